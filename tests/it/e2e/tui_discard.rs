//! The agent's `discard` with a `distillation`, read on the real OpenCode TUI's screen: the
//! notice the user sees once the turn ends, what the model is sent next, and `/dcp stats`.
//!
//! It drives the TUI through [`super::tui::Screen`] and scripts the model as the other TUI
//! tests do; what it asserts is what the pane shows, and that what dcp wrote into the session
//! carries no raw control characters.

use serde_json::{json, Value};

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, read, result, IMMEDIATE};
use super::tui::{block, no_new_request, numbers_out, wait_answer, Screen};
use super::Lab;

/// The agent's summary of `config.txt`, kept in place of its output.
const DISTILLATION: &str = "config.txt: mode=fast, retries=3, timeout=30";

/// A line of `config.txt` as the `read` tool returns it, which the distillation replaces.
const RAW_LINE: &str = "retries = 3";

/// How long a turn of three model requests may take on a loaded two-core machine.
const TURN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

#[test]
fn tui_shows_an_agent_discard_with_a_distillation_as_a_kept_summary() {
    let config = IMMEDIATE.replace(r#""pruneNotification": "minimal""#, r#""pruneNotification": "detailed""#);
    assert_ne!(config, IMMEDIATE, "the lab's config names its notification level");
    let lab = Lab::new(&config);
    let discard = json!({"ids": ["{{list:config.txt}}"], "distillation": [DISTILLATION]});
    lab.llm.push(vec![
        read("p1.config", "config.txt"),
        Turn::tool("p1.discard", "discard", discard),
        Turn::text("p1.answer", "Kept the essentials of the config."),
    ]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Read the config and keep only its essentials.");
    let text = screen.wait_until("the turn's answer and its prune notice", TURN_TIMEOUT, |s| {
        s.contains("Kept the essentials of the config.") && s.contains("▣ DCP |")
    });
    let notice = screen.filtered(&block(&text, "▣ DCP |"));
    println!("--- the pane's notice ---\n{notice}");
    insta::assert_snapshot!("tui_discard_distillation_notice", numbers_out(&notice));
    // The notice names the call the agent dropped and the summary that stands in its place.
    assert!(notice.starts_with("▣ DCP | in force: -") && notice.contains(", 1 tool\n→ extract: ~"), "{notice}");
    assert!(notice.contains(&format!("read config.txt, kept as \"{DISTILLATION}\"")), "{notice}");

    // The next request carries the distillation in place of the output.
    let next = lab.llm.request_for("p1.answer");
    let config_call = call_id_of(&lab, "p1.config");
    assert_eq!(result(&next, &config_call), DISTILLATION);
    assert!(!next.text().contains(RAW_LINE), "the raw output reached the model");
    assert!(!next.text().contains("▣ DCP"), "the notice reached the model");

    let requests = lab.llm.log().len();
    screen.submit("/dcp stats");
    let text = wait_answer(&screen, "/dcp stats", "All-time");
    let stats = screen.filtered(&block(&text, "/dcp stats"));
    println!("--- the pane's answer to /dcp stats ---\n{stats}");
    stats_show_the_saving(&stats);
    assert!(no_new_request(&lab, requests), "/dcp stats went to the model");
    no_control_characters_in_what_dcp_wrote(&lab, &text);
}

/// `/dcp stats` counts the extract as pruned and in force in the session.
fn stats_show_the_saving(stats: &str) {
    let row = |label: &str| {
        stats.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("no {label}:\n{stats}"))
    };
    let in_force = row("In force:");
    assert!(in_force.contains("(1 prune)") && !in_force.contains("~0 "), "{stats}");
    assert!(row("Pruned (DCP):").contains("1 tool"), "{stats}");
    assert!(row("extract").contains("1 tool"), "{stats}");
}

/// The pane, and every text dcp put in the session (its notices and answers, its tools'
/// outputs), hold no control character but the line break.
fn no_control_characters_in_what_dcp_wrote(lab: &Lab, pane: &str) {
    let raw = |s: &str| s.chars().any(|c| c.is_control() && c != '\n');
    assert!(!raw(pane), "{pane:?}");
    let mut written = Vec::new();
    for part in lab.stored_parts(&lab.session_id()) {
        let part: Value = serde_json::from_str(&part).unwrap();
        if part["ignored"] == true {
            written.push(part["text"].as_str().unwrap_or_default().to_string());
        }
        if part["tool"] == "discard" {
            written.push(part["state"]["output"].as_str().unwrap_or_default().to_string());
        }
    }
    assert!(written.iter().any(|t| t.contains("▣ DCP |")), "the notice is stored: {written:?}");
    assert!(written.iter().any(|t| t.starts_with("Extracted 1 tool output")), "{written:?}");
    for text in &written {
        assert!(!raw(text), "a raw control character in {text:?}");
    }
}
