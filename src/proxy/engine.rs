//! The proxy's engine: the same [`Server`] `dcp serve` runs (strategies, cache-aware policy,
//! state files), on a thread of its own, fed one `transform` per proxied request.
//!
//! The server is handed requests as the plugin sends them (PROTOCOL.md): a client resends
//! the whole conversation every time, so the engine remembers a digest of each message it
//! sent per conversation and sends only what follows the unchanged prefix (`base`), as the
//! plugin does, and holds the last answer's edits so that the server sends only what changed
//! of them. Between requests it counts tokens ahead and hands out the saves that fall
//! due, as the sidecar's line loop does. An error of the server drops what the engine
//! remembers of that conversation, so that its next request is sent whole.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use super::convert::EngineEdit;
use crate::session::Node;
use crate::sidecar::protocol::Request;
use crate::sidecar::Server;

/// Why a request's conversation was not run through the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the engine did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the engine has stopped")]
    Stopped,
    #[error("the engine refused the conversation: {0}")]
    Refused(String),
}

struct Job {
    sid: String,
    messages: Vec<Value>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<EngineEdit>, EngineError>>,
}

/// A handle on the engine's thread; the thread saves every state and ends when the last
/// handle is dropped or [`Engine::stop`] is called.
#[derive(Clone)]
pub struct Engine {
    jobs: Sender<Job>,
    done: std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Engine {
    pub fn start(server: Server) -> Engine {
        let (jobs, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dcp-proxy-engine".into())
            .spawn(move || run(server, &rx))
            .expect("a thread can be started");
        Engine { jobs, done: std::sync::Arc::new(std::sync::Mutex::new(Some(thread))) }
    }

    /// The engine's edits for conversation `sid`, whose messages are `messages`.
    pub async fn transform(
        &self,
        sid: String,
        messages: Vec<Value>,
        timeout: Duration,
    ) -> Result<Vec<EngineEdit>, EngineError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs.send(Job { sid, messages, reply }).map_err(|_| EngineError::Stopped)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(EngineError::Stopped),
            Err(_) => Err(EngineError::Timeout(timeout)),
        }
    }

    /// Stops the engine once the jobs sent are done, and waits for its saves to be handed out.
    pub fn stop(self) {
        let Engine { jobs, done } = self;
        drop(jobs);
        let thread = done.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn run(mut server: Server, jobs: &Receiver<Job>) {
    let mut sent: HashMap<String, Sent> = HashMap::new();
    while let Some(job) = next_job(&mut server, jobs) {
        let result = transform(&mut server, &mut sent, &job.sid, job.messages);
        let _ = job.reply.send(result);
    }
    // Every handle is gone: save what waits, as `dcp serve` does at `shutdown`.
    server.handle_line(r#"{"jsonrpc":"2.0","id":0,"method":"shutdown"}"#);
}

/// The next job, counting ahead while none waits and handing out the saves that fall due.
fn next_job(server: &mut Server, jobs: &Receiver<Job>) -> Option<Job> {
    let mut early = None;
    loop {
        if early.is_none() && !server.save_is_due() && server.has_precount() {
            server.precount(|| {
                if early.is_none() {
                    early = jobs.try_recv().ok();
                }
                early.is_none()
            });
        }
        if let Some(job) = early.take() {
            return Some(job);
        }
        match server.save_due() {
            Some(due) => match jobs.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(job) => return Some(job),
                Err(RecvTimeoutError::Timeout) => server.save_waiting(),
                Err(RecvTimeoutError::Disconnected) => return None,
            },
            None => return jobs.recv().ok(),
        }
    }
}

/// What the engine sent of a conversation: each message's digest, and the edits of the last
/// answer with its number, which the server then sends only the changes of (as the plugin
/// holds them, PROTOCOL.md `have`).
#[derive(Default)]
struct Sent {
    digests: Vec<u64>,
    seq: Option<u64>,
    edits: Vec<EngineEdit>,
}

/// Runs one `transform` of conversation `sid`, sending only what changed since the last one.
fn transform(
    server: &mut Server,
    sent: &mut HashMap<String, Sent>,
    sid: &str,
    messages: Vec<Value>,
) -> Result<Vec<EngineEdit>, EngineError> {
    let digests: Vec<u64> = messages.iter().map(digest).collect();
    let mut before = sent.remove(sid).unwrap_or_default();
    let base = before.digests.iter().zip(&digests).take_while(|(a, b)| a == b).count();
    let tail: Vec<Node> = messages.into_iter().skip(base).map(Node::from).collect();
    let request = Request {
        id: Some(json!(1)),
        method: "transform".to_string(),
        params: json!({ "sessionID": sid, "parentID": null, "base": base, "have": before.seq, "messages": [] }),
        messages: Some(tail),
    };
    let answer = server.handle_decoded(Ok(request)).ok_or_else(|| EngineError::Refused("no answer".into()))?;
    let mut answer: Value = serde_json::from_str(&answer).map_err(|e| EngineError::Refused(e.to_string()))?;
    if let Some(error) = answer.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("an error");
        return Err(EngineError::Refused(message.to_string()));
    }
    let result = answer.get_mut("result").map(Value::take).unwrap_or_default();
    let edits = |key: &str| -> Result<Option<Vec<EngineEdit>>, EngineError> {
        let Some(list) = result.get(key) else { return Ok(None) };
        Vec::<EngineEdit>::deserialize(list).map(Some).map_err(|e| EngineError::Refused(e.to_string()))
    };
    if let Some(full) = edits("edits")? {
        before.edits = full;
    } else if let Some(added) = edits("addEdits")? {
        before.edits.extend(added);
    } else if result.get("sameEdits").and_then(Value::as_bool) != Some(true) {
        before.edits.clear();
    }
    let answer = before.edits.clone();
    let seq = result.get("seq").and_then(Value::as_u64);
    sent.insert(sid.to_string(), Sent { digests, seq, edits: before.edits });
    Ok(answer)
}

/// A digest of a message, for telling an unchanged prefix. FxHash, not SipHash: it reads a
/// long history's every byte on every request, and no one chooses these bytes to collide.
fn digest(message: &Value) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    hash_value(message, &mut h);
    std::hash::Hasher::finish(&h)
}

fn hash_value(v: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            items.iter().for_each(|i| hash_value(i, h));
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            for (k, v) in o {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}
