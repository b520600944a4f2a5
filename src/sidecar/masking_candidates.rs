//! The masking candidates: the outputs observation masking would take now
//! (`crate::strategies::masking` says which, by its window), held as pending rewrites that are
//! recorded only when the policy applies them.
//!
//! Whether an old output is masked on a request is decided here and in two steps after it:
//! `transform`'s `Server::decide_request` (the per-request entry) gathers these candidates,
//! the pure `crate::policy::choose` says whether their rewrite goes on this request, and
//! `transform`'s `apply_pending` records and applies it.

use super::request::RequestContext;
use crate::config::RewriteMode;
use crate::policy;
use crate::state::{Action, PruneRecord, Strategy};
use crate::strategies::masking;

/// The calls masking would take now, with where they are, the record to make when one is
/// applied, and its cost to the policy (`Mirror::tail`: the history from its message on); then, in
/// batched mode, the calls beyond the narrower window: the volatile ones as candidates, the
/// others as riders, which a rewrite that goes anyway also masks (see
/// `crate::strategies::masking`, "What goes first"). The current turn's views of files are
/// marked, for a spend leaves them (`crate::policy::Pending::current_view`). Calls in a range
/// (applied or waiting) are not masked: the range stands in for them.
pub(super) fn mask_pending(cx: &mut RequestContext) -> Vec<((usize, usize), String, PruneRecord, policy::Pending)> {
    let (rules, slot, mirror) = (cx.rules, &mut *cx.slot, cx.mirror);
    let (index, sizes) = (&mut cx.session.history.index, &mut cx.session.caches.sizes);
    let messages = mirror.messages();
    let seen = slot.changes_mark();
    let (state, tokens) = slot.state_and_tokens();
    let candidates = index.mask_candidates(messages, state, Some(seen), rules, tokens).to_vec();
    let riders = match rules.config().rewrite.mode {
        RewriteMode::Batched => index.mask_riders(messages, state, rules, tokens),
        RewriteMode::Immediate => Vec::new(),
    };
    let ranged: rustc_hash::FxHashSet<&str> = slot.state().blocks.active_calls().collect();
    let flagged = candidates.iter().map(|c| (c, false)).chain(riders.iter().map(|c| (c, true)));
    flagged
        .filter(|(c, _)| ranged.is_empty() || !ranged.contains(index.candidate(c).0))
        .map(|(c, rider)| {
            let (id, tool, at) = index.candidate(c);
            let record = PruneRecord {
                strategy: Strategy::Masking,
                action: if c.inputs { Action::MaskInputs } else { Action::Mask },
                tokens: c.tokens,
                tool: tool.to_string(),
                applied: false,
            };
            let tokens = sizes.approx_saving(mirror, id, at, &record.action);
            let current_view = masking::is_view(tool) && index.in_current_turn(c);
            let pending = policy::Pending {
                tokens,
                tail: mirror.tail(at.0),
                rider: rider && !c.volatile,
                unsure: c.inputs,
                current_view,
            };
            (at, id.to_string(), record, pending)
        })
        .collect()
}
