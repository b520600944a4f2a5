//! A slot's changes: the call ids whose prune was recorded or put in force since its prunes
//! were last reset, which a view of the prunes kept across requests reads past
//! ([`Slot::changes`], [`Slot::changes_since`]).

use super::Slot;

/// Where a reader of a slot's changes ([`Slot::changes`]) got to: the slot's resets and the
/// number of changes then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangesMark {
    resets: u64,
    len: usize,
}

impl Slot {
    /// The call ids whose prune was recorded or put in force since the last reset, oldest
    /// first: a view of the prunes kept across requests reads past what it read. Every change
    /// to `state.pruned` but a reset goes through [`Slot::record`] and [`Slot::apply`].
    pub fn changes(&self) -> &[String] {
        &self.changes
    }

    /// Where a reader of the changes is now: what [`Slot::changes_since`] reads past.
    pub fn changes_mark(&self) -> ChangesMark {
        ChangesMark { resets: self.resets, len: self.changes.len() }
    }

    /// The changes since `mark`, oldest first; `None` when the prunes were reset since (then
    /// every prune must be read again).
    pub fn changes_since(&self, mark: ChangesMark) -> Option<&[String]> {
        (mark.resets == self.resets).then(|| self.changes.get(mark.len..)).flatten()
    }
}
