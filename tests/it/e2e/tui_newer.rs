//! A state file a newer dcp wrote, read on the real OpenCode TUI's screen: `/dcp stats` and
//! `/dcp decompress` answer from it (its unknown strategies as "other", its range of an
//! unknown origin as a newer dcp's), print none of its text raw, and nothing is set aside.

use super::scenarios::IMMEDIATE;
use super::tui::{no_new_request, wait_answer, Screen};
use super::Lab;

/// The pane's rows from the last `command` on, as the user reads its answer.
fn answer(text: &str, command: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().rposition(|l| l.trim().trim_start_matches('┃').trim() == command).unwrap_or(0);
    lines[at..].join("\n")
}

#[test]
fn tui_answers_from_a_state_file_a_newer_dcp_wrote() {
    let lab = Lab::new(IMMEDIATE);
    // Once this dcp saved the session, the file is replaced.
    let (session, file) = lab.explored_session();
    std::fs::write(&file, crate::newer_state::NEWER).unwrap();
    let screen = Screen::start(&lab, &["--session", &session]);
    let requests = lab.llm.log().len();

    screen.submit("/dcp stats");
    let stats = answer(&wait_answer(&screen, "/dcp stats", "All-time"), "/dcp stats");
    println!("--- the pane's answer to /dcp stats ---\n{}", screen.filtered(&stats));
    assert!(stats.contains("Pruned (DCP):    ~1,405, 4 tools"), "{stats}");
    assert!(stats.contains("other") && stats.contains("~1,105") && stats.contains("deduplication"), "{stats}");
    assert!(!stats.contains("31m") && !stats.contains("52;c") && !stats.contains("corrupt"), "{stats}");

    screen.submit("/dcp decompress");
    let listed = answer(&wait_answer(&screen, "/dcp decompress", "b1"), "/dcp decompress");
    println!("--- the pane's answer to /dcp decompress ---\n{}", screen.filtered(&listed));
    assert!(listed.contains("made by a newer dcp"), "{listed}");
    assert!(no_new_request(&lab, requests), "a /dcp command sent a model request");
    drop(screen);

    let aside: Vec<_> = std::fs::read_dir(lab.state_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".corrupt-"))
        .collect();
    assert!(aside.is_empty(), "{aside:?}");
    let state = lab.state(&session);
    assert_eq!(state["dcp"]["pruned"]["call_a"]["strategy"], "summarised-reads", "{state}");
}
