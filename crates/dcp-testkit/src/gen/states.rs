//! State files in dcp's own layout, for the all-time stats, with what they record summed
//! independently of dcp's stats code.

use std::path::Path;

use serde::Serialize;

use dcp::state::{persist, Action, PruneRecord, SessionState, Strategy};

use super::text::{base62, capitalise, sentence};
use super::{skewed_size, Rng};

/// What [`write_states`] wrote, summed independently of dcp's own stats code so a test can
/// check one against the other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatesSummary {
    pub files: u64,
    pub tokens_saved: u64,
    pub tools_pruned: u64,
    /// Files with savings above 0.
    pub sessions: u64,
    pub bytes: u64,
}

const TOOLS: &[&str] = &["read", "read", "read", "bash", "grep", "glob", "webfetch", "write"];

/// One generated session state: a few to a few hundred prune records, sometimes across a
/// compaction (which clears the prune list but keeps the stats). Returns the state and the
/// tokens and tools it records.
fn state(rng: &mut Rng, index: usize) -> (SessionState, u64, u64) {
    let mut state = SessionState::default();
    let n = rng.range(4, 14);
    state.session_name = Some(capitalise(&sentence(rng, n)));
    // About one session in twenty pruned nothing.
    let records = if rng.percent(5) {
        0
    } else {
        match rng.weighted(&[35, 30, 22, 13]) {
            0 => rng.range(1, 4),
            1 => rng.range(5, 16),
            2 => rng.range(17, 64),
            _ => rng.range(65, 300),
        }
    };
    let compaction_at = if records > 4 && rng.percent(15) { Some(rng.range(1, records - 1)) } else { None };
    let (mut tokens, mut tools) = (0, 0);
    for i in 0..records {
        if Some(i) == compaction_at {
            state.clear_after_compaction(1_790_000_000_000 + index as i64 * 1_000);
        }
        let strategy = match rng.weighted(&[45, 8, 10, 20, 7, 10]) {
            0 => Strategy::Deduplication,
            1 => Strategy::SupersedeWrites,
            2 => Strategy::PurgeErrors,
            3 => Strategy::Discard,
            4 => Strategy::Extract,
            _ => Strategy::Sweep,
        };
        let action = match strategy {
            Strategy::SupersedeWrites => Action::WriteContent,
            Strategy::PurgeErrors => Action::ErrorInputs,
            Strategy::Extract => {
                let n = rng.range(8, 30);
                Action::Distill { distillation: capitalise(&sentence(rng, n)) }
            }
            _ => Action::Output,
        };
        let record_tokens = (skewed_size(rng) / 4) as u64;
        let tool = if strategy == Strategy::SupersedeWrites { "write" } else { rng.word(TOOLS) };
        let call = format!("call_{}", base62(rng, 24));
        state.id_for(&call);
        let record =
            PruneRecord { strategy, action, tokens: record_tokens, tool: tool.to_string(), applied: !rng.percent(10) };
        if state.record(&call, record) {
            tokens += record_tokens;
            tools += 1;
        }
    }
    state.fold_counter();
    (state, tokens, tools)
}

/// Writes `count` state files into `dir` (created if missing), in the layout dcp writes, and
/// sums what they record. `dcp stats --data-dir D` reads `D/storage/plugin/dcp/`, so pass that
/// as `dir` to see them there.
pub fn write_states(count: usize, seed: u64, dir: &Path) -> std::io::Result<StatesSummary> {
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng::new(seed ^ 0x6463_705f_7374_6174);
    let base = 1_790_000_000_000_i64 + rng.below(50_000_000_000) as i64;
    let mut summary = StatesSummary::default();
    for i in 0..count {
        let (state, tokens, tools) = state(&mut rng, i);
        let time = base + i as i64 * 61_000;
        // The counter in the id keeps every file name distinct.
        let stamp = !(((time as u64) << 12) + i as u64) & 0xFFFF_FFFF_FFFF;
        let id = format!("ses_{stamp:012x}{}", base62(&mut rng, 14));
        let updated = chrono::DateTime::from_timestamp_millis(time)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        let bytes = persist::render(&state, &updated);
        std::fs::write(dir.join(format!("{id}.json")), &bytes)?;
        summary.files += 1;
        summary.bytes += bytes.len() as u64;
        summary.tokens_saved += tokens;
        summary.tools_pruned += tools;
        if tokens > 0 {
            summary.sessions += 1;
        }
    }
    Ok(summary)
}
