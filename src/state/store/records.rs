//! What a session's [`Slot`] records besides its prunes and ranges, each noted for the next
//! save: its arm of the control group, the misses seen live, the usage its provider reported
//! and the models its client named, and an unreadable state file to set aside. Some ride
//! along with the next save with no change to note, as the policy's ledger does: the
//! session's name, the prompts the trial counts, the agent-facing ids handed out, and the
//! figures of what reached the model ([`Slot::savings_mut`]).

use super::Slot;
use crate::state::savings::{Model, Savings, Usage};
use crate::state::trial::Trial;

impl Slot {
    /// Names the session `title` when it has no name yet.
    pub fn name_if_unnamed(&mut self, title: Option<&str>) {
        if self.state.session_name.is_none() {
            self.state.session_name = title.map(str::to_string);
        }
    }

    /// Notes that the history has `prompts` user prompts, for the trial's requests per
    /// prompt; nothing outside the trial.
    pub fn note_prompts(&mut self, prompts: u64) {
        if let Some(trial) = self.state.trial.as_mut() {
            trial.prompts = trial.prompts.max(prompts);
        }
    }

    /// The agent-facing id of `call_id`, handed out now if it has none (see
    /// [`crate::state::SessionState::id_for`]).
    pub fn id_for(&mut self, call_id: &str) -> u32 {
        self.state.id_for(call_id)
    }

    /// The figures of what reached the model, to count a request in: they ride along with
    /// the next save, as [`Slot::unsaved`] says, with no change to note.
    pub fn savings_mut(&mut self) -> &mut Savings {
        &mut self.state.savings
    }

    /// Puts the session in the control group's `trial`, once: a session already in it keeps
    /// its arm. Whether it joined now.
    pub fn join_trial(&mut self, trial: Trial) -> bool {
        if self.state.trial.is_some() {
            return false;
        }
        self.state.trial = Some(trial);
        self.mark_changed();
        true
    }

    /// Counts a restore of what the model is sent hidden (see `crate::state::misses`).
    pub fn count_restore(&mut self) {
        self.state.misses.restores = self.state.misses.restores.saturating_add(1);
        self.mark_changed();
    }

    /// Counts `found` re-fetches of what the model was sent hidden.
    pub fn count_refetches(&mut self, found: u64) {
        self.state.misses.refetches = self.state.misses.refetches.saturating_add(found);
        if found > 0 {
            self.mark_changed();
        }
    }

    /// Records what the provider reported for the request made at `created` (ms), or for
    /// the session's last request without it (see `crate::state::savings::Savings::report`).
    /// Whether it was recorded.
    pub fn report_usage(&mut self, created: Option<i64>, usage: Usage, model: Option<&Model>) -> bool {
        let savings = &mut self.state.savings;
        let request = match created {
            Some(created) => savings.request_at(created),
            None => Some(savings.requests),
        };
        let reported = request.is_some_and(|r| savings.report(r, usage, model));
        if reported {
            self.mark_changed();
        }
        reported
    }

    /// Keeps `model`, which the client named, so that a later process prices the session's
    /// first request by it (see `crate::state::savings::Savings::remember`).
    pub fn remember_model(&mut self, model: &Model) {
        if self.state.savings.remember(model) {
            self.mark_changed();
        }
    }

    /// A request found the state file unreadable ([`Slot::corrupt`]): the save it brings sets
    /// the file aside.
    pub fn set_aside_due(&mut self) {
        if self.corrupt.is_some() {
            self.mark_changed();
        }
    }
}
