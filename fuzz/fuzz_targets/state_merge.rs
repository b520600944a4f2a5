//! Merging two state files: the input is two files split at the first 0xFF byte (which no
//! UTF-8 file holds). When both parse, `persist::merge` (the other process's file on disk,
//! this one's state with its prunes as the journal) never panics or wraps, keeps the prune
//! list of the newer compaction (both lists on a tie), keeps every count within
//! `MAX_COUNT`, and renders to a file that parses again with the same prunes.

#![no_main]

use dcp::state::persist::{self, MAX_COUNT};
use libfuzzer_sys::fuzz_target;

const WHEN: &str = "2026-01-01T00:00:00.000Z";

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|b| *b == 0xff) else {
        return;
    };
    let (Ok(disk), Ok(mine)) = (persist::parse(&data[..split]), persist::parse(&data[split + 1..])) else {
        return;
    };
    let journal: Vec<_> = mine
        .pruned
        .iter()
        .filter(|(id, _)| !id.starts_with("unblock:"))
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    let mut before = disk.clone();
    before.fold_counter();
    let merged = persist::merge(disk.clone(), &mine, &journal);
    let newer = mine.last_compaction.cmp(&disk.last_compaction);
    for id in disk.pruned.keys().filter(|_| newer.is_le()) {
        assert!(merged.pruned.contains_key(id), "the file's prune {id} was lost");
    }
    for id in mine.pruned.keys().filter(|_| newer.is_ge()) {
        assert!(merged.pruned.contains_key(id), "this process's prune {id} was lost");
    }
    assert!(merged.stats.tokens() <= MAX_COUNT, "{} tokens is past the bound", merged.stats.tokens());
    assert!(merged.stats.tokens() >= before.stats.tokens().min(MAX_COUNT), "the merge lost tokens");
    for (strategy, tally) in &merged.stats.by_strategy {
        assert!(tally.tokens.max(tally.tools) <= MAX_COUNT, "{strategy:?} {tally:?} is past the bound");
    }
    let rendered = persist::render(&merged, WHEN);
    let back = persist::parse(&rendered).unwrap_or_else(|e| {
        panic!("a merged state does not parse again: {e}\n{}", String::from_utf8_lossy(&rendered))
    });
    assert_eq!(back.pruned, merged.pruned, "the merged prunes changed in a round trip");
    assert_eq!(back.stats.tokens(), merged.stats.tokens(), "the merged total changed in a round trip");
    let again = persist::merge(back, &mine, &[]);
    assert_eq!(again.pruned, merged.pruned, "merging the same state again changed the prunes");
});
