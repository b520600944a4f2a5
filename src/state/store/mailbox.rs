//! The mailbox between the writer task and the store: the outcome of each finished save, by
//! session, which the store takes in before the next request, and what each session's last
//! save wrote, so a later save of this process does not read its own write as news.
//!
//! It also carries what the person using a session is told of its saves ([`SaveNews`]): the
//! first failure of a run of failed saves (an episode, which a successful save ends), once,
//! and, when they were told, that a later save succeeded. A save retried every few seconds
//! against a state dir that cannot be written is told once, not on every request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::state::persist::{Stamp, Synced, Written};
use crate::state::SessionState;

/// Outcomes of finished saves, by session id, waiting for the store to take them in. The
/// writer task posts to it; the store reads it before the next request.
#[derive(Debug, Default, Clone)]
pub struct Mailbox(Arc<Mutex<Boxes>>);

#[derive(Debug, Default)]
struct Boxes {
    posted: HashMap<String, Posted>,
    /// The job number and what it wrote, of each session's last write, kept after the
    /// outcome is taken in.
    written: HashMap<String, (u64, Written)>,
    /// The sessions whose saves fail: the last failure's error, and whether it was told.
    failing: HashMap<String, Failing>,
    /// The sessions told their saves fail whose save then succeeded, until that is told.
    saved_again: HashSet<String>,
}

#[derive(Debug)]
struct Failing {
    error: String,
    told: bool,
}

/// What the person using a session is to be told of its saves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaveNews {
    /// Its saves fail: the error, naming what failed, the path and the cause.
    Failing(String),
    /// A save succeeded after they were told that its saves fail.
    SavedAgain,
}

#[derive(Debug)]
pub(super) struct Posted {
    seq: u64,
    pub(super) stamp: Option<Stamp>,
    /// The merged state, kept when a save took in another process's changes.
    pub(super) merged: Option<SessionState>,
}

impl Mailbox {
    pub(super) fn post(&self, id: &str, seq: u64, synced: Synced) {
        let Ok(mut boxes) = self.0.lock() else {
            return;
        };
        // A later job may take this write for its own only if it wrote nothing but this
        // process's state. One that merged another process's changes is news to a job
        // handed out before it was taken in: that job must read it, or it would overwrite them.
        match synced.written {
            Some(written) if !synced.foreign => {
                boxes.written.insert(id.to_string(), (seq, written));
            }
            _ => {
                boxes.written.remove(id);
            }
        }
        if boxes.failing.remove(id).is_some_and(|f| f.told) {
            boxes.saved_again.insert(id.to_string());
        }
        let entry = boxes.posted.entry(id.to_string()).or_insert(Posted { seq, stamp: None, merged: None });
        // A later save after a merge read the file that merge wrote (see above), so it has
        // those changes too, and its own merge replaces the earlier one.
        entry.seq = seq;
        entry.stamp = synced.stamp;
        entry.merged = synced.merged;
    }

    /// Notes that a save of session `id` failed with `error`. A failure while the episode's
    /// first is told or waiting to be is no news.
    pub(super) fn post_failure(&self, id: &str, error: String) {
        let Ok(mut boxes) = self.0.lock() else {
            return;
        };
        boxes.saved_again.remove(id);
        boxes
            .failing
            .entry(id.to_string())
            .and_modify(|f| f.error.clone_from(&error))
            .or_insert(Failing { error, told: false });
    }

    /// What session `id` is to be told of its saves and has not been, noted as told.
    pub(super) fn news(&self, id: &str) -> Option<SaveNews> {
        let mut boxes = self.0.lock().ok()?;
        if let Some(failing) = boxes.failing.get_mut(id) {
            return (!failing.told).then(|| {
                failing.told = true;
                SaveNews::Failing(failing.error.clone())
            });
        }
        boxes.saved_again.remove(id).then_some(SaveNews::SavedAgain)
    }

    pub(super) fn take(&self, id: &str, seq: u64) -> Option<Posted> {
        let mut boxes = self.0.lock().ok()?;
        if boxes.posted.get(id).is_some_and(|p| p.seq == seq) {
            return boxes.posted.remove(id);
        }
        None
    }

    /// What session `id`'s last save wrote, if that save came before job number `seq`.
    pub(super) fn written(&self, id: &str, seq: u64) -> Option<Written> {
        let boxes = self.0.lock().ok()?;
        boxes.written.get(id).filter(|(s, _)| *s < seq).map(|(_, written)| *written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved() -> Synced {
        Synced { merged: None, stamp: None, foreign: false, aside: None, written: None, skipped: false }
    }

    #[test]
    fn a_run_of_failed_saves_is_news_once_and_the_save_that_ends_it_once_if_the_failure_was_told() {
        let mailbox = Mailbox::default();
        mailbox.post_failure("ses_a", "cannot create state dir X: X is not a directory".into());
        mailbox.post_failure("ses_a", "cannot create state dir X: X is not a directory".into());
        assert_eq!(
            mailbox.news("ses_a"),
            Some(SaveNews::Failing("cannot create state dir X: X is not a directory".into()))
        );
        mailbox.post_failure("ses_a", "cannot write state file X/ses_a.json: the disk is full".into());
        assert_eq!(mailbox.news("ses_a"), None, "the same run of failures");
        mailbox.post("ses_a", 1, saved());
        assert_eq!(mailbox.news("ses_a"), Some(SaveNews::SavedAgain));
        assert_eq!(mailbox.news("ses_a"), None);

        // Failed and saved again before anything was told: nothing to tell.
        mailbox.post_failure("ses_b", "cannot write state file Y: the disk is full".into());
        mailbox.post("ses_b", 1, saved());
        assert_eq!(mailbox.news("ses_b"), None);
    }
}
