//! The sidecar's views kept between requests (`dcp::sidecar::Views`): the prunes in force and
//! waiting, the edits the plugin lacks and the savings' first rewritten message, read from what
//! changed since the last request, give the answers that reading every prune on every request
//! gives, over a generated session with edits of old messages, full resends, missed answers,
//! a sweep, new rules and a compaction.

use serde_json::{json, Value};

use crate::support::Sandbox;
use dcp::host::paths::Env;
use dcp::sidecar::{Server, Views};

const NOW: i64 = 1_790_000_000_000;

fn server(sandbox: &Sandbox, views: Views) -> Server {
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let mut server = Server::new(options, None).unwrap();
    server.set_views(views);
    server
}

fn line(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Makes the output of the last completed tool part of `message` longer, as an edit would.
fn edit(message: &mut Value) {
    let parts = message["parts"].as_array_mut().unwrap();
    let Some(part) = parts.iter_mut().rev().find(|p| p["state"]["status"] == "completed") else { return };
    let output = part["state"]["output"].as_str().unwrap_or("").to_string();
    part["state"]["output"] = Value::String(format!("{output}{}", " edited".repeat(300)));
}

/// A compaction summary after the history, as OpenCode writes one.
fn summary(sid: &str, at: i64) -> Value {
    json!({"info": {"id": format!("msg_summary_{at}"), "sessionID": sid, "role": "assistant", "summary": true,
        "mode": "compaction", "time": {"created": at}}, "parts": [{"id": format!("prt_summary_{at}"),
        "sessionID": sid, "messageID": format!("msg_summary_{at}"), "type": "text", "text": "What happened so far."}]})
}

/// What the next request of the scenario sends after `step`: the base, and whether the last
/// answer is claimed (`have`); every fifth step edits an old message, every ninth resends
/// everything, every seventh claims no answer (as a plugin that missed one).
fn next_request(step: usize, history: &mut [Value], sent: usize) -> (usize, bool) {
    match step {
        s if s % 5 == 0 => {
            edit(&mut history[sent - 3]);
            (sent - 3, true)
        }
        s if s % 9 == 0 => (0, true),
        s if s % 7 == 0 => (sent, false),
        _ => (sent, true),
    }
}

/// Runs the scenario through `server`, deciding each request from the answers it got; returns
/// every answer.
fn run(server: &mut Server, messages: usize, steps: usize, seed: u64) -> Vec<String> {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed });
    let sid = session.session_id.clone();
    let mut history: Vec<Value> = serde_json::from_value(serde_json::to_value(&session.messages).unwrap()).unwrap();
    let mut answers = vec![server.handle_line(&line(0, "initialize", json!({"protocol": 2}))).unwrap()];
    let first = json!({"sessionID": sid, "now": NOW, "messages": history});
    answers.push(server.handle_line(&line(1, "transform", first)).unwrap());
    for (i, step) in session.steps.iter().enumerate() {
        let sent = history.len();
        history.extend(serde_json::from_value::<Vec<Value>>(serde_json::to_value(step).unwrap()).unwrap());
        if i == steps / 3 {
            let sweep = json!({"sessionID": sid, "command": "dcp", "arguments": "sweep"});
            answers.push(server.handle_line(&line(700, "command", sweep)).unwrap());
        }
        if i == steps / 2 {
            let project = json!({"protocol": 2, "directory": "/nonexistent/dcp-views-project"});
            answers.push(server.handle_line(&line(800, "initialize", project)).unwrap());
        }
        if i == 2 * steps / 3 {
            history.push(summary(&sid, NOW + 1000 * i as i64 + 500));
        }
        let (base, claimed) = next_request(i + 1, &mut history, sent);
        let have = answers
            .last()
            .and_then(|a| serde_json::from_str::<Value>(a).ok())
            .and_then(|a| a["result"]["seq"].as_u64());
        let now = NOW + 1000 * (i as i64 + 1);
        let params = json!({"sessionID": sid, "now": now, "base": base, "have": if claimed { have } else { None },
            "messages": history[base..]});
        answers.push(server.handle_line(&line(i + 2, "transform", params)).unwrap());
        server.precount(|| true);
    }
    // The savings counted on every request (from the kept views too) are compared through
    // the session's report.
    let stats = json!({"sessionID": sid, "command": "dcp", "arguments": "stats"});
    answers.push(server.handle_line(&line(900, "command", stats)).unwrap());
    answers
}

#[test]
fn answers_from_the_views_kept_between_requests_equal_answers_from_every_prune_read_again() {
    for (messages, steps, seed) in [(300, 60, 11), (600, 45, 5)] {
        let (kept_box, rebuilt_box) = (Sandbox::new(), Sandbox::new());
        let kept = run(&mut server(&kept_box, Views::Kept), messages, steps, seed);
        let rebuilt = run(&mut server(&rebuilt_box, Views::Rebuilt), messages, steps, seed);
        assert_eq!(kept.len(), rebuilt.len());
        for (i, (a, b)) in kept.iter().zip(&rebuilt).enumerate() {
            assert_eq!(a, b, "session of {messages} messages, answer {i}");
        }
        // The comparison means something: edits were added to answers the plugin held, and
        // rewrites were applied.
        let adds = kept.iter().filter(|a| a.contains("\"addEdits\":[{")).count();
        let applied = kept.iter().filter(|a| a.contains("\"applied\"")).count();
        assert!(adds > 3 && applied > 3, "{adds} answers added edits, {applied} applied rewrites");
    }
}
