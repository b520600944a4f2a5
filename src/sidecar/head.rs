//! `system` and `turn`: what dcp adds in front of a session's prompt, and from when.
//!
//! dcp's head is its agent tools' definitions alone, as short as keeps the tools usable
//! ([`crate::texts::tool_definitions`]): what would be instructions in the system prompt is
//! folded into the tools' descriptions, so `system` adds no line. The head sits before the
//! whole history, so adding it to a session whose cache is warm re-bills its cached prompt,
//! and once there it costs a cached read on every request. By default
//! (`tools.settings.offer = "always"`) a session has them from its first request, whose cache
//! is cold anyway. With `"paid"` a session is offered them
//! only from the first user turn on a cold cache at which its ledger has banked that cost
//! (`crate::policy::offer`); until then its requests carry neither the tools, nor the
//! `<prunable-tools>` list, nor the message id tags. OpenCode decides a turn's tools when its
//! user message is created: the plugin asks `turn` then, and sets the message's `tools` map
//! to leave dcp's out.

use super::protocol::{RpcError, SessionParams, System, TurnAnswer, TurnParams};
use super::{now_ms, validate_session_id, LiveSession, Server};
use crate::config::Offer;
use crate::policy;
use crate::strategies::Rules;
use crate::texts;
use crate::tokens::TokenCounter;

/// Whether `session`'s requests carry dcp's head now. `"always"` offers it from the first
/// request only where the head is cheap to carry (`crate::policy::head_is_cheap`: a cache
/// reads it); without a cache it is offered as `"paid"` is.
pub(super) fn offered(rules: &Rules, session: &LiveSession) -> bool {
    let tools = &rules.config().tools;
    let any = tools.discard.enabled || tools.extract.enabled || tools.compress.enabled;
    let always = tools.settings.offer == Offer::Always && policy::head_is_cheap(session.priced_by(rules).rates);
    any && (always || session.ledger.offered)
}

impl Server {
    /// A request's system prompt is being built. dcp adds no line to it (the tools'
    /// descriptions say when to call them); the call still sees the session first, so its
    /// title and ledger are at hand before its first `transform`.
    pub(super) fn system(&mut self, p: SessionParams) -> System {
        if let Some(sid) = p.session_id.as_deref() {
            self.with_session(sid, |server, session| {
                server.look_up_session(session, sid);
                server.resume_ledger(session, sid);
            });
        }
        System { system: Vec::new() }
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
        let sheet = session.priced_by(&self.rules);
        let turn = policy::Turn {
            head: tokens(&mut self.head, &self.rules, &slot.tokens),
            cold: idle.is_none_or(|s| s >= rewrite.cold_after(sheet)),
            banked: session.ledger.banked,
            rates: sheet.rates,
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

/// Tokens of dcp's head: its tools' definitions as a provider is sent them
/// ([`texts::tool_definitions`]). Counted once.
pub(super) fn tokens(head: &mut Option<u64>, rules: &Rules, counter: &TokenCounter) -> u64 {
    *head.get_or_insert_with(|| texts::tool_definitions(&rules.config().tools).iter().map(|d| counter.count(d)).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::tokens::EstimatorChoice;

    fn head_of(config: Config) -> u64 {
        let rules = Rules::new(config).unwrap();
        tokens(&mut None, &rules, &TokenCounter::new(EstimatorChoice::Auto))
    }

    #[test]
    fn the_default_head_of_discard_and_compress_stays_at_most_151_tokens() {
        // The tools' definitions are in every request of a session offered them: the head must
        // not grow unnoticed. At 151 tokens, a short session that dcp never rewrites (the head
        // alone) costs at most 1.02 of no pruning.
        let head = head_of(Config::default());
        assert!(head <= 151, "the head is {head} tokens");
        assert!(head >= 130, "the head is {head} tokens: are discard and compress both defined?");
    }

    #[test]
    fn extract_is_off_by_default_and_enabling_it_adds_its_definition() {
        let mut config = Config::default();
        assert!(!config.tools.extract.enabled);
        config.tools.extract.enabled = true;
        let with_extract = head_of(config);
        let added = with_extract - head_of(Config::default());
        assert!((50..=80).contains(&added), "extract adds {added} tokens");
    }

    #[test]
    fn the_head_counts_only_the_tools_enabled() {
        let mut config = Config::default();
        config.tools.compress.enabled = false;
        let without_compress = head_of(config.clone());
        assert!(without_compress < head_of(Config::default()) && without_compress > 0, "{without_compress}");
        config.tools.discard.enabled = false;
        assert_eq!(head_of(config), 0);
    }
}
