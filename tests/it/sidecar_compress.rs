//! Range compression and the forgiving agent tools, through `dcp serve`'s protocol.

use serde_json::{json, Value};

use crate::sidecar::{apply, prunes, recorded_messages, state_file, IMMEDIATE};
use crate::support::Sidecar;
use crate::support::{poll, Sandbox, DB_SESSION};
use std::time::Duration;

fn text_of(message: &Value) -> String {
    serde_json::to_string(message).unwrap()
}

#[test]
fn message_ids_ride_at_the_end_and_never_change_older_bytes() {
    let s = Sandbox::new();
    // Every prune goes on the first request, and masking is off: the second request has
    // nothing to rewrite, so only the new tag is added.
    let config = r#"{"rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}},
        "tools": {"compress": {"tagsFrom": 0}}}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let messages = recorded_messages(&s);
    let n = messages.len() - 1;
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages[..n].to_vec()}));
    let mut seen = messages[..n].to_vec();
    apply(&mut seen, &first);
    let tagged = seen[0]["parts"][0]["text"].as_str().unwrap();
    assert!(tagged.ends_with("\n<m1>"), "{tagged}");
    // One more message, sent as a delta: only its own tag is added.
    let seq = first["seq"].as_u64().unwrap();
    let second = sidecar.result(
        "transform",
        json!({"sessionID": DB_SESSION, "base": n, "have": seq, "messages": [messages[n].clone()]}),
    );
    let added = second["addEdits"].as_array().unwrap();
    assert!(added.iter().all(|e| e["m"] == n), "{second}");
    assert!(added.iter().any(|e| e["append"].as_str().unwrap().contains(&format!("<m{}>", n + 1))), "{second}");
    // Applied as the plugin does (kept edits, then the added ones), the older messages are
    // byte for byte what the model saw before.
    let mut kept = first.clone();
    kept["edits"] = json!([first["edits"].as_array().unwrap().clone(), added.clone()].concat());
    let mut now = messages.clone();
    apply(&mut now, &kept);
    assert_eq!(now[..n].iter().map(text_of).collect::<Vec<_>>(), seen.iter().map(text_of).collect::<Vec<_>>());
    sidecar.shutdown();
}

/// [`IMMEDIATE`] without dcp's own ranges of finished turns (`crate::strategies::turns`):
/// the agent's ranges alone, numbered from b1.
const AGENT_RANGES_ONLY: &str = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "minimal", "tools": {"settings": {"minTokens": 0}, "compress": {"tagsFrom": 0}}, "strategies": {"masking": {"collapseTurns": false}}}"#;

#[test]
fn compress_replaces_a_range_and_decompress_restores_it() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, AGENT_RANGES_ONLY);
    let messages = recorded_messages(&s);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let args = json!({"topic": "overview", "content": [
        {"startId": "m0001", "endId": "m0006", "summary": "The project has parser.py (18 section parsers) and calc.py."},
        {"startId": "m7", "endId": "m99", "summary": "out of range"},
    ]});
    let answer = sidecar.result(
        "tool",
        json!({"sessionID": DB_SESSION, "name": "compress", "args": args, "callID": "call_c", "messageID": "msg_c"}),
    );
    let text = answer["output"].as_str().unwrap();
    assert!(text.starts_with("Compressed 6 messages into b1"), "{text}");
    assert!(text.contains("Not applied: Range 2 (m7..m99): m99 is not in the conversation"), "{text}");
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    assert_eq!(result["replace"][0]["from"], 0);
    assert_eq!(result["replace"][0]["to"], 5);
    assert!(result["notify"].as_str().unwrap().contains("1 range compressed"), "{result}");
    let mut seen = messages.clone();
    apply(&mut seen, &result);
    assert_eq!(seen.len(), messages.len() - 5);
    let summary = seen[0]["parts"][0]["text"].as_str().unwrap();
    assert!(summary.contains("parser.py (18 section parsers)") && summary.ends_with("\n<b1>"));
    assert!(text_of(&seen[1]).contains("<m7>"), "later ids are unchanged");

    let list = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress"}));
    assert!(list["text"].as_str().unwrap().contains("b1  6 messages"), "{list}");
    let compressed = |file: Value| file["dcp"]["byStrategy"]["compress"]["tokens"].as_u64().unwrap_or(0);
    assert!(poll(|| compressed(state_file(&s)) > 0, Duration::from_secs(10)), "the range is in the stats");
    let undo = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress b1"}));
    assert!(undo["text"].as_str().unwrap().starts_with("Restored b1"), "{undo}");
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    assert!(result.get("replace").is_none(), "{result}");
    let bad = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress b7"}));
    assert!(bad["text"].as_str().unwrap().starts_with("\"b7\" is not an active compressed range"), "{bad}");
    sidecar.shutdown();
    let file = state_file(&s);
    let block = &file["prune"]["messages"]["blocksById"]["1"];
    assert_eq!((block["startId"].as_str(), block["compressCallId"].as_str()), (Some("m0001"), Some("call_c")));
    // The stats say what is applied: the range is sent again, so its tokens are no saving.
    assert_eq!(file["dcp"]["byStrategy"]["compress"]["tokens"], 0, "{file}");
    assert_eq!(file["dcp"]["byStrategy"]["compress"]["tools"], 0, "{file}");

    assert_eq!(block["deactivatedByUser"], true);
    assert_eq!(file["prune"]["messages"]["activeBlockIds"], json!([]));
}

#[test]
fn a_compressed_range_waits_for_the_policy_like_any_rewrite() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, r#"{"rewrite": {"mode": "batched", "coldCacheSeconds": 300}}"#);
    let messages = recorded_messages(&s);
    let t0 = 1_800_000_000_000i64;
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0, "messages": messages.clone()}));
    let args = json!({"topic": "t", "content": [{"startId": "m0002", "endId": "m0003", "summary": "globbed, read parser.py"}]});
    sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    // A small cut deep in a warm cache does not pay for re-billing the tail.
    let warm =
        sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 1_000, "messages": messages.clone()}));
    assert!(warm.get("replace").is_none(), "{warm}");
    let list = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress"}));
    assert!(list["text"].as_str().unwrap().contains("(waiting for the cache)"), "{list}");
    // Once the cache is cold, it goes.
    let cold = sidecar
        .result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 3_600_000, "messages": messages.clone()}));
    assert_eq!(cold["replace"][0]["from"], 1, "{cold}");
    sidecar.shutdown();
}

#[test]
fn one_wrong_id_no_longer_voids_a_discard() {
    let s = Sandbox::new();
    // Without observation masking, which would have taken the glob already.
    let config = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "minimal",
        "tools": {"settings": {"minTokens": 0}}, "strategies": {"masking": {"enabled": false}}}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let messages = recorded_messages(&s);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    // The glob of message m0002 by its message id, a wrong list id, and a protected edit by its call id.
    let args = json!({"ids": ["m0002", "4242", "call_8_0_43eecac5"], "reason": "noise"});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "discard", "args": args}));
    let text = answer["output"].as_str().unwrap();
    assert!(text.starts_with("Discarded 1 tool output"), "{text}");
    assert!(text.contains("m0002: glob"), "{text}");
    assert!(text.contains("4242: no tool call has this id") && text.contains("a protected tool"), "{text}");
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    assert!(prunes(&result, "edits").iter().any(|e| e["m"] == 1), "{result}");
    sidecar.shutdown();
}

#[test]
fn a_finished_turn_s_calls_become_one_line_and_masking_leaves_what_the_line_stands_for() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let ranges = result["replace"].as_array().expect("the finished turns' calls are ranges");
    let lines: Vec<&str> = ranges.iter().filter_map(|r| r["message"]["parts"][0]["text"].as_str()).collect();
    assert!(lines.iter().any(|l| l.starts_with("[Tool calls of this turn")), "{lines:?}");
    // No edit lands in a range: the line stands for those calls, masked or not.
    let inside = |m: u64| ranges.iter().any(|r| r["from"].as_u64().unwrap() <= m && m <= r["to"].as_u64().unwrap());
    let edits = result["edits"].as_array().unwrap();
    let masked: Vec<&Value> =
        edits.iter().filter(|e| e.get("value").is_some() && inside(e["m"].as_u64().unwrap())).collect();
    assert!(masked.is_empty(), "{masked:?}");
    // The prompts stay: the model still sees every one the person wrote.
    let mut seen = messages.clone();
    apply(&mut seen, &result);
    let ids = |ms: &[Value], role: &str| -> Vec<String> {
        ms.iter().filter(|m| m["info"]["role"] == role).map(|m| m["info"]["id"].as_str().unwrap().to_string()).collect()
    };
    let kept = ids(&seen, "user");
    assert!(ids(&messages, "user").iter().all(|id| kept.contains(id)), "{kept:?}");
    let size = |ms: &[Value]| serde_json::to_string(ms).unwrap().len();
    assert!(size(&seen) < size(&messages), "the lines are shorter than the steps they stand for");
    sidecar.shutdown();
}

/// The blocks of the state file that dcp made of finished turns.
fn turn_blocks(file: &Value) -> Vec<Value> {
    let blocks = file["prune"]["messages"]["blocksById"].as_object().cloned().unwrap_or_default();
    blocks.into_values().filter(|b| b["dcpOrigin"] == "finished-turn").collect()
}

/// The bug: dcp's lines of finished turns were counted as the agent's `compress` in the
/// stats, so `/dcp stats` told the user the agent had compressed when dcp had, on its own.
#[test]
fn finished_turns_count_as_dcp_s_finished_turns_not_as_the_agent_s_compress() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    assert!(result["replace"].as_array().is_some_and(|r| !r.is_empty()), "a finished turn is collapsed: {result}");
    let stats = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "stats"}));
    let text = stats["text"].as_str().unwrap();
    assert!(text.contains("finished-turns") && !text.contains("compress"), "{text}");
    sidecar.shutdown();
    let file = state_file(&s);
    let by = &file["dcp"]["byStrategy"];
    assert!(by["finished-turns"]["tokens"].as_u64().unwrap_or(0) > 0, "{by}");
    assert!(by.get("compress").is_none(), "{by}");
    assert!(!turn_blocks(&file).is_empty(), "the state file says whose the ranges are: {file}");
}

/// The bug: the notice of a request that carried a finished turn's line said "1 range
/// compressed", as for the agent's `compress`.
#[test]
fn the_notice_of_a_finished_turn_never_says_a_range_was_compressed() {
    let s = Sandbox::new();
    let detailed = IMMEDIATE.replace(r#""minimal""#, r#""detailed""#);
    let mut sidecar = Sidecar::spawn(&s, &detailed);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let notice = result["notify"].as_str().unwrap();
    assert!(notice.contains("calls of 1 finished turn in one line"), "{notice}");
    assert!(notice.contains("\n→ finished turn b1: "), "{notice}");
    assert!(!notice.contains("compress"), "{notice}");
    sidecar.shutdown();
}

/// The line of a finished turn as the model sees it, from a first transform under `config`.
fn turn_line(config: &str) -> String {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, config);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    sidecar.shutdown();
    let line = result["replace"][0]["message"]["parts"][0]["text"].as_str().unwrap_or_default();
    assert!(line.starts_with("[Tool calls of this turn"), "{result}");
    line.to_string()
}

/// The bug: the line carried its `<bN>` tag with the agent's `compress` off, tokens in every
/// later request for a tag the model can do nothing with.
#[test]
fn a_finished_turn_s_line_has_no_block_tag_when_compress_is_off() {
    let off = IMMEDIATE.replace(r#""compress": {"tagsFrom": 0}"#, r#""compress": {"enabled": false}"#);
    assert_ne!(off, IMMEDIATE);
    let line = turn_line(&off);
    assert!(line.ends_with(']') && !line.contains("<b"), "{line}");
    // With `compress` on, the agent may name the range to take it into a larger one.
    let line = turn_line(IMMEDIATE);
    assert!(line.ends_with("]\n<b1>"), "{line}");
}

/// The bug: `/dcp decompress` listed dcp's finished turns like the agent's ranges. They may be
/// restored all the same, and they stay dcp's after a restart.
#[test]
fn decompress_names_dcp_s_finished_turns_and_a_restart_keeps_them_so() {
    let s = Sandbox::new();
    let messages = recorded_messages(&s);
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    sidecar.shutdown();
    // A new process reads the ranges from the state file.
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let list = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress"}));
    let text = list["text"].as_str().unwrap();
    assert!(text.contains("tokens  finished turn (dcp)"), "{text}");
    assert!(!text.contains("tool calls of a finished turn"), "named, not shown by its topic: {text}");
    let undo = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress b1"}));
    assert!(undo["text"].as_str().unwrap().starts_with("Restored b1"), "{undo}");
    sidecar.shutdown();
    let file = state_file(&s);
    assert_eq!(file["dcp"]["byStrategy"]["finished-turns"]["tools"], 0, "undone, it saves nothing: {file}");
    assert!(file["dcp"]["byStrategy"].get("compress").is_none(), "{file}");
}

#[test]
fn a_finished_turn_the_user_restored_stays_restored() {
    let s = Sandbox::new();
    let messages = recorded_messages(&s);
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let undo = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress b1"}));
    assert!(undo["text"].as_str().unwrap().starts_with("Restored b1"), "{undo}");
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let list = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "decompress"}));
    let text = list["text"].as_str().unwrap();
    assert!(!text.contains("finished turn (dcp)"), "the restored turn was collapsed again: {text}");
    sidecar.shutdown();
}

/// The `<mN>`/`<bN>` tags and the example ids `compress` would offer (the lab's `m12/b1`).
fn names_a_tag(text: &str) -> bool {
    ["<m", "<b", "m12", "b1"].iter().any(|t| text.contains(t))
}

#[test]
fn a_tool_description_names_no_id_the_request_lacks() {
    // A short session: its requests carry no id tag (the history is far below tagsFrom).
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, "{}");
    let init = sidecar.result("initialize", json!({"protocol": 2}));
    let registered = init["descriptions"]["compress"].as_str().unwrap();
    assert!(!names_a_tag(registered), "{registered}");
    let messages = recorded_messages(&s);
    let answer = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    assert!(!answer.to_string().contains("\n<m"), "no tag in the request: {answer}");
    let described = sidecar.result("describe", json!({"sessionID": DB_SESSION}));
    let said = described["compress"].as_str().unwrap();
    assert!(!names_a_tag(said), "{said}");
    for (name, description) in init["descriptions"].as_object().unwrap() {
        assert!(!names_a_tag(description.as_str().unwrap()), "{name}: {description}");
    }
    // With every message tagged, a description asked for on a cold cache names the tags.
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let t0 = 1_800_000_000_000i64;
    let answer = sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0, "messages": messages}));
    assert!(answer.to_string().contains("\\n<m1>"), "{answer}");
    let warm = sidecar.result("describe", json!({"sessionID": DB_SESSION, "now": t0 + 1_000}));
    assert!(warm["compress"].as_str().unwrap().contains("<mN>"), "first described in this process: {warm}");
}
