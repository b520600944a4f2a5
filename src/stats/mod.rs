//! Savings: per session, and all-time across every state file.
//!
//! What reached the model comes first: the prunes in force and those waiting apart (a waiting
//! prune has saved nothing), the tokens kept out of the requests so far and the cost saved as
//! a share, from the figures the sidecar records request by request (`crate::state::savings`),
//! and beside them what the provider reported it billed ([`reported`]).
//!
//! DCP's figures are kept beside them: pruned tokens is the sum of `totalPruneTokens`, tools pruned
//! counts the pruned ids of every layout (or dcp's own per-strategy tally when that is
//! larger, since it survives compactions), and sessions counts the files whose savings are
//! above 0. A corrupt file counts for nothing and is listed; it never stops the report.
//!
//! The all-time report must stay fast over thousands of files: [`AllTimeCache`] says how.

mod all_time;
pub mod money;
mod net;
pub mod reported;
pub mod trial;
mod watch;

pub use all_time::AllTimeCache;
pub use net::{Direction, Net};

use std::path::PathBuf;

use serde::Serialize;

use crate::state::{SessionState, Tally};

/// One session's savings. `pruned_tokens` is DCP's figure (the one-time size of everything
/// pruned, waiting or not); what reached the model is in force, waiting and kept out.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionStats {
    pub session_id: String,
    /// The session's title, as its state file remembers it.
    pub title: Option<String>,
    pub pruned_tokens: u64,
    pub tools_pruned: u64,
    /// Calls and ranges whose prune is in force now (cleared by compactions), and those waiting
    /// for the policy.
    pub in_force_prunes: u64,
    pub waiting_prunes: u64,
    #[serde(flatten)]
    pub figures: Figures,
    pub by_strategy: Vec<StrategyTally>,
    /// What dcp saved in money, where the session's sheet has money prices (see [`money`]).
    #[serde(flatten)]
    pub money: money::MoneyFigures,
    /// What the provider reported it billed, summed over the requests dcp learned it for, and
    /// each request's figures beside it (see [`reported`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<reported::ReportedTotals>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_request: Vec<reported::RequestRow>,
}

impl SessionStats {
    /// The client of a conversation through `dcp proxy` (`claude-code`), as its state file's
    /// folder names it; `None` for an OpenCode session.
    /// The same with its money priced at the sheet `config` gives `state`, the session's state
    /// (see [`money::sheet_of`]).
    pub fn priced(mut self, state: &SessionState, config: &crate::config::Config) -> SessionStats {
        self.money = money::of_session(state, &self.figures, &money::sheet_of(state, config));
        self
    }

    pub fn proxy_client(&self) -> Option<String> {
        let folder = crate::state::persist::folder_of(&self.session_id)?;
        Some(folder.trim_start_matches("proxy/").to_string())
    }
}

/// What reached the model, for a session or summed over sessions (see
/// `crate::state::savings`).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Figures {
    /// Tokens the prunes in force take out of each request, and those of the prunes waiting.
    pub in_force_tokens: u64,
    pub waiting_tokens: u64,
    /// Tokens kept out of the requests so far, net of what dcp added.
    pub kept_out_tokens: i64,
    pub requests: u64,
    /// What dcp saved of what the requests would have cost without it, as a share.
    #[serde(serialize_with = "four_places")]
    pub cost_saved_share: f64,
    /// The same in tokens at the base input price, and what the requests would have cost.
    #[serde(serialize_with = "one_place")]
    pub cost_saved: f64,
    #[serde(serialize_with = "one_place")]
    pub cost_without: f64,
    /// The misses seen live: calls run or files read again whose output dcp had hidden, and
    /// hidden texts the agent restored (see `crate::state::misses`).
    pub refetches: u64,
    pub restores: u64,
}

impl Figures {
    /// The figures of `state`.
    pub fn of(state: &SessionState) -> Figures {
        let (in_force_tokens, waiting_tokens) = state.in_force_and_waiting();
        let s = &state.savings;
        let mut f = Figures {
            in_force_tokens,
            waiting_tokens,
            kept_out_tokens: s.kept_out_tokens,
            requests: s.requests,
            cost_saved: s.cost_saved,
            cost_without: s.cost_without,
            cost_saved_share: 0.0,
            refetches: state.misses.refetches,
            restores: state.misses.restores,
        };
        f.cost_saved_share = share(f.cost_saved, f.cost_without);
        f
    }

    /// Adds another session's figures.
    pub fn add(&mut self, other: &Figures) {
        self.in_force_tokens = self.in_force_tokens.saturating_add(other.in_force_tokens);
        self.waiting_tokens = self.waiting_tokens.saturating_add(other.waiting_tokens);
        self.kept_out_tokens = self.kept_out_tokens.saturating_add(other.kept_out_tokens);
        self.requests = self.requests.saturating_add(other.requests);
        self.cost_saved += other.cost_saved;
        self.cost_without += other.cost_without;
        self.cost_saved_share = share(self.cost_saved, self.cost_without);
        self.refetches = self.refetches.saturating_add(other.refetches);
        self.restores = self.restores.saturating_add(other.restores);
    }
}

fn share(saved: f64, without: f64) -> f64 {
    if without > 0.0 {
        saved / without
    } else {
        0.0
    }
}

fn four_places<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((v * 10_000.0).round() / 10_000.0)
}

fn one_place<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((v * 10.0).round() / 10.0)
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StrategyTally {
    pub strategy: &'static str,
    pub tokens: u64,
    pub tools: u64,
}

/// The all-time report. `pruned_tokens` is DCP's figure, summed.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AllTime {
    pub pruned_tokens: u64,
    pub tools_pruned: u64,
    pub sessions: u64,
    #[serde(flatten)]
    pub figures: Figures,
    /// State files read, corrupt ones included.
    pub files: u64,
    pub bytes: u64,
    pub corrupt: Vec<CorruptFile>,
    /// The state files of conversations through `dcp proxy`, by client (their folders).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub proxied: std::collections::BTreeMap<String, u64>,
    /// What dcp saved in money, priced at the sheet `prices` gives (see [`money`]).
    #[serde(flatten)]
    pub money: money::MoneyFigures,
}

impl AllTime {
    /// The same with its money priced at `sheet`.
    pub fn priced(mut self, sheet: &crate::prices::Sheet) -> AllTime {
        self.money = money::MoneyFigures::priced(&self.figures, sheet);
        self
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CorruptFile {
    pub file: PathBuf,
    pub reason: String,
}

/// The savings recorded in `state`.
pub fn session(session_id: &str, state: &SessionState) -> SessionStats {
    let by_strategy = state
        .stats
        .reported()
        .into_iter()
        .map(|(strategy, t)| StrategyTally { strategy, tokens: t.tokens, tools: t.tools })
        .collect();
    let all: Vec<bool> = state.cuts().map(|c| c.applied).collect();
    let in_force_prunes = all.iter().filter(|a| **a).count() as u64;
    let figures = Figures::of(state);
    let money = money::of_session(state, &figures, &crate::prices::Sheet::default());
    SessionStats {
        session_id: session_id.to_string(),
        title: state.session_name.clone(),
        pruned_tokens: state.stats.tokens(),
        tools_pruned: tools_of(state),
        in_force_prunes,
        waiting_prunes: all.len() as u64 - in_force_prunes,
        figures,
        by_strategy,
        money,
        reported: reported::totals(&state.savings),
        per_request: reported::rows(&state.savings),
    }
}

pub(crate) fn tools_of(state: &SessionState) -> u64 {
    let tally: u64 = state.stats.by_strategy.values().map(|t: &Tally| t.tools).sum();
    tally.max(state.pruned.len() as u64)
}
