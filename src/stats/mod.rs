//! Savings: per session, and all-time across every state file.
//!
//! All-time figures follow DCP: tokens saved is the sum of `totalPruneTokens`, tools pruned
//! counts the pruned ids of every layout (or dcp's own per-strategy tally when that is
//! larger, since it survives compactions), and sessions counts the files whose savings are
//! above 0. A corrupt file counts for nothing and is listed; it never stops the report.
//!
//! The all-time report must stay fast over thousands of files: [`all_time`] says how.

mod all_time;
mod watch;

pub use all_time::all_time;

use std::path::PathBuf;

use serde::Serialize;

use crate::state::{SessionState, Strategy, Tally};

/// One session's savings.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SessionStats {
    pub session_id: String,
    /// The session's title, as its state file remembers it.
    pub title: Option<String>,
    pub tokens_pruned: u64,
    pub tools_pruned: u64,
    /// Calls whose prune is in force now (cleared by compactions).
    pub active_prunes: u64,
    pub by_strategy: Vec<StrategyTally>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StrategyTally {
    pub strategy: &'static str,
    pub tokens: u64,
    pub tools: u64,
}

/// The all-time report.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct AllTime {
    pub tokens_saved: u64,
    pub tools_pruned: u64,
    pub sessions: u64,
    /// State files read, corrupt ones included.
    pub files: u64,
    pub bytes: u64,
    pub corrupt: Vec<CorruptFile>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CorruptFile {
    pub file: PathBuf,
    pub reason: String,
}

/// The savings recorded in `state`.
pub fn session(session_id: &str, state: &SessionState) -> SessionStats {
    let by_strategy = Strategy::ALL
        .iter()
        .filter_map(|s| {
            let t = state.stats.by_strategy.get(s)?;
            Some(StrategyTally { strategy: s.name(), tokens: t.tokens, tools: t.tools })
        })
        .collect();
    SessionStats {
        session_id: session_id.to_string(),
        title: state.session_name.clone(),
        tokens_pruned: state.stats.tokens(),
        tools_pruned: tools_of(state),
        active_prunes: state.pruned.len() as u64,
        by_strategy,
    }
}

pub(crate) fn tools_of(state: &SessionState) -> u64 {
    let tally: u64 = state.stats.by_strategy.values().map(|t: &Tally| t.tools).sum();
    tally.max(state.pruned.len() as u64)
}
