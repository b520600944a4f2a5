//! dcp's line of a finished turn, read on the real OpenCode TUI's screen: the notice once the
//! next turn ends, `/dcp decompress`, `/dcp stats` and `/dcp context` name it as dcp's finished
//! turn, never as the agent's `compress`, and the model is sent the line without a tag it
//! cannot use.
//!
//! It drives the TUI through [`super::tui::Screen`] and scripts the model as the other TUI
//! tests do.

use super::fake_llm::Turn;
use super::scenarios::read;
use super::tui::{block, no_new_request, wait_answer, Screen};
use super::Lab;

/// Every decision on the next request, the detailed notice, masking (and so finished turns)
/// on, and the agent's `compress` off.
const CONFIG: &str = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "detailed",
    "tools": {"settings": {"nudgeEnabled": false}, "compress": {"enabled": false}}}"#;

/// How long a turn of three model requests may take on a loaded two-core machine.
const TURN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

#[test]
fn tui_names_a_finished_turn_as_dcp_s_in_the_notice_decompress_stats_and_context() {
    let lab = Lab::new(CONFIG);
    lab.llm.push(vec![
        read("p1.parser", "src/parser.py"),
        read("p1.records", "data/records.csv"),
        Turn::text("p1.answer", "Explored: a parser with 12 sections and 150 records."),
    ]);
    lab.llm.push(vec![Turn::text("p2.answer", "The parser has 12 sections.")]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Explore the project.");
    screen.wait_until("the first answer", TURN_TIMEOUT, |s| s.contains("Explored: a parser"));
    screen.submit("How many sections?");
    let text = screen.wait_until("the second answer and its notice", TURN_TIMEOUT, |s| {
        s.contains("The parser has 12 sections.") && s.contains("finished turn")
    });
    let notice = screen.filtered(&block(&text, "▣ DCP |"));
    println!("--- the pane's notice ---\n{notice}");
    assert!(notice.contains("calls of 1 finished turn in one line"), "{notice}");
    assert!(notice.contains("→ finished turn b1: ") && !notice.contains("compress"), "{notice}");
    // The model got the line, and no `<b1>` it could not use with `compress` off.
    let sent = lab.llm.request_for("p2.answer").text();
    assert!(sent.contains("[Tool calls of this turn") && !sent.contains("<b1>"), "{sent}");

    let requests = lab.llm.log().len();
    screen.submit("/dcp decompress");
    let text = wait_answer(&screen, "/dcp decompress", "finished turn (dcp)");
    println!("--- the pane's answer to /dcp decompress ---\n{}", screen.filtered(&block(&text, "/dcp decompress")));
    screen.submit("/dcp stats");
    let text = wait_answer(&screen, "/dcp stats", "All-time");
    let stats = screen.filtered(&block(&text, "/dcp stats"));
    println!("--- the pane's answer to /dcp stats ---\n{stats}");
    assert!(stats.contains("finished-turns") && !stats.contains("compress"), "{stats}");
    // `/dcp context` says where the savings in force went: the range, not only the calls.
    screen.submit("/dcp context");
    let text = wait_answer(&screen, "/dcp context", "Compressed ranges");
    let context = screen.filtered(&block(&text, "/dcp context"));
    println!("--- the pane's answer to /dcp context ---\n{context}");
    let ranges = context.split("Compressed ranges").nth(1).unwrap_or_default();
    assert!(ranges.starts_with(" (1 in force, 0 waiting for the policy)"), "{context}");
    let row = ranges.lines().nth(1).map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or_default();
    assert!(row.starts_with("b1 m2..m3 finished turn (dcp) in force "), "{context}");
    // The in-force row counts the calls the range stands for, as `/dcp stats` counts them.
    let words = |text: &str, first: &str| -> Vec<String> {
        let line = text.lines().map(str::trim_start).find(|l| l.starts_with(first) && !l.contains("now:"));
        line.unwrap_or_default().split_whitespace().map(str::to_string).collect()
    };
    let pruned = words(&stats, "Pruned (DCP):");
    let tools = pruned.iter().rev().nth(1).cloned().unwrap_or_default();
    assert_eq!(words(&context, "in force ").last(), Some(&tools), "stats:\n{stats}\ncontext:\n{context}");
    assert!(no_new_request(&lab, requests), "a /dcp command went to the model");
}
