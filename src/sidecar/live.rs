//! A live session in `dcp serve`: what the sidecar keeps of it besides its state file's slot
//! (`crate::state::store::Slot`, which holds what the file keeps, the policy's ledger among it),
//! in parts, each changed by the module that owns it: the mirror of the history and the index
//! of its tool calls ([`Transcript`]: [`super::mirror`], counted ahead by the server's
//! `precount`); the policy's running totals besides the ledger ([`PolicyTotals`]: `transform` and
//! [`super::pending`]); the `<prunable-tools>` lists and nudges sent ([`Lists`]: `transform`'s
//! tail); the caches that make a request cost what is new ([`Caches`]: [`super::in_force`],
//! [`super::saving_cache`], [`super::ranges`], [`super::refetch`]); what is known of the session
//! ([`About`]: its parent and title, its arm, its price sheet, its back-off and id tags); and
//! what the plugin holds of its edits, when it was last saved, and what counting its savings
//! needs ([`super::edits`], `crate::state::saver`, [`super::savings`]).

use super::edits::sent::EditsSent;
use super::mirror::Mirror;
use super::pending::waiting::WaitingRequest;
use super::ranges::spans::SpanCache;
use super::totals::PolicyTotals;
use super::{describe, in_force, refetch, saving_cache, savings};
use crate::config::Offer;
use crate::policy;
use crate::state::saver::SaveTiming;
use crate::state::trial::Arm;
use crate::state::Ledger;
use crate::strategies::incremental::Index;
use crate::strategies::Rules;

/// What the sidecar keeps about a live session besides its state.
#[derive(Debug, Default)]
pub(super) struct LiveSession {
    pub history: Transcript,
    /// The policy's running totals besides its ledger (see [`super::totals`]).
    pub totals: PolicyTotals,
    pub lists: Lists,
    pub caches: Caches,
    pub about: About,
    /// What the plugin holds of the edits.
    pub edits: EditsSent,
    /// When its state was last handed out for saving.
    pub saves: SaveTiming,
    /// What counting the next request's savings needs of this one (see [`savings`]).
    pub savings: savings::Meter,
    /// The last request, when it is counted once its answer is known (see [`super::pending`]).
    pub pending: Option<WaitingRequest>,
}

impl LiveSession {
    /// Before a process's first request of the session: goes on from the figures its state
    /// file keeps (`ledger`, when dcp keeps one), the policy's costs so far and the lists sent,
    /// so that it decides as a process that had answered every request would.
    pub fn resume(&mut self, ledger: Option<&Ledger>) {
        let Some(ledger) = ledger.filter(|_| self.totals.requests() == 0) else { return };
        self.totals.resume(ledger);
        self.lists.resume(ledger);
    }

    /// Whether messages are left whose outputs were not counted ahead.
    pub fn uncounted(&self) -> bool {
        self.history.precounted < self.history.mirror.messages().len()
    }

    /// Whether the session's requests carry dcp's head now. `"always"` offers it from the first
    /// request only where the head is cheap to carry (`crate::policy::head_is_cheap`: a cache
    /// reads it); without a cache it is offered as `"paid"` is.
    /// `ledger`: the session's, once its state is loaded.
    pub fn offered(&self, rules: &Rules, ledger: Option<&Ledger>) -> bool {
        let tools = &rules.config().tools;
        let any = tools.discard.enabled || tools.extract.enabled || tools.compress.enabled || tools.restore.enabled;
        let always = tools.settings.offer == Offer::Always && policy::head_is_cheap(self.priced_by(rules).rates);
        any && (always || ledger.is_some_and(|l| l.offered)) && self.about.arm != Some(Some(Arm::Unpruned))
    }
}

/// The session's history as the sidecar mirrors it, and what it reads of it.
#[derive(Debug, Default)]
pub(super) struct Transcript {
    pub mirror: Mirror,
    /// The session's tool calls, as the strategies and the prunable list need them.
    pub index: Index,
    /// The messages whose tool outputs were counted ahead (see the server's `precount`).
    pub precounted: usize,
}

/// The `<prunable-tools>` lists sent to a session, the nudges, and what the agent did with
/// them.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Lists {
    /// Tool calls in the history when the agent was last nudged.
    pub calls_at_nudge: usize,
    /// The last call the list named when it was last sent.
    pub shown: Option<usize>,
    /// The agent's own prunes when they were last counted ([`in_force::AgentPrunes`]).
    pub answered: usize,
    /// Lists sent since the agent last pruned (`crate::policy::list_pays`).
    pub unanswered: u32,
}

impl Lists {
    /// Goes on from the lists `ledger` says were sent.
    fn resume(&mut self, ledger: &Ledger) {
        let l = &ledger.lists;
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        self.calls_at_nudge = count(l.calls_at_nudge);
        self.shown = l.shown.map(count);
        (self.answered, self.unanswered) = (count(l.answered), l.unanswered);
    }

    /// Writes the lists sent into `ledger`, which the next save keeps.
    pub fn keep(&self, ledger: &mut Ledger) {
        let l = &mut ledger.lists;
        l.calls_at_nudge = self.calls_at_nudge as u64;
        l.shown = self.shown.map(|s| s as u64);
        (l.answered, l.unanswered) = (self.answered as u64, self.unanswered);
    }
}

/// What a request of the session reads again unless it is kept: the rewrite sizes, the
/// prunes in force, where the ranges stand, the agent's own prunes, the calls read for
/// re-fetches.
#[derive(Debug, Default)]
pub(super) struct Caches {
    /// The rewrite sizes of the masking candidates and the prunes (see [`saving_cache`]).
    pub sizes: saving_cache::SavingCache,
    /// The prunes in force and those waiting (see [`in_force`]).
    pub in_force: in_force::InForce,
    /// Where the ranges stand in the mirror's history, and the agent's own prunes as they come.
    pub spans: SpanCache,
    pub agent_prunes: in_force::AgentPrunes,
    /// The calls read for re-fetches (see [`refetch`]).
    pub refetches: refetch::Refetches,
}

/// What is known of the session besides its history.
#[derive(Debug, Default)]
pub(super) struct About {
    /// Whether the session has a parent (a subagent), once known.
    pub parent: Option<bool>,
    pub title: Option<String>,
    /// How often the session was looked up in `opencode.db`.
    pub lookups: u32,
    /// How far the session backs off for the misses it saw (`crate::policy::backoff_level`).
    pub backoff: u32,
    /// The kinds of id tag the session's last request carried, and those its agent tools'
    /// descriptions name (see [`describe`]).
    pub present: describe::Tags,
    pub described: Option<describe::Tags>,
    /// Its arm of the control group, once looked up: `Some(None)` outside it (see
    /// [`super::holdout`]).
    pub arm: Option<Option<crate::state::trial::Arm>>,
    /// Its price sheet, once its client named its model (see [`super::sheet`]).
    pub sheet: Option<crate::prices::Sheet>,
}
