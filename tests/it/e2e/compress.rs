//! Range compression end to end: the agent compresses a range in a step of its own, prunes
//! with a wrong id in another, the user undoes the range, the agent compresses in the tool's
//! registered form, and a compaction forgets it.

use serde_json::json;

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, compact, read, result, IMMEDIATE};
use super::{tail, Lab};

#[test]
fn the_agent_compresses_a_range_and_prunes_with_a_wrong_id_in_steps_of_their_own() {
    let lab = Lab::new(IMMEDIATE);
    let (session, records) = explore(&lab);
    compress_and_discard(&lab, &session, &records);
    undo_the_range(&lab, &session, &records);
    a_compaction_forgets_the_ranges(&lab, &session);
}

/// The first prompt: two reads and an answer; every message the model saw carries its id.
/// Returns the session and the call id of the records read.
fn explore(lab: &Lab) -> (String, String) {
    lab.prompt(
        None,
        "Explore the project.",
        vec![
            read("p1.parser", "src/parser.py"),
            read("p1.records", "data/records.csv"),
            Turn::text("p1.answer", "A parser with 12 sections and 150 records."),
        ],
    );
    let session = lab.session_id();
    let records = call_id_of(lab, "p1.records");
    // Messages: m1 the prompt, m2 and m3 the reads, m4 the answer, m5 the
    // next prompt. Every message the model saw carried its id at its end.
    let answer = lab.llm.request_for("p1.answer");
    let text = answer.text();
    for id in ["m1", "m2", "m3"] {
        assert!(text.contains(&format!("\n<{id}>")), "{id} in {text}");
    }
    let tools: Vec<&str> =
        answer.body["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"compress"), "{tools:?}");
    (session, records)
}

/// The agent compresses m1..m4 (and names a range that is not there) in a step of its own,
/// then discards with one good and one wrong id in another.
fn compress_and_discard(lab: &Lab, session: &str, records: &str) {
    let summary = "Explored: src/parser.py has parse_section_1..12; data/records.csv has 150 rows.";
    lab.prompt(
        Some(session),
        "Compress what you explored, then check the config.",
        vec![
            Turn::tool(
                "p2.compress",
                "compress",
                json!({"topic": "exploration", "content": [
                    {"startId": "m0001", "endId": "m0004", "summary": summary},
                    {"startId": "m42", "endId": "m50", "summary": "not there"},
                ]}),
            ),
            read("p2.config", "config.txt"),
            Turn::tool("p2.discard", "discard", json!({"ids": ["{{list:config.txt}}", "999"], "reason": "completion"})),
            Turn::text("p2.answer", "Done."),
        ],
    );
    let after = lab.llm.request_for("p2.config");
    let compressed = result(&after, &call_id_of(lab, "p2.compress"));
    assert!(compressed.starts_with("Compressed 4 messages into b1"), "{compressed}");
    assert!(compressed.contains("Not applied: Range 2 (m42..m50)"), "{compressed}");
    // The range is one summary message now; the records output is gone from the request.
    let first = after.messages().iter().find(|m| m["role"] != "system").unwrap();
    let first = super::fake_llm::content_text(&first["content"]);
    assert!(first.contains(summary) && first.ends_with("\n<b1>"), "{first}");
    assert!(after.tool_result(records).is_none(), "the compressed read is not sent");
    assert!(after.text().contains("\n<m5>"), "later ids stay");
    let discarded = result(&lab.llm.request_for("p2.answer"), &call_id_of(lab, "p2.discard"));
    assert!(discarded.starts_with("Discarded 1 tool output"), "{discarded}");
    assert!(discarded.contains("999: no tool call has this id"), "{discarded}");

    let state = lab.state(session);
    let block = &state["prune"]["messages"]["blocksById"]["1"];
    assert_eq!((block["startId"].as_str(), block["endId"].as_str()), (Some("m0001"), Some("m0004")), "{state}");
    assert_eq!(block["effectiveToolIds"].as_array().unwrap().len(), 2, "{state}");
    assert!(state["dcp"]["byStrategy"]["compress"]["tokens"].as_u64().unwrap() > 500, "{state}");
}

/// The user undoes the range: its messages are sent again. The agent then compresses the two
/// reads in the form the tool is registered with, one `range`.
fn undo_the_range(lab: &Lab, session: &str, records: &str) {
    let undo = lab.opencode(&["run", "--session", session, "--command", "dcp", "decompress", "b1"]);
    let stdout = String::from_utf8_lossy(&undo.stdout);
    assert!(stdout.contains("Restored b1"), "stdout: {stdout}\n{}", tail(&undo.stderr));
    let range = json!({"range": "m2..m3", "summary": "Read src/parser.py and data/records.csv (150 rows)."});
    lab.prompt(
        Some(session),
        "Go on.",
        vec![Turn::tool("p3.compress", "compress", range), Turn::text("p3.answer", "The records are back.")],
    );
    let restored = lab.llm.request_for("p3.compress");
    assert!(result(&restored, records).contains("150,item-150"), "the range's messages are back");
    assert!(!restored.text().contains("\n<b1>"));
    assert_eq!(lab.state(session)["prune"]["messages"]["blocksById"]["1"]["deactivatedByUser"], true);
    let after = lab.llm.request_for("p3.answer");
    let compressed = result(&after, &call_id_of(lab, "p3.compress"));
    assert!(compressed.starts_with("Compressed 2 messages into b2"), "{compressed}");
    assert!(after.tool_result(records).is_none(), "the reads are compressed again");
}

/// A compaction forgets the ranges, and no id tag ever reached OpenCode's stored history.
fn a_compaction_forgets_the_ranges(lab: &Lab, session: &str) {
    compact(lab, session);
    lab.prompt(Some(session), "Carry on.", vec![Turn::text("p4.answer", "After the summary.")]);
    let state = lab.state(session);
    assert_eq!(state["prune"]["messages"]["blocksById"], json!({}), "{state}");
    assert!(lab.stored_parts(session).iter().all(|p| !p.contains("\\n<m1>")), "no tag reached opencode.db");
}
