//! What the proxy's long-session tests share: the check made on the upstream's log (no tool
//! output reaches the model hidden before it has answered it once), the recording of the
//! clients' request shapes as fixtures, and the drivers of the real clients' sessions in which
//! the person writes while the agent works: Claude Code's stream-json input (a second user
//! message on stdin) and Codex's app server (`turn/steer`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::fake_llm::content_text;

/// What the person sends while the agent works, in every session here.
pub const QUEUED: &str = "also check the docs";

/// The tool results of a request of any of the three APIs, in order: id and text.
pub fn results(body: &Value) -> Vec<(String, String)> {
    let list = body["messages"].as_array().or(body["input"].as_array()).cloned().unwrap_or_default();
    let mut out = Vec::new();
    let id = |v: &Value| v.as_str().unwrap_or("").to_string();
    for item in &list {
        match (item["role"].as_str(), item["type"].as_str()) {
            (Some("tool"), _) => out.push((id(&item["tool_call_id"]), content_text(&item["content"]))),
            (_, Some("function_call_output" | "custom_tool_call_output")) => {
                out.push((id(&item["call_id"]), content_text(&item["output"])));
            }
            (Some("user"), _) => {
                let blocks = item["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result");
                out.extend(blocks.map(|b| (id(&b["tool_use_id"]), content_text(&b["content"]))));
            }
            _ => {}
        }
    }
    out
}

/// Whether an output is one of dcp's stand-ins for what it took out.
fn hidden(text: &str) -> bool {
    crate::restore::is_pruned(Some(text))
        || text.starts_with("[Output masked")
        || text.starts_with("[Tool calls of this turn")
}

/// What the model was sent over a session, from the bodies the upstream received in turn.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub requests: usize,
    /// Tool outputs, each counted at the first request that carried it.
    pub outputs: usize,
    /// The outputs that request carried hidden: the model never saw them whole.
    pub hidden_first: Vec<String>,
    /// Outputs hidden in a later request (after the model had answered them).
    pub hidden_later: usize,
}

/// Checks `bodies` (the session's requests as the upstream received them, in order).
pub fn seen(bodies: &[&Value]) -> Seen {
    let mut out = Seen { requests: bodies.len(), ..Seen::default() };
    let mut known = std::collections::HashSet::new();
    for body in bodies {
        for (id, text) in results(body) {
            let first = known.insert(id.clone());
            out.outputs += usize::from(first);
            match (first, hidden(&text)) {
                (true, true) => out.hidden_first.push(id),
                (false, true) => out.hidden_later += 1,
                _ => {}
            }
        }
    }
    out
}

/// Whether this run records the clients' request shapes (`DCP_RECORD_CLIENTS` set): the
/// clients then talk to the fake upstream directly, so that what it logs is what they send.
pub fn recording() -> bool {
    std::env::var_os("DCP_RECORD_CLIENTS").is_some()
}

/// Writes `body`, the last request of a recorded session, as fixture `name` in
/// `tests/data/clients/` when [`recording`]: its conversation list with long texts cut, the
/// paths of this run replaced by `/work`, the client's user agent, and the person's prompts.
pub fn record(name: &str, body: &Value, user_agent: &str, root: &Path, prompts: &[&str]) {
    if !recording() {
        return;
    }
    let key = if body.get("input").is_some() { "input" } else { "messages" };
    let mut list = body[key].clone();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let machine = [(root.display().to_string(), "/work"), (kernel.trim().to_string(), "<kernel>")];
    scrub(&mut list, &machine);
    // The client and its version; the rest names this machine's system.
    let agent = user_agent.split(' ').next().unwrap_or("");
    let fixture = json!({"client": name, "user_agent": agent, "list_key": key, "prompts": prompts, "queued": QUEUED, "list": list});
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(&fixture).unwrap() + "\n").unwrap();
}

/// Cuts every string over 1,000 characters to its first 300 and last 700 (where clients
/// append their reminders), and replaces what names this machine (this run's
/// temp dir, the kernel's release) as `machine` says.
fn scrub(v: &mut Value, machine: &[(String, &str)]) {
    match v {
        Value::String(s) => {
            let mut t = s.clone();
            for (what, with) in machine.iter().filter(|(what, _)| !what.is_empty()) {
                t = t.replace(what.as_str(), with);
            }
            let n = t.chars().count();
            if n > 1000 {
                let tail: String = t.chars().skip(n - 700).collect();
                t = t.chars().take(300).collect::<String>() + &format!("…[{n} characters]…") + &tail;
            }
            *s = t;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, machine)),
        Value::Object(o) => o.values_mut().for_each(|i| scrub(i, machine)),
        _ => {}
    }
}

/// A client process whose stdout lines arrive on a channel.
pub struct Driven {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Driven {
    pub fn spawn(mut command: Command) -> Driven {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the client");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Driven { child, stdin, lines, seen: Vec::new() }
    }

    pub fn send(&mut self, line: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for a line that `wanted` accepts, within `limit`; the lines read are kept.
    pub fn wait_for(&mut self, limit: Duration, wanted: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + limit;
        loop {
            let line = match self.lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!("no such line within {limit:?}; the last: {:?}", self.tail()),
                Err(RecvTimeoutError::Disconnected) => panic!("the client exited; its last lines: {:?}", self.tail()),
            };
            self.seen.push(line.chars().take(300).collect());
            if let Ok(value) = serde_json::from_str::<Value>(&line) {
                if wanted(&value) {
                    return value;
                }
            }
        }
    }

    fn tail(&self) -> &[String] {
        &self.seen[self.seen.len().saturating_sub(8)..]
    }

    /// Closes stdin and waits for the client to exit, killing it after `limit`.
    pub fn finish(mut self, limit: Duration) {
        self.stdin.take();
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC client of Codex's app server (`codex app-server`, JSON lines on stdio).
pub struct AppServer {
    pub driven: Driven,
    next: u64,
}

impl AppServer {
    pub fn start(command: Command) -> AppServer {
        let mut server = AppServer { driven: Driven::spawn(command), next: 0 };
        server.call("initialize", json!({"clientInfo": {"name": "codex_dcp_e2e", "version": "0"}}));
        server.driven.send(&json!({"jsonrpc": "2.0", "method": "initialized"}));
        server
    }

    /// Calls `method`; returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.driven.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = self.driven.wait_for(Duration::from_secs(60), |m| m["id"] == id);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// Waits for the notification of the turn's end.
    pub fn turn_completed(&mut self) {
        self.driven.wait_for(Duration::from_secs(180), |m| m["method"] == "turn/completed");
    }
}
