//! One `transform` request of one session, as the functions that answer it see it: the
//! session's live state, its state file's slot, the mirror of its history, the rules, and
//! the request's facts (when it came, whether the provider's cache is cold, the model's
//! window). [`Server::request_context`] gathers them once per request; the per-request
//! functions of `transform`, `masking_candidates` and `savings` take the one
//! [`RequestContext`] instead of six or seven arguments.

use super::head;
use super::in_force::Views;
use super::mirror::Mirror;
use super::{in_force, LiveSession, Server};
use crate::state::persist::StateError;
use crate::state::store::Slot;
use crate::strategies::Rules;
use crate::texts::restore::Via;

/// What a transform knows about the request besides the history.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestFacts {
    /// The number of the last answer whose edits the plugin holds.
    pub have: Option<u64>,
    /// Requests since the cache was last cold, this one included.
    pub warm: u32,
    /// The gap since the session's last request, if dcp saw one.
    pub idle_seconds: Option<u64>,
    /// The model's context window, if the plugin knows it.
    pub context_limit: Option<u64>,
    /// Whether the provider's cache holds nothing of the session: its first request dcp knows
    /// of, or one after an idle gap past `rewrite.coldCacheSeconds`.
    pub cold_start: bool,
    /// Whether an idle gap since a request dcp saw let the cache go cold (the first request
    /// has no gap, so it is not one).
    pub gap_went_cold: bool,
    /// The session's cache prices, and the idle seconds after which its cache is cold (its
    /// price sheet's TTL unless `rewrite.coldCacheSeconds` is set).
    pub rates: crate::prices::Rates,
    pub cold_after: u64,
}

impl RequestFacts {
    /// What the policy weighs of this request before the session's balances: its warm run,
    /// idle gap, window and prices.
    pub fn inputs(&self) -> crate::policy::Inputs {
        let (warm, idle_seconds, context_limit) = (self.warm, self.idle_seconds, self.context_limit);
        let (rates, cold_after) = (self.rates, self.cold_after);
        crate::policy::Inputs { warm, idle_seconds, context_limit, rates, cold_after, ..Default::default() }
    }

    /// The request's balance before what dcp did on it: whether the cache went cold, and the
    /// prices.
    pub fn request(&self) -> crate::policy::Charges {
        crate::policy::Charges { cold: self.gap_went_cold, rates: self.rates, ..Default::default() }
    }

    /// The facts of a request made `idle_seconds` after the session's last one.
    pub fn new(rules: &Rules, sheet: &crate::prices::Sheet, idle_seconds: Option<u64>) -> RequestFacts {
        let cold_after = rules.config().rewrite.cold_after(sheet);
        RequestFacts {
            rates: sheet.rates,
            cold_after,
            have: None,
            warm: 0,
            idle_seconds,
            context_limit: None,
            cold_start: idle_seconds.is_none_or(|s| s >= cold_after),
            gap_went_cold: idle_seconds.is_some_and(|s| s >= cold_after),
        }
    }
}

/// Everything answering one request of one session needs.
pub(super) struct RequestContext<'a> {
    pub rules: &'a Rules,
    /// The project dir, for the paths the prunable list shortens.
    pub project: Option<&'a str>,
    pub sid: &'a str,
    pub session: &'a mut LiveSession,
    pub slot: &'a mut Slot,
    pub mirror: &'a Mirror,
    pub facts: RequestFacts,
    /// How the session's view of its prunes is brought up to date.
    pub views: Views,
    /// How the agent restores what dcp hid, as the placeholders say it (none: they say nothing).
    pub restore: Option<Via>,
    /// Tokens of dcp's head, once counted (the server's, shared by its sessions).
    head: &'a mut Option<u64>,
}

impl RequestContext<'_> {
    /// Whether the session's requests carry dcp's head now.
    pub fn offered(&self) -> bool {
        head::offered(self.rules, self.session, Some(self.slot.ledger()))
    }

    /// Tokens of dcp's head, whether or not this session is offered it.
    pub fn head_tokens(&mut self) -> u64 {
        head::tokens(self.head, self.rules, &self.slot.tokens)
    }
}

impl Server {
    /// The context of a request of session `sid`, its state loaded if it was not yet.
    pub(super) fn request_context<'a>(
        &'a mut self,
        session: &'a mut LiveSession,
        sid: &'a str,
        mirror: &'a Mirror,
        facts: RequestFacts,
    ) -> Result<RequestContext<'a>, StateError> {
        let ledger = *self.store.slot(sid)?.ledger();
        let restore = self.restore_via(session, Some(&ledger));
        let slot = self.store.slot(sid)?;
        let rules = match session.about.backoff {
            0 => &self.rules,
            n => self.backed_off.get(n as usize - 1).unwrap_or(&self.rules),
        };
        Ok(RequestContext {
            rules,
            project: self.options.project.as_ref().and_then(|p| p.to_str()),
            sid,
            session,
            slot,
            mirror,
            facts,
            views: self.views,
            restore,
            head: &mut self.head,
        })
    }

    /// Sets how far `session` backs off for the misses its state counts; a new step
    /// judges its calls afresh by the wider windows.
    pub(super) fn back_off(&mut self, session: &mut LiveSession, sid: &str) {
        let Ok(slot) = self.store.slot(sid) else { return };
        let level = if self.backed_off.is_empty() {
            0
        } else {
            crate::policy::backoff_level(slot.state.misses.refetches, slot.state.misses.restores)
        };
        if level != session.about.backoff {
            tracing::debug!(session = sid, level, misses = slot.state.misses.total(), "backing off");
            session.about.backoff = level;
            session.history.index = crate::strategies::incremental::Index::default();
            session.caches.in_force = in_force::InForce::default();
        }
    }
}
