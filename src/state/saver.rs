//! Asynchronous saves: a tokio task that writes state files without blocking pruning.
//!
//! The sidecar hands every save to one writer task over a channel, so saves of a session
//! happen in order. Jobs that pile up while a write is in flight are coalesced: only the
//! newest state of each session is written, with the journals of all of them. A failed save
//! (full disk, read-only dir) is logged once per session and retried later; pruning goes on
//! in memory meanwhile.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::store::SaveJob;

/// How long a save waits for more saves to fold into it. The sidecar already hands out at
/// most one save per session every `SAVE_EVERY` (see `crate::sidecar`); this only gathers
/// the saves of several sessions into one pass.
pub const GATHER: Duration = Duration::from_millis(20);

/// How long to wait before retrying a failed save, unless `DCP_SAVE_RETRY_MS` says otherwise.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

fn retry_after() -> Duration {
    std::env::var("DCP_SAVE_RETRY_MS").ok().and_then(|v| v.parse().ok()).map_or(RETRY_AFTER, Duration::from_millis)
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
            Err(e) => tracing::error!("state save task failed: {e}"),
        }
    }
}
