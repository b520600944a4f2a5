//! The control group (`holdout`, see `crate::state::trial`): which arm a session is in, drawn
//! at its start and kept in its state file, and the answer dcp gives a session of the
//! unpruned arm: the history unchanged, no tools, no list, its request still counted by the
//! meter, so that `dcp report` can set the two arms side by side.

use super::edits::answer_edits;
use super::protocol::Transformed;
use super::request::RequestContext;
use super::{LiveSession, Server};
use crate::session::Role;
use crate::state::trial::{self, Arm, Trial};

impl Server {
    /// The arm of session `sid`, drawn now when it starts (no request answered yet) while
    /// `holdout` is above 0, else as its state file recorded it; `None` outside the trial.
    /// Looked up once per process.
    pub(super) fn arm(&mut self, session: &mut LiveSession, sid: &str) -> Option<Arm> {
        if let Some(arm) = session.about.arm {
            return arm;
        }
        let holdout = self.rules.config().holdout;
        let Ok(slot) = self.store.slot(sid) else { return None };
        if slot.state().trial.is_none() && holdout > 0.0 && slot.state().savings.requests == 0 {
            let arm = Arm::drawn(holdout, trial::draw());
            tracing::debug!(session = sid, arm = arm.key(), "control group: arm drawn");
            slot.join_trial(Trial { arm, prompts: 0 });
        }
        let arm = slot.state().trial.map(|t| t.arm);
        session.about.arm = Some(arm);
        arm
    }
}

/// Notes the user prompts the history has, for the comparison's requests per prompt.
pub(super) fn note_prompts(cx: &mut RequestContext) {
    if cx.slot.state().trial.is_none() {
        return;
    }
    let prompts = cx.mirror.messages().iter().filter(|m| m.role() == Role::User).count() as u64;
    cx.slot.note_prompts(prompts);
}

/// The answer to a request of the unpruned arm: what the plugin holds of the edits (none,
/// unless the person swept by hand), nothing added.
pub(super) fn answer(cx: &mut RequestContext) -> Transformed {
    cx.slot.name_if_unnamed(cx.session.about.title.as_deref());
    let (seq, edits) = answer_edits(cx, None);
    Transformed { seq: Some(seq), edits, replace: Vec::new(), append: Vec::new(), notify: None, applied: None }
}
