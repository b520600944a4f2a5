//! The sidecar's mirror strips what it keeps of each message (`session::slim`: infos trimmed
//! to what is read, step and patch parts kept as their ids, big strings counted and kept as
//! markers); the CLI reads the whole history from `opencode.db` and strips nothing. On the
//! same generated sessions, with compaction summaries among their messages, the sidecar's
//! `/dcp context` and its transform's edits must be what the whole history gives (review 4b).

use std::collections::BTreeSet;

use dcp::session::{visible_history, Message, ToolCall};
use dcp::state::PruneRecord;
use dcp::texts::restore::{Handle, Via};
use serde_json::{json, Value};

use crate::sidecar::IMMEDIATE;
use crate::support::{dcp, Sandbox, DB_SESSION};

const NOW: i64 = 1_790_000_000_000;

/// A compaction after `before`: the user's request and its summary, with its step parts, a
/// millisecond apart.
fn compaction(before: &Message, n: usize) -> [Message; 2] {
    let sid = before.info["sessionID"].as_str().unwrap();
    let t = before.time_created();
    let (uid, aid) = (format!("msg_zcompact{n}u"), format!("msg_zcompact{n}a"));
    let part = |id: &str, mid: &str, rest: Value| {
        let mut part = json!({"id": id, "sessionID": sid, "messageID": mid});
        part.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
        part
    };
    let request = Message::from_values(
        json!({"id": uid, "sessionID": sid, "role": "user", "time": {"created": t + 1}, "agent": "build"}),
        vec![part(&format!("prt_zc{n}u"), &uid, json!({"type": "compaction", "auto": n % 2 == 0}))],
    );
    let summary = Message::from_values(
        json!({"id": aid, "sessionID": sid, "role": "assistant", "parentID": uid, "summary": true,
            "mode": "compaction", "agent": "compaction", "cost": 0, "finish": "stop",
            "time": {"created": t + 2, "completed": t + 3}, "tokens": {"input": 1000, "output": 200}}),
        vec![
            part(&format!("prt_zc{n}s"), &aid, json!({"type": "step-start", "snapshot": "abc"})),
            part(
                &format!("prt_zc{n}t"),
                &aid,
                json!({"type": "text", "text": format!("Summary {n}: the work so far."),
                "time": {"start": t + 2, "end": t + 3}}),
            ),
            part(&format!("prt_zc{n}f"), &aid, json!({"type": "step-finish", "reason": "stop", "cost": 0})),
        ],
    );
    [request, summary]
}

/// A generated session with two compactions in its history, and its steps.
fn session(seed: u64) -> (String, Vec<Message>, Vec<Vec<Message>>) {
    let spec = dcp_testkit::gen::SessionSpec { messages: 160, steps: 8, seed };
    let generated = dcp_testkit::gen::session(&spec);
    let mut history = generated.messages;
    for (n, at) in [(2, 110), (1, 50)] {
        let pair = compaction(&history[at - 1], n);
        assert!(history[at].time_created() > pair[1].time_created() + 1, "no room for a compaction");
        history.splice(at..at, pair);
    }
    (generated.session_id, history, generated.steps)
}

/// Stores `messages` in the sandbox's `opencode.db` as session `sid` (the session row is the
/// recorded session's, renamed).
fn store(sandbox: &Sandbox, sid: &str, messages: &[Message]) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute("CREATE TEMP TABLE copy AS SELECT * FROM session WHERE id = ?1", [DB_SESSION]).unwrap();
    conn.execute("UPDATE copy SET id = ?1", [sid]).unwrap();
    conn.execute("INSERT INTO session SELECT * FROM copy", []).unwrap();
    for m in messages {
        let (mid, t) = (m.id(), m.time_created());
        let row = "INSERT INTO message VALUES (?1, ?2, ?3, ?3, ?4)";
        conn.execute(row, rusqlite::params![mid, sid, t, m.info.to_string()]).unwrap();
        for (i, p) in m.parts.iter().enumerate() {
            let row = "INSERT INTO part VALUES (?1, ?2, ?3, ?4, ?4, ?5)";
            let pid = p["id"].as_str().unwrap();
            conn.execute(row, rusqlite::params![pid, mid, sid, t + i as i64, p.to_string()]).unwrap();
        }
    }
}

fn line(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn values(messages: &[Message]) -> Vec<Value> {
    messages.iter().map(|m| serde_json::to_value(m).unwrap()).collect()
}

/// Sends `line` to `server` and returns its answer's result, failing on an error.
fn ask(server: &mut dcp::sidecar::Server, line: &str) -> Value {
    let answer: Value = serde_json::from_str(&server.handle_line(line).unwrap()).unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

/// The sidecar's answers to the visible history, then to each step after it (counting ahead,
/// and so slimming, after each), then to `/dcp context`: the last transform's result and the
/// context's text.
fn sidecar(sandbox: &Sandbox, sid: &str, visible: &[Message], steps: &[Vec<Message>]) -> (Value, String) {
    let home = sandbox.dir.path().join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let server = &mut dcp::sidecar::Server::new(options, None).unwrap();
    ask(server, &line(0, "initialize", json!({"protocol": 2})));
    let mut last =
        ask(server, &line(1, "transform", json!({"sessionID": sid, "now": NOW, "messages": values(visible)})));
    let mut base = visible.len();
    for (i, step) in steps.iter().enumerate() {
        server.precount(|| true);
        let params =
            json!({"sessionID": sid, "now": NOW + 1000 * (i as i64 + 1), "base": base, "messages": values(step)});
        last = ask(server, &line(i + 2, "transform", params));
        base += step.len();
    }
    server.precount(|| true);
    let context =
        ask(server, &line(99, "command", json!({"sessionID": sid, "command": "dcp", "arguments": "context"})));
    (last, context["text"].as_str().unwrap().to_string())
}

/// A value edit of a transform's answer, as text: message, part, path and value.
fn edit(m: usize, p: usize, path: &Value, value: &Value) -> String {
    json!({"m": m, "p": p, "path": path, "value": value}).to_string()
}

/// The value edits (prunes, not the message id tags) of a transform's result.
fn edits_of(result: &Value) -> BTreeSet<String> {
    let edits = result["edits"].as_array().unwrap().iter().filter(|e| e.get("value").is_some());
    edits
        .map(|e| edit(e["m"].as_u64().unwrap() as usize, e["p"].as_u64().unwrap() as usize, &e["path"], &e["value"]))
        .collect()
}

/// The edits the applied prunes of session `sid`'s state file make to `messages`, the whole
/// history, computed by the library on its parts as OpenCode stored them, each placeholder
/// naming the call's handle.
fn edits_of_state(sandbox: &Sandbox, sid: &str, messages: &[Message]) -> BTreeSet<String> {
    let file: Value =
        serde_json::from_slice(&std::fs::read(sandbox.state_dir().join(format!("{sid}.json"))).unwrap()).unwrap();
    let mut edits = BTreeSet::new();
    for (m, message) in messages.iter().enumerate() {
        for (p, part) in message.parts.iter().enumerate() {
            let Some(call) = ToolCall::from_part(m, p, part, 0) else { continue };
            let Some(record) = file["dcp"]["pruned"].get(call.call_id) else { continue };
            let record: PruneRecord = serde_json::from_value(record.clone()).unwrap();
            // The placeholders name the call's agent-facing id: the agent restores by it.
            let id = file["dcp"]["ids"].get(call.call_id).and_then(Value::as_u64);
            let handle = id.map(|id| Handle { id: id as u32, via: Via::Tool });
            for e in dcp::strategies::field_edits(part, &record.action, handle).into_iter().filter(|_| record.applied) {
                edits.insert(edit(m, p, &json!(e.path), &e.value));
            }
        }
    }
    edits
}

#[test]
fn a_stripped_mirror_answers_as_the_whole_history_does() {
    // Rewrites at once, and as the cache-aware default decides (prunes wait, so some are
    // recorded but not applied, and the strategies propose more).
    for (seed, rules) in [(3, IMMEDIATE), (8, "{}")] {
        let sandbox = Sandbox::new();
        let config = sandbox.dir.path().join("home/.config/opencode");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("dcp.jsonc"), rules).unwrap();
        let (sid, history, steps) = session(seed);
        let stored: Vec<Message> = history.iter().chain(steps.iter().flatten()).cloned().collect();
        store(&sandbox, &sid, &stored);
        // OpenCode sends the history from the newest compaction's request on.
        let visible = visible_history(history);
        assert_eq!(visible[1].info["summary"], true, "seed {seed}");
        let (result, context) = sidecar(&sandbox, &sid, &visible, &steps);
        let cli = dcp(&sandbox, &["context", "--session", &sid]);
        assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
        let cli = String::from_utf8(cli.stdout).unwrap();
        // The headers differ (the CLI names the session's title and where it read it).
        let body = |text: &str| text.split_once('\n').map(|(_, rest)| rest.to_string());
        assert_eq!(body(&context), body(&cli), "seed {seed}");
        let whole: Vec<Message> = visible.into_iter().chain(steps.into_iter().flatten()).collect();
        let expected = edits_of_state(&sandbox, &sid, &whole);
        assert_eq!(edits_of(&result), expected, "seed {seed}");
        // Something was pruned or proposed, so the comparisons mean something.
        assert!(expected.len() >= 3 || !context.contains(", 0 proposed now)"), "seed {seed}: {context}");
    }
}
