//! `dcp serve` over its stdio protocol, on the recorded session.

use std::time::Duration;

use dcp::host::paths::Env;
use dcp::host::DataDir;
use dcp::session::visible_history;
use serde_json::{json, Value};

use crate::restore::is_pruned;
use crate::support::{poll, Sandbox, Sidecar, DB_SESSION};

pub(crate) fn recorded_messages(sandbox: &Sandbox) -> Vec<Value> {
    let loaded = DataDir::new(&sandbox.data(), &Env::default()).load(DB_SESSION).unwrap();
    visible_history(loaded.messages).into_iter().map(|m| serde_json::to_value(m).unwrap()).collect()
}

/// Applies a transform result the way the plugin does: values, then appends (message id
/// tags), then the compressed ranges from the last one back.
pub(crate) fn apply(messages: &mut Vec<Value>, result: &Value) {
    let edits = result["edits"].as_array().unwrap();
    for appending in [false, true] {
        for e in edits.iter().filter(|e| e.get("append").is_some() == appending) {
            let (m, p) = (e["m"].as_u64().unwrap() as usize, e["p"].as_u64().unwrap() as usize);
            let mut at = &mut messages[m]["parts"][p];
            for key in e["path"].as_array().unwrap() {
                at = &mut at[key.as_str().unwrap()];
            }
            *at = match &e["append"] {
                Value::String(tail) => json!(format!("{}{tail}", at.as_str().unwrap_or(""))),
                _ => e["value"].clone(),
            };
        }
    }
    for r in result.get("replace").and_then(Value::as_array).into_iter().flatten().rev() {
        let (from, to) = (r["from"].as_u64().unwrap() as usize, r["to"].as_u64().unwrap() as usize);
        messages.splice(from..=to, [r["message"].clone()]);
    }
}

/// The edits of `result[key]` that set a value (prunes), leaving out the message id tags.
pub(crate) fn prunes(result: &Value, key: &str) -> Vec<Value> {
    result[key].as_array().unwrap().iter().filter(|e| e.get("value").is_some()).cloned().collect()
}

/// The output of `call` as the model sees it, without the message id tag at its end.
fn output_of(messages: &[Value], call: &str) -> Value {
    untag(
        &messages.iter().flat_map(|m| m["parts"].as_array().unwrap()).find(|p| p["callID"] == call).unwrap()["state"]
            ["output"],
    )
}

/// `text` without the message id tag dcp appends (see `strategies::compress`).
pub(crate) fn untag(text: &Value) -> Value {
    let t = text.as_str().unwrap_or("");
    match t.rfind("\n<") {
        Some(i) if dcp::strategies::compress::is_tag(&t[i + 1..]) => json!(&t[..i]),
        _ => text.clone(),
    }
}

pub(crate) fn state_file(sandbox: &Sandbox) -> Value {
    serde_json::from_slice(&std::fs::read(sandbox.state_dir().join(format!("{DB_SESSION}.json"))).unwrap()).unwrap()
}

pub(crate) const IMMEDIATE: &str = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "minimal", "tools": {"settings": {"minTokens": 0}, "compress": {"tagsFrom": 0}}}"#;

#[test]
fn transform_prunes_duplicates_and_lists_the_rest() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let mut messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    apply(&mut messages, &result);
    // The second read of parser.py is a duplicate of the third; the first was pruned already.
    assert!(is_pruned(output_of(&messages, "call_12_0_5abbdb74").as_str()));
    assert!(is_pruned(output_of(&messages, "call_3_0_fa6f4b33").as_str()));
    assert!(!is_pruned(output_of(&messages, "call_22_0_07e7b86f").as_str()));
    let tail = &result["append"][0];
    assert_eq!(tail["info"]["role"], "user");
    let text = tail["parts"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("<prunable-tools>\n"), "{text}");
    assert!(text.contains(": read, /tmp/fixture-lab/work/base/proj/src/parser.py\n"), "{text}");
    assert!(result["notify"].as_str().unwrap().starts_with("▣ DCP | in force: -"), "{result}");
    sidecar.shutdown();
    let file = state_file(&s);
    let ids = file["prune"]["toolIds"].as_array().unwrap();
    assert!(ids.contains(&json!("call_12_0_5abbdb74")));
    assert!(file["stats"]["totalPruneTokens"].as_u64().unwrap() > 907);
    assert_eq!(file["dcp"]["pruned"]["call_12_0_5abbdb74"]["strategy"], "deduplication");
}

/// The bug: as it stopped, the sidecar saved every session it had served again, and a state
/// nothing had changed since its last write was rewritten with only a new `lastUpdated` (the
/// pass-through end-to-end tests saw the file change after OpenCode had exited).
#[test]
fn a_sidecar_that_stops_does_not_rewrite_a_state_it_already_saved() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": recorded_messages(&s)}));
    // The prune is saved off the request path: wait for it, and for the file to settle.
    let path = s.state_dir().join(format!("{DB_SESSION}.json"));
    let pruned = || {
        let file: Value = serde_json::from_slice(&std::fs::read(&path).unwrap_or_default()).unwrap_or_default();
        file["dcp"]["pruned"].get("call_12_0_5abbdb74").is_some()
    };
    assert!(poll(pruned, Duration::from_secs(10)), "the prune was not saved");
    assert!(settled(&path, Duration::from_secs(10)), "the state file kept changing");
    let saved = std::fs::read_to_string(&path).unwrap();
    sidecar.shutdown();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), saved, "the state file was written again");
}

/// Waits until `path`'s stamp (inode, length, modification time) has stayed the same over two
/// checks 100 ms apart, or `limit` passes; returns whether it settled.
fn settled(path: &std::path::Path, limit: Duration) -> bool {
    use std::os::unix::fs::MetadataExt;
    let stamp = || std::fs::metadata(path).ok().map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()));
    let start = std::time::Instant::now();
    let (mut last, mut same) = (stamp(), 0);
    while start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
        let now = stamp();
        same = if now == last { same + 1 } else { 0 };
        if same == 2 {
            return true;
        }
        last = now;
    }
    false
}

#[test]
fn the_same_request_twice_gives_the_same_answer_and_references_work() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(
        &s,
        r#"{"rewrite": {"mode": "immediate"}, "tools": {"settings": {"nudgeEnabled": false, "minTokens": 0}}}"#,
    );
    let messages = recorded_messages(&s);
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    // Send every part by reference, and the infos by id only.
    let refs: Vec<Value> = messages
        .iter()
        .map(|m| json!({"id": m["info"]["id"], "parts": m["parts"].as_array().unwrap().iter().map(|p| json!({"ref": p["id"]})).collect::<Vec<_>>()}))
        .collect();
    let mut second = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": refs}));
    second["notify"] = first["notify"].clone();
    assert_eq!(first["edits"], second["edits"]);
    assert_eq!(first["append"], second["append"]);
    let bad = sidecar.call(
        "transform",
        json!({"sessionID": DB_SESSION, "messages": [{"id": "msg_x", "parts": [{"ref": "prt_nope"}]}]}),
    );
    assert_eq!(bad["error"]["code"], -32001, "{bad}");
    sidecar.shutdown();
}

#[test]
fn batched_mode_records_at_once_and_rewrites_when_the_cache_is_cold() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, r#"{"rewrite": {"mode": "batched", "coldCacheSeconds": 300}}"#);
    let messages = recorded_messages(&s);
    let t0 = 1_800_000_000_000i64;
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0, "messages": messages.clone()}));
    let edits_at_first = prunes(&first, "edits").len();
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 1_000, "messages": messages.clone()}));
    let cold = sidecar
        .result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 3_600_000, "messages": messages.clone()}));
    let mut applied = messages.clone();
    apply(&mut applied, &cold);
    assert!(is_pruned(output_of(&applied, "call_12_0_5abbdb74").as_str()));
    assert!(prunes(&cold, "edits").len() > edits_at_first, "{edits_at_first} then {}", cold["edits"]);
    sidecar.shutdown();
    let file = state_file(&s);
    assert_eq!(file["dcp"]["pruned"]["call_12_0_5abbdb74"]["applied"], true);
}

#[test]
fn batched_mode_tells_a_waiting_prune_when_it_is_recorded() {
    let s = Sandbox::new();
    let config = r#"{"rewrite": {"mode": "batched"}, "pruneNotification": "detailed"}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let messages = recorded_messages(&s);
    let t0 = 1_800_000_000_000i64;
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0, "messages": messages.clone()}));
    let notice = first["notify"].as_str().unwrap();
    // The process's first request knows no warm run, so only rewrites that pay on this very
    // request go; the rest wait, and the notification says so: never as removed.
    assert!(notice.starts_with("▣ DCP | waiting: ") || notice.starts_with("▣ DCP | in force: -"), "{notice}");
    assert!(notice.contains("applied when it pays"), "{notice}");
    assert!(notice.contains("\n→ deduplication: ~"), "{notice}");
    assert!(!notice.contains(" 1 tools"), "{notice}");
    // Told once: the same request again records nothing new (the next one may apply what
    // waited, and says so; after that, nothing is left to say).
    let next =
        sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 1_000, "messages": messages.clone()}));
    assert!(!next["notify"].as_str().unwrap_or("").contains("→ deduplication"), "{next}");
    let again = sidecar.result("transform", json!({"sessionID": DB_SESSION, "now": t0 + 2_000, "messages": messages}));
    assert_eq!(again["notify"], Value::Null, "{again}");
    sidecar.shutdown();
}

#[test]
fn commands_in_a_fresh_process_read_the_stored_history() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, "{}");
    // No transform yet: the sidecar has mirrored nothing of the session.
    let context = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "context"}));
    let text = context["text"].as_str().unwrap();
    assert!(
        text.starts_with("Session \"Fake session title\" (ses_dfedb2935ffeIhuHRntLhlCv3U)\n30 messages, 17 tool calls"),
        "{text}"
    );
    let sweep = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "sweep 2"}));
    assert!(sweep["text"].as_str().unwrap().starts_with("Swept 2 tool outputs"), "{sweep}");
    sidecar.shutdown();
}

#[test]
fn discard_and_extract_by_list_id() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let list = result["append"][0]["parts"][0]["text"].as_str().unwrap().to_string();
    let id_of = |needle: &str| -> String {
        list.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} in {list}"))
            .split(':')
            .next()
            .unwrap()
            .to_string()
    };
    let bash = id_of(": bash,");
    let grep = id_of(": grep,");
    let answer = sidecar.agent_tool("discard", json!({"ids": ["completion", bash.clone()]}));
    assert!(answer.starts_with("Discarded 1 tool output"), "{answer}");
    let again = sidecar.agent_tool("discard", json!({"ids": [bash], "reason": "noise"}));
    assert!(again.starts_with("Nothing was pruned. Not pruned: ") && again.contains("already pruned"), "{again}");
    // A discard with a distillation extracts (`extract` itself is off by default).
    let distillation = "grep: 18 parse_section_ defs in parser.py";
    let answer = sidecar.agent_tool("discard", json!({"ids": [grep.clone()], "distillation": [distillation]}));
    assert!(answer.starts_with("Extracted 1 tool output"), "{answer}");
    let answer = sidecar.agent_tool("extract", json!({"ids": [grep], "distillation": ["grep"]}));
    assert_eq!(answer, "extract is disabled in dcp.jsonc; nothing was changed.");
    let mut after = messages.clone();
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    apply(&mut after, &result);
    let outputs: Vec<Value> = after
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().clone())
        .filter(|p| p["tool"] == "grep")
        .map(|p| untag(&p["state"]["output"]))
        .collect();
    assert!(outputs.contains(&json!("grep: 18 parse_section_ defs in parser.py")), "{outputs:?}");
    sidecar.shutdown();
    let file = state_file(&s);
    let by = &file["dcp"]["byStrategy"];
    assert_eq!(by["discard"]["tools"], 1);
    assert_eq!(by["extract"]["tools"], 1);
}

#[test]
fn an_enabled_extract_is_answered_and_a_discard_with_blank_distillations_only_discards() {
    let s = Sandbox::new();
    let config =
        r#"{"rewrite": {"mode": "immediate"}, "tools": {"settings": {"minTokens": 0}, "extract": {"enabled": true}}}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let init = sidecar.result("initialize", json!({"protocol": 2}));
    assert_eq!(init["tools"]["extract"], true, "{init}");
    assert_eq!(init["required"]["discard"], json!(["ids"]), "{init}");
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let list = result["append"][0]["parts"][0]["text"].as_str().unwrap().to_string();
    let ids: Vec<String> =
        list.lines().skip(1).filter_map(|l| l.split_once(':')).map(|(id, _)| id.to_string()).collect();
    let answer = sidecar.agent_tool("extract", json!({"ids": [ids[0]], "distillation": ["kept"]}));
    assert!(answer.starts_with("Extracted 1 tool output"), "{answer}");
    // Distillations of blanks alone are no distillation: the call discards.
    let answer = sidecar.agent_tool("discard", json!({"ids": [ids[1]], "distillation": [" "]}));
    assert!(answer.starts_with("Discarded 1 tool output"), "{answer}");
    sidecar.shutdown();
    let by = &state_file(&s)["dcp"]["byStrategy"];
    assert_eq!((&by["extract"]["tools"], &by["discard"]["tools"]), (&json!(1), &json!(1)), "{by}");
}

#[test]
fn commands_answer_in_text() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let help = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": ""}));
    assert!(help["text"].as_str().unwrap().contains("/dcp sweep [N]"));
    let stats = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "stats"}));
    let text = stats["text"].as_str().unwrap();
    assert!(
        text.starts_with("DCP statistics\n\nSession \"Fake session title\" (ses_dfedb2935ffeIhuHRntLhlCv3U):"),
        "{text}"
    );
    assert!(text.contains("deduplication"), "{text}");
    let context = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "context"}));
    assert!(context["text"].as_str().unwrap().contains("tool outputs"));
    let sweep = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "sweep 2"}));
    assert!(sweep["text"].as_str().unwrap().starts_with("Swept 2 tool outputs"), "{sweep}");
    let bad = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "sweep lots"}));
    assert!(bad["text"].as_str().unwrap().starts_with("/dcp sweep takes a number"));
    sidecar.shutdown();
}

#[test]
fn malformed_lines_get_errors_and_the_sidecar_goes_on() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, "{}");
    assert_eq!(sidecar.raw("{garbage")["error"]["code"], -32700);
    assert_eq!(sidecar.raw(r#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#)["error"]["code"], -32601);
    let missing = sidecar.raw(r#"{"jsonrpc":"2.0","id":2,"method":"transform","params":{"messages":[]}}"#);
    assert_eq!(missing["error"]["code"], -32602);
    assert!(missing["error"]["message"].as_str().unwrap().contains("sessionID"), "{missing}");
    let bad_id = sidecar.call("transform", json!({"sessionID": "../../x", "messages": []}));
    assert!(bad_id["error"]["message"].as_str().unwrap().starts_with("invalid session id"), "{bad_id}");
    let init = sidecar.result("initialize", json!({"protocol": 2}));
    assert_eq!(init["protocol"], 2);
    sidecar.shutdown();
}

#[test]
fn subagent_sessions_are_pruned_unless_turned_off() {
    // The replay suite says pruning pays in subagent sessions too (BENCHMARKS.md), so it is on
    // by default; `pruneSubagents: false` leaves them alone.
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, r#"{"pruneSubagents": false, "rewrite": {"mode": "immediate"}}"#);
    let messages = recorded_messages(&s);
    let result = sidecar
        .result("transform", json!({"sessionID": DB_SESSION, "parentID": "ses_parent", "messages": messages.clone()}));
    assert_eq!(result["edits"], json!([]));
    assert_eq!(result["append"], json!([]));
    assert_eq!(sidecar.result("system", json!({"sessionID": DB_SESSION}))["system"], json!([]));
    sidecar.shutdown();
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let result =
        sidecar.result("transform", json!({"sessionID": DB_SESSION, "parentID": "ses_parent", "messages": messages}));
    assert!(!result["edits"].as_array().unwrap().is_empty());
    sidecar.shutdown();
}

#[test]
fn unchanged_messages_and_edits_are_not_sent_twice() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let seq = first["seq"].as_u64().unwrap();
    let edits = first["edits"].as_array().unwrap().len();
    assert!(edits > 0, "{first}");
    // The same history again, none of it re-sent: the edits hold, and are not repeated.
    let n = messages.len();
    let again = sidecar.result("transform", json!({"sessionID": DB_SESSION, "base": n, "have": seq, "messages": []}));
    assert_eq!(again["sameEdits"], true, "{again}");
    assert!(again.get("edits").is_none());
    let list = |answer: &Value| {
        let text = answer["append"][0]["parts"][0]["text"].as_str().unwrap().to_string();
        text[..text.find("</prunable-tools>").unwrap()].to_string()
    };
    assert_eq!(list(&again), list(&first), "the prunable list is the same");
    // Without `have`, or with a stale one, the edits come in full.
    let full = sidecar.result("transform", json!({"sessionID": DB_SESSION, "base": n, "have": 0, "messages": []}));
    assert_eq!(full["edits"].as_array().unwrap().len(), edits, "{full}");
    // A base past what the sidecar holds asks for a resync.
    let answer = sidecar.call("transform", json!({"sessionID": DB_SESSION, "base": n + 5, "messages": []}));
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    sidecar.shutdown();
}

#[test]
fn a_new_prune_is_sent_as_an_added_edit() {
    let s = Sandbox::new();
    // No working set: the two new calls would push an edit of NOTES.md out of the last ten,
    // and its read would be masked along with the duplicates.
    let config = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "minimal",
        "tools": {"settings": {"minTokens": 0}}, "strategies": {"masking": {"workingCalls": 0}}}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let mut messages = recorded_messages(&s);
    let first = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    apply(&mut messages, &first);
    assert!(!is_pruned(output_of(&messages, "call_22_0_07e7b86f").as_str()));
    // The model repeats the step holding the last read of parser.py: a copy with new ids.
    let at = messages
        .iter()
        .position(|m| m["parts"].as_array().unwrap().iter().any(|p| p["callID"] == "call_22_0_07e7b86f"))
        .unwrap();
    let mut again = recorded_messages(&s)[at].clone();
    again["info"]["id"] = json!("msg_zz_again");
    for (i, p) in again["parts"].as_array_mut().unwrap().iter_mut().enumerate() {
        p["id"] = json!(format!("prt_zz_again_{i}"));
        p["messageID"] = json!("msg_zz_again");
        if p["type"] == "tool" {
            p["callID"] = json!(format!("call_zz_again_{i}"));
        }
    }
    let n = messages.len();
    let seq = first["seq"].as_u64().unwrap();
    let second = sidecar
        .result("transform", json!({"sessionID": DB_SESSION, "base": n, "have": seq, "messages": [again.clone()]}));
    assert!(second.get("edits").is_none(), "{second}");
    // Every call of the copied step is a duplicate now: only their older twins' edits come.
    let tools = again["parts"].as_array().unwrap().iter().filter(|p| p["type"] == "tool").count();
    let added = prunes(&second, "addEdits");
    assert_eq!(added.len(), tools, "{second}");
    assert!(added.iter().all(|e| e["m"] == at && is_pruned(e["value"].as_str())), "{second}");
    assert_eq!(second["seq"].as_u64().unwrap(), seq + 1);
    sidecar.shutdown();
}

/// Runs a generated session through an in-process sidecar, request by request, and returns
/// every answer and the `dcp` section of the session's state file (every prune with its
/// tokens). With `ahead`, the sidecar counts
/// outputs ahead between requests, as `dcp serve` does while idle.
fn run_in_process(ahead: bool) -> (Vec<Value>, Value) {
    let sandbox = Sandbox::new();
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let mut server = dcp::sidecar::Server::new(options, None).unwrap();
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 200, steps: 30, seed: 7 });
    let ask = |server: &mut dcp::sidecar::Server, id: usize, method: &str, params: Value| -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let answer: Value = serde_json::from_str(&server.handle_line(&line).unwrap()).unwrap();
        assert!(answer.get("error").is_none(), "{answer}");
        answer["result"].clone()
    };
    ask(&mut server, 0, "initialize", json!({"protocol": 2}));
    let mut messages = session.messages.clone();
    let mut answers = Vec::new();
    for step in 0..=session.steps.len() {
        if step > 0 {
            messages.extend(session.steps[step - 1].iter().cloned());
        }
        let params = json!({"sessionID": session.session_id, "now": 1_790_000_000_000_i64 + step as i64 * 1000, "messages": messages});
        answers.push(ask(&mut server, step + 1, "transform", params));
        if ahead {
            assert!(server.has_precount());
            // A request that comes in stops the count at once...
            let mut asked = 0;
            server.precount(|| {
                asked += 1;
                false
            });
            assert_eq!(asked, 1);
            assert!(server.has_precount());
            // ...and while idle it reads every new message.
            server.precount(|| true);
            assert!(!server.has_precount());
        }
    }
    ask(&mut server, 1000, "shutdown", json!({}));
    let file = sandbox.state_dir().join(format!("{}.json", session.session_id));
    let state: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    (answers, state["dcp"].clone())
}

#[test]
fn counting_outputs_ahead_changes_no_answer_and_no_count() {
    let (ahead, state_ahead) = run_in_process(true);
    let (plain, state_plain) = run_in_process(false);
    assert_eq!(ahead, plain);
    assert_eq!(state_ahead, state_plain);
    assert!(state_plain["byStrategy"]["deduplication"]["tools"].as_u64().unwrap() > 100, "{state_plain}");
}

/// The bug: a state file that could not be read was reported only in OpenCode's log; the
/// person using the TUI was never told that the session's pruning had started afresh.
#[test]
fn a_state_file_that_cannot_be_read_is_told_to_the_user_and_set_aside() {
    let s = Sandbox::new();
    std::fs::create_dir_all(s.state_dir()).unwrap();
    let path = s.state_dir().join(format!("{DB_SESSION}.json"));
    std::fs::write(&path, b"{\"prune\": {\"toolIds\": [").unwrap();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let messages = recorded_messages(&s);
    let result = sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let notice = result["notify"].as_str().unwrap();
    assert!(notice.starts_with("▣ DCP | this session's state file could not be read: it is set aside as "), "{notice}");
    assert!(notice.contains(&format!("{DB_SESSION}.json.corrupt-<time> (nothing of it is lost)")), "{notice}");
    assert!(notice.contains("\n▣ DCP | in force: -"), "the prunes are told too: {notice}");
    sidecar.shutdown();
    let aside: Vec<_> = std::fs::read_dir(s.state_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{DB_SESSION}.json.corrupt-")))
        .collect();
    assert_eq!(aside.len(), 1, "set aside once: {aside:?}");
    assert_eq!(std::fs::read(s.state_dir().join(&aside[0])).unwrap(), b"{\"prune\": {\"toolIds\": [");
    assert!(state_file(&s)["dcp"].is_object(), "a valid file is written in its place");
}
