//! The index's masking candidates: the calls beyond masking's window that wait for the policy
//! to say a rewrite pays, and those a rewrite that goes anyway takes along.
//!
//! The waiting candidates are checked against the state's prunes on every request, as the
//! policy or another strategy may have pruned one since. A prune is recorded only through the
//! slot, which notes it among its changes (`crate::state::store::Slot::changes`) and drops
//! prunes only with a reset; so while the slot's changes mark and the number of prunes stand
//! where they stood at the last check, nothing the candidates hold was pruned since, and the
//! check is skipped. A candidate joins the list already checked, and a rebuilt index starts
//! with no list and no mark; going back to the last message keeps both, since the candidates
//! are calls before it.

use super::{view, Cursor, Index, MaskCandidate};
use crate::session::Message;
use crate::state::store::ChangesMark;
use crate::state::SessionState;
use crate::strategies::{masking, Rules};
use crate::tokens::TokenCounter;

#[cfg(doc)]
use crate::state::store::Slot;

impl Index {
    /// The calls masking would take now, oldest first: those that left the window since the
    /// last request join the ones still waiting, and those pruned since (by the policy or
    /// another strategy) leave.
    ///
    /// `seen` is where the slot's changes of its prunes stand ([`Slot::changes_mark`]), when
    /// the state is a slot's: while it and the number of prunes are what they were at the
    /// last check, no prune was recorded since, and the waiting candidates are not looked up
    /// again. `None` checks every one.
    pub fn mask_candidates(
        &mut self,
        messages: &[Message],
        state: &SessionState,
        seen: Option<ChangesMark>,
        rules: &Rules,
        counter: &mut TokenCounter,
    ) -> &[MaskCandidate] {
        self.advance_window(rules);
        while self.mask_cursor < self.window.start {
            let at = self.mask_cursor;
            self.mask_cursor += 1;
            let Some(view) = view(&self.calls, messages, at) else { continue };
            if state.pruned.contains_key(view.call_id) {
                continue;
            }
            if let Some(d) = masking::prune(&view, rules, counter) {
                self.masking.push(MaskCandidate::of(at, &d));
            }
        }
        let checked = seen.map(|mark| (mark, state.pruned.len()));
        if checked.is_none() || checked != self.masks_checked {
            let calls = &self.calls;
            self.masking.retain(|c| !state.pruned.contains_key(&*calls[c.call].facts.call_id));
            self.masks_checked = checked;
        }
        let ready: Vec<MaskCandidate> = self.masking.iter().filter(|c| !self.working(c.call, rules)).copied().collect();
        self.ready = ready;
        &self.ready
    }

    /// The calls a rewrite that goes anyway also masks, oldest first: inside masking's window
    /// but beyond the narrower one ([`masking::Window::OnRewrite`]), open, and longer than their
    /// placeholder. The volatile ones among them ([`masking::volatile`]) may start a rewrite.
    pub fn mask_riders(
        &mut self,
        messages: &[Message],
        state: &SessionState,
        rules: &Rules,
        counter: &mut TokenCounter,
    ) -> Vec<MaskCandidate> {
        self.advance_window(rules);
        let mut riders = Vec::new();
        self.pruned.resize(self.calls.len(), false);
        for at in self.window.start..self.deep.start {
            if self.pruned[at] {
                continue;
            }
            let Some(view) = view(&self.calls, messages, at) else { continue };
            if state.pruned.contains_key(view.call_id) {
                self.pruned[at] = true;
                continue;
            }
            if self.working(at, rules) {
                continue;
            }
            let decided = *self
                .riders
                .entry(at)
                .or_insert_with(|| masking::prune(&view, rules, counter).map(|d| MaskCandidate::of(at, &d)));
            if let Some(c) = decided {
                let volatile = !c.inputs && masking::volatile(&self.calls[at].facts.tool, self.superseded(at));
                riders.push(MaskCandidate { volatile, ..c });
            }
        }
        riders
    }

    /// Moves the start of both masking windows past the calls that left them.
    pub(super) fn advance_window(&mut self, rules: &Rules) {
        self.window = self.advance(self.window, rules, masking::Window::Kept);
        self.deep = self.advance(self.deep.max_start(self.window), rules, masking::Window::OnRewrite);
    }

    /// `cursor` moved past the calls that left `window`.
    fn advance(&self, mut cursor: Cursor, rules: &Rules, window: masking::Window) -> Cursor {
        while cursor.start < self.calls.len() {
            let call = &self.calls[cursor.start];
            let age = masking::Age {
                newer_calls: self.calls.len() - 1 - cursor.start,
                newer_prompts: self.prompts - call.prompts,
                newer_tokens: cursor.kept_weight - call.weight,
                steps: self.current.saturating_sub(call.turn),
            };
            if !masking::beyond_window(age, rules, window) {
                break;
            }
            cursor.kept_weight -= call.weight;
            cursor.start += 1;
        }
        cursor
    }

    /// The call id and tool of a masking candidate, and where it is: its message and part.
    pub fn candidate(&self, c: &MaskCandidate) -> (&str, &str, (usize, usize)) {
        let call = &self.calls[c.call];
        (&call.facts.call_id, &call.facts.tool, (call.message, call.facts.part))
    }

    /// Whether candidate `c`'s call was made since the latest user prompt: in the current turn.
    pub fn in_current_turn(&self, c: &MaskCandidate) -> bool {
        self.calls[c.call].prompts == self.prompts
    }
}
