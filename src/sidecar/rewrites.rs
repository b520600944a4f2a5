//! What the rewrite policy needs from the session besides the recorded prunes and ranges:
//! the calls observation masking would take now (`crate::strategies::masking`), as pending
//! rewrites that are recorded only when the policy applies them, and the tokens of the
//! prunes in force, for the session's balance against no pruning (`crate::policy::balance`).

use super::mirror::Mirror;
use crate::policy;
use crate::state::store::Slot;
use crate::state::{Action, PruneRecord, Strategy};
use crate::strategies::incremental::Index;
use crate::strategies::Rules;

/// Tokens of the prunes in force: applied, of calls still in the history.
pub(super) fn in_force(slot: &Slot, index: &Index) -> u64 {
    slot.state.pruned.iter().filter(|(id, r)| r.applied && index.position(id).is_some()).map(|(_, r)| r.tokens).sum()
}

/// The calls masking would take now, with where they are, the record to make when one is
/// applied, and its cost to the policy (`tails[m]`: the history from message `m` on).
pub(super) fn mask_pending(
    rules: &Rules,
    slot: &mut Slot,
    index: &mut Index,
    mirror: &Mirror,
    tails: &[u64],
) -> Vec<((usize, usize), String, PruneRecord, policy::Pending)> {
    let candidates = index.mask_candidates(mirror.messages(), &slot.state, rules, &mut slot.tokens).to_vec();
    candidates
        .iter()
        .map(|c| {
            let (id, tool, at) = index.candidate(c);
            let record = PruneRecord {
                strategy: Strategy::Masking,
                action: Action::Mask,
                tokens: c.tokens,
                tool: tool.to_string(),
                applied: false,
            };
            (at, id.to_string(), record, policy::Pending { tokens: c.tokens, tail: tails[at.0] })
        })
        .collect()
}
