//! Recoverable hiding through `dcp serve` (issue 38, part 2): every hidden output names a
//! handle, and `restore` gives back the exact original from OpenCode's store, counted; a
//! re-fetch of what dcp hid is counted and makes the session back off (part 3).

use serde_json::{json, Value};

use crate::support::{clone_session, Sandbox, SessionBuilder};
use dcp::host::paths::Env;
use dcp::host::DataDir;
use dcp::session::Message;
use dcp::sidecar::Server;

/// Whether `text` is the pruned-output placeholder as the model is sent it: the published
/// DCP's text, naming the handle that restores the output when there is one.
pub fn is_pruned(text: Option<&str>) -> bool {
    let placeholder = dcp::strategies::OUTPUT_PLACEHOLDER;
    let open = placeholder.trim_end_matches(']');
    text.is_some_and(|t| {
        t == placeholder || t.strip_prefix(open).is_some_and(|rest| rest.starts_with("; ") && rest.contains("restore"))
    })
}

const NOW: i64 = 1_795_000_000_000;
const IMMEDIATE: &str = r#"{"rewrite": {"mode": "immediate"},
    "strategies": {"masking": {"keepLast": 1, "keepTokens": 0, "keepUserTurns": 0}}}"#;

fn server(sandbox: &Sandbox, config: &str) -> Server {
    let home = sandbox.dir.path().join("home");
    let cfg = home.join(".config/opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("dcp.jsonc"), config).unwrap();
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let mut server = Server::new(options, None).unwrap();
    call(&mut server, "initialize", json!({"protocol": 2}));
    server
}

fn call(server: &mut Server, method: &str, params: Value) -> Value {
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let answer: Value = serde_json::from_str(&server.handle_line(&line).unwrap()).unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

fn transform(server: &mut Server, sid: &str, messages: &[Message], now: i64) -> Value {
    call(server, "transform", json!({"sessionID": sid, "now": now, "messages": messages}))
}

fn restore(server: &mut Server, sid: &str, id: &str) -> String {
    let answer = call(server, "tool", json!({"sessionID": sid, "name": "restore", "args": {"id": id}}));
    answer["output"].as_str().unwrap().to_string()
}

/// The handles the answer's output placeholders name, with the message and part of each.
fn handles(answer: &Value) -> Vec<(String, usize, usize)> {
    let edits = answer["edits"].as_array().cloned().unwrap_or_default();
    edits
        .iter()
        .filter_map(|e| {
            let text = e["value"].as_str().filter(|_| e["path"] == json!(["state", "output"]))?;
            let n = text.split("; restore ").nth(1)?.trim_end_matches(']');
            Some((n.to_string(), e["m"].as_u64()? as usize, e["p"].as_u64()? as usize))
        })
        .collect()
}

fn output(messages: &[Message], m: usize, p: usize) -> String {
    messages[m].parts[p]["state"]["output"].as_str().unwrap().to_string()
}

#[test]
fn a_restore_returns_the_hidden_output_byte_for_byte_from_opencode_s_store() {
    let sandbox = Sandbox::new();
    let sid = "ses_restoredFromTheStore";
    clone_session(&sandbox, sid);
    let stored = DataDir::new(&sandbox.data(), &Env::default()).load(sid).unwrap().messages;
    let mut server = server(&sandbox, IMMEDIATE);
    let answer = transform(&mut server, sid, &stored, NOW);
    // The mirror keeps a digest of every big output from now on: the text comes from the store.
    server.precount(|| true);
    let hidden = handles(&answer);
    assert!(hidden.len() >= 3, "placeholders with handles: {answer}");
    let big = hidden.iter().filter(|(_, m, p)| output(&stored, *m, *p).len() >= dcp::session::slim::MIN_BYTES);
    assert!(big.count() >= 2, "outputs the mirror keeps only as digests: {answer}");
    let mut restored = 0;
    for (handle, m, p) in &hidden {
        let original = output(&stored, *m, *p);
        assert_eq!(restore(&mut server, sid, handle), original, "restore {handle}");
        restored += 1;
    }
    let stats = call(&mut server, "command", json!({"sessionID": sid, "arguments": "stats"}));
    let text = stats["text"].as_str().unwrap();
    assert!(text.contains(&format!("0 re-fetches, {restored} restores")), "{text}");
}

#[test]
fn a_restore_names_what_it_cannot_bring_back_and_counts_nothing() {
    let sandbox = Sandbox::new();
    let sid = "ses_restoreOfNothing";
    clone_session(&sandbox, sid);
    let stored = DataDir::new(&sandbox.data(), &Env::default()).load(sid).unwrap().messages;
    let mut server = server(&sandbox, IMMEDIATE);
    transform(&mut server, sid, &stored, NOW);
    let said = restore(&mut server, sid, "9999");
    assert!(said.starts_with("Nothing to restore for \"9999\""), "{said}");
    // A stored copy that is not what the model was sent is not given.
    let hidden = handles(&transform(&mut server, sid, &stored, NOW + 1_000));
    server.precount(|| true);
    let (handle, m, p) = hidden.iter().find(|(_, m, p)| output(&stored, *m, *p).len() >= 256).unwrap().clone();
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    let part = stored[m].parts[p]["id"].as_str().unwrap().to_string();
    let changed =
        conn.execute("UPDATE part SET data = json_set(data, '$.state.output', 'changed') WHERE id = ?1", [&part]);
    assert_eq!(changed.unwrap(), 1);
    let said = restore(&mut server, sid, &handle);
    assert!(said.contains("not what the model was sent"), "{said}");
    let state: Value =
        serde_json::from_slice(&std::fs::read(sandbox.state_dir().join(format!("{sid}.json"))).unwrap_or_default())
            .unwrap_or(Value::Null);
    assert!(state["stats"].get("restores").is_none(), "{state}");
}

/// A session whose agent reads the files `first`, moves on until masking hides those reads,
/// then reads the files `second`: one request per step, as OpenCode makes them.
fn reads(first: &[&str], second: &[&str]) -> Vec<Vec<Message>> {
    let body = "fn step() { compute(1, 2); }\n".repeat(200);
    let mut b = SessionBuilder::new().user("Look at the code.");
    let mut steps = Vec::new();
    for (i, file) in first.iter().enumerate() {
        b = b.tool(&format!("a{i}"), "read", json!({"filePath": file}), &body);
        steps.push(b.clone().build());
    }
    for i in 0..3 {
        b = b.tool(&format!("l{i}"), "bash", json!({"command": format!("ls dir{i}")}), &"x\n".repeat(300));
        steps.push(b.clone().build());
    }
    for (i, file) in second.iter().enumerate() {
        b = b.tool(&format!("b{i}"), "read", json!({"filePath": file}), &body);
        steps.push(b.clone().build());
    }
    steps
}

/// Runs `steps` through a new session of `server`, then one more step; returns the edits in
/// force after it.
fn edits_after(server: &mut Server, sid: &str, steps: &[Vec<Message>]) -> usize {
    for (i, messages) in steps.iter().enumerate() {
        transform(server, sid, messages, NOW + i as i64 * 1_000);
    }
    let b = SessionBuilder::continuing(steps.last().unwrap().clone());
    let next = b.tool("c6", "bash", json!({"command": "ls dir6"}), &"y\n".repeat(300)).build();
    let answer = transform(server, sid, &next, NOW + 60_000);
    answer["edits"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_re_fetch_is_counted_and_makes_the_session_back_off() {
    let sandbox = Sandbox::new();
    let mut engine = server(&sandbox, IMMEDIATE);
    let files = ["/p/src/a.rs", "/p/src/b.rs", "/p/src/c.rs", "/p/src/g.rs", "/p/src/h.rs"];
    // Five files read again while their first reads are hidden: five re-fetches, a step of
    // backoff (`policy::backoff_level`).
    let backed_off = edits_after(&mut engine, "ses_rereads", &reads(&files, &files));
    let stats = call(&mut engine, "command", json!({"sessionID": "ses_rereads", "arguments": "stats"}));
    let text = stats["text"].as_str().unwrap();
    assert!(text.contains("Misses seen:     5 re-fetches, 0 restores"), "{text}");
    // Backed off, the session keeps more: its last step masks less than the same step of a
    // session whose second reads are of other files (no re-fetch).
    let others = ["/p/src/d.rs", "/p/src/e.rs", "/p/src/f.rs", "/p/src/i.rs", "/p/src/j.rs"];
    let plain = edits_after(&mut engine, "ses_plain", &reads(&files, &others));
    let stats = call(&mut engine, "command", json!({"sessionID": "ses_plain", "arguments": "stats"}));
    let session = stats["text"].as_str().unwrap().split("All-time").next().unwrap();
    assert!(!session.contains("Misses seen"), "{stats}");
    assert!(backed_off < plain, "edits in force after backing off {backed_off}, without {plain}");
    // With the backoff off, the session that re-fetched masks as much as the other.
    let off = IMMEDIATE.replace(r#""keepUserTurns": 0"#, r#""keepUserTurns": 0, "backoff": false"#);
    let mut unmoved = server(&Sandbox::new(), &off);
    assert_eq!(edits_after(&mut unmoved, "ses_rereads", &reads(&files, &files)), plain);
}
