//! One `transform` request of one session, as the functions that answer it see it: the
//! session's live state, its state file's slot, the mirror of its history, the rules, and
//! the request's facts ([`RequestFacts`]: when it came, whether the provider's cache is cold,
//! the model's window). The server's `request_context` gathers them once per request; the per-request
//! functions of `transform`, `masking_candidates` and `savings` take the one
//! [`RequestContext`] instead of six or seven arguments.

pub(super) use super::facts::RequestFacts;
use super::in_force::Views;
use super::live::LiveSession;
use super::mirror::Mirror;
use crate::state::store::Slot;
use crate::strategies::Rules;
use crate::texts;
use crate::texts::restore::Via;
use crate::tokens::TokenCounter;

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
    /// How the plugin takes the edits of messages OpenCode sent again.
    pub resent: super::edits::sent::ResentEdits,
    /// How the agent restores what dcp hid, as the placeholders say it (none: they say nothing).
    pub restore: Option<Via>,
    /// Tokens of dcp's head, once counted (the server's, shared by its sessions).
    pub head: &'a mut Option<u64>,
}

impl RequestContext<'_> {
    /// Whether the session's requests carry dcp's head now.
    pub fn offered(&self) -> bool {
        self.session.offered(self.rules, Some(self.slot.ledger()))
    }

    /// Tokens of dcp's head, whether or not this session is offered it.
    pub fn head_tokens(&mut self) -> u64 {
        head_tokens(self.head, self.rules, &self.slot.tokens)
    }
}

/// Tokens of dcp's head: its tools' definitions as a provider is sent them
/// (`crate::texts::tool_definitions`), counted once (`head`: the server's, shared by its
/// sessions).
pub(super) fn head_tokens(head: &mut Option<u64>, rules: &Rules, counter: &TokenCounter) -> u64 {
    *head.get_or_insert_with(|| texts::tool_definitions(&rules.config().tools).iter().map(|d| counter.count(d)).sum())
}
