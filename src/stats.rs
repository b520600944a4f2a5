//! Savings: per session, and all-time across every state file.
//!
//! All-time figures follow DCP: tokens saved is the sum of `totalPruneTokens`, tools pruned
//! counts the pruned ids of every layout (or dcp's own per-strategy tally when that is
//! larger, since it survives compactions), and sessions counts the files whose savings are
//! above 0. A corrupt file counts for nothing and is listed; it never stops the report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::state::persist::{self, LoadOutcome};
use crate::state::{SessionState, Strategy, Tally};

/// One session's savings.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SessionStats {
    pub session_id: String,
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
        tokens_pruned: state.stats.tokens(),
        tools_pruned: tools_of(state),
        active_prunes: state.pruned.len() as u64,
        by_strategy,
    }
}

fn tools_of(state: &SessionState) -> u64 {
    let tally: u64 = state.stats.by_strategy.values().map(|t: &Tally| t.tools).sum();
    tally.max(state.pruned.len() as u64)
}

/// The state files of `dir`: every `<session id>.json`, sorted by name.
pub fn state_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if persist::validate_session_id(id).is_ok() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Sums every state file of `dir`.
pub fn all_time(dir: &Path) -> std::io::Result<AllTime> {
    let mut report = AllTime::default();
    for path in state_files(dir)? {
        report.files += 1;
        report.bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        match persist::load_path(&path) {
            LoadOutcome::Loaded(state) => {
                let tokens = state.stats.tokens();
                report.tokens_saved += tokens;
                report.tools_pruned += tools_of(&state);
                if tokens > 0 {
                    report.sessions += 1;
                }
            }
            LoadOutcome::Corrupt { path, reason } => report.corrupt.push(CorruptFile { file: path, reason }),
            LoadOutcome::Missing => {}
        }
    }
    Ok(report)
}
