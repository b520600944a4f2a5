//! The threads that parse and slim the messages of a long line while the scanner reads on.
//!
//! Parsing a message and counting its big strings' tokens ([`slim_message`]) is most of what
//! reading a first request costs (at 20,000 messages, 58 MB of tool outputs to count). Each
//! message is parsed and slimmed with a counter of its own, so messages are independent: the
//! scanner hands each one's bytes to a few worker threads as it cuts them out of the line, and
//! goes on reading the pipe (the plugin can then write on while the sidecar counts). The
//! messages come back in the line's order, as the scanner alone would have made them: the same
//! nodes, the same counts, the same first error.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::session::{slim, Node};
use crate::sidecar::protocol::{self, RpcError};
use crate::tokens::{EstimatorChoice, TokenCounter};

/// At most this many workers: past it, the plugin's writing is what the line waits for.
const MAX_WORKERS: usize = 4;

/// Messages cut out but not yet taken by a worker, per worker; the scanner waits past it, so
/// that a slow count holds the pipe back instead of piling up the line's bytes.
const QUEUED_PER_WORKER: usize = 64;

/// A message read, or the error a whole read of the line would give for it (with its line
/// offset).
pub(super) type Slimmed = Result<Node, (usize, RpcError)>;

/// One message to parse: its index in the list, its line offset, and its bytes.
struct Job {
    index: usize,
    at: usize,
    bytes: Vec<u8>,
}

/// How many threads parse and slim the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Workers {
    /// The scanner's own thread, as each message ends.
    Inline,
    /// This many threads of their own.
    Threads(usize),
}

impl Workers {
    /// As many as the machine has cores, up to [`MAX_WORKERS`]; on one core, none.
    pub(super) fn for_this_machine() -> Workers {
        match std::thread::available_parallelism().map_or(1, |n| n.get()) {
            1 => Workers::Inline,
            cores => Workers::Threads(cores.min(MAX_WORKERS)),
        }
    }
}

/// The messages of one list, parsed and slimmed in order, inline or on worker threads.
pub(super) struct Slimmers {
    workers: Workers,
    pool: Option<Pool>,
    /// The messages slimmed inline, or taken back from the workers, by index.
    done: Vec<Option<Slimmed>>,
    sent: usize,
}

/// The worker threads, started at the first message.
struct Pool {
    jobs: Option<SyncSender<Job>>,
    results: Receiver<(usize, Slimmed)>,
    threads: Vec<JoinHandle<()>>,
}

impl Slimmers {
    pub(super) fn new(workers: Workers) -> Slimmers {
        Slimmers { workers, pool: None, done: Vec::new(), sent: 0 }
    }

    /// Parses and slims message `bytes`, found at line offset `at`: now, or on a worker.
    pub(super) fn push(&mut self, at: usize, bytes: Vec<u8>) {
        let index = self.sent;
        self.sent += 1;
        if let (Workers::Threads(n), None) = (self.workers, &self.pool) {
            self.pool = Pool::start(n);
            if self.pool.is_none() {
                // No thread could be started: the scanner's thread does it all.
                self.workers = Workers::Inline;
            }
        }
        match self.pool.as_ref().and_then(|pool| pool.jobs.as_ref()) {
            // The workers end only when `jobs` is dropped, or by a panic (a bug) that
            // `finish` reports.
            Some(jobs) => {
                let _ = jobs.send(Job { index, at, bytes });
            }
            None => {
                let slimmed = slim(Job { index, at, bytes }, &mut TokenCounter::new(EstimatorChoice::Auto));
                self.done.push(Some(slimmed));
            }
        }
    }

    /// Forgets the messages pushed so far (a later `messages` list stands for this one), but
    /// for their first error: a scan alone would have stopped there.
    pub(super) fn restart(&mut self) -> Option<(usize, RpcError)> {
        self.take().err()
    }

    /// Waits for every message pushed so far; the messages in order, or the first error.
    pub(super) fn take(&mut self) -> Result<Vec<Node>, (usize, RpcError)> {
        self.finish();
        let done = std::mem::take(&mut self.done);
        self.sent = 0;
        let mut messages = Vec::with_capacity(done.len());
        for slimmed in done {
            match slimmed {
                Some(Ok(message)) => messages.push(message),
                Some(Err(e)) => return Err(e),
                None => unreachable!("every message pushed is taken back"),
            }
        }
        Ok(messages)
    }

    /// Takes back every message the workers were given, and ends them.
    fn finish(&mut self) {
        let Some(mut pool) = self.pool.take() else { return };
        drop(pool.jobs.take());
        self.done.resize_with(self.sent, || None);
        for (index, slimmed) in pool.results.iter() {
            self.done[index] = Some(slimmed);
        }
        for thread in pool.threads {
            // A panic in a worker is a bug, not bad input: it goes on as one.
            if let Err(p) = thread.join() {
                std::panic::resume_unwind(p);
            }
        }
    }
}

impl Pool {
    /// `threads` workers, or as many as could be started; `None` if none could.
    fn start(threads: usize) -> Option<Pool> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUED_PER_WORKER * threads);
        let (done, results) = mpsc::channel();
        let queue = Arc::new(Mutex::new(queue));
        let threads = (0..threads)
            .map(|_| {
                let (queue, done) = (Arc::clone(&queue), done.clone());
                let worker = std::thread::Builder::new().name("dcp-slim".to_string());
                worker.spawn(move || work(&queue, &done))
            })
            // A worker that cannot be started (no threads left) is one less.
            .filter_map(Result::ok)
            .collect::<Vec<_>>();
        (!threads.is_empty()).then_some(Pool { jobs: Some(jobs), results, threads })
    }
}

/// A worker: takes the next message until none is left.
fn work(queue: &Mutex<Receiver<Job>>, done: &mpsc::Sender<(usize, Slimmed)>) {
    let mut counter = TokenCounter::new(EstimatorChoice::Auto);
    loop {
        // A poisoned lock means another worker panicked: that worker's join reports it.
        let Ok(job) = queue.lock().map(|q| q.recv()) else { return };
        let Ok(job) = job else { return };
        let index = job.index;
        let slimmed = slim(job, &mut counter);
        if done.send((index, slimmed)).is_err() {
            return;
        }
    }
}

/// Parses and slims one message, with `counter` cleared after: each message is counted alone.
fn slim(job: Job, counter: &mut TokenCounter) -> Slimmed {
    let Job { index, at: message_at, bytes } = job;
    let slimmed = match serde_json::from_slice::<Node>(&bytes) {
        Ok(mut message) => {
            slim_message(&mut message, counter);
            Ok(message)
        }
        Err(e) => {
            let at = message_at + e.column().saturating_sub(1);
            Err((at, protocol::not_json(format!("{} (in params.messages[{index}])", at_column(&e, at + 1)))))
        }
    };
    counter.clear();
    slimmed
}

/// Serde's message for `e`, at `column` of line 1 instead of where serde saw it.
pub(super) fn at_column(e: &serde_json::Error, column: usize) -> String {
    let text = e.to_string();
    let what = text.strip_suffix(&format!(" at line {} column {}", e.line(), e.column())).unwrap_or(&text);
    format!("{what} at line 1 column {column}")
}

/// Slims a message as the mirror would keep it: its info and every part.
pub fn slim_message(message: &mut Node, counter: &mut TokenCounter) {
    if let Some(info) = message.get_mut("info") {
        slim::slim_info(info);
    }
    for part in message.get_mut("parts").and_then(Node::as_array_mut).into_iter().flatten() {
        slim::slim_part(part, counter);
    }
}
