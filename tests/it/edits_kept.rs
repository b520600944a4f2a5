//! The edits the plugin holds between requests: an answer to a plugin that holds the last
//! one's sends only what changed (`sameEdits`, `addEdits`, and `keepEditsBefore` when OpenCode
//! sent again messages those edits point at, as it does with the message being written), and
//! the edits it then holds, kept as the plugin keeps them, are those a plugin that holds none
//! is sent whole, request by request.

use serde_json::{json, Value};

use crate::support::Sandbox;
use dcp::host::paths::Env;
use dcp::sidecar::Server;

const NOW: i64 = 1_790_000_000_000;

fn server(sandbox: &Sandbox) -> Server {
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    Server::new(options, None).unwrap()
}

fn line(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// What the plugin holds: the last answer's number and the edits in force.
#[derive(Default)]
struct Plugin {
    seq: Option<u64>,
    edits: Vec<Value>,
}

/// How an answer sent its edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Same,
    Added,
    Kept,
    Whole,
}

impl Plugin {
    /// Keeps the answer's edits as the plugin does (`plugin/edits.js`, `resolveEdits`); returns
    /// how they came and the answer as applied: the edits held then, in one order, and the
    /// rest of the answer as it came.
    fn answered(&mut self, answer: &str) -> (Sent, String) {
        let mut answer: Value = serde_json::from_str(answer).unwrap();
        let result = answer["result"].as_object_mut().expect("a transform answers with a result");
        self.seq = result.remove("seq").and_then(|s| s.as_u64()).or(self.seq);
        let before = result.remove("keepEditsBefore").and_then(|k| k.as_u64());
        let same = result.remove("sameEdits").is_some();
        let sent = match (result.remove("addEdits"), result.remove("edits")) {
            (Some(Value::Array(added)), _) => {
                if let Some(before) = before {
                    self.edits.retain(|e| e["m"].as_u64().is_some_and(|m| m < before));
                }
                self.edits.extend(added);
                if before.is_some() {
                    Sent::Kept
                } else {
                    Sent::Added
                }
            }
            (None, Some(Value::Array(all))) => {
                self.edits = all;
                Sent::Whole
            }
            _ => {
                assert!(same, "an answer without edits says they are the same: {answer}");
                Sent::Same
            }
        };
        let mut held: Vec<String> = self.edits.iter().map(Value::to_string).collect();
        held.sort_unstable();
        result.insert("held".into(), json!(held));
        // In one order of keys, whichever came.
        let result: std::collections::BTreeMap<&String, &Value> = result.iter().collect();
        (sent, json!(result).to_string())
    }
}

/// Runs a generated session through `server` as OpenCode and the plugin send it: each step's
/// last message first being written and finished with the next step (every fifth step appends
/// only, every thirteenth changes an older message too). With `claim`, each request says which
/// answer's edits the plugin holds (`have`); without, it holds none. Returns each answer as
/// applied, with how its edits came. `protocol` is the one the plugin says it speaks.
fn run(
    server: &mut Server,
    (messages, steps, seed): (usize, usize, u64),
    claim: bool,
    protocol: u64,
) -> Vec<(Sent, String)> {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed });
    let sid = session.session_id.clone();
    let mut history: Vec<Value> = serde_json::from_value(serde_json::to_value(&session.messages).unwrap()).unwrap();
    server.handle_line(&line(0, "initialize", json!({"protocol": protocol}))).unwrap();
    let mut plugin = Plugin::default();
    let first = json!({"sessionID": sid, "now": NOW, "messages": history});
    let mut answers = vec![plugin.answered(&server.handle_line(&line(1, "transform", first)).unwrap())];
    let mut finishing: Option<Value> = None;
    for (i, step) in session.steps.iter().enumerate() {
        let mut base = history.len();
        if let Some(finished) = finishing.take() {
            *history.last_mut().unwrap() = finished;
            base -= 1;
        }
        if i % 13 == 12 && base > 4 {
            let old = &mut history[base - 4]["info"];
            old["edited"] = json!(i);
            base -= 4;
        }
        history.extend(serde_json::from_value::<Vec<Value>>(serde_json::to_value(step).unwrap()).unwrap());
        if i % 5 != 4 {
            let last = history.last_mut().unwrap();
            finishing = Some(std::mem::replace(last, dcp_testkit::gen::unfinished(last)));
        }
        let have = plugin.seq.filter(|_| claim);
        let now = NOW + 2_000 * (i as i64 + 1);
        let params = json!({"sessionID": sid, "now": now, "base": base, "have": have, "messages": history[base..]});
        answers.push(plugin.answered(&server.handle_line(&line(i + 2, "transform", params)).unwrap()));
        server.precount(|| true);
    }
    answers
}

#[test]
fn edits_kept_by_the_plugin_across_resent_messages_equal_edits_sent_whole() {
    for scenario in [(400, 90, 3), (900, 60, 8)] {
        let (held_box, whole_box) = (Sandbox::new(), Sandbox::new());
        let held = run(&mut server(&held_box), scenario, true, 2);
        let whole = run(&mut server(&whole_box), scenario, false, 2);
        assert_eq!(held.len(), whole.len());
        for (i, ((_, a), (sent, b))) in held.iter().zip(&whole).enumerate() {
            assert_eq!(*sent, Sent::Whole, "a plugin that holds no edits is sent them whole");
            if a != b {
                panic!("session {scenario:?}, answer {i}:\n{}", difference(a, b));
            }
        }
        // The comparison means something: most answers kept the edits of the messages before
        // the one sent again, and some of those carried edits and message id tags.
        let count = |kind: Sent| held.iter().filter(|(s, _)| *s == kind).count();
        let (kept, added) = (count(Sent::Kept), count(Sent::Added) + count(Sent::Same));
        assert!(kept > held.len() / 2 && added > 3, "{kept} answers kept edits, {added} added or the same");
        let tagged = held.iter().filter(|(_, a)| a.contains("\\\"append\\\"")).count();
        let pruned = held.iter().filter(|(_, a)| a.contains("\\\"value\\\"")).count();
        assert!(tagged > 3 && pruned > held.len() / 2, "{tagged} answers held tags, {pruned} held prunes");
    }
}

/// A plugin of protocol 1 does not know `keepEditsBefore`: had it been sent one, it would
/// have applied it as `addEdits` and kept stale edits of the message sent again. It is sent
/// its edits whole instead, and holds what a plugin that holds none is sent.
#[test]
fn a_plugin_of_protocol_1_is_never_sent_keep_edits_before() {
    let scenario = (400, 90, 3);
    let (old_box, whole_box) = (Sandbox::new(), Sandbox::new());
    let old = run(&mut server(&old_box), scenario, true, 1);
    let whole = run(&mut server(&whole_box), scenario, false, 2);
    assert!(old.iter().all(|(sent, _)| *sent != Sent::Kept), "a protocol 1 plugin was sent keepEditsBefore");
    assert!(old.iter().any(|(sent, _)| *sent == Sent::Added), "it still gets added answers");
    for (i, ((_, a), (_, b))) in old.iter().zip(&whole).enumerate() {
        if a != b {
            panic!("answer {i}:\n{}", difference(a, b));
        }
    }
}

/// What differs between two answers as applied: the edits held by one only, and the rest.
fn difference(a: &str, b: &str) -> String {
    let (a, b): (Value, Value) = (serde_json::from_str(a).unwrap(), serde_json::from_str(b).unwrap());
    let held = |v: &Value| -> Vec<String> {
        v["held"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect()
    };
    let (ha, hb) = (held(&a), held(&b));
    let only_a: Vec<&String> = ha.iter().filter(|e| !hb.contains(e)).collect();
    let only_b: Vec<&String> = hb.iter().filter(|e| !ha.contains(e)).collect();
    let rest = |mut v: Value| {
        v.as_object_mut().unwrap().remove("held");
        v.to_string()
    };
    format!(
        "held only by the plugin that kept edits: {only_a:?}\nonly when sent whole: {only_b:?}\n{}\n{}",
        rest(a),
        rest(b)
    )
}
