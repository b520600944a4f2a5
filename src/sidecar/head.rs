//! `system` and `turn`: what dcp adds in front of a session's prompt, and from when.
//!
//! dcp's head is its instructions (added to the system prompt) and its agent tools'
//! definitions. Both sit before the whole history, so adding them to a session re-bills its
//! cached prompt, and once there they cost a cached read on every request. With
//! `tools.settings.offer = "paid"` a session is offered them only from the first user turn on
//! a cold cache at which its ledger has banked that cost (`crate::policy::offer`); until then its requests
//! carry neither the head, nor the `<prunable-tools>` list, nor the message id tags. OpenCode
//! decides a turn's tools when its user message is created: the plugin asks `turn` then, and
//! sets the message's `tools` map to leave dcp's out.

use super::protocol::{RpcError, SessionParams, System, TurnAnswer, TurnParams};
use super::{now_ms, validate_session_id, LiveSession, Server};
use crate::config::Offer;
use crate::policy;
use crate::state::Ledger;
use crate::strategies::Rules;
use crate::texts;
use crate::tokens::TokenCounter;

/// Whether `session`'s requests carry dcp's head now.
pub(super) fn offered(rules: &Rules, session: &LiveSession) -> bool {
    let tools = &rules.config().tools;
    let any = tools.discard.enabled || tools.extract.enabled || tools.compress.enabled;
    any && (tools.settings.offer == Offer::Always || session.ledger.offered)
}

impl Server {
    pub(super) fn system(&mut self, p: SessionParams) -> System {
        let offered = match p.session_id.as_deref() {
            Some(sid) => self.with_session(sid, |server, session| {
                server.look_up_session(session, sid);
                server.resume_ledger(session, sid);
                !server.skips(Some(session)) && offered(&server.rules, session)
            }),
            // No session to judge by: as before there were sessions without the head.
            None => offered(
                &self.rules,
                &LiveSession { ledger: Ledger { offered: true, ..Ledger::default() }, ..LiveSession::default() },
            ),
        };
        if !self.rules.config().enabled || !offered {
            return System { system: Vec::new() };
        }
        System { system: vec![texts::system(&self.rules.config().tools)] }
    }

    /// A user turn starts: whether its requests carry dcp's head. A session not offered it
    /// yet gets it when the policy says its ledger has paid for it; the charge is taken from
    /// the bank and the decision kept in the state file.
    pub(super) fn turn(&mut self, p: TurnParams) -> Result<TurnAnswer, RpcError> {
        let sid = p.session_id.clone();
        validate_session_id(&sid)?;
        let offer = self.with_session(&sid, |server, session| {
            if let Some(parent) = p.parent_id {
                session.parent = Some(parent.is_some());
            }
            // No look-up in `opencode.db` here: the session is being titled as its first
            // message is created, and the state file keeps the title the first look-up finds.
            if server.skips(Some(session)) {
                return false;
            }
            server.resume_ledger(session, &sid);
            if offered(&server.rules, session) {
                return true;
            }
            let tools = &server.rules.config().tools;
            if !(tools.discard.enabled || tools.extract.enabled || tools.compress.enabled) {
                return false;
            }
            server.offer_when_paid(session, &sid, p.now.unwrap_or_else(now_ms))
        });
        Ok(TurnAnswer { offer })
    }

    fn offer_when_paid(&mut self, session: &mut LiveSession, sid: &str, now: i64) -> bool {
        let rewrite = &self.rules.config().rewrite;
        let idle = session.ledger.last_request.map(|t| (now.saturating_sub(t) / 1000).max(0) as u64);
        let Ok(slot) = self.store.slot(sid) else { return false };
        let turn = policy::Turn {
            head: tokens(&mut self.head, &self.rules, &slot.tokens),
            cold: idle.is_none_or(|s| s >= rewrite.cold_cache_seconds),
            banked: session.ledger.banked,
        };
        if !policy::offer(rewrite, &turn) {
            return false;
        }
        tracing::debug!(session = sid, banked = session.ledger.banked, "offering the agent tools from this turn on");
        session.ledger.banked -= policy::offer_charge(&turn);
        session.ledger.offered = true;
        slot.state.ledger = session.ledger;
        slot.mark_changed();
        self.save(session, sid);
        true
    }
}

/// Tokens of dcp's head: its instructions and its tools' definitions (descriptions, and about
/// 60 tokens of argument schema each, as `dcp replay` counts them). Counted once.
pub(super) fn tokens(head: &mut Option<u64>, rules: &Rules, counter: &TokenCounter) -> u64 {
    const SCHEMA: u64 = 60;
    let tools = &rules.config().tools;
    *head.get_or_insert_with(|| {
        let described = [
            (tools.discard.enabled, texts::DISCARD_DESCRIPTION),
            (tools.extract.enabled, texts::EXTRACT_DESCRIPTION),
            (tools.compress.enabled, texts::COMPRESS_DESCRIPTION),
        ];
        let mut n = 0;
        for (_, description) in described.iter().filter(|(on, _)| *on) {
            n += counter.count(description) + SCHEMA;
        }
        if n > 0 {
            n += counter.count(&texts::system(tools));
        }
        n
    })
}
