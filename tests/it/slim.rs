//! The sidecar's slim mirror: once the big strings of a part are counted, the mirror keeps a
//! marker instead of the text (`dcp::session::slim`), and a long first request is read as a
//! stream and slimmed message by message. Neither may change an answer.

use serde_json::{json, Value};

use crate::support::Sandbox;
use dcp::host::paths::Env;

const NOW: i64 = 1_790_000_000_000;

fn options(sandbox: &Sandbox) -> dcp::sidecar::ServeOptions {
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None }
}

fn line(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The lines of a generated session as the plugin sends them: the whole history first, then
/// each step after the messages the sidecar holds (`base`), then `/dcp context` and `/dcp sweep`.
fn session_lines(messages: usize, steps: usize) -> (String, Vec<String>) {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed: 11 });
    let sid = session.session_id.clone();
    let mut lines = vec![line(0, "initialize", json!({"protocol": 2}))];
    lines.push(line(1, "transform", json!({"sessionID": sid, "now": NOW, "messages": session.messages})));
    let mut base = session.messages.len();
    for (i, step) in session.steps.iter().enumerate() {
        if i == steps / 2 {
            // New rules: the index is rebuilt from what the mirror holds, slimmed or not.
            lines.push(line(800, "initialize", json!({"protocol": 2, "directory": "/nonexistent/dcp-slim-project"})));
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

/// A session with one large tool output, sent to a fresh server; with `precount`, the server
/// counts ahead (and so slims the output) after the first request. The next request sends
/// the part by reference. Returns the answers and what the mirror held before and after
/// counting ahead.
fn big_output_session(precount: bool) -> (Vec<String>, usize, usize) {
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
    let next = json!([
        {"id": "msg_2", "parts": [{"ref": "prt_big"}]},
        {"info": {"id": "msg_3", "sessionID": "ses_big", "role": "user", "time": {"created": 3}},
         "parts": [{"id": "prt_3", "type": "text", "text": "and now?"}]},
    ]);
    let mut answers = Vec::new();
    let mut send = |server: &mut dcp::sidecar::Server, l: String| answers.push(server.handle_line(&l).unwrap());
    send(&mut server, line(0, "initialize", json!({"protocol": 2})));
    send(&mut server, line(1, "transform", json!({"sessionID": "ses_big", "now": NOW, "messages": messages})));
    let before = server.mirror_bytes("ses_big").unwrap();
    if precount {
        server.precount(|| true);
    }
    let after = server.mirror_bytes("ses_big").unwrap();
    let params = json!({"sessionID": "ses_big", "now": NOW + 1000, "base": 1, "messages": next});
    send(&mut server, line(2, "transform", params));
    send(&mut server, line(3, "command", json!({"sessionID": "ses_big", "command": "dcp", "arguments": "context"})));
    (answers, before, after)
}

#[test]
fn the_mirror_holds_no_large_output_after_it_was_counted() {
    let output_len = "a line of a long tool output\n".len() * 2_000;
    let (counted, before, after) = big_output_session(true);
    // Until it is counted, the mirror holds the output (but not OpenCode's second copy).
    assert!(before > output_len && before < 2 * output_len, "{before}");
    assert!(after < 1_000, "the mirror holds {after} bytes after counting a {output_len}-byte output");
    // The next request finds the slimmed part by reference, and every answer, `/dcp context`'s
    // count of the output included, is the one of a server that never slimmed it.
    let (uncounted, _, kept) = big_output_session(false);
    assert!(kept > output_len, "the server that never counted ahead holds {kept} bytes");
    for (i, (a, b)) in counted.iter().zip(&uncounted).enumerate() {
        assert_eq!(a, b, "answer {i}");
    }
    assert!(!counted[2].contains("\"error\""), "{}", counted[2]);
    // 2,000 lines of 8 tokens: the count the marker holds.
    let outputs = counted[3].split("\\n").find(|l| l.trim_start().starts_with("tool outputs"));
    assert!(outputs.is_some_and(|l| l.contains("16,000")), "{}", counted[3]);
}

#[test]
fn a_streamed_first_request_gets_the_answer_of_one_read_whole() {
    let (sid, lines) = session_lines(250, 10);
    assert!(lines[1].len() > (1 << 20), "the first request must be long enough to be streamed: {}", lines[1].len());
    let (whole, _) = answers_in_process(&lines, &sid, false);
    let sandbox = Sandbox::new();
    let input = lines.join("\n") + "\n";
    let mut output = Vec::new();
    // Every line over 1 KiB is streamed: the steps and commands too.
    let limits = dcp::sidecar::stream::LineLimits { max: 1 << 30, stream_from: 1024 };
    dcp::sidecar::serve_on(options(&sandbox), std::io::Cursor::new(input), &mut output, limits).unwrap();
    let streamed: Vec<&str> = std::str::from_utf8(&output).unwrap().lines().collect();
    assert_eq!(streamed.len(), whole.len());
    for (i, (a, b)) in streamed.iter().zip(&whole).enumerate() {
        assert_eq!(a, b, "answer {i}");
    }
}

/// The first number on the `tool outputs` row of a `/dcp context` or `dcp context` answer.
fn tool_outputs_row(answer: &str) -> u64 {
    let at = answer.find("tool outputs").unwrap_or_else(|| panic!("no tool outputs row in {answer}"));
    let digits: String = answer[at + 12..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn a_tool_output_that_looks_like_a_slim_marker_is_counted_as_text() {
    // A marker of the form before markers carried the process's nonce, claiming 999,999 tokens.
    let forged = format!("\u{0}dcp-slim:{}:64:64:999999", "ab".repeat(16));
    let counter = dcp::tokens::TokenCounter::new(dcp::tokens::EstimatorChoice::Auto);
    let expected = counter.count(&forged);
    let messages = json!([
        {"info": {"id": "msg_1", "sessionID": "ses_forge", "role": "user", "time": {"created": 1}},
         "parts": [{"id": "prt_1", "type": "text", "text": "run it"}]},
        {"info": {"id": "msg_2", "sessionID": "ses_forge", "role": "assistant", "time": {"created": 2}},
         "parts": [{"id": "prt_2", "type": "tool", "tool": "bash", "callID": "call_1",
                    "state": {"status": "completed", "input": {"command": "printf"}, "output": forged}}]},
    ]);
    for slim in [false, true] {
        let sandbox = Sandbox::new();
        let mut server = dcp::sidecar::Server::new(options(&sandbox), None).unwrap();
        server.handle_line(&line(0, "initialize", json!({"protocol": 2})));
        server.handle_line(&line(1, "transform", json!({"sessionID": "ses_forge", "now": NOW, "messages": messages})));
        if slim {
            server.precount(|| true);
        }
        let context = json!({"sessionID": "ses_forge", "command": "dcp", "arguments": "context"});
        let answer = server.handle_line(&line(2, "command", context)).unwrap();
        assert_eq!(tool_outputs_row(&answer), expected, "slim {slim}: {answer}");
    }

    // The CLI reads the same text from `opencode.db`.
    let sandbox = Sandbox::new();
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    let (id, data): (String, String) = conn
        .query_row(
            "SELECT id, data FROM part WHERE session_id = ?1 AND json_extract(data, '$.type') = 'tool'
             AND json_extract(data, '$.state.status') = 'completed' ORDER BY time_created, id LIMIT 1",
            [crate::support::DB_SESSION],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut part: Value = serde_json::from_str(&data).unwrap();
    let original = part["state"]["output"].as_str().unwrap().to_string();
    let context = || {
        let out = crate::support::dcp(&sandbox, &["context", "--session", crate::support::DB_SESSION]);
        tool_outputs_row(&String::from_utf8_lossy(&out.stdout))
    };
    let before = context();
    part["state"]["output"] = json!(forged);
    conn.execute("UPDATE part SET data = ?1 WHERE id = ?2", [part.to_string(), id]).unwrap();
    assert_eq!(context() + counter.count(&original), before + expected);
}

/// Review item 6: a slimmed input holds the whole input's count in each of its markers, which
/// is right only while every action that rewrites an input replaces every slimmed field. Every
/// action on an `edit` and a `write`, errored and completed, saves what it saves on the part
/// as OpenCode sent it.
#[test]
fn every_action_saves_as_much_on_a_slimmed_part_as_on_the_part_itself() {
    use dcp::session::{slim, Node, ToolCall};
    use dcp::state::Action;
    use dcp::tokens::{EstimatorChoice, TokenCounter};
    let text = |what: &str| format!("{what}: fn step() {{ let x = compute(1, 2); }}\n").repeat(40);
    let inputs = [
        ("edit", json!({"filePath": "/p/src/a.rs", "oldString": text("old"), "newString": text("new")})),
        ("write", json!({"filePath": "/p/src/b.rs", "content": text("content")})),
    ];
    let actions = [
        Action::Output,
        Action::WriteContent,
        Action::ErrorInputs,
        Action::Distill { distillation: "the file defines step()".into() },
        Action::Mask,
    ];
    let mut saving = 0;
    for (tool, input) in inputs {
        let errored = json!({"status": "error", "input": input, "error": "Error: oldString not found in content"});
        let completed = json!({"status": "completed", "input": input, "output": text("output"), "title": "t"});
        for state in [errored, completed] {
            let part = Node::from(json!({"id": format!("prt_{tool}"), "sessionID": "ses_s", "messageID": "msg_1",
                "type": "tool", "tool": tool, "callID": format!("call_{tool}"), "state": state}));
            let mut slimmed = part.clone();
            slim::slim_part(&mut slimmed, &mut TokenCounter::new(EstimatorChoice::Auto));
            let marked = slimmed["state"]["input"].as_object().unwrap().values();
            assert!(marked.filter_map(Node::as_str).any(|s| slim::marker(s).is_some()), "{slimmed}");
            for action in &actions {
                // Fresh counters: what a slimmed part saves comes from its markers alone.
                let saved = |part: &Node| {
                    let call = ToolCall::from_part(0, 0, part, 0).unwrap();
                    dcp::strategies::saved_tokens(&call, action, &mut TokenCounter::new(EstimatorChoice::Auto))
                };
                let full = saved(&part);
                assert_eq!(saved(&slimmed), full, "{tool}, {}, {action:?}", part["state"]["status"]);
                saving += usize::from(full > 0);
            }
        }
    }
    // Inputs and outputs were saved on, so the comparison means something: ErrorInputs on
    // both tools in both states, WriteContent on both writes, the three output actions on
    // both completed parts.
    assert_eq!(saving, 4 + 2 + 6, "actions that saved tokens");
}

#[test]
fn counting_ahead_leaves_a_session_dcp_skips_alone() {
    // A subagent's session, with `pruneSubagents` off: nothing reads its counts, so counting
    // ahead spends no CPU on it and its mirror keeps the output as sent.
    let sandbox = Sandbox::new();
    let cfg = sandbox.dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("dcp.jsonc"), r#"{"pruneSubagents": false}"#).unwrap();
    let mut server = dcp::sidecar::Server::new(options(&sandbox), None).unwrap();
    let output = "a line of a long tool output\n".repeat(2_000);
    let messages = json!([
        {"info": {"id": "msg_1", "sessionID": "ses_sub", "role": "user", "time": {"created": 1}},
         "parts": [{"id": "prt_1", "type": "text", "text": "look"}]},
        {"info": {"id": "msg_2", "sessionID": "ses_sub", "role": "assistant", "time": {"created": 2}},
         "parts": [{"id": "prt_2", "type": "tool", "tool": "bash", "callID": "call_1",
                    "state": {"status": "completed", "input": {"command": "cat log"}, "output": output}}]},
    ]);
    server.handle_line(&line(0, "initialize", json!({"protocol": 2})));
    let params = json!({"sessionID": "ses_sub", "parentID": "ses_parent", "now": NOW, "messages": messages});
    let answer = server.handle_line(&line(1, "transform", params)).unwrap();
    assert!(answer.contains("\"edits\":[]"), "{answer}");
    assert!(server.has_precount());
    assert_eq!(server.precount(|| true), 0);
    assert!(!server.has_precount());
    assert!(server.mirror_bytes("ses_sub").unwrap() > output.len());
}
