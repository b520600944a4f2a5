//! A session whose state file cannot be read, reopened in the real OpenCode TUI: the person
//! is told on the screen that its pruning starts afresh and where the file was set aside, the
//! session goes on, and the unreadable file is kept, not written over.

use super::fake_llm::Turn;
use super::scenarios::IMMEDIATE;
use super::tui::{block, Screen};
use super::Lab;

/// How long a turn of two model requests may take on a loaded two-core machine.
const TURN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// What the state file holds when the session is reopened: JSON cut short.
const BROKEN: &[u8] = b"{\"prune\": {\"toolIds\": [\"call_";

#[test]
fn tui_tells_a_state_file_that_cannot_be_read_and_keeps_it() {
    let lab = Lab::new(IMMEDIATE);
    // Once this dcp saved the session, the file is replaced.
    let (session, file) = lab.explored_session();
    std::fs::write(&file, BROKEN).unwrap();

    lab.llm.push(vec![Turn::text("p2.answer", "The parser has 12 sections.")]);
    let screen = Screen::start(&lab, &["--session", &session]);
    screen.submit("How many sections?");
    let text = screen.wait_until("the answer and the notice", TURN_TIMEOUT, |s| {
        s.contains("The parser has 12 sections.") && s.contains("could not be read")
    });
    let notice = screen.filtered(&block(&text, "▣ DCP | this session's state file could not be read"));
    println!("--- the pane's notice ---\n{notice}");
    let flat = notice.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("could not be read: it is set aside as"), "{notice}");
    assert!(flat.contains("pruning starts afresh"), "{notice}");
    let set_aside = || -> Vec<String> {
        let names = std::fs::read_dir(lab.state_dir()).unwrap();
        let names = names.map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
        names.filter(|n| n.starts_with(&format!("{session}.json.corrupt-"))).collect()
    };
    // The sidecar saves after the request, on its writer thread.
    crate::support::poll(|| !set_aside().is_empty(), std::time::Duration::from_secs(30));
    drop(screen);
    let aside = set_aside();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(lab.state_dir().join(&aside[0])).unwrap(), BROKEN, "the unreadable file is kept");
    assert!(lab.state(&session)["dcp"].is_object(), "a valid file is written in its place");
}
