//! A scripted fake upstream on 127.0.0.1 that speaks Anthropic Messages (`/v1/messages`) and
//! OpenAI Responses (`/v1/responses`), streaming as the real APIs do, for driving Claude Code
//! and Codex through `dcp proxy`.
//!
//! Every request that carries tools takes the next scripted step: a tool call or a final
//! text. Other requests (a client's title and topic checks) get a canned text. Every request
//! is logged with its headers, its body and what it was billed: the usage of a provider with a
//! prompt cache (five minutes, [`super::prompt_cache`]), in each API's fields. A tool call's
//! input may hold `{{restore}}`: the handle the request's first placeholder names
//! (`dcp restore N`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::prompt_cache::{anthropic_pieces, responses_pieces, Billed, PromptCache};

/// One scripted answer: a call of `tool` with `input`, several calls at once (a model calling
/// tools in parallel), or a text.
#[derive(Debug, Clone)]
pub enum Step {
    Tool(&'static str, Value),
    Tools(Vec<(&'static str, Value)>),
    Text(&'static str),
}

impl Step {
    /// The calls of the step, each with its id: `id`, or `id_k` for the k-th of several.
    fn calls(&self, id: &str) -> Vec<(String, &'static str, Value)> {
        match self {
            Step::Tool(name, input) => vec![(id.to_string(), *name, input.clone())],
            Step::Tools(calls) => {
                calls.iter().enumerate().map(|(k, (name, input))| (format!("{id}_{k}"), *name, input.clone())).collect()
            }
            Step::Text(_) => Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Logged {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The scripted step this request was answered with, if any.
    pub step: Option<usize>,
    /// What it was billed (a request for no model answer, none), and its output tokens.
    pub billed: Option<Billed>,
}

/// Output tokens every answer is billed.
pub const OUTPUT: u64 = 10;

struct Script {
    steps: Vec<Step>,
    next: usize,
    log: Vec<Logged>,
    cache: PromptCache,
}

pub struct FakeUpstream {
    pub port: u16,
    script: Arc<Mutex<Script>>,
}

impl FakeUpstream {
    pub fn start(steps: Vec<Step>) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let cache = PromptCache::new(super::fake_llm::CACHE_TTL);
        let script = Arc::new(Mutex::new(Script { steps, next: 0, log: Vec::new(), cache }));
        let s = script.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = handle(conn, &s);
                });
            }
        });
        FakeUpstream { port, script }
    }

    pub fn remaining(&self) -> usize {
        let s = self.script.lock().unwrap();
        s.steps.len() - s.next
    }

    pub fn log(&self) -> Vec<Logged> {
        self.script.lock().unwrap().log.clone()
    }
}

fn read_request(conn: &TcpStream) -> std::io::Result<(String, Vec<(String, String)>, Vec<u8>)> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let length = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((request_line, headers, body))
}

fn handle(conn: TcpStream, script: &Mutex<Script>) -> std::io::Result<()> {
    let (request_line, headers, body) = read_request(&conn)?;
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut out = conn;
    let responses = path.starts_with("/v1/responses");
    if !(path.starts_with("/v1/messages") || responses) || path.contains("count_tokens") {
        let mut s = script.lock().unwrap();
        s.log.push(Logged { path, headers, body, step: None, billed: None });
        return respond(&mut out, "application/json", &json!({"input_tokens": 10}).to_string());
    }
    let scripted = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (step, index, billed) = {
        let mut s = script.lock().unwrap();
        let index = (scripted && s.next < s.steps.len()).then_some(s.next);
        if let Some(i) = index {
            s.next = i + 1;
        }
        let step = match index.map_or(Step::Text("ok"), |i| s.steps[i].clone()) {
            Step::Tool(name, input) => {
                let handle = super::fake_llm::restore_handle(&body.to_string());
                Step::Tool(name, serde_json::from_str(&input.to_string().replace("{{restore}}", &handle)).unwrap())
            }
            text => text,
        };
        let billed = s.cache.bill(&if responses { responses_pieces(&body) } else { anthropic_pieces(&body) });
        s.log.push(Logged { path, headers, body: body.clone(), step: index, billed: Some(billed) });
        (step, index, billed)
    };
    let id = format!("toolu_{:02}", index.unwrap_or(99));
    if responses {
        return respond(&mut out, "text/event-stream", &response_events(&step, &id, &billed));
    }
    if body["stream"].as_bool() == Some(true) {
        respond(&mut out, "text/event-stream", &events(&step, &id, &billed))
    } else {
        respond(&mut out, "application/json", &whole(&step, &id, &billed).to_string())
    }
}

fn respond(out: &mut TcpStream, kind: &str, body: &str) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

fn whole(step: &Step, id: &str, billed: &Billed) -> Value {
    let (content, stop) = match step {
        Step::Text(text) => (json!([{"type": "text", "text": text}]), "end_turn"),
        _ => {
            let calls = step.calls(id).into_iter();
            let uses =
                calls.map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            (Value::Array(uses.collect()), "tool_use")
        }
    };
    json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": content, "stop_reason": stop, "stop_sequence": null, "usage": billed.anthropic(OUTPUT)})
}

/// The answer as the API's server-sent events: the prompt's usage in `message_start`, the
/// output's in `message_delta`.
fn events(step: &Step, id: &str, billed: &Billed) -> String {
    let mut start = whole(step, id, billed);
    start["usage"]["output_tokens"] = json!(1);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    let (blocks, stop) = match step {
        Step::Text(text) => {
            (vec![(json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": text}))], "end_turn")
        }
        _ => {
            let calls = step.calls(id).into_iter().map(|(id, name, input)| {
                let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                (block, json!({"type": "input_json_delta", "partial_json": input.to_string()}))
            });
            (calls.collect(), "tool_use")
        }
    };
    let mut events = vec![("message_start", json!({"type": "message_start", "message": start}))];
    for (index, (block, delta)) in blocks.into_iter().enumerate() {
        events.extend([
            ("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": block})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})),
            ("content_block_stop", json!({"type": "content_block_stop", "index": index})),
        ]);
    }
    events.extend([
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": OUTPUT}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

/// The answer as the Responses API's server-sent events.
fn response_events(step: &Step, id: &str, billed: &Billed) -> String {
    let items: Vec<Value> = match step {
        Step::Text(text) => {
            vec![json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]})]
        }
        _ => step
            .calls(id)
            .into_iter()
            .map(|(id, name, input)| {
                json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                    "name": name, "arguments": input.to_string(), "status": "completed"})
            })
            .collect(),
    };
    let usage = billed.responses(OUTPUT);
    let response = |status: &str, output: Value, usage: &Value| json!({"id": format!("resp_{id}"), "object": "response", "status": status, "output": output, "usage": usage});
    let created = response("in_progress", json!([]), &Value::Null);
    let mut events = vec![("response.created", json!({"type": "response.created", "response": created}))];
    for (index, item) in items.iter().enumerate() {
        let done = json!({"type": "response.output_item.done", "output_index": index, "item": item});
        events.push(("response.output_item.done", done));
    }
    let completed = response("completed", Value::Array(items), &usage);
    events.push(("response.completed", json!({"type": "response.completed", "response": completed})));
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}
