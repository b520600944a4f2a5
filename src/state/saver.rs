//! Saving in one place: when a session's state is handed out for saving ([`SaveTiming`],
//! [`hand_out`]), and a tokio task that writes state files without blocking pruning.
//!
//! After a request the sidecar hands a session's state to the saver at once, or, when it
//! handed one less than [`SAVE_EVERY`] ago, when that interval is up: a burst of requests
//! costs one copy and one write per interval. A save copies and writes every record of the
//! session, so a large session's automatic decisions also wait for one request per
//! [`RECORDS_PER_REQUEST`] records it holds (at most [`WAIT_AT_MOST`]): what saving costs a
//! request stays about the same however long the session grows. The sidecar hands every save to one writer task
//! over a channel, so saves of a session happen in order. Jobs that pile up while a write is
//! in flight are coalesced: only the newest state of each session is written, with the
//! journals of all of them. A failed save (full disk, read-only dir) is logged once per
//! session and retried later; pruning goes on in memory meanwhile, and the job posts the
//! failure to the store's mailbox, so that the session's next answer tells the user once.
//!
//! A save that would write what this process last wrote to the file, but for `lastUpdated`,
//! writes nothing (`persist::sync`). The policy's ledger (`dcp.ledger`) moves with every
//! request and is no reason for a write of its own: it rides along with the next save and the
//! sidecar's last one as it stops ([`SessionStore::dirty`]). A killed sidecar loses at most the
//! ledger of the requests since its last save, a balance the policy rebuilds as it goes.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::store::{SaveJob, SessionStore};

/// How often a session's state is handed to the saver after requests, at most: a burst of
/// requests (an agent's tool steps) costs one copy and one write per interval, and what
/// waits reaches the disk within about this long.
pub const SAVE_EVERY: Duration = Duration::from_millis(100);

/// Records of a session's state (prunes and ranges) a save writes for each request its
/// automatic decisions wait for: a save of `n` records waits for `n / RECORDS_PER_REQUEST`
/// requests since the last one (or [`WAIT_AT_MOST`]), so that a request pays for about this
/// many records of saving, whatever the session's size. A session of fewer records is saved
/// after every [`SAVE_EVERY`].
pub const RECORDS_PER_REQUEST: usize = 256;

/// The longest a large session's automatic decisions wait for their save.
pub const WAIT_AT_MOST: Duration = Duration::from_secs(10);

/// How long a save waits for more saves to fold into it. The sidecar already hands out at
/// most one save per session every [`SAVE_EVERY`]; this only gathers the saves of several
/// sessions into one pass.
pub const GATHER: Duration = Duration::from_millis(20);

/// How long to wait before retrying a failed save, unless `DCP_SAVE_RETRY_MS` says otherwise.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

fn retry_after() -> Duration {
    std::env::var("DCP_SAVE_RETRY_MS").ok().and_then(|v| v.parse().ok()).map_or(RETRY_AFTER, Duration::from_millis)
}

/// When one session's state was last handed out for saving, whether a save waits, and the
/// requests since and records then that say how long it may wait.
#[derive(Debug, Default)]
pub struct SaveTiming {
    handed: Option<Instant>,
    waiting: bool,
    /// Requests since the state was last handed out, and the records it held then.
    requests: usize,
    records: usize,
}

impl SaveTiming {
    /// Notes a request of the session: a large session's save waits for requests.
    pub fn request(&mut self) {
        self.requests = self.requests.saturating_add(1);
    }

    /// How long after the last hand-out a save may wait: [`SAVE_EVERY`], once a request came
    /// for every whole [`RECORDS_PER_REQUEST`] records the last one held (none for a smaller
    /// session); else [`WAIT_AT_MOST`].
    fn wait(&self) -> Duration {
        if self.requests >= self.records / RECORDS_PER_REQUEST {
            SAVE_EVERY
        } else {
            WAIT_AT_MOST
        }
    }

    /// Whether a save asked for now waits for [`SaveTiming::due`]: one was handed out less
    /// than [`SaveTiming::wait`] ago. What waits is only what the automatic strategies
    /// decided, which a restarted sidecar decides again from the history, and the request's
    /// figures; the agent's and the user's prunes are handed out at once.
    pub fn defer(&mut self) -> bool {
        let recent = self.handed.is_some_and(|t| t.elapsed() < self.wait());
        if recent {
            self.waiting = true;
        }
        recent
    }

    /// Whether a save waits.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// When the waiting save is due, if one waits.
    pub fn due(&self) -> Option<Instant> {
        self.handed.filter(|_| self.waiting).map(|t| t + self.wait())
    }

    /// Whether a save waits and its time has come.
    pub fn due_now(&self) -> bool {
        self.waiting && self.handed.is_none_or(|t| t.elapsed() >= self.wait())
    }
}

/// Hands session `id`'s state from `store` to `saver` now, or, without a saver, saves it on
/// this thread; `timing` notes it.
pub fn hand_out(saver: Option<&Saver>, store: &mut SessionStore, id: &str, timing: &mut SaveTiming) {
    timing.waiting = false;
    timing.requests = 0;
    timing.records = store.slot(id).map_or(0, |s| s.state().pruned.len() + s.state().blocks.by_id.len());
    match store.save_job(id) {
        Ok(job) => match saver {
            Some(saver) => {
                timing.handed = Some(Instant::now());
                saver.save(job)
            }
            None => {
                if let Err(e) = job.run() {
                    tracing::warn!("{}", crate::error_chain(&e));
                }
            }
        },
        Err(e) => tracing::warn!("{e}"),
    }
}

enum Msg {
    Save(Box<SaveJob>),
    Flush(oneshot::Sender<()>),
}

/// A handle to the writer task. Cloning it is cheap.
#[derive(Clone)]
pub struct Saver {
    tx: mpsc::UnboundedSender<Msg>,
}

impl Saver {
    /// Starts the writer task on the current tokio runtime.
    pub fn spawn() -> Saver {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(rx));
        Saver { tx }
    }

    /// Queues a save; returns at once.
    pub fn save(&self, job: SaveJob) {
        let _ = self.tx.send(Msg::Save(Box::new(job)));
    }

    /// Waits until every save queued before this call has been attempted.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

async fn writer(mut rx: mpsc::UnboundedReceiver<Msg>) {
    let mut failing: HashSet<String> = HashSet::new();
    let mut retry: BTreeMap<String, SaveJob> = BTreeMap::new();
    let wait = retry_after();
    loop {
        let first = if retry.is_empty() {
            match rx.recv().await {
                Some(m) => m,
                None => return,
            }
        } else {
            match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(m)) => m,
                Ok(None) => {
                    write_all(std::mem::take(&mut retry), &mut failing, &mut BTreeMap::new()).await;
                    return;
                }
                Err(_) => {
                    let jobs = std::mem::take(&mut retry);
                    write_all(jobs, &mut failing, &mut retry).await;
                    continue;
                }
            }
        };
        // Coalesce everything queued meanwhile: the newest job per session wins. A flush
        // does not wait.
        if matches!(first, Msg::Save(_)) {
            tokio::time::sleep(GATHER).await;
        }
        let mut jobs: BTreeMap<String, SaveJob> = BTreeMap::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Save(job) => {
                    let mut job = *job;
                    if let Some(older) = jobs.remove(&job.session_id) {
                        job.absorb_older(older);
                    }
                    jobs.insert(job.session_id.clone(), job);
                }
                Msg::Flush(done) => flushes.push(done),
            }
            next = rx.try_recv().ok();
        }
        for (id, older) in std::mem::take(&mut retry) {
            match jobs.get_mut(&id) {
                Some(job) => job.absorb_older(older),
                None => {
                    jobs.insert(id, older);
                }
            }
        }
        write_all(jobs, &mut failing, &mut retry).await;
        for done in flushes {
            let _ = done.send(());
        }
    }
}

async fn write_all(
    jobs: BTreeMap<String, SaveJob>,
    failing: &mut HashSet<String>,
    retry: &mut BTreeMap<String, SaveJob>,
) {
    for (id, job) in jobs {
        let result = tokio::task::spawn_blocking(move || {
            let outcome = job.run();
            (job, outcome)
        })
        .await;
        match result {
            Ok((_, Ok(aside))) => {
                if let Some(aside) = aside {
                    tracing::warn!("set the corrupt state file of {id} aside as {}", aside.display());
                }
                if failing.remove(&id) {
                    tracing::warn!("saved the state of {id} again after earlier failures");
                }
            }
            Ok((job, Err(e))) => {
                if failing.insert(id.clone()) {
                    tracing::warn!(
                        "{}; pruning goes on in memory and the save will be retried",
                        crate::error_chain(&e)
                    );
                }
                retry.insert(id, job);
            }
            // The runtime stopped with the sidecar before a retry could run.
            Err(e) if e.is_cancelled() => tracing::warn!("dcp stopped before the state of {id} could be saved"),
            Err(e) => tracing::error!("state save task failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Action, PruneRecord, Strategy};
    use crate::tokens::EstimatorChoice;

    /// Hands session `id`'s state to `saver`, waits for the write, and returns the file.
    fn save(rt: &tokio::runtime::Runtime, saver: &Saver, store: &mut SessionStore, id: &str) -> String {
        hand_out(Some(saver), store, id, &mut SaveTiming::default());
        rt.block_on(saver.flush());
        store.refresh(id).unwrap();
        std::fs::read_to_string(store.dir().join(format!("{id}.json"))).unwrap()
    }

    /// The bug: the sidecar's last save, as it stopped after OpenCode, rewrote a state
    /// nothing had changed since its last write, with only a new `lastUpdated`; a reader that
    /// compared the file (the pass-through end-to-end tests) saw it change after the run.
    #[test]
    fn a_save_of_an_unchanged_state_does_not_rewrite_the_file_with_a_new_time() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let saver = rt.block_on(async { Saver::spawn() });
        let dir = tempfile::tempdir().unwrap();
        let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        let id = "ses_unchanged";
        let slot = store.slot(id).unwrap();
        let record = PruneRecord {
            strategy: Strategy::Deduplication,
            action: Action::Output,
            tokens: 40,
            tool: "read".into(),
            applied: true,
        };
        slot.record("call_1", record);
        let first = save(&rt, &saver, &mut store, id);
        let path = dir.path().join(format!("{id}.json"));
        let stamp = crate::state::persist::stamp(&path);
        assert!(store.dirty().is_empty(), "{:?}", store.dirty());

        // A save asked for with nothing new, a few milliseconds later: nothing is written.
        std::thread::sleep(Duration::from_millis(5));
        store.slot(id).unwrap().mark_changed();
        assert_eq!(save(&rt, &saver, &mut store, id), first, "the file was rewritten");
        assert_eq!(crate::state::persist::stamp(&path), stamp);

        // The policy's ledger moved (a request): the session has something to save, and the
        // save writes it.
        store.slot(id).unwrap().ledger_mut().warm += 1;
        assert_eq!(store.dirty(), [id]);
        let after = save(&rt, &saver, &mut store, id);
        assert_ne!(after, first);
        assert_eq!(crate::state::persist::parse(after.as_bytes()).unwrap().ledger.warm, 1);
        assert!(store.dirty().is_empty());
    }

    #[test]
    fn a_large_session_s_save_waits_for_a_request_per_records_per_request_of_its_records() {
        let handed = |records: usize| SaveTiming { handed: Some(Instant::now()), records, ..SaveTiming::default() };
        // Below RECORDS_PER_REQUEST records, a save waits SAVE_EVERY after the last, as ever,
        // with no request since (what the request's savings changed after its save).
        let mut small = handed(RECORDS_PER_REQUEST - 1);
        assert!(small.defer());
        assert!(small.due().is_some_and(|due| due <= Instant::now() + SAVE_EVERY));
        small.request();
        assert!(small.defer());
        assert!(small.due().is_some_and(|due| due <= Instant::now() + SAVE_EVERY));
        // Four times as many records wait for four requests, or for WAIT_AT_MOST.
        let mut large = handed(4 * RECORDS_PER_REQUEST);
        for _ in 0..3 {
            large.request();
            assert!(large.defer());
            assert!(large.due().is_some_and(|due| due > Instant::now() + SAVE_EVERY), "{large:?}");
            assert!(!large.due_now());
        }
        large.request();
        assert!(large.due().is_some_and(|due| due <= Instant::now() + SAVE_EVERY), "{large:?}");
        large.handed = Some(Instant::now() - SAVE_EVERY);
        assert!(large.due_now() && !large.defer());
        // However few the requests, the save goes within WAIT_AT_MOST.
        let mut waited = handed(1_000 * RECORDS_PER_REQUEST);
        waited.request();
        assert!(waited.defer());
        waited.handed = Some(Instant::now() - WAIT_AT_MOST);
        assert!(waited.due_now());
    }
}
