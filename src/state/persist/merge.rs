//! Merging two processes' states of one session (see [`merge`]).

use super::MAX_COUNT;
use crate::state::{PruneRecord, SessionState};

/// Brings `disk`, the state another process may have written since this one last read it,
/// together with `mine`, this process's state, and returns the union. `journal` holds the
/// prunes `mine` recorded since it last synced: their stats are added to the file's, except
/// for calls the file already has (another process pruned them too, and counted them).
///
/// The newer compaction wins the prune list: prunes from before it name calls the model no longer
/// sees. Stats add up, but for a compressed block the user undid (`unblock:` entries) and a
/// prune whose reason left a rewound history (`unprune:`, which also leaves the file's
/// prunes). Agent-facing ids keep the file's numbering; an id of `mine` that another call took
/// on disk is renumbered.
pub fn merge(disk: SessionState, mine: &SessionState, journal: &[(String, PruneRecord)]) -> SessionState {
    let mut out = disk;
    out.fold_counter();
    add_journal(&mut out, journal);
    // The ledger of the process that made the latest request goes on.
    if mine.ledger.last_request >= out.ledger.last_request {
        out.ledger = mine.ledger;
    }
    merge_savings(&mut out, mine);
    out.trial = crate::state::trial::Trial::merged(out.trial, mine.trial);
    out.misses = out.misses.merged(mine.misses);
    if mine.last_compaction > out.last_compaction {
        out.pruned.clear();
        out.foreign_records.clear();
        out.blocks.clear();
        out.last_compaction = mine.last_compaction;
    }
    if mine.last_compaction == out.last_compaction {
        out.blocks.merge(&mine.blocks);
        for (id, record) in &mine.pruned {
            match out.pruned.get_mut(id) {
                // Once either side applied a prune it stays applied.
                Some(theirs) => theirs.applied |= record.applied,
                None => {
                    out.pruned.insert(id.clone(), record.clone());
                    if let Some(read) = mine.foreign_records.get(id) {
                        out.foreign_records.insert(id.clone(), read.clone());
                    }
                }
            }
        }
    }
    let taken: std::collections::HashSet<u32> = out.ids.values().copied().collect();
    let mut next = out.next_id.max(mine.next_id).max(1);
    for (call, n) in &mine.ids {
        if out.ids.contains_key(call) {
            continue;
        }
        let n = if taken.contains(n) {
            let fresh = next;
            next = next.saturating_add(1);
            fresh
        } else {
            *n
        };
        out.ids.insert(call.clone(), n);
    }
    let max_id = out.ids.values().copied().max().unwrap_or(0);
    out.next_id = next.max(max_id.saturating_add(1));
    if mine.session_name.is_some() {
        out.session_name.clone_from(&mine.session_name);
    }
    clamp_counts(&mut out);
    out
}

/// The savings of the process that answered more requests go on, with what the provider
/// reported that either process learned.
fn merge_savings(out: &mut SessionState, mine: &SessionState) {
    let (other, models) = if mine.savings.requests >= out.savings.requests {
        let disk = (std::mem::take(&mut out.savings.reported), std::mem::take(&mut out.savings.models));
        out.savings.clone_from(&mine.savings);
        disk
    } else {
        (mine.savings.reported.clone(), mine.savings.models.clone())
    };
    for r in other {
        if out.savings.reported.binary_search_by_key(&r.request, |x| x.request).is_err() {
            out.savings.report(r.request, r.usage, r.model.and_then(|m| models.get(m as usize)));
        }
    }
}

/// Keeps every count within [`MAX_COUNT`]: two files' counts, each within it, may add up past
/// it, and a file dcp writes must read back.
fn clamp_counts(out: &mut SessionState) {
    out.stats.total_prune_tokens = out.stats.total_prune_tokens.min(MAX_COUNT);
    out.stats.prune_token_counter = out.stats.prune_token_counter.min(MAX_COUNT);
    for tally in out.stats.by_strategy.values_mut() {
        tally.tokens = tally.tokens.min(MAX_COUNT);
        tally.tools = tally.tools.min(MAX_COUNT);
    }
}

/// Adds the stats of `journal`'s prunes to `out`'s, but for calls `out` already has, and takes
/// out those of compressed blocks the user undid.
fn add_journal(out: &mut SessionState, journal: &[(String, PruneRecord)]) {
    for (id, record) in journal {
        if let Some(call) = id.strip_prefix(crate::state::UNPRUNE) {
            // A prune whose reason left a rewound history: out of the file, and of the stats.
            out.pruned.remove(call);
            out.foreign_records.remove(call);
            let tally = out.stats.by_strategy.entry(record.strategy).or_default();
            tally.tokens = tally.tokens.saturating_sub(record.tokens);
            tally.tools = tally.tools.saturating_sub(1);
            out.stats.unrecord(record.tokens);
            continue;
        }
        if id.starts_with(crate::state::UNBLOCK) {
            // A compressed block undone: its tokens leave the stats as they came in.
            let tally = out.stats.by_strategy.entry(record.strategy).or_default();
            tally.tokens = tally.tokens.saturating_sub(record.tokens);
            tally.tools = tally.tools.saturating_sub(1);
            out.stats.unrecord(record.tokens);
            continue;
        }
        if out.pruned.contains_key(id) {
            continue;
        }
        let tally = out.stats.by_strategy.entry(record.strategy).or_default();
        tally.tokens = tally.tokens.saturating_add(record.tokens);
        tally.tools = tally.tools.saturating_add(1);
        out.stats.total_prune_tokens = out.stats.total_prune_tokens.saturating_add(record.tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Action, Strategy};

    fn rec(strategy: Strategy, tokens: u64, applied: bool) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens, tool: String::new(), applied }
    }

    #[test]
    fn an_undone_compressed_block_leaves_the_merged_stats() {
        let mut disk = SessionState::default();
        disk.stats.total_prune_tokens = 500;
        disk.stats.by_strategy.insert(Strategy::Compress, crate::state::Tally { tokens: 500, tools: 2 });
        let undone = rec(Strategy::Compress, 500, true);
        let journal =
            [("unblock:1:0".to_string(), undone), ("unblock:1:1".to_string(), rec(Strategy::Compress, 0, true))];
        let out = merge(disk, &SessionState::default(), &journal);
        assert_eq!(out.stats.tokens(), 0);
        assert_eq!(out.stats.by_strategy[&Strategy::Compress], crate::state::Tally { tokens: 0, tools: 0 });
    }

    #[test]
    fn a_prune_dropped_from_a_rewound_history_leaves_the_file_and_its_stats() {
        let mut disk = SessionState::default();
        disk.record("c1", rec(Strategy::Deduplication, 40, true));
        disk.record("c2", rec(Strategy::Deduplication, 60, true));
        disk.fold_counter();
        let mut mine = disk.clone();
        mine.pruned.remove("c1");
        let journal = [("unprune:c1".to_string(), rec(Strategy::Deduplication, 40, true))];
        let out = merge(disk, &mine, &journal);
        assert_eq!(out.pruned.keys().collect::<Vec<_>>(), ["c2"]);
        assert_eq!(out.stats.tokens(), 60);
        assert_eq!(out.stats.by_strategy[&Strategy::Deduplication], crate::state::Tally { tokens: 60, tools: 1 });
    }

    #[test]
    fn a_merge_into_totals_at_the_top_saturates_at_the_bound_instead_of_wrapping() {
        let mut disk = SessionState::default();
        disk.stats.total_prune_tokens = u64::MAX - 1;
        disk.stats.by_strategy.insert(Strategy::Sweep, crate::state::Tally { tokens: u64::MAX, tools: u64::MAX });
        let journal = [("c1".to_string(), rec(Strategy::Sweep, 3_580, true))];
        let out = merge(disk, &SessionState::default(), &journal);
        assert_eq!(out.stats.tokens(), MAX_COUNT);
        assert_eq!(
            out.stats.by_strategy[&Strategy::Sweep],
            crate::state::Tally { tokens: MAX_COUNT, tools: MAX_COUNT }
        );
    }

    #[test]
    fn merge_unions_prunes_and_counts_each_call_once() {
        let mut disk = SessionState::default();
        disk.record("theirs", rec(Strategy::Sweep, 7, true));
        disk.record("both", rec(Strategy::Deduplication, 5, false));
        disk.fold_counter();
        let mut mine = SessionState::default();
        mine.record("both", rec(Strategy::Deduplication, 5, true));
        mine.record("mine", rec(Strategy::Discard, 3, true));
        let journal = vec![
            ("both".to_string(), rec(Strategy::Deduplication, 5, true)),
            ("mine".to_string(), rec(Strategy::Discard, 3, true)),
        ];
        let out = merge(disk, &mine, &journal);
        assert_eq!(out.pruned.keys().collect::<Vec<_>>(), ["both", "mine", "theirs"]);
        assert!(out.pruned["both"].applied, "applied on either side stays applied");
        // `both` was counted by the other process already.
        assert_eq!(out.stats.tokens(), 15);
        assert_eq!(out.stats.by_strategy[&Strategy::Deduplication].tools, 1);
        assert_eq!(out.stats.by_strategy[&Strategy::Discard].tools, 1);
    }

    #[test]
    fn merge_lets_the_newer_compaction_win_the_prune_list_and_keeps_stats() {
        let mut disk = SessionState::default();
        disk.record("old", rec(Strategy::Sweep, 4, true));
        disk.fold_counter();
        let mut mine = SessionState::default();
        mine.clear_after_compaction(100);
        mine.record("new", rec(Strategy::Sweep, 6, true));
        let journal = vec![("new".to_string(), rec(Strategy::Sweep, 6, true))];
        let out = merge(disk.clone(), &mine, &journal);
        assert_eq!(out.pruned.keys().collect::<Vec<_>>(), ["new"]);
        assert_eq!((out.last_compaction, out.stats.tokens()), (100, 10));
        // The other way round: the file saw a compaction this process has not.
        disk.clear_after_compaction(200);
        let out = merge(disk, &mine, &journal);
        assert!(out.pruned.is_empty());
        assert_eq!((out.last_compaction, out.stats.tokens()), (200, 10));
    }

    #[test]
    fn merge_keeps_the_files_agent_ids_and_renumbers_a_clash() {
        let mut disk = SessionState::default();
        assert_eq!(disk.id_for("a"), 1);
        let mut mine = SessionState::default();
        assert_eq!(mine.id_for("b"), 1);
        assert_eq!(mine.id_for("a"), 2);
        let out = merge(disk, &mine, &[]);
        assert_eq!(out.ids["a"], 1);
        // `b` cannot keep 1, and 2 is the id this process gave `a`: it gets a fresh one.
        assert_eq!(out.ids["b"], 3);
        assert_eq!(out.next_id, 4);
    }
}
