//! A session's compressed ranges in its [`Slot`]: counted in the stats when made, put in force,
//! undone by the user, dropped when a rewind leaves them; each noted for the next save, and
//! journalled so that a merge with another process's file counts them as this process does.

use super::Slot;
use crate::state::{Action, PruneRecord, Strategy, UNBLOCK};

impl Slot {
    /// Counts compressed block `id` in the stats, under its maker's strategy: `tokens` it takes
    /// out of each request and the tool calls it hides, and notes it for the next save. One
    /// journal entry per hidden call (the tokens on the first), so a merge with another
    /// process's file counts it as this process does.
    pub fn record_block(&mut self, id: u32, tools: &[String], tokens: u64) {
        let strategy = self.state.blocks.strategy(id);
        let tally = self.state.stats.by_strategy.entry(strategy).or_default();
        tally.tokens += tokens;
        tally.tools += tools.len().max(1) as u64;
        self.state.stats.prune_token_counter += tokens;
        let entry = |key: String, tokens: u64| (key, block_record(strategy, tokens));
        if tools.is_empty() {
            self.journal.push(entry(format!("block:{id}"), tokens));
        }
        for (k, call) in tools.iter().enumerate() {
            self.journal.push(entry(format!("block:{id}:{call}"), if k == 0 { tokens } else { 0 }));
        }
        self.dirty = true;
    }

    /// Takes compressed block `id` back out of the stats when the user undoes it (`/dcp
    /// decompress`): what it took out of each request is sent again, so the stats say what
    /// is applied. Journalled as `unblock:ID`, which a merge subtracts.
    fn unrecord_block(&mut self, id: u32, tools: usize, tokens: u64) {
        let strategy = self.state.blocks.strategy(id);
        let tally = self.state.stats.by_strategy.entry(strategy).or_default();
        tally.tokens = tally.tokens.saturating_sub(tokens);
        tally.tools = tally.tools.saturating_sub(tools.max(1) as u64);
        self.state.stats.unrecord(tokens);
        for k in 0..tools.max(1) {
            let tokens = if k == 0 { tokens } else { 0 };
            self.journal.push((format!("{UNBLOCK}{id}:{k}"), block_record(strategy, tokens)));
        }
        self.dirty = true;
    }

    /// Puts waiting compressed block `id` in force, a rewrite the next save writes: the calls
    /// it hides leave the prunable list.
    pub fn apply_block(&mut self, id: u32) {
        let hidden = self.state.blocks.by_id.get_mut(&id).map(|b| {
            b.applied = true;
            b.effective_tools.clone()
        });
        self.hide(hidden.unwrap_or_default());
        self.mark_rewrites_added();
        self.dirty = true;
    }

    /// Undoes compressed block `id` (`/dcp decompress`): its messages are sent again, and
    /// the older ranges it had taken in stand for theirs again (see
    /// [`super::blocks::Blocks::decompress`]), which it returns; `None` when there is no such
    /// range.
    pub fn decompress(&mut self, id: u32) -> Option<Vec<u32>> {
        let restored = self.state.blocks.decompress(id)?;
        if let Some(block) = self.state.blocks.by_id.get(&id) {
            let (tools, tokens) = (block.direct_tools.len(), block.net_tokens());
            self.unrecord_block(block.id, tools, tokens);
        }
        self.mark_rewrites_added();
        self.dirty = true;
        Some(restored)
    }

    /// Drops compressed block `id`, whose messages left a rewound history: it is no longer
    /// active, and its tokens leave the stats (as [`Slot::unrecord_block`]).
    pub fn drop_block(&mut self, id: u32) {
        let Some(block) = self.state.blocks.by_id.get_mut(&id) else { return };
        block.active = false;
        let (tools, tokens) = (block.direct_tools.len(), block.net_tokens());
        self.unrecord_block(id, tools, tokens);
    }
}

/// The journal's record of `tokens` taken out (or given back) by a compressed block.
pub(super) fn block_record(strategy: Strategy, tokens: u64) -> PruneRecord {
    PruneRecord { strategy, action: Action::Output, tokens, tool: String::new(), applied: true }
}
