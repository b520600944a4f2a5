//! State files: `persist::parse` on arbitrary bytes never panics, a state it parses renders
//! to a file that parses again and renders to the same bytes, and merging it with itself
//! (another process's copy of the same file) loses no prune and counts nothing twice.

#![no_main]

use dcp::state::persist;
use libfuzzer_sys::fuzz_target;

const WHEN: &str = "2026-01-01T00:00:00.000Z";

fuzz_target!(|data: &[u8]| {
    let Ok(state) = persist::parse(data) else {
        return;
    };
    let rendered = persist::render(&state, WHEN);
    let again = persist::parse(&rendered).unwrap_or_else(|e| {
        panic!("a rendered state does not parse again: {e}\n{}", String::from_utf8_lossy(&rendered))
    });
    assert_eq!(again.pruned, state.pruned, "the prune records changed in a round trip");
    let twice = persist::render(&again, WHEN);
    assert!(
        rendered == twice,
        "rendering is not stable:\n{}\n---\n{}",
        String::from_utf8_lossy(&rendered),
        String::from_utf8_lossy(&twice)
    );
    let journal: Vec<_> = state.pruned.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
    let merged = persist::merge(again, &state, &journal);
    assert_eq!(merged.pruned, state.pruned, "a merge with the same file changed the prunes");
    assert_eq!(merged.stats.tokens(), state.stats.tokens(), "a merge with the same file counted prunes twice");
});
