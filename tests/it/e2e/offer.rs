//! The agent tools at the defaults (`tools.settings.offer = "always"`): offered from a
//! session's first request, and a discard by the model reaching the next request, in the real
//! OpenCode.

use serde_json::json;

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, read, result};
use super::Lab;

/// The defaults, but for the notifications (this run does not look at them).
const DEFAULTS: &str = r#"{ "pruneNotification": "off" }"#;

#[test]
fn discard_is_offered_on_the_first_request_and_a_discard_reaches_the_next_request() {
    let lab = Lab::new(DEFAULTS);
    lab.prompt(
        None,
        "Look at the records, then clean up.",
        vec![
            read("o1.records", "data/records.csv"),
            Turn::tool("o1.discard", "discard", json!({"ids": ["{{list:records.csv}}"]})),
            Turn::text("o1.answer", "Done."),
        ],
    );
    // The very first request of the session carries the tools, whose descriptions say when
    // to call them.
    let first = lab.llm.main_requests().into_iter().next().expect("a first request");
    let tools: Vec<String> = first.body["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert!(tools.iter().any(|t| t == "discard") && tools.iter().any(|t| t == "compress"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "extract"), "extract is off by default: {tools:?}");
    // What OpenCode sends for each is what dcp counts as its head, `distillation` optional.
    for name in ["discard", "compress"] {
        let sent = first.body["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == name);
        let counted = dcp::texts::tool_definitions(&dcp::config::Config::default().tools)
            .into_iter()
            .map(|d| serde_json::from_str::<serde_json::Value>(&d).unwrap())
            .find(|d| d["function"]["name"] == name);
        assert_eq!(sent, counted.as_ref(), "{name}");
    }
    // The records output is big enough to be listed, and the model discards it by its list id.
    let listed = lab.llm.request_for("o1.discard");
    let last = listed.messages().last().unwrap();
    let list = super::fake_llm::content_text(&last["content"]);
    assert!(list.starts_with("<prunable-tools>") && list.contains("records.csv"), "{list}");
    // The discard reaches the very next request: the output is the placeholder there.
    let records = call_id_of(&lab, "o1.records");
    let discard = call_id_of(&lab, "o1.discard");
    let after = lab.llm.request_for("o1.answer");
    assert!(result(&after, &discard).starts_with("Discarded 1 tool output"), "{}", result(&after, &discard));
    assert!(crate::restore::is_pruned(Some(&result(&after, &records))));
}
