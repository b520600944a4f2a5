//! The masking candidates: the outputs observation masking would take now
//! (`crate::strategies::masking` says which, by its window), held as pending rewrites that are
//! recorded only when the policy applies them; and the tokens of the prunes in force, for the
//! session's balance against no pruning (`crate::policy::balance`).
//!
//! Whether an old output is masked on a request is decided here and in two steps after it:
//! `transform`'s `Server::decide_request` (the per-request entry) gathers these candidates,
//! the pure `crate::policy::choose` says whether their rewrite goes on this request, and
//! `transform`'s `apply_pending` records and applies it.

use super::mirror::Mirror;
use super::request::RequestContext;
use crate::config::RewriteMode;
use crate::policy;
use crate::state::{Action, PruneRecord, Strategy};
use crate::strategies::masking;

/// What the prunes in force remove (applied, of calls still in the history), in the unit of
/// the mirror's sizes ([`approx_saving`]).
pub(super) fn in_force(cx: &mut RequestContext) -> u64 {
    let (slot, index, mirror, sizes) = (&*cx.slot, &cx.session.index, cx.mirror, &mut cx.session.sizes);
    let applied = slot.state.pruned.iter().filter(|(_, r)| r.applied);
    applied.filter_map(|(id, r)| Some(sizes.approx_saving(mirror, id, index.position(id)?, &r.action))).sum()
}

/// The calls masking would take now, with where they are, the record to make when one is
/// applied, and its cost to the policy (`tails[m]`: the history from message `m` on); then, in
/// batched mode, the calls beyond the narrower window: the volatile ones as candidates, the
/// others as riders, which a rewrite that goes anyway also masks (see
/// `crate::strategies::masking`, "What goes first"). The current turn's views of files are
/// marked, for a spend leaves them (`crate::policy::Pending::current_view`).
pub(super) fn mask_pending(
    cx: &mut RequestContext,
    tails: &[u64],
) -> Vec<((usize, usize), String, PruneRecord, policy::Pending)> {
    let (rules, slot, index, mirror) = (cx.rules, &mut *cx.slot, &mut cx.session.index, cx.mirror);
    let messages = mirror.messages();
    let candidates = index.mask_candidates(messages, &slot.state, rules, &mut slot.tokens).to_vec();
    let riders = match rules.config().rewrite.mode {
        RewriteMode::Batched => index.mask_riders(messages, &slot.state, rules, &mut slot.tokens),
        RewriteMode::Immediate => Vec::new(),
    };
    let flagged = candidates.iter().map(|c| (c, false)).chain(riders.iter().map(|c| (c, true)));
    flagged
        .map(|(c, rider)| {
            let (id, tool, at) = index.candidate(c);
            let record = PruneRecord {
                strategy: Strategy::Masking,
                action: if c.inputs { Action::MaskInputs } else { Action::Mask },
                tokens: c.tokens,
                tool: tool.to_string(),
                applied: false,
            };
            let tokens = approx_saving(mirror, at, &record.action);
            let current_view = masking::is_view(tool) && index.in_current_turn(c);
            let pending = policy::Pending {
                tokens,
                tail: tails[at.0],
                rider: rider && !c.volatile,
                unsure: c.inputs,
                current_view,
            };
            (at, id.to_string(), record, pending)
        })
        .collect()
}

/// What the rewrite of the part at `at` by `action` removes, in the unit of the mirror's sizes
/// (characters / 4), which the policy weighs it against: a prune's recorded tokens are the
/// tokenizer's, and for dense text (code, CSV) they run well above characters / 4, so a rewrite
/// would look cheaper than it is.
pub(super) fn approx_saving(mirror: &Mirror, at: (usize, usize), action: &Action) -> u64 {
    let Some(part) = mirror.messages().get(at.0).and_then(|m| m.parts.get(at.1)) else { return 0 };
    let (mut before, mut after) = (0usize, 0usize);
    for edit in crate::strategies::field_edits(part, action) {
        let old = edit.path.iter().try_fold(part, |v, key| v.get(key.as_str()));
        before += old.map_or(0, |v| chars(v.as_str()));
        after += chars(edit.value.as_str());
    }
    (before.saturating_sub(after) as u64).div_ceil(4)
}

/// Bytes of a field as the mirror counts it: a string's length (or that of the string a slim
/// marker stands for), 8 for anything else.
fn chars(v: Option<&str>) -> usize {
    v.map_or(8, crate::session::slim::bytes)
}
