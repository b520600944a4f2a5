//! Recoverable hiding in the real OpenCode (issue 38, part 2): masking hides an old read, its
//! placeholder names a handle, the scripted model calls `restore` with it, and the next request
//! carries the read's output exactly as OpenCode stored it.

use serde_json::{json, Value};

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, read};
use super::Lab;

/// Every decision on the next request, and masking down to the newest output.
const MASK_ALL_BUT_ONE: &str = r#"{"rewrite": {"mode": "immediate"},
    "tools": {"settings": {"nudgeEnabled": false}},
    "strategies": {"masking": {"keepLast": 1, "keepTokens": 0, "keepUserTurns": 0}}}"#;

#[test]
fn a_scripted_model_restores_a_hidden_read_and_the_next_request_carries_it_byte_for_byte() {
    let lab = Lab::new(MASK_ALL_BUT_ONE);
    lab.prompt(
        None,
        "Explore, then look at the parser again.",
        vec![
            read("p1.parser", "src/parser.py"),
            read("p1.records", "data/records.csv"),
            Turn::tool("p1.restore", "restore", json!({"id": "{{restore}}"})),
            Turn::text("p1.answer", "The parser has 12 sections."),
        ],
    );
    let session = lab.session_id();
    let parser = call_id_of(&lab, "p1.parser");
    // The request that restored it saw the read hidden, by a placeholder naming its handle.
    let asked = lab.llm.request_for("p1.restore");
    let hidden = asked.tool_result(&parser).unwrap();
    assert!(hidden.starts_with("[Output masked; restore "), "{hidden}");
    // The next request carries OpenCode's stored output of the read, as the restore's answer.
    let stored = lab.stored_parts(&session);
    let part: Value =
        stored.iter().map(|p| serde_json::from_str::<Value>(p).unwrap()).find(|p| p["callID"] == parser).unwrap();
    let original = part["state"]["output"].as_str().unwrap();
    let restore = call_id_of(&lab, "p1.restore");
    let carried = lab.llm.request_for("p1.answer").tool_result(&restore).unwrap();
    assert_eq!(carried, original, "the restored text, byte for byte");
    assert!(original.len() > 2_000, "a read the mirror keeps only as a digest: {}", original.len());
    let state = lab.state(&session);
    assert_eq!(state["stats"]["restores"], 1, "{state}");
}
