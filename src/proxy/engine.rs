//! The proxy's engine: the same [`Server`] `dcp serve` runs (strategies, cache-aware policy,
//! state files), on a thread of its own, fed one `transform` per proxied request.
//!
//! The server is handed requests as the plugin sends them (PROTOCOL.md): the caller sends
//! only what follows the messages the server already holds unchanged (`base`, which
//! `super::conversation` finds), and the engine holds the last answer's edits so that the
//! server sends only what changed of them. The server's answer reaches the request as a
//! value, not as protocol text, as soon as the server has decided it
//! ([`Server::transform_answering`]): the save of what it changed and counting the request's
//! savings, which tokenizes its new messages, run after, off the request's path. Between
//! requests it counts tokens ahead and hands out the saves that fall due, as the sidecar's
//! line loop does. An error of the
//! server drops what the engine remembers of that conversation; the caller then sends its
//! next request whole. A request is counted (its savings, and what it adds to the policy's
//! ledger) only once its upstream has answered it: the caller settles the [`Ticket`] each
//! transform hands back with the answer's status (`crate::sidecar::Count::Later`).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prices::Sheet;
use crate::session::Node;
use crate::sidecar::protocol::{self, code, Edit, RpcError, TransformParams, Transformed};
use crate::sidecar::{Count, Server, UpstreamOutcome};
use crate::state::savings::{Model, Usage};

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
    base: usize,
    messages: Vec<Value>,
    /// The price sheet the request asks for (`crate::proxy::priced`).
    sheet: Option<Sheet>,
    /// The request's number, which its [`Ticket`] settles.
    number: u64,
    reply: tokio::sync::oneshot::Sender<Result<Edits, EngineError>>,
    /// When the job was sent, for the debug log's stages.
    sent: Instant,
}

/// What the engine's thread is sent: a request to transform, how one it transformed ended,
/// or a call on its server ([`Engine::call`]).
enum Work {
    Transform(Job),
    Call(Box<dyn FnOnce(&mut Server) + Send>),
    Settle {
        sid: String,
        number: u64,
        outcome: UpstreamOutcome,
    },
    /// Drop what the engine holds of a conversation in memory (see [`Engine::forget`]).
    Forget {
        sid: String,
    },
    /// What the upstream reported it billed for a conversation's last request, and the model
    /// its answer named (see [`Billing`]).
    Usage(String, Usage, Option<Model>),
}

/// A handle on the engine's thread; the thread saves every state and ends when the last
/// handle is dropped or [`Engine::stop`] is called.
#[derive(Clone)]
pub struct Engine {
    jobs: Sender<Work>,
    done: std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// The next request's number.
    next: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A request the engine transformed, counted once it is settled with the status its client
/// got: answered (a `2xx` from the upstream), or not (an error status, or the proxy's own
/// `502`). One dropped unsettled (its client went away first, say) is taken as not answered.
/// What the upstream reported it billed for a request, sent to the engine's thread to be kept
/// for the request's conversation, after the request was settled (`super::usage`).
pub struct Billing {
    sid: String,
    jobs: Sender<Work>,
}

impl Billing {
    pub fn report(self, usage: Usage, model: Option<Model>) {
        let _ = self.jobs.send(Work::Usage(self.sid, usage, model));
    }
}

pub struct Ticket {
    sid: String,
    number: u64,
    jobs: Option<Sender<Work>>,
    /// Whether the conversation is forgotten once the request is settled.
    forget: bool,
}

impl Ticket {
    /// Settles the request by the status of the answer its client got.
    pub fn settle(mut self, status: hyper::StatusCode) {
        let outcome = if status.is_success() { UpstreamOutcome::Answered } else { UpstreamOutcome::Failed };
        self.send(outcome);
    }

    /// Has the engine forget the conversation once the request is settled ([`Engine::forget`]).
    pub fn forget_after(&mut self) {
        self.forget = true;
    }

    /// Where the request's answer reports what the upstream billed, if the engine runs.
    pub fn billing(&self) -> Option<Billing> {
        Some(Billing { sid: self.sid.clone(), jobs: self.jobs.clone()? })
    }

    fn send(&mut self, outcome: UpstreamOutcome) {
        if let Some(jobs) = self.jobs.take() {
            let sid = std::mem::take(&mut self.sid);
            let _ = jobs.send(Work::Settle { sid: sid.clone(), number: self.number, outcome });
            if self.forget {
                let _ = jobs.send(Work::Forget { sid });
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.send(UpstreamOutcome::Failed);
    }
}

impl Engine {
    pub fn start(server: Server) -> Engine {
        let (jobs, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dcp-proxy-engine".into())
            .spawn(move || run(server, &rx))
            .expect("a thread can be started");
        let done = std::sync::Arc::new(std::sync::Mutex::new(Some(thread)));
        Engine { jobs, done, next: std::sync::Arc::default() }
    }

    /// The engine's edits for conversation `sid` (the same list as last time's, not a copy,
    /// when they did not change), whose messages from index `base` on are
    /// `messages` (those before are the ones of its last transform), and the ticket that
    /// counts the request once its answer is known.
    pub async fn transform(
        &self,
        sid: String,
        base: usize,
        messages: Vec<Value>,
        sheet: Option<Sheet>,
        timeout: Duration,
    ) -> Result<(Edits, Ticket), EngineError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ticket = Ticket { sid: sid.clone(), number, jobs: Some(self.jobs.clone()), forget: false };
        let job = Job { sid, base, messages, sheet, number, reply, sent: Instant::now() };
        self.jobs.send(Work::Transform(job)).map_err(|_| EngineError::Stopped)?;
        let edits = match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(EngineError::Stopped),
            Err(_) => Err(EngineError::Timeout(timeout)),
        };
        // Without edits there is nothing to settle: the engine settled the request itself.
        match edits {
            Ok(edits) => Ok((edits, ticket)),
            Err(e) => {
                let mut ticket = ticket;
                ticket.jobs = None;
                Err(e)
            }
        }
    }

    /// Runs `f` on the engine's server, in turn with the requests' transforms.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Server) -> T + Send + 'static,
        timeout: Duration,
    ) -> Result<T, EngineError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let work = Work::Call(Box::new(move |server| {
            let _ = reply.send(f(server));
        }));
        self.jobs.send(work).map_err(|_| EngineError::Stopped)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(_)) => Err(EngineError::Stopped),
            Err(_) => Err(EngineError::Timeout(timeout)),
        }
    }

    /// Drops what the engine holds of conversation `sid` in memory, once the jobs sent before
    /// are done, and hands the memory freed back to the system: its next request is read
    /// whole (see `Server::forget`).
    pub fn forget(&self, sid: String) {
        let _ = self.jobs.send(Work::Forget { sid });
    }

    /// Stops the engine once the jobs sent are done, and waits for its saves to be handed out.
    pub fn stop(self) {
        let Engine { jobs, done, .. } = self;
        drop(jobs);
        let thread = done.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn run(mut server: Server, jobs: &Receiver<Work>) {
    let mut sent: HashMap<String, Sent> = HashMap::new();
    while let Some(work) = next_job(&mut server, jobs) {
        let job = match work {
            Work::Transform(job) => job,
            Work::Call(f) => {
                f(&mut server);
                continue;
            }
            Work::Settle { sid, number, outcome } => {
                server.settle(&sid, number, outcome);
                continue;
            }
            Work::Forget { sid } => {
                sent.remove(&sid);
                server.forget(&sid);
                super::buffers::hand_back();
                continue;
            }
            Work::Usage(sid, usage, model) => {
                server.record_usage(&sid, None, usage, model);
                continue;
            }
        };
        let Job { sid, base, messages, sheet, number, reply, sent: at } = job;
        let queued = at.elapsed();
        transform(&mut server, &mut sent, &sid, Tail { base, messages, sheet, number }, reply);
        tracing::debug!(session = sid, ?queued, "engine job");
    }
    // Every handle is gone: save what waits, as `dcp serve` does at `shutdown`.
    server.shutdown();
}

/// The next job, counting ahead while none waits and handing out the saves that fall due.
fn next_job(server: &mut Server, jobs: &Receiver<Work>) -> Option<Work> {
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

/// The edits of a conversation's last answer with its number, which the server then sends
/// only the changes of (as the plugin holds them, PROTOCOL.md `have`).
#[derive(Default)]
struct Sent {
    seq: Option<u64>,
    edits: Edits,
    /// The list in force before `edits`, a prefix of it. The proxy holds the list it was
    /// handed until it is handed the next, so an answer that adds edits builds a new list;
    /// once the proxy has let go of this one, it is brought up to date and reused, and only
    /// the edits added since it was in force are copied, not every edit in force.
    older: Edits,
}

impl Sent {
    /// Adds `added` to the edits in force: in place when no one else holds the list, else onto
    /// the older list when no one holds that, else onto a copy.
    fn add(&mut self, added: &[Edit]) {
        if let Some(edits) = std::sync::Arc::get_mut(&mut self.edits) {
            edits.extend_from_slice(added);
            return;
        }
        let mut next = std::mem::take(&mut self.older);
        match std::sync::Arc::get_mut(&mut next).filter(|older| older.len() <= self.edits.len()) {
            Some(older) => older.extend_from_slice(&self.edits[older.len()..]),
            None => next = Edits::new(self.edits.to_vec()),
        }
        if let Some(list) = std::sync::Arc::get_mut(&mut next) {
            list.extend_from_slice(added);
        }
        self.older = std::mem::replace(&mut self.edits, next);
    }
}

/// The edits in force for a conversation, shared: an answer whose edits did not change hands
/// out the same list.
pub type Edits = std::sync::Arc<Vec<Edit>>;

/// The messages of a request from index `base` on (those before are the last transform's),
/// and the request's number.
struct Tail {
    base: usize,
    messages: Vec<Value>,
    sheet: Option<Sheet>,
    number: u64,
}

type Reply = tokio::sync::oneshot::Sender<Result<Edits, EngineError>>;

/// Runs one `transform` of conversation `sid`, sending only what changed since the last one,
/// and hands `reply` the edits as soon as the server has decided them (it counts the
/// request's savings after).
fn transform(server: &mut Server, sent: &mut HashMap<String, Sent>, sid: &str, tail: Tail, reply: Reply) {
    let mut before = sent.remove(sid).unwrap_or_default();
    let messages: Vec<Node> = tail.messages.into_iter().map(Node::from).collect();
    let params = TransformParams {
        session_id: sid.to_string(),
        parent_id: Some(None),
        context_limit: None,
        now: None,
        compaction: false,
        base: tail.base,
        have: before.seq,
        model: None,
        sheet: tail.sheet,
        messages,
    };
    let mut reply = Some(reply);
    let mut delivered = false;
    let count = Count::Later(tail.number);
    let result = server.transform_answering(
        params,
        &mut |result| {
            if let Some(reply) = reply.take() {
                delivered = reply.send(answered(&mut before, result)).is_ok();
            }
        },
        count,
    );
    if let Some(reply) = reply.take() {
        delivered = reply.send(answered(&mut before, &result)).is_ok();
    }
    // A request that got no edits settles here: one whose caller gave up waiting went
    // upstream unpruned, so what the engine counted for it never reached the model; one
    // the server refused is counted as it was (it holds no savings).
    if result.is_err() {
        server.settle(sid, tail.number, UpstreamOutcome::Answered);
    } else if !delivered {
        server.settle(sid, tail.number, UpstreamOutcome::Failed);
    }
    if result.is_ok() {
        sent.insert(sid.to_string(), before);
    }
}

/// The edits in force after `result`, which `before` is brought up to.
fn answered(before: &mut Sent, result: &Result<Transformed, RpcError>) -> Result<Edits, EngineError> {
    let answer = match result {
        Ok(answer) => answer,
        Err(e) => {
            if e.code != code::RESYNC {
                tracing::warn!("transform: {}", e.message);
            }
            return Err(EngineError::Refused(e.message.clone()));
        }
    };
    match &answer.edits {
        protocol::EditsAnswer::Full(full) => {
            before.edits = Edits::new(full.clone());
            before.older = Edits::default();
        }
        protocol::EditsAnswer::Add(added) if !added.is_empty() => before.add(added),
        protocol::EditsAnswer::Add(_) | protocol::EditsAnswer::Same => {}
        protocol::EditsAnswer::Keep { before: from, add } => {
            let kept = before.edits.iter().filter(|e| e.m < *from);
            before.edits = Edits::new(kept.chain(add).cloned().collect());
            before.older = Edits::default();
        }
    }
    before.seq = answer.seq;
    Ok(Edits::clone(&before.edits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn edit(n: usize) -> Edit {
        Edit {
            m: n,
            p: 0,
            path: vec!["state".into(), "output".into()],
            value: Some(json!(format!("e{n}"))),
            append: None,
        }
    }

    /// Answers `Add`s to a list the proxy holds (the last one handed out, and at times the one
    /// before), and checks each list handed out against the edits added so far, copied whole.
    #[test]
    fn lists_built_onto_the_older_list_equal_lists_copied_whole() {
        let mut sent = Sent::default();
        let mut expected: Vec<Edit> = (0..5).map(edit).collect();
        let full = Ok(Transformed { edits: protocol::EditsAnswer::Full(expected.clone()), ..Transformed::unchanged() });
        let mut held = vec![answered(&mut sent, &full).unwrap()];
        let mut reused = 0;
        for step in 1..40 {
            let added: Vec<Edit> = (0..step % 4).map(|k| edit(100 * step + k)).collect();
            expected.extend(added.iter().cloned());
            let older = Edits::as_ptr(&sent.older);
            let answer = Ok(Transformed { edits: protocol::EditsAnswer::Add(added), ..Transformed::unchanged() });
            let list = answered(&mut sent, &answer).unwrap();
            assert_eq!(*list, expected, "step {step}");
            reused += usize::from(Edits::as_ptr(&list) == older);
            // The proxy holds the last list; every third step it holds the one before too.
            if step % 3 != 0 {
                held.clear();
            }
            held.push(list);
        }
        assert!(reused > 10, "the older list was reused {reused} times");
    }
}
