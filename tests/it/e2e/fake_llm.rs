//! A scripted fake OpenAI-compatible chat-completions server on 127.0.0.1, for driving the
//! real OpenCode binary.
//!
//! Every request that carries a `tools` list is a main-agent request and consumes the next
//! scripted turn; other requests (title generation, compaction summaries) get a canned answer.
//! Every request is logged with its full body, so tests can assert on exactly what the model
//! received, and with the usage it was answered with: what a provider with a prompt cache
//! (five minutes, [`super::prompt_cache`]) would have billed, `prompt_tokens` with
//! `prompt_tokens_details.cached_tokens`, in the whole answer and in the stream's last chunk.
//! Tool-call arguments may hold `{{cwd}}` (the project dir), `{{list:NEEDLE}}` (the id of the
//! line holding NEEDLE in the request's last `<prunable-tools>` list) and `{{restore}}` (the
//! handle the request's first placeholder names, `restore N`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// One scripted model turn: tool calls, or a final text.
#[derive(Debug, Clone)]
pub struct Turn {
    pub label: String,
    pub tool_calls: Vec<(String, Value)>,
    pub text: Option<String>,
    /// Before answering, SIGKILL the process whose pid is the last line of this file.
    pub kill_pidfile: Option<std::path::PathBuf>,
}

impl Turn {
    pub fn tool(label: &str, name: &str, args: Value) -> Turn {
        Turn { label: label.into(), tool_calls: vec![(name.into(), args)], text: None, kill_pidfile: None }
    }

    pub fn text(label: &str, text: &str) -> Turn {
        Turn { label: label.into(), tool_calls: Vec::new(), text: Some(text.into()), kill_pidfile: None }
    }

    /// This turn first kills the process named by `pidfile`.
    pub fn killing(self, pidfile: &std::path::Path) -> Turn {
        Turn { kill_pidfile: Some(pidfile.to_path_buf()), ..self }
    }
}

/// A request the fake model received.
#[derive(Debug, Clone)]
pub struct Logged {
    pub main: bool,
    pub label: Option<String>,
    pub body: Value,
    /// What it was billed: the `usage` of its answer.
    pub billed: super::prompt_cache::Billed,
    pub output: u64,
}

impl Logged {
    /// The request's messages.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map(Vec::as_slice).unwrap_or(&[])
    }

    /// The content of the tool message answering `call_id`, if the request has one.
    pub fn tool_result(&self, call_id: &str) -> Option<String> {
        self.messages()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .map(|m| content_text(&m["content"]))
    }

    /// All the text of the request's messages.
    pub fn text(&self) -> String {
        self.messages().iter().map(|m| content_text(&m["content"])).collect::<Vec<_>>().join("\n")
    }
}

/// The text of a message's `content`, a string or a list of parts.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| p.get("text").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| p.to_string()))
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

struct Script {
    turns: Vec<Turn>,
    next: usize,
    cwd: String,
    log: Vec<Logged>,
    calls: u64,
    cache: super::prompt_cache::PromptCache,
}

/// How long the fake provider keeps a prompt cached after its last use.
pub const CACHE_TTL: Duration = Duration::from_secs(300);

pub struct FakeLlm {
    pub port: u16,
    script: Arc<Mutex<Script>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeLlm {
    pub fn start(cwd: &str) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(Script {
            turns: Vec::new(),
            next: 0,
            cwd: cwd.to_string(),
            log: Vec::new(),
            calls: 0,
            cache: super::prompt_cache::PromptCache::new(CACHE_TTL),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (script.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = handle(conn, &s);
                });
            }
        });
        FakeLlm { port, script, stop, thread: Some(thread) }
    }

    /// Queues more turns after the current ones.
    pub fn push(&self, turns: Vec<Turn>) {
        self.script.lock().unwrap().turns.extend(turns);
    }

    /// Turns not consumed yet.
    pub fn remaining(&self) -> usize {
        let s = self.script.lock().unwrap();
        s.turns.len() - s.next
    }

    pub fn log(&self) -> Vec<Logged> {
        self.script.lock().unwrap().log.clone()
    }

    pub fn main_requests(&self) -> Vec<Logged> {
        self.log().into_iter().filter(|l| l.main).collect()
    }

    /// The main request that a scripted turn answered.
    pub fn request_for(&self, label: &str) -> Logged {
        self.main_requests()
            .into_iter()
            .find(|l| l.label.as_deref() == Some(label))
            .unwrap_or_else(|| panic!("no request for turn {label}"))
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn handle(conn: TcpStream, script: &Mutex<Script>) -> std::io::Result<()> {
    let (request_line, body) = read_request(&conn)?;
    let mut out = conn;
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    if request_line.starts_with("GET") {
        let models = json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]});
        return respond_json(&mut out, &models);
    }
    if !path.ends_with("/chat/completions") {
        return respond_json(&mut out, &json!({"error": "not found"}));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (turn, seq, usage) = next_turn(script, &body);
    if let Some(pidfile) = &turn.kill_pidfile {
        let pids = std::fs::read_to_string(pidfile).unwrap_or_default();
        if let Some(pid) = pids.lines().last() {
            let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
    let calls: Vec<Value> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"index": i, "id": format!("call_{seq}_{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let text = turn.text.clone().unwrap_or_default();
    let answer = Answer { seq, text, calls, usage };
    if !body["stream"].as_bool().unwrap_or(false) {
        return respond_whole(&mut out, &answer);
    }
    respond_stream(&mut out, &answer)
}

/// Reads one HTTP request: its request line and its body (by length, or chunked).
fn read_request(conn: &TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            if n == 0 {
                let mut end = String::new();
                reader.read_line(&mut end)?;
                break;
            }
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    Ok((request_line, body))
}

/// The turn that answers a chat request, the request's number and the usage it is billed: the
/// script's next turn for the main agent (a request with tools), a canned answer for a title
/// or a summary.
fn next_turn(script: &Mutex<Script>, body: &Value) -> (Turn, u64, Value) {
    let main = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let mut s = script.lock().unwrap();
    s.calls += 1;
    let seq = s.calls;
    let turn = if main {
        match s.turns.get(s.next).cloned() {
            Some(t) => {
                s.next += 1;
                render(t, &s.cwd, body)
            }
            None => Turn::text("exhausted", "(script exhausted)"),
        }
    } else if content_text(&body["messages"][0]["content"]).contains("title generator") {
        Turn::text("title", "Exploring the demo project")
    } else {
        Turn::text("side", "Summary: the user explored a demo project; files were read and edited. (fake side answer)")
    };
    let billed = s.cache.bill(&super::prompt_cache::chat_pieces(body));
    let answered: usize =
        turn.text.as_deref().map_or(0, str::len) + turn.tool_calls.iter().map(|c| c.1.to_string().len()).sum::<usize>();
    let output = (answered as u64 / 4).max(1);
    s.log.push(Logged { main, label: main.then(|| turn.label.clone()), body: body.clone(), billed, output });
    (turn, seq, billed.chat(output))
}

/// What the fake model answers: request number `seq`'s text and tool calls, and the usage.
struct Answer {
    seq: u64,
    text: String,
    calls: Vec<Value>,
    usage: Value,
}

impl Answer {
    fn finish(&self) -> &'static str {
        if self.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }
}

/// The answer as one `chat.completion` JSON response.
fn respond_whole(out: &mut TcpStream, a: &Answer) -> std::io::Result<()> {
    let content = if a.text.is_empty() { Value::Null } else { json!(a.text) };
    let mut message = json!({"role": "assistant", "content": content});
    if !a.calls.is_empty() {
        message["tool_calls"] = json!(a
            .calls
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.as_object_mut().unwrap().remove("index");
                c
            })
            .collect::<Vec<_>>());
    }
    let answer = json!({"id": format!("chatcmpl-{}", a.seq), "object": "chat.completion", "created": 0, "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": a.finish()}], "usage": a.usage});
    respond_json(out, &answer)
}

/// The answer as a server-sent event stream of `chat.completion.chunk`s.
fn respond_stream(out: &mut TcpStream, a: &Answer) -> std::io::Result<()> {
    let seq = a.seq;
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )?;
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": format!("chatcmpl-{seq}"), "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut send = |v: Value| -> std::io::Result<()> {
        write!(out, "data: {v}\n\n")?;
        out.flush()
    };
    send(chunk(json!({"role": "assistant", "content": ""}), None))?;
    if !a.text.is_empty() {
        send(chunk(json!({"content": a.text}), None))?;
    }
    for c in &a.calls {
        send(chunk(json!({"tool_calls": [c]}), None))?;
    }
    send(chunk(json!({}), Some(a.finish())))?;
    send(
        json!({"id": format!("chatcmpl-{seq}"), "object": "chat.completion.chunk", "created": 0, "model": "fake-model", "choices": [], "usage": a.usage}),
    )?;
    write!(out, "data: [DONE]\n\n")?;
    out.flush()
}

fn respond_json(out: &mut TcpStream, value: &Value) -> std::io::Result<()> {
    let body = value.to_string();
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// Fills the templates of a turn's tool-call arguments.
fn render(turn: Turn, cwd: &str, body: &Value) -> Turn {
    let text: String = body["messages"]
        .as_array()
        .map(|ms| ms.iter().map(|m| content_text(&m["content"])).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default();
    let list = text
        .rfind("<prunable-tools>")
        .map(|i| &text[i..])
        .map(|t| t.split("</prunable-tools>").next().unwrap_or(""))
        .unwrap_or("");
    let handle = restore_handle(&text);
    let fill = |s: &str| -> String {
        let mut s = s.replace("{{cwd}}", cwd).replace("{{restore}}", &handle);
        while let Some(start) = s.find("{{list:") {
            let Some(len) = s[start..].find("}}") else { break };
            let needle = &s[start + 7..start + len];
            let id = list
                .lines()
                .find(|l| l.contains(needle))
                .and_then(|l| l.split(':').next())
                .unwrap_or("0")
                .trim()
                .to_string();
            s.replace_range(start..start + len + 2, &id);
        }
        s
    };
    fn walk(v: &Value, fill: &dyn Fn(&str) -> String) -> Value {
        match v {
            Value::String(s) => Value::String(fill(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, fill)).collect()),
            Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), walk(x, fill))).collect()),
            other => other.clone(),
        }
    }
    Turn { tool_calls: turn.tool_calls.iter().map(|(n, a)| (n.clone(), walk(a, &fill))).collect(), ..turn }
}

/// The handle the first placeholder of `text` names (`[...; restore 12]`), or `0`.
pub fn restore_handle(text: &str) -> String {
    let after = text.split("restore ").skip(1).find(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    after.map(|rest| rest.chars().take_while(char::is_ascii_digit).collect()).unwrap_or_else(|| "0".to_string())
}
