//! dcp's head (its agent tools, their instructions, the prunable list and the message id
//! tags): by default (`tools.settings.offer = "always"`) from a session's first request, the
//! tags once the history is long enough (`tools.compress.tagsFrom`), and the tools usable by
//! tool call ids without any list; with `"paid"` only once its ledger has paid for it
//! (`turn`, `policy::offer`).

use serde_json::{json, Value};

use crate::sidecar::recorded_messages;
use crate::support::{Sandbox, Sidecar, DB_SESSION};

/// One request of the recorded session at `now`, after a `turn`: what `turn`, `system` and
/// `transform` answered.
fn request(sidecar: &mut Sidecar, sandbox: &Sandbox, now: i64) -> (bool, Value, Value) {
    let turn = sidecar.result("turn", json!({"sessionID": DB_SESSION, "parentID": null, "now": now}));
    let system = sidecar.result("system", json!({"sessionID": DB_SESSION}));
    let params = json!({"sessionID": DB_SESSION, "parentID": null, "now": now, "messages": recorded_messages(sandbox)});
    let transformed = sidecar.result("transform", params);
    (turn["offer"] == json!(true), system["system"].clone(), transformed)
}

/// The offer of the tools once paid for, with every message tagged once they are.
const PAID: &str = r#"{"tools": {"settings": {"offer": "paid"}, "compress": {"tagsFrom": 0}}}"#;

fn tagged(transformed: &Value) -> bool {
    transformed["edits"].as_array().unwrap().iter().any(|e| e.get("append").is_some())
}

#[test]
fn a_new_session_is_offered_nothing_it_has_not_paid_for() {
    let sandbox = Sandbox::new();
    // The fixture's state file was written by a dcp that offered the tools from the start
    // (as one that predates `offered` did); a new session has none.
    let _ = std::fs::remove_file(sandbox.state_dir().join(format!("{DB_SESSION}.json")));
    let mut sidecar = Sidecar::spawn(&sandbox, PAID);
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert!(!offer, "nothing is banked on a session's first turn");
    assert_eq!(system, json!([]), "no instructions for tools the session does not have");
    assert_eq!(transformed["append"], json!([]), "no <prunable-tools> list");
    assert!(!tagged(&transformed), "no message id tags");
    // A session dcp never saved anything on never gets them.
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_900_000);
    assert!(!offer);
    sidecar.shutdown();
}

#[test]
fn the_tools_come_at_a_cold_turn_once_the_bank_covers_them_and_stay() {
    let sandbox = Sandbox::new();
    // A session whose ledger has banked enough (as a restarted sidecar finds it).
    let state = json!({"sessionName": "t", "dcp": {"ledger": {"banked": 20000.0, "warm": 3,
        "lastRequest": 1_790_000_000_000_i64, "offered": false}}});
    std::fs::create_dir_all(sandbox.state_dir()).unwrap();
    let file = sandbox.state_dir().join(format!("{DB_SESSION}.json"));
    std::fs::write(&file, state.to_string()).unwrap();
    let mut sidecar = Sidecar::spawn(&sandbox, PAID);
    // Warm (a minute later): offering would re-bill the whole cached prompt.
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_060_000);
    assert!(!offer, "a warm turn would re-bill the prompt: not paid for");
    // Cold (ten minutes later): the prompt is written again anyway; only the head costs.
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_660_000);
    assert!(offer, "a cold turn with the head paid for");
    assert_eq!(system, json!([]), "the tools' descriptions are the instructions: no system line");
    assert!(tagged(&transformed), "the tags come with the head, on the request that re-bills anyway");
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_720_000);
    assert!(offer, "once offered, the tools stay");
    sidecar.shutdown();
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["dcp"]["ledger"]["offered"], json!(true), "{saved}");
}

#[test]
fn by_default_the_tools_are_offered_from_a_sessions_first_request_without_tags_on_a_short_history() {
    let sandbox = Sandbox::new();
    let _ = std::fs::remove_file(sandbox.state_dir().join(format!("{DB_SESSION}.json")));
    let mut sidecar = Sidecar::spawn(&sandbox, "{}");
    let init = sidecar.result("initialize", json!({"protocol": 2}));
    let strings = json!({"type": "array", "items": {"type": "string"}});
    // A distillation is not in discard's schema (`compress` keeps a summary), but it is read.
    assert_eq!(init["args"]["discard"], json!({"ids": strings}), "{init}");
    assert_eq!(init["required"]["discard"], json!(["ids"]), "{init}");
    assert_eq!((&init["tools"]["discard"], &init["tools"]["extract"]), (&json!(true), &json!(false)), "{init}");
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert!(offer, "the first turn has the tools");
    assert_eq!(system, json!([]), "the tools' descriptions are the instructions: no system line");
    assert!(init["descriptions"]["discard"].as_str().unwrap().contains("alongside your next tool call"), "{init}");
    assert_eq!(init["args"]["compress"]["range"], json!({"type": "string"}), "{init}");
    // The recorded session is far below `tagsFrom`: a range of it would free little.
    assert!(!tagged(&transformed), "no message id tags on a short history");
    sidecar.shutdown();
}

#[test]
fn message_id_tags_start_where_the_history_reaches_tags_from() {
    let sandbox = Sandbox::new();
    let messages = recorded_messages(&sandbox);
    // The recorded session's first three messages weigh more than 300 tokens.
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"tools": {"compress": {"tagsFrom": 300}}}"#);
    let (_, _, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    let tagged: Vec<u64> = transformed["edits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("append").is_some())
        .map(|e| e["m"].as_u64().unwrap())
        .collect();
    let first = *tagged.first().expect("tags past 300 tokens");
    assert!(first > 0 && tagged.last() == Some(&(messages.len() as u64 - 1)), "{tagged:?}");
    assert!(tagged.windows(2).all(|w| w[0] < w[1]), "one tag per message from the first on: {tagged:?}");
    sidecar.shutdown();
    // With 0, every message has its tag.
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"tools": {"compress": {"tagsFrom": 0}}}"#);
    let (_, _, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    let edits = transformed["edits"].as_array().unwrap();
    assert!(edits.iter().any(|e| e["m"] == 0 && e["append"] == "\n<m1>"), "{transformed}");
    sidecar.shutdown();
}

#[test]
fn without_a_list_or_tags_the_agent_discards_and_compresses_by_tool_call_ids() {
    let sandbox = Sandbox::new();
    let messages = recorded_messages(&sandbox);
    // Masking off, so the glob is still there to discard; no list, no tags.
    let config = r#"{"rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}},
        "tools": {"settings": {"minTokens": 100000}}}"#;
    let mut sidecar = Sidecar::spawn(&sandbox, config);
    let (_, _, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert_eq!(transformed["append"], json!([]), "no <prunable-tools> list");
    assert!(!tagged(&transformed));
    let glob = call_ids(&messages, "glob")[0].clone();
    let args = json!({"ids": [glob]});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "discard", "args": args}));
    assert!(answer["output"].as_str().unwrap().starts_with("Discarded 1 tool output"), "{answer}");
    // A range named by the call ids in its first and last messages, in the tool's own form.
    let reads = call_ids(&messages, "read");
    let args = json!({"range": format!("{}..{}", reads[0], reads[1]), "summary": "read parser.py twice"});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    assert!(answer["output"].as_str().unwrap().starts_with("Compressed "), "{answer}");
    // A range written another way is refused with the form to use.
    let args = json!({"range": "first-last", "summary": "s"});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    assert!(
        answer["output"].as_str().unwrap().contains("Give a range as from..to, its ends named by the tool call ids"),
        "{answer}"
    );
    sidecar.shutdown();
}

/// The bug: a range end or an id holding a control character (ESC) came back raw in the tool's
/// answer, which OpenCode shows in the session.
#[test]
fn a_control_character_in_a_range_or_an_id_is_answered_escaped() {
    let sandbox = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"rewrite": {"mode": "immediate"}}"#);
    request(&mut sidecar, &sandbox, 1_790_000_000_000);
    let raw = |output: &str| output.chars().any(|c| c.is_control() && c != '\n');
    let args = json!({"range": "m1..m2\u{1b}[2J", "summary": "s"});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    let output = answer["output"].as_str().unwrap();
    assert!(output.contains("Not applied: The range (m1..m2\\x1b[2J)"), "{output}");
    assert!(!raw(output), "{output:?}");
    let args = json!({"ids": ["\u{1b}]0;title\u{7}"]});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "discard", "args": args}));
    let output = answer["output"].as_str().unwrap();
    assert!(output.starts_with("Nothing was pruned."), "{output}");
    assert!(!raw(output), "{output:?}");
    sidecar.shutdown();
}

/// The call ids of `tool`'s calls in `messages`, in order.
fn call_ids(messages: &[Value], tool: &str) -> Vec<String> {
    let parts = messages.iter().flat_map(|m| m["parts"].as_array().into_iter().flatten());
    parts
        .filter(|p| p["type"] == "tool" && p["tool"] == tool)
        .map(|p| p["callID"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_list_is_sent_again_only_when_it_names_new_outputs_worth_it() {
    let sandbox = Sandbox::new();
    let _ = std::fs::remove_file(sandbox.state_dir().join(format!("{DB_SESSION}.json")));
    let messages = recorded_messages(&sandbox);
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"strategies": {"masking": {"enabled": false}}}"#);
    let listed = |sidecar: &mut Sidecar, upto: usize| {
        let params = json!({"sessionID": DB_SESSION, "messages": messages[..upto].to_vec()});
        let transformed = sidecar.result("transform", params);
        transformed["append"].as_array().is_some_and(|a| !a.is_empty())
    };
    // The history grows one message a request, as an agent run's does.
    let shown: Vec<usize> = (1..=messages.len()).filter(|upto| listed(&mut sidecar, *upto)).collect();
    // The first large output is listed on the request after it; the next requests name
    // nothing new, so they go without the list, until another large output comes.
    assert_eq!(shown.first(), Some(&3), "{shown:?}");
    assert!(!shown.contains(&4) && shown.len() >= 2 && shown.len() * 4 < messages.len(), "{shown:?}");
    // The same request again: nothing new to name.
    assert!(!listed(&mut sidecar, messages.len()));
    sidecar.shutdown();
}
