//! Savings: per session, and all-time across every state file.
//!
//! All-time figures follow DCP: tokens saved is the sum of `totalPruneTokens`, tools pruned
//! counts the pruned ids of every layout (or dcp's own per-strategy tally when that is
//! larger, since it survives compactions), and sessions counts the files whose savings are
//! above 0. A corrupt file counts for nothing and is listed; it never stops the report.
//!
//! The report must stay fast over thousands of files, so a file dcp wrote is read from its
//! head (`stats` comes first, with `totalPrunedTools`) once its last byte shows it whole, and
//! each file's summary is remembered for the process by name, size and modification time.

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

/// What one state file adds to the all-time report.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Summary {
    Counts { tokens: u64, tools: u64 },
    Corrupt(String),
    Missing,
}

/// A file's summary, with the size and modification time it was read at.
#[derive(Debug, Clone)]
struct Remembered {
    len: u64,
    modified: Option<std::time::SystemTime>,
    summary: Summary,
}

/// Summaries of the state files read so far in this process, by dir and file name: a
/// repeated report reads only the files whose size or modification time changed.
type Memo = std::collections::HashMap<PathBuf, std::collections::HashMap<String, Remembered>>;
static MEMO: std::sync::Mutex<Option<Memo>> = std::sync::Mutex::new(None);

/// The summary at the head of a file dcp wrote: `stats` comes first and carries
/// `totalPrunedTools`, so the report need not parse the whole file. `None` for other files.
fn summary_from_head(head: &[u8]) -> Option<Summary> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(default)]
        prune_token_counter: u64,
        total_prune_tokens: u64,
        total_pruned_tools: u64,
    }
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.trim_start().strip_prefix('{')?.trim_start().strip_prefix("\"stats\"")?;
    let rest = rest.trim_start().strip_prefix(':')?;
    // `stats` is flat: its object ends at the first `}`.
    let end = rest.find('}')?;
    let head: Head = serde_json::from_str(&rest[..=end]).ok()?;
    Some(Summary::Counts { tokens: head.total_prune_tokens + head.prune_token_counter, tools: head.total_pruned_tools })
}

/// Reads what `path` adds to the report: from its head when dcp wrote it and it ends as a
/// whole file does, else by loading it.
fn summarize(path: &Path, len: u64, regular: bool) -> Summary {
    use std::io::Read;
    const HEAD: u64 = 4096;
    // Only a plain file is opened here: a FIFO would block. Anything else is left to the
    // loader, which says what is wrong with it.
    if let Some(mut file) = regular.then(|| std::fs::File::open(path).ok()).flatten() {
        let mut head = Vec::with_capacity(HEAD.min(len) as usize);
        let complete = file.by_ref().take(HEAD).read_to_end(&mut head).is_ok() && whole(&file, len);
        if complete {
            if let Some(summary) = summary_from_head(&head) {
                return summary;
            }
        }
    }
    match persist::load_path(path) {
        LoadOutcome::Loaded(state) => Summary::Counts { tokens: state.stats.tokens(), tools: tools_of(&state) },
        LoadOutcome::Corrupt { reason, .. } => Summary::Corrupt(reason),
        LoadOutcome::Missing => Summary::Missing,
    }
}

/// Whether a file ends with the closing brace of a JSON object,
/// as a whole state file does: a torn or truncated one is loaded in full and reported.
fn whole(file: &std::fs::File, len: u64) -> bool {
    let tail_len = len.min(64);
    let mut tail = vec![0u8; tail_len as usize];
    #[cfg(unix)]
    let read = std::os::unix::fs::FileExt::read_exact_at(file, &mut tail, len - tail_len).is_ok();
    // Elsewhere the file is loaded in full.
    #[cfg(not(unix))]
    let read = {
        let _ = file;
        false
    };
    read && tail.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b'}')
}

/// Sums every state file of `dir`. Files dcp wrote are read from their head; summaries are
/// remembered for the process, by file name, size and modification time.
pub fn all_time(dir: &Path) -> std::io::Result<AllTime> {
    let mut report = AllTime::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(e),
    };
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    let known = memo.get_or_insert_with(Default::default).entry(dir.to_path_buf()).or_default();
    let mut files: Vec<(String, Summary)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.strip_suffix(".json").is_none_or(|id| persist::validate_session_id(id).is_err()) {
            continue;
        }
        // The entry's own metadata: a stat relative to the open dir, not a walk of the path.
        let meta = entry.metadata().ok();
        let len = meta.as_ref().map_or(0, |m| m.len());
        let modified = meta.as_ref().and_then(|m| m.modified().ok());
        report.bytes += len;
        let summary = match known.get(&name) {
            Some(r) if meta.is_some() && r.len == len && r.modified == modified => r.summary.clone(),
            _ => {
                let regular = meta.as_ref().is_some_and(std::fs::Metadata::is_file);
                let summary = summarize(&entry.path(), len, regular);
                known.insert(name.clone(), Remembered { len, modified, summary: summary.clone() });
                summary
            }
        };
        files.push((name, summary));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, summary) in files {
        report.files += 1;
        match summary {
            Summary::Counts { tokens, tools } => {
                report.tokens_saved += tokens;
                report.tools_pruned += tools;
                if tokens > 0 {
                    report.sessions += 1;
                }
            }
            Summary::Corrupt(reason) => report.corrupt.push(CorruptFile { file: dir.join(name), reason }),
            Summary::Missing => {}
        }
    }
    Ok(report)
}
