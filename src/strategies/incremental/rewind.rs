//! Going back one message: what lets the index re-read the last message it read when that
//! message changed, instead of reading the whole history again.
//!
//! OpenCode changes the newest message of a history between two requests (an assistant
//! message gains its tool results, its finish and its tokens), so the index is told nearly on
//! every request that the last message it read changed. Before it reads the last message of a
//! history, the index takes an [`IndexMark`]: its counts, the signals' state and the working files,
//! which are small; while it reads that message it journals what it overwrites in its maps
//! ([`Undo`]). Going back is then the journal undone in reverse, the calls of the message cut
//! off and the mark restored, in proportion to the message, not to the history. A change
//! further back, or one that the requests' own bookkeeping already went past (a masking
//! window that left a call of the message behind), rebuilds the index as before.

use std::cmp::Reverse;
use std::sync::Arc;

use super::{Cursor, Index};
use crate::strategies::{keep, masking, Rules};

/// Where the index stood before it read the last message of the history.
#[derive(Debug)]
pub(super) struct IndexMark {
    /// Messages read before it: the message the mark goes back to.
    messages: usize,
    calls: usize,
    current: u32,
    prompts: u32,
    signals: keep::SignalsMark,
    recent_files: Vec<String>,
}

/// What [`Index::rewind_holds`] checks against: where the index stood before it went back.
#[derive(Debug, Clone, Copy)]
pub(super) struct Before {
    current: u32,
}

/// What reading a call overwrote in one of the index's maps, to put back.
#[derive(Debug)]
pub(super) enum Undo {
    CallId(Arc<str>, Option<usize>),
    Newest(u64, Option<usize>),
    /// A write was added to the path's list of writes no read covers yet.
    Write(String),
    /// A read covered the path's writes.
    Covered(String, Vec<usize>),
    FileView(String, Option<masking::FileView>),
    LastEdit(String, Option<usize>),
    LatestView((Arc<str>, Arc<str>), Option<usize>),
}

impl Index {
    /// How many times the index read again messages it had read because they changed:
    /// rebuilt, or gone back to the last one. What a reader derived from the positions of its
    /// calls may no longer hold.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Forgets what was read, to read the history from its start.
    pub(super) fn start_over(&mut self, resets: u64) {
        let (rebuilds, rewinds) = (self.rebuilds + 1, self.rewinds);
        *self = Index { resets, rebuilds, rewinds, ..Index::default() };
    }

    /// How many of [`Index::rebuilds`] only went back to the last message read.
    pub fn rewinds(&self) -> u64 {
        self.rewinds
    }

    /// Where the latest of [`Index::rewinds`] went back to: the message it read again and the
    /// number of calls before it, which it kept.
    pub fn rewound_to(&self) -> (usize, usize) {
        self.rewound_to
    }

    /// The number of calls read before message `message`.
    pub fn calls_before(&self, message: usize) -> usize {
        self.calls.partition_point(|c| c.message < message)
    }

    /// The ids of the calls of message `message` and those after it.
    pub fn call_ids_from(&self, message: usize) -> Vec<String> {
        let from = self.calls.partition_point(|c| c.message < message);
        self.calls[from..].iter().map(|c| c.facts.call_id.to_string()).collect()
    }

    /// Where call `call_id` is, as [`Index::position`], with the id as the index holds it: a
    /// holder keyed by call id shares it rather than copying the string.
    pub fn shared_position(&self, call_id: &str) -> Option<(&Arc<str>, (usize, usize))> {
        let (shared, &at) = self.by_call_id.get_key_value(call_id)?;
        let call = &self.calls[at];
        Some((shared, (call.message, call.facts.part)))
    }

    /// Takes the mark before message `at`, the last one of the history, is read: what is
    /// journalled from here on undoes reading it.
    pub(super) fn mark_before(&mut self, at: usize) {
        self.journal.clear();
        self.mark = Some(IndexMark {
            messages: at,
            calls: self.calls.len(),
            current: self.current,
            prompts: self.prompts,
            signals: self.signals.mark(),
            recent_files: self.recent_files.clone(),
        });
    }

    /// Journals `undo` while a mark is held.
    pub(super) fn note(&mut self, undo: impl FnOnce() -> Undo) {
        if self.mark.is_some() {
            self.journal.push(undo());
        }
    }

    /// Goes back to before message `kept`, so that it is read again, if it can: it must be
    /// the message the mark was taken before, and no request's bookkeeping may have gone past
    /// one of its calls. Returns where the index stood before, for [`Index::rewind_holds`].
    pub(super) fn rewind(&mut self, kept: usize) -> Option<Before> {
        let cut = self.mark.as_ref().filter(|m| m.messages == kept)?.calls;
        if self.window.start > cut || self.deep.start > cut {
            return None;
        }
        let mark = self.mark.take()?;
        self.rewound_to = (mark.messages, cut);
        let before = Before { current: self.current };
        for undo in std::mem::take(&mut self.journal).into_iter().rev() {
            self.undo(undo);
        }
        let weight: u64 = self.calls[cut..].iter().map(|c| c.weight).sum();
        self.window.kept_weight -= weight;
        self.deep.kept_weight -= weight;
        self.calls.truncate(cut);
        self.pruned.truncate(cut);
        self.waiting.retain(|Reverse(w)| w.3 < cut);
        if self.cursor > cut {
            self.cursor = cut;
            let keep = self.listed.partition_point(|l| l.call < cut);
            if keep < self.listed.len() {
                self.listed.truncate(keep);
                self.text = None;
            }
        }
        self.messages = mark.messages;
        (self.current, self.prompts, self.recent_files) = (mark.current, mark.prompts, mark.recent_files);
        self.signals.rewind(mark.signals);
        Some(before)
    }

    /// Whether what the requests' bookkeeping decided before the index went back still holds
    /// with the message read again, as it does when the history only grows: the calls before
    /// each masking window's start are still beyond it (the newest of them is, so the older
    /// are), and the model step did not go back. When it does not, the index is rebuilt.
    pub(super) fn rewind_holds(&self, before: Before, rules: &Rules) -> bool {
        let beyond = |cursor: Cursor, window| {
            let Some(at) = cursor.start.checked_sub(1) else { return true };
            let call = &self.calls[at];
            let age = masking::Age {
                newer_calls: self.calls.len() - cursor.start,
                newer_prompts: self.prompts - call.prompts,
                newer_tokens: cursor.kept_weight,
                steps: self.current.saturating_sub(call.turn),
            };
            masking::beyond_window(age, rules, window)
        };
        self.current >= before.current
            && beyond(self.window, masking::Window::Kept)
            && beyond(self.deep, masking::Window::OnRewrite)
    }

    fn undo(&mut self, undo: Undo) {
        fn restore<K: std::hash::Hash + Eq, V>(map: &mut rustc_hash::FxHashMap<K, V>, key: K, old: Option<V>) {
            match old {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        match undo {
            Undo::CallId(id, old) => restore(&mut self.by_call_id, id, old),
            Undo::Newest(sig, old) => restore(&mut self.newest, sig, old),
            Undo::Write(path) => {
                let writes = self.writes.get_mut(&path).map(|w| (w.pop(), w.is_empty()));
                if let Some((_, true)) = writes {
                    self.writes.remove(&path);
                }
            }
            Undo::Covered(path, writes) => restore(&mut self.writes, path, Some(writes)),
            Undo::FileView(path, old) => restore(&mut self.file_views, path, old),
            Undo::LastEdit(path, old) => restore(&mut self.last_edit, path, old),
            Undo::LatestView(key, old) => restore(&mut self.latest_view, key, old),
        }
    }
}
