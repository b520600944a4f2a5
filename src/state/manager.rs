//! The session-state manager: one state per session id, loaded on first sight, cleared on
//! compaction.
//!
//! Many sessions are live at once in one OpenCode process (the main agent and its
//! subagents, several tabs), so there is no single global state: the manager keeps a
//! [`Slot`] per session id. When a newer compaction summary (an assistant message with
//! `summary: true`) appears, the session's prune list and token cache are cleared, its stats
//! are kept, and it is due to be saved. A corrupt state file is reported once by name; the
//! session starts afresh, and the file is set aside when the state is first saved.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::persist::{self, LoadOutcome, StateError};
use super::SessionState;
use crate::session::Message;
use crate::tokens::{EstimatorChoice, TokenCounter};

/// One live session.
#[derive(Debug)]
pub struct Slot {
    pub state: SessionState,
    pub tokens: TokenCounter,
    /// The unreadable state file found at load, still to be set aside.
    pub corrupt: Option<PathBuf>,
    /// Whether the state changed since it was last handed out for saving.
    pub dirty: bool,
}

/// What [`Manager::observe`] noticed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    /// The session was new to this manager.
    pub first_seen: bool,
    /// A newer compaction appeared; the prune list was cleared.
    pub compacted: bool,
}

/// A save to perform: the bytes of a state file and where they go.
#[derive(Debug, Clone)]
pub struct SaveJob {
    pub dir: PathBuf,
    pub session_id: String,
    pub bytes: Vec<u8>,
    /// Set the existing file aside before writing: it was corrupt.
    pub set_aside: bool,
}

impl SaveJob {
    /// Performs the save synchronously.
    pub fn run(&self) -> Result<Option<PathBuf>, StateError> {
        let path = persist::state_path(&self.dir, &self.session_id)?;
        let mut aside = None;
        if self.set_aside && path.exists() {
            aside = Some(persist::set_aside(&path)?);
        }
        persist::write_atomic(&path, &self.bytes).map_err(|source| StateError::Write { path, source })?;
        Ok(aside)
    }
}

/// Keeps the state of every session seen, backed by the files of one state dir.
#[derive(Debug)]
pub struct Manager {
    dir: PathBuf,
    estimator: EstimatorChoice,
    slots: HashMap<String, Slot>,
}

/// The `time.created` of the newest compaction summary in `messages`, or 0.
pub fn newest_compaction(messages: &[Message]) -> i64 {
    messages.iter().filter(|m| m.is_compaction_summary()).map(Message::time_created).max().unwrap_or(0)
}

impl Manager {
    pub fn new(dir: &Path, estimator: EstimatorChoice) -> Manager {
        Manager { dir: dir.to_path_buf(), estimator, slots: HashMap::new() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slot of session `id`, loading its state file the first time. The bool says
    /// whether it was loaded just now.
    pub fn slot(&mut self, id: &str) -> Result<(&mut Slot, bool), StateError> {
        persist::validate_session_id(id)?;
        let first = !self.slots.contains_key(id);
        if first {
            let (state, corrupt) = match persist::load(&self.dir, id)? {
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
            let slot = Slot { state, tokens: TokenCounter::new(self.estimator), corrupt, dirty: false };
            self.slots.insert(id.to_string(), slot);
        }
        Ok((self.slots.get_mut(id).expect("inserted above"), first))
    }

    /// Looks at the messages about to be sent for session `id`: loads its state on first
    /// sight and handles a compaction newer than the last one handled.
    pub fn observe(&mut self, id: &str, messages: &[Message]) -> Result<Observation, StateError> {
        let newest = newest_compaction(messages);
        let (slot, first_seen) = self.slot(id)?;
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
            slot.dirty = true;
            seen.compacted = true;
        }
        Ok(seen)
    }

    /// Folds the pending counter and renders the session's state for saving. The corrupt
    /// file, if any, is set aside by this job and forgotten.
    pub fn save_job(&mut self, id: &str) -> Result<SaveJob, StateError> {
        let dir = self.dir.clone();
        let (slot, _) = self.slot(id)?;
        slot.state.fold_counter();
        slot.dirty = false;
        let set_aside = slot.corrupt.take().is_some();
        let bytes = persist::render(&slot.state, &persist::now_iso());
        Ok(SaveJob { dir, session_id: id.to_string(), bytes, set_aside })
    }

    /// Saves session `id` now, on this thread.
    pub fn save_now(&mut self, id: &str) -> Result<Option<PathBuf>, StateError> {
        let job = self.save_job(id)?;
        job.run()
    }

    /// The ids of sessions with unsaved changes.
    pub fn dirty(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.slots.iter().filter(|(_, s)| s.dirty).map(|(k, _)| k.clone()).collect();
        ids.sort();
        ids
    }
}
