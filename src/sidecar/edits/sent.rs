//! What the plugin holds of a session's edits ([`EditsSent`]): a part of the live session
//! (`crate::sidecar::live`) that only [`super`] changes, as it answers a request.

use rustc_hash::FxHashSet as HashSet;

use crate::state::store::ChangesMark;
use crate::texts::restore::Via;

/// What the plugin holds of a session's edits: the number of the last answer whose edits
/// it may keep, what they were computed from, and the calls they cover.
#[derive(Debug, Default)]
pub(in crate::sidecar) struct EditsSent {
    pub(super) seq: u64,
    pub(super) basis: Option<EditsBasis>,
    pub(super) calls: HashSet<String>,
    /// Where the slot's changes ([`crate::state::store::Slot::changes`]) were when they were
    /// computed: what came after is what may add edits.
    pub(super) changes: ChangesMark,
    /// The messages whose id tags were sent (see `super::ranges`).
    pub(super) tags: usize,
}

/// What a set of edits was computed from: the slot's revision and resets, the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EditsBasis {
    pub(super) revision: u64,
    pub(super) resets: u64,
    pub(super) messages: usize,
    /// How the placeholders said to restore: another way rewrites them all.
    pub(super) via: Option<Via>,
}

/// How a plugin takes an answer when OpenCode sent again messages its edits point at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::sidecar) enum ResentEdits {
    /// It keeps its edits of the messages before them (`keepEditsBefore`, protocol 2).
    #[default]
    KeepBefore,
    /// It knows only whole and added answers (protocol 1), so it is sent its edits whole.
    Whole,
}
