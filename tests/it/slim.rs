//! The sidecar's slim mirror: once the big strings of a part are counted, the mirror keeps a
//! marker instead of the text (`dcp::session::slim`), and a long first request is read as a
//! stream and slimmed message by message. Neither may change an answer.

use serde_json::{json, Value};

use crate::support::Sandbox;
use dcp::host::paths::Env;

const NOW: i64 = 1_790_000_000_000;

fn options(sandbox: &Sandbox) -> dcp::sidecar::Options {
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    dcp::sidecar::Options { data_dir: sandbox.data(), env, project: None }
}

fn line(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The lines of a generated session as the plugin sends them: the whole history first, then
/// each step after the messages the sidecar holds (`base`), then `/dcp context` and `/dcp sweep`.
fn session_lines(messages: usize, steps: usize) -> (String, Vec<String>) {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed: 11 });
    let sid = session.session_id.clone();
    let mut lines = vec![line(0, "initialize", json!({"protocol": 1}))];
    lines.push(line(1, "transform", json!({"sessionID": sid, "now": NOW, "messages": session.messages})));
    let mut base = session.messages.len();
    for (i, step) in session.steps.iter().enumerate() {
        if i == steps / 2 {
            // New rules: the index is rebuilt from what the mirror holds, slimmed or not.
            lines.push(line(800, "initialize", json!({"protocol": 1, "directory": "/nonexistent/dcp-slim-project"})));
        }
        let params = json!({"sessionID": sid, "now": NOW + 1000 * (i as i64 + 1), "base": base, "messages": step});
        lines.push(line(i + 2, "transform", params));
        base += step.len();
    }
    for (i, arguments) in ["context", "sweep"].into_iter().enumerate() {
        lines.push(line(900 + i, "command", json!({"sessionID": sid, "command": "dcp", "arguments": arguments})));
    }
    (sid, lines)
}

/// Answers every line in process; with `slim`, counts ahead (and so slims every part) after
/// each one, as `dcp serve` does while idle. Returns the answers and what the mirror holds.
fn answers_in_process(lines: &[String], sid: &str, slim: bool) -> (Vec<String>, usize) {
    let sandbox = Sandbox::new();
    let mut server = dcp::sidecar::Server::new(options(&sandbox), None).unwrap();
    let mut answers = Vec::new();
    for l in lines {
        answers.push(server.handle_line(l).unwrap());
        if slim {
            server.precount(|| true);
        }
    }
    let held = server.mirror_bytes(sid).unwrap();
    (answers, held)
}

#[test]
fn a_slimmed_mirror_changes_no_answer() {
    let (sid, lines) = session_lines(300, 40);
    let (slimmed, held_slim) = answers_in_process(&lines, &sid, true);
    let (full, held_full) = answers_in_process(&lines, &sid, false);
    for (i, (a, b)) in slimmed.iter().zip(&full).enumerate() {
        assert_eq!(a, b, "answer {i}");
    }
    // Something was pruned, listed and reported, so the comparison means something.
    assert!(full[1].contains("Output removed") && full[lines.len() - 2].contains("tool outputs"), "{}", full[1]);
    assert!(held_slim * 3 < held_full, "slim {held_slim} bytes, full {held_full}");
}

#[test]
fn the_mirror_holds_no_large_output_after_it_was_counted() {
    let sandbox = Sandbox::new();
    let mut server = dcp::sidecar::Server::new(options(&sandbox), None).unwrap();
    let output = "a line of a long tool output\n".repeat(2_000);
    let part = json!({"id": "prt_big", "sessionID": "ses_big", "messageID": "msg_2", "type": "tool", "tool": "bash",
        "callID": "call_big", "state": {"status": "completed", "input": {"command": "cat log"}, "output": output,
        "metadata": {"output": output}, "title": "cat log", "time": {"start": 1, "end": 2}}});
    let messages = json!([
        {"info": {"id": "msg_1", "sessionID": "ses_big", "role": "user", "time": {"created": 1}},
         "parts": [{"id": "prt_1", "type": "text", "text": "look"}]},
        {"info": {"id": "msg_2", "sessionID": "ses_big", "role": "assistant", "time": {"created": 2}}, "parts": [part]},
    ]);
    server.handle_line(&line(0, "initialize", json!({"protocol": 1})));
    server.handle_line(&line(1, "transform", json!({"sessionID": "ses_big", "now": NOW, "messages": messages})));
    // Until it is counted, the mirror holds the output (but not OpenCode's second copy).
    let before = server.mirror_bytes("ses_big").unwrap();
    assert!(before > output.len() && before < 2 * output.len(), "{before}");
    server.precount(|| true);
    let after = server.mirror_bytes("ses_big").unwrap();
    assert!(after < 1_000, "the mirror holds {after} bytes after counting a {}-byte output", output.len());
    // The next request finds the part by reference, with its count.
    let answer = server.handle_line(&line(
        2,
        "command",
        json!({"sessionID": "ses_big", "command": "dcp", "arguments": "context"}),
    ));
    assert!(answer.unwrap().contains("tool outputs"));
}

#[test]
fn a_streamed_first_request_gets_the_answer_of_one_read_whole() {
    let (sid, lines) = session_lines(250, 10);
    assert!(lines[1].len() > (1 << 20), "the first request must be long enough to be streamed: {}", lines[1].len());
    let (whole, _) = answers_in_process(&lines, &sid, false);
    let sandbox = Sandbox::new();
    let input = lines.join("\n") + "\n";
    let mut output = Vec::new();
    dcp::sidecar::serve_on(options(&sandbox), std::io::Cursor::new(input), &mut output, 1 << 30).unwrap();
    let streamed: Vec<&str> = std::str::from_utf8(&output).unwrap().lines().collect();
    assert_eq!(streamed.len(), whole.len());
    for (i, (a, b)) in streamed.iter().zip(&whole).enumerate() {
        assert_eq!(a, b, "answer {i}");
    }
}
