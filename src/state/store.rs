//! The session store: one state per session id, loaded on first sight, cleared on
//! compaction.
//!
//! Many sessions are live at once in one OpenCode process (the main agent and its
//! subagents, several tabs), so there is no single global state: the store keeps a
//! [`Slot`] per session id. When a newer compaction summary (an assistant message with
//! `summary: true`) appears, the session's prune list and token cache are cleared, its stats
//! are kept, and it is due to be saved. A corrupt state file is reported once by name; the
//! session starts afresh, and the file is set aside when the state is first saved. A save
//! that fails is told to the session once per run of failures ([`SaveNews`]), and so is the
//! save that works again.
//!
//! Other processes may write the same state file: a CLI sweep, a second OpenCode. Saves are
//! read-merge-writes under the file's lock ([`persist::sync`]), so none of their updates is
//! lost, and before each request [`SessionStore::observe`] checks the file's stamp and merges in
//! what another process wrote. A slot keeps a journal of the prunes it recorded since its
//! last save, which is what a merge adds to the file's stats.
//!
//! Who owns what of a session: a [`Slot`] holds what the state file keeps and what saving it
//! needs (the state, the policy's ledger among it, its token counts, the journal, the stamps);
//! the CLI uses it as the sidecar does. A change the next save must write is noted by the
//! slot's own operations, never by their callers: a prune recorded or put in force, a range
//! made, put in force, undone or dropped ([`blocks`]), the ledger's decisions ([`ledger`]), the
//! arm, the misses and the usage reported ([`records`]). The state itself is private: read
//! through [`Slot::state`], changed through those operations; the strategies that make a range
//! or hand out agent-facing ids as they decide take it through [`Slot::state_for_strategies`].
//! What only a live session in `dcp serve` needs (the mirror of the history, the index of tool
//! calls, the policy's running totals, the lists, the caches, what the plugin holds of the
//! edits, when its next save is due) is the sidecar's `LiveSession` (`crate::sidecar`'s
//! `live`), keyed by the same id; the store never sees it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::persist::{self, LoadOutcome, Stamp, StateError};
use super::{Ledger, PruneRecord, SessionState, UNPRUNE};
use crate::session::Message;
use crate::tokens::{EstimatorChoice, TokenCounter};

mod blocks;
mod changes;
mod ledger;
mod mailbox;
mod records;

pub use changes::ChangesMark;
pub use mailbox::{Mailbox, SaveNews};

/// One live session.
#[derive(Debug)]
pub struct Slot {
    state: SessionState,
    pub tokens: TokenCounter,
    /// The unreadable state file found at load; the first save sets it aside.
    corrupt: Option<PathBuf>,
    /// What the person is to be told of the session's saves with the next answer.
    save_news: Option<SaveNews>,
    /// Whether the state changed since it was last handed out for saving. The policy's
    /// ledger, which moves with every request, does not count: see [`Slot::unsaved`].
    dirty: bool,
    /// The ledger as it was last loaded or handed out for saving.
    saved_ledger: Ledger,
    /// The requests the savings counted when last loaded or handed out (see
    /// `crate::state::savings`): like the ledger, they ride along with the next save.
    saved_requests: u64,
    /// Bumped whenever the rewrites in force may change (an applied record, a compaction, a
    /// merge), so the sidecar can tell that the edits it last sent still hold.
    revision: u64,
    /// Bumped when rewrites may have been dropped (a compaction, a merge): only additions
    /// can then be sent as such.
    resets: u64,
    /// Prunes recorded since the last save job, for the next merge.
    journal: Vec<(String, PruneRecord)>,
    /// Call ids recorded since the sidecar last took them ([`Slot::take_recorded`]).
    recorded: Vec<String>,
    changes: Vec<String>, // See `Slot::changes`.
    /// The version of the file `state` was last synced with.
    stamp: Option<Stamp>,
    /// The number of save jobs handed out, and of those whose outcome was taken in.
    handed: u64,
    absorbed: u64,
}

impl Slot {
    /// The session's state, to read: the slot's own operations change it, each noting what
    /// the next save must write.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The session's state to read, with the token counter that the strategies reading it
    /// count with.
    pub fn state_and_tokens(&mut self) -> (&SessionState, &mut TokenCounter) {
        (&self.state, &mut self.tokens)
    }

    /// The session's state, with the token counter, for the strategies that change it as they
    /// decide: those that make a compressed range (`crate::strategies::compress`, whose caller
    /// then records it with [`Slot::record_block`]) and the prunable list, which hands out
    /// agent-facing ids. The last writers outside the slot's operations (issue 39); nothing
    /// else takes it.
    pub fn state_for_strategies(&mut self) -> (&mut SessionState, &mut TokenCounter) {
        (&mut self.state, &mut self.tokens)
    }

    /// The session's state, for a test that plants what no operation makes.
    #[cfg(test)]
    pub(crate) fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }

    /// The unreadable state file found at load or since, until a save sets it aside.
    pub fn corrupt(&self) -> Option<&Path> {
        self.corrupt.as_deref()
    }

    /// What the person is to be told of the session's state file with an answer: the
    /// unreadable file to set aside, and the news of its saves (taken, so told once).
    pub fn file_news(&mut self) -> (Option<&Path>, Option<SaveNews>) {
        (self.corrupt.as_deref(), self.save_news.take())
    }

    /// The number that changes whenever the rewrites in force may have changed: edits computed
    /// at the same revision (and [`Slot::resets`]) still hold.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The number that changes whenever rewrites in force may have been dropped (a compaction,
    /// another process's changes merged in).
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Notes a change to the state that the next save must write: only this store's
    /// operations do.
    pub(super) fn mark_changed(&mut self) {
        self.dirty = true;
    }

    /// Notes that the rewrites in force grew (a rewrite applied): edits sent before miss it.
    fn mark_rewrites_added(&mut self) {
        self.revision += 1;
    }

    /// Notes that rewrites in force may have been dropped or replaced wholesale: edits sent
    /// before may no longer hold.
    fn mark_rewrites_reset(&mut self) {
        self.revision += 1;
        self.resets += 1;
        self.changes.clear();
    }

    /// Puts the waiting prune of `call_id` in force, a rewrite the next save writes. The call
    /// gets its agent-facing id, the handle its placeholder names (`crate::texts::restore`).
    pub fn apply(&mut self, call_id: &str) {
        if let Some(record) = self.state.pruned.get_mut(call_id).filter(|r| !r.applied) {
            record.applied = true;
            self.state.id_for(call_id);
            self.changes.push(call_id.to_string());
        }
        self.mark_rewrites_added();
        self.dirty = true;
    }

    /// Records a prune, as [`SessionState::record`] does, and notes it for the next save.
    pub fn record(&mut self, call_id: &str, record: PruneRecord) -> bool {
        let applied = record.applied;
        if !self.state.record(call_id, record.clone()) {
            return false;
        }
        if applied {
            self.state.id_for(call_id);
            self.mark_rewrites_added();
        }
        self.journal.push((call_id.to_string(), record));
        self.recorded.push(call_id.to_string());
        self.changes.push(call_id.to_string());
        self.dirty = true;
        true
    }

    /// Drops the prune of `call_id`, whose reason left a rewound history
    /// (`crate::strategies::rewind`): its tokens leave the stats as they came in, and the
    /// edits sent before no longer hold. Journalled as `unprune:ID`, which a merge takes out
    /// of the file. Whether there was one.
    pub fn drop_prune(&mut self, call_id: &str) -> bool {
        let Some(record) = self.state.pruned.remove(call_id) else { return false };
        self.state.foreign_records.remove(call_id);
        let tally = self.state.stats.by_strategy.entry(record.strategy).or_default();
        tally.tokens = tally.tokens.saturating_sub(record.tokens);
        tally.tools = tally.tools.saturating_sub(1);
        self.state.stats.unrecord(record.tokens);
        self.journal.push((format!("{UNPRUNE}{call_id}"), record));
        self.dirty = true;
        self.mark_rewrites_reset();
        true
    }

    /// Whether the state has anything a save would write: a change marked [`Slot::dirty`],
    /// or a policy ledger that moved since the last save. The ledger alone is not worth a
    /// write after every request (it moves with each one, and every write wakes every reader
    /// of the state dir); it rides along with the next save and the sidecar's last one.
    pub fn unsaved(&self) -> bool {
        self.dirty || self.state.ledger != self.saved_ledger || self.state.savings.requests != self.saved_requests
    }

    /// Takes calls a compressed range hid off the prunable list.
    pub fn hide(&mut self, calls: impl IntoIterator<Item = String>) {
        self.recorded.extend(calls);
    }

    /// The call ids recorded since the last call, oldest first: what the sidecar's prunable
    /// list must drop.
    pub fn take_recorded(&mut self) -> Vec<String> {
        std::mem::take(&mut self.recorded)
    }
}

/// What [`SessionStore::observe`] noticed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    /// The session was new to this store.
    pub first_seen: bool,
    /// A newer compaction appeared; the prune list was cleared.
    pub compacted: bool,
}

/// A save to perform: a session's state, and the prunes it recorded since its last save.
#[derive(Debug)]
pub struct SaveJob {
    pub dir: PathBuf,
    pub session_id: String,
    state: SessionState,
    journal: Vec<(String, PruneRecord)>,
    base: Option<Stamp>,
    seq: u64,
    mailbox: Mailbox,
}

impl SaveJob {
    /// Performs the save synchronously: a read-merge-write under the file's lock, skipped
    /// when it would write what this process's last save wrote but the time. Returns where a
    /// corrupt file was set aside.
    pub fn run(&self) -> Result<Option<PathBuf>, StateError> {
        // A job handed out while an earlier one was in flight has the version before that
        // one as its base; what that one wrote is no news to it either.
        let last = self.mailbox.written(&self.session_id, self.seq);
        let known: Vec<Stamp> = self.base.into_iter().chain(last.map(|w| w.stamp)).collect();
        let synced = persist::sync(&self.dir, &self.session_id, &self.state, &self.journal, &known, last);
        let mut synced = synced.inspect_err(|e| self.mailbox.post_failure(&self.session_id, crate::error_chain(e)))?;
        if synced.skipped {
            tracing::debug!(session = self.session_id, "save skipped: the file already says the same");
        }
        let aside = synced.aside.take();
        self.mailbox.post(&self.session_id, self.seq, synced);
        Ok(aside)
    }

    /// Folds an older job of the same session into this newer one, for a writer that has
    /// both queued: the newer state wins, and neither journal is lost.
    pub fn absorb_older(&mut self, older: SaveJob) {
        let mut journal = older.journal;
        journal.append(&mut self.journal);
        self.journal = journal;
        self.base = older.base;
    }
}

/// Whether [`SessionStore::load`] read the state file just now or found the slot loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loaded {
    Now,
    Before,
}

/// Keeps the state of every session seen, backed by the files of one state dir.
#[derive(Debug)]
pub struct SessionStore {
    dir: PathBuf,
    estimator: EstimatorChoice,
    slots: HashMap<String, Slot>,
    mailbox: Mailbox,
}

/// The `time.created` of the newest compaction summary in `messages`, or 0.
pub fn newest_compaction(messages: &[Message]) -> i64 {
    messages.iter().filter(|m| m.is_compaction_summary()).map(Message::time_created).max().unwrap_or(0)
}

impl SessionStore {
    pub fn new(dir: &Path, estimator: EstimatorChoice) -> SessionStore {
        SessionStore { dir: dir.to_path_buf(), estimator, slots: HashMap::new(), mailbox: Mailbox::default() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slot of session `id` if its state is loaded: nothing is read.
    pub fn loaded(&self, id: &str) -> Option<&Slot> {
        self.slots.get(id)
    }

    /// The slot of session `id`, loading its state file the first time.
    pub fn slot(&mut self, id: &str) -> Result<&mut Slot, StateError> {
        self.load(id).map(|(slot, _)| slot)
    }

    /// The slot of session `id`, and whether its state file was loaded just now.
    fn load(&mut self, id: &str) -> Result<(&mut Slot, Loaded), StateError> {
        persist::validate_session_id(id)?;
        let loaded = if self.slots.contains_key(id) { Loaded::Before } else { Loaded::Now };
        if loaded == Loaded::Now {
            let path = persist::state_path(&self.dir, id)?;
            let stamp = persist::stamp(&path);
            let (state, corrupt) = match persist::load_path(&path) {
                LoadOutcome::Missing => (SessionState::default(), None),
                LoadOutcome::Loaded(state) => (*state, None),
                LoadOutcome::Corrupt { path, reason } => {
                    tracing::warn!(
                        "state file {} is corrupt ({reason}); starting afresh, and it will be set aside, not overwritten",
                        path.display()
                    );
                    (SessionState::default(), Some(path))
                }
            };
            // A corrupt file is no version to build on: the first save reads it again, and
            // sets it aside.
            let stamp = if corrupt.is_some() { None } else { stamp };
            let slot = Slot {
                saved_ledger: state.ledger,
                saved_requests: state.savings.requests,
                state,
                tokens: TokenCounter::new(self.estimator),
                corrupt,
                save_news: None,
                dirty: false,
                revision: 0,
                resets: 0,
                journal: Vec::new(),
                recorded: Vec::new(),
                changes: Vec::new(),
                stamp,
                handed: 0,
                absorbed: 0,
            };
            self.slots.insert(id.to_string(), slot);
        }
        Ok((self.slots.get_mut(id).expect("inserted above"), loaded))
    }

    /// Takes in what happened to session `id`'s file since the state was last synced: the
    /// outcome of this process's last save (and [`Slot::file_news`]), or another process's
    /// write. While a save of this process is still in flight nothing is read: that save
    /// merges, and its outcome is taken in next time.
    pub fn refresh(&mut self, id: &str) -> Result<(), StateError> {
        let path = persist::state_path(&self.dir, id)?;
        let mailbox = self.mailbox.clone();
        let (slot, loaded) = self.load(id)?;
        if loaded == Loaded::Now {
            return Ok(());
        }
        slot.save_news = match (slot.save_news.take(), mailbox.news(id)) {
            // Saves failed and succeeded again before the person was told: nothing to tell.
            (Some(SaveNews::Failing(_)), Some(SaveNews::SavedAgain)) => None,
            (before, news) => news.or(before),
        };
        if slot.absorbed < slot.handed {
            let Some(posted) = mailbox.take(id, slot.handed) else {
                return Ok(());
            };
            slot.absorbed = slot.handed;
            slot.stamp = posted.stamp;
            let Some(merged) = posted.merged else {
                return Ok(());
            };
            slot.state = persist::merge(merged, &slot.state, &slot.journal);
            slot.mark_rewrites_reset();
            return Ok(());
        }
        let now = persist::stamp(&path);
        if now == slot.stamp || now.is_none() {
            return Ok(());
        }
        slot.stamp = now;
        match persist::load_path(&path) {
            LoadOutcome::Loaded(disk) => {
                slot.state = persist::merge(*disk, &slot.state, &slot.journal);
                slot.mark_rewrites_reset();
                Ok(())
            }
            LoadOutcome::Missing => Ok(()),
            LoadOutcome::Corrupt { path, reason } => {
                if slot.corrupt.is_none() {
                    tracing::warn!(
                        "state file {} was changed by another process and is now corrupt ({reason}); it will be set aside, not overwritten",
                        path.display()
                    );
                }
                // The file is no version to build on (as at load): the next save reads it
                // again, and sets it aside.
                slot.stamp = None;
                slot.corrupt = Some(path);
                slot.mark_changed();
                Ok(())
            }
        }
    }

    /// Looks at the messages about to be sent for session `id`: loads its state on first
    /// sight, merges in another process's changes, and handles a compaction newer than the
    /// last one handled.
    pub fn observe(&mut self, id: &str, messages: &[Message]) -> Result<Observation, StateError> {
        self.observe_newest(id, newest_compaction(messages))
    }

    /// [`SessionStore::observe`], given the `time.created` of the newest compaction summary in the
    /// messages (0 if there is none).
    pub fn observe_newest(&mut self, id: &str, newest: i64) -> Result<Observation, StateError> {
        let first_seen = !self.slots.contains_key(id);
        self.refresh(id)?;
        let slot = self.slot(id)?;
        let mut seen = Observation { first_seen, compacted: false };
        let foreign = !slot.state.raw.contains_key("dcp");
        if first_seen && foreign && slot.state.last_compaction == 0 {
            // A file dcp did not write does not say which compaction it has seen: take the
            // newest one as the baseline, as DCP does, rather than clear a valid prune list.
            slot.state.last_compaction = newest;
            return Ok(seen);
        }
        if newest > slot.state.last_compaction {
            slot.state.clear_after_compaction(newest);
            slot.tokens.clear();
            slot.mark_changed();
            slot.mark_rewrites_reset();
            seen.compacted = true;
        }
        Ok(seen)
    }

    /// Hands out session `id`'s state for saving: a copy and the journal since the last job.
    pub fn save_job(&mut self, id: &str) -> Result<SaveJob, StateError> {
        let dir = self.dir.clone();
        let mailbox = self.mailbox.clone();
        let slot = self.slot(id)?;
        slot.state.fold_counter();
        slot.dirty = false;
        slot.saved_ledger = slot.state.ledger;
        slot.saved_requests = slot.state.savings.requests;
        slot.corrupt = None;
        slot.handed += 1;
        Ok(SaveJob {
            dir,
            session_id: id.to_string(),
            state: slot.state.clone(),
            journal: std::mem::take(&mut slot.journal),
            base: slot.stamp,
            seq: slot.handed,
            mailbox,
        })
    }

    /// Saves session `id` now, on this thread, and takes in the outcome. Returns where a
    /// corrupt file was set aside.
    pub fn save_now(&mut self, id: &str) -> Result<Option<PathBuf>, StateError> {
        let job = self.save_job(id)?;
        match job.run() {
            Ok(aside) => {
                self.refresh(id)?;
                Ok(aside)
            }
            Err(e) => {
                // Nothing was written: the journal goes back, for the next save.
                let slot = self.slot(id)?;
                let mut journal = job.journal;
                journal.append(&mut slot.journal);
                slot.journal = journal;
                slot.absorbed = slot.handed;
                slot.mark_changed();
                Err(e)
            }
        }
    }

    /// The ids of sessions with anything a save would write ([`Slot::unsaved`]).
    pub fn dirty(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.slots.iter().filter(|(_, s)| s.unsaved()).map(|(k, _)| k.clone()).collect();
        ids.sort();
        ids
    }
}
