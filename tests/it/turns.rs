//! What a turn is: tool results that arrive with new text in the same user message (the
//! person typing while the agent works, a client's reminder, a queued message) are the
//! current turn's, and reach the model whole at least once; through `dcp proxy` on each API,
//! and in the plugin's path.

use serde_json::{json, Value};

use crate::proxy::{post_bytes, ProxyProcess, Recorder};
use crate::support::{Sandbox, SessionBuilder, Sidecar};

/// A 20 KB command output, different for each check.
fn big_output(i: usize) -> String {
    format!("check {i}: line of output that the model has not read yet\n").repeat(360)
}

/// An Anthropic request: a prompt, one step of eight Bash calls, and their results, with
/// `text` after them in the same user message when given.
fn anthropic(text: Option<&str>) -> Value {
    let calls: Vec<Value> = (0..8)
        .map(|i| json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": format!("check {i}")}}))
        .collect();
    let mut results: Vec<Value> = (0..8)
        .map(|i| json!({"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": big_output(i)}))
        .collect();
    results.extend(text.map(|t| json!({"type": "text", "text": t})));
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true, "system": "You are a coding agent.",
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Run the eight checks."},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
    ]})
}

/// The same on Responses: eight `function_call`s, their outputs, then a user message.
fn responses(text: Option<&str>) -> Value {
    let mut input = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Run the eight checks."}]}),
    ];
    input.extend((0..8).map(|i| {
        json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "shell",
            "arguments": json!({"command": format!("check {i}")}).to_string()})
    }));
    input.extend(
        (0..8)
            .map(|i| json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": big_output(i)})),
    );
    input.extend(
        text.map(|t| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]})),
    );
    json!({"model": "gpt-5-codex", "stream": true, "instructions": "You are a coding agent.", "input": input,
        "tools": [{"type": "function", "name": "shell"}]})
}

/// The same on Chat Completions: one assistant message with eight `tool_calls`, eight `tool`
/// messages, then a user message.
fn chat(text: Option<&str>) -> Value {
    let calls: Vec<Value> = (0..8)
        .map(|i| {
            json!({"id": format!("call_{i}"), "type": "function", "function": {"name": "bash",
                "arguments": json!({"command": format!("check {i}")}).to_string()}})
        })
        .collect();
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Run the eight checks."}),
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
    ];
    messages
        .extend((0..8).map(|i| json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": big_output(i)})));
    messages.extend(text.map(|t| json!({"role": "user", "content": t})));
    json!({"model": "m", "stream": true, "messages": messages, "tools": [{"type": "function", "function": {"name": "bash"}}]})
}

/// Every tool output of a request of any of the three APIs, in order.
pub fn outputs(body: &Value) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    };
    let list = body["messages"].as_array().or(body["input"].as_array()).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for item in &list {
        match (item["role"].as_str(), item["type"].as_str()) {
            (Some("tool"), _) => out.push(text(&item["content"])),
            (_, Some("function_call_output")) => out.push(text(&item["output"])),
            (Some("user"), _) => {
                let blocks = item["content"].as_array().into_iter().flatten();
                out.extend(blocks.filter(|b| b["type"] == "tool_result").map(|b| text(&b["content"])));
            }
            _ => {}
        }
    }
    out
}

/// A proxy with its own dirs under `dir`, in front of `upstream`.
fn proxy(dir: &std::path::Path, upstream: &Recorder) -> ProxyProcess {
    let env =
        [("HOME", dir.join("home")), ("XDG_CONFIG_HOME", dir.join("config")), ("XDG_DATA_HOME", dir.join("data"))];
    ProxyProcess::start_logging(&format!("http://127.0.0.1:{}", upstream.port), env, &dir.join("stderr"))
}

/// Sends `body` to `path` through a new proxy; returns the outputs the upstream received.
fn through_proxy(path: &str, body: &Value) -> Vec<String> {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy(dir.path(), &upstream);
    let answer = post_bytes(proxy.port, path, body.to_string().as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(proxy.stop());
    outputs(&upstream.last())
}

#[test]
fn tool_results_sent_with_new_text_reach_the_model_whole_on_all_three_apis() {
    let apis: [(&str, &str, fn(Option<&str>) -> Value); 3] = [
        ("anthropic", "/v1/messages", anthropic),
        ("responses", "/v1/responses", responses),
        ("chat", "/v1/chat/completions", chat),
    ];
    let sent: Vec<String> = (0..8).map(big_output).collect();
    let mut hidden = Vec::new();
    for (api, path, request) in apis {
        assert_eq!(through_proxy(path, &request(None)), sent, "{api}: the results alone pass unchanged");
        let received = through_proxy(path, &request(Some("also check the docs")));
        assert_eq!(received.len(), 8, "{api}");
        hidden.push((api, received.iter().zip(&sent).filter(|(got, sent)| got != sent).count()));
    }
    let none = [("anthropic", 0), ("responses", 0), ("chat", 0)];
    assert_eq!(hidden, none, "results the model had not seen yet were hidden (of eight, by API)");
}

#[test]
fn a_message_opencode_queued_while_the_agent_worked_hides_none_of_the_results_before_it() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, "{}");
    // OpenCode 1.18 stores a prompt sent while the agent works as a user message of its own,
    // read by the loop's next step after the step that called the tools.
    let mut step = SessionBuilder::new().user("Run the eight checks.").build();
    let calls: Vec<Value> = (0..8)
        .map(|i| {
            let state = json!({"status": "completed", "input": {"command": format!("check {i}")}, "output": big_output(i),
                "title": "", "metadata": {}, "time": {"start": 1, "end": 2}});
            json!({"id": format!("prt_c{i}"), "type": "tool", "callID": format!("c{i}"), "tool": "bash", "state": state})
        })
        .collect();
    let info = json!({"id": "msg_0002", "sessionID": "ses_test", "role": "assistant", "time": {"created": 2}, "finish": "tool-calls"});
    step.push(dcp::session::Message::from_values(info, calls));
    let messages: Vec<Value> = SessionBuilder::continuing(step)
        .user("also check the docs")
        .build()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": messages.clone()}));
    let mut seen = messages.clone();
    crate::sidecar::apply(&mut seen, &result);
    let parts = seen[1]["parts"].as_array().unwrap();
    let hidden = (0..8).filter(|&i| parts[i]["state"]["output"].as_str() != Some(big_output(i).as_str())).count();
    assert_eq!(hidden, 0, "results the model had not seen yet were hidden: {}", result);
}

/// The recorded clients' requests (`tests/data/clients/`, written by the proxy's long-session
/// tests with `DCP_RECORD_CLIENTS=1`): each client's last request of a session of two prompts
/// in which the person wrote while the agent worked.
fn recorded_clients() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    files.iter().map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap()).collect()
}

#[test]
fn the_real_clients_requests_start_a_turn_at_each_prompt_the_person_typed_and_nowhere_else() {
    let fixtures = recorded_clients();
    let names: Vec<&str> = fixtures.iter().map(|f| f["client"].as_str().unwrap()).collect();
    assert!(
        names.iter().any(|n| n.starts_with("claude-code")) && names.iter().any(|n| n.starts_with("codex")),
        "{names:?}"
    );
    for fixture in &fixtures {
        let name = fixture["client"].as_str().unwrap();
        let api = if name.starts_with("codex") {
            dcp::proxy::convert::Api::Responses
        } else {
            dcp::proxy::convert::Api::Anthropic
        };
        let body = json!({ fixture["list_key"].as_str().unwrap(): fixture["list"] });
        let mapped = dcp::proxy::convert::map(api, &body, "s").unwrap();
        let messages: Vec<dcp::session::Message> =
            mapped.messages.iter().map(|m| serde_json::from_value(m.clone()).unwrap()).collect();
        let typed = |i: usize| -> Vec<String> {
            let parts = messages[i].parts.iter().filter(|p| p.get("synthetic").is_none());
            parts.filter_map(|p| p.get("text").and_then(|t| t.as_str()).map(str::to_string)).collect()
        };
        let starts: Vec<Vec<String>> =
            (0..messages.len()).filter(|&i| dcp::session::starts_turn(&messages, i)).map(typed).collect();
        let prompts: Vec<Vec<String>> =
            fixture["prompts"].as_array().unwrap().iter().map(|p| vec![p.as_str().unwrap().to_string()]).collect();
        assert_eq!(
            starts, prompts,
            "{name}: the turns start at the person's prompts, with the client's reminders apart"
        );
        assert!(body.to_string().contains(fixture["queued"].as_str().unwrap()), "{name}: the queued message is in it");
    }
}
