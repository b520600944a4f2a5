//! A re-fetch read on the real OpenCode TUI's screen (issue 38, part 3): masking hides a read,
//! the agent reads the same file again, and `/dcp stats` counts the miss, for the session and
//! all-time.
//!
//! It drives the TUI through [`super::tui::Screen`] and scripts the model as the other TUI
//! tests do.

use super::fake_llm::Turn;
use super::scenarios::read;
use super::tui::{block, no_new_request, wait_answer, Screen};
use super::Lab;

/// Every decision on the next request, and masking down to the newest output.
const MASK_ALL_BUT_ONE: &str = r#"{"rewrite": {"mode": "immediate"},
    "tools": {"settings": {"nudgeEnabled": false}},
    "strategies": {"masking": {"keepLast": 1, "keepTokens": 0, "keepUserTurns": 0}}}"#;

/// How long a turn of four model requests may take on a loaded two-core machine.
const TURN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(240);

#[test]
fn tui_shows_a_re_fetch_of_a_hidden_read_in_dcp_stats() {
    let lab = Lab::new(MASK_ALL_BUT_ONE);
    lab.llm.push(vec![
        read("p1.parser", "src/parser.py"),
        read("p1.records", "data/records.csv"),
        read("p1.parser_again", "src/parser.py"),
        Turn::text("p1.answer", "The parser has 12 sections."),
    ]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Explore the project.");
    screen.wait_until("the turn's answer", TURN_TIMEOUT, |s| s.contains("The parser has 12 sections."));
    // The second read of the parser was asked for while the first was hidden.
    let asked = lab.llm.request_for("p1.parser_again").text();
    assert!(asked.contains("[Output masked; restore "), "{asked}");
    let requests = lab.llm.log().len();
    screen.submit("/dcp stats");
    let text = wait_answer(&screen, "/dcp stats", "All-time");
    let stats = screen.filtered(&block(&text, "/dcp stats"));
    println!("--- the pane's answer to /dcp stats ---\n{stats}");
    let seen: Vec<&str> = stats.lines().filter(|l| l.contains("Misses seen:")).collect();
    assert_eq!(seen.len(), 2, "the session's and all-time: {stats}");
    assert!(seen.iter().all(|l| l.contains("1 re-fetch, 0 restores of what dcp hid")), "{stats}");
    assert!(no_new_request(&lab, requests), "/dcp stats went to the model");
}
