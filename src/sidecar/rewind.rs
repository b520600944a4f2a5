//! A request whose history was rewound: the client cut it back or changed it before its end
//! (Claude Code's rewind through the proxy, OpenCode's revert and `/undo`). The index reads
//! the new history whole; the prunes and ranges whose reason left it are dropped
//! (`crate::strategies::rewind`), so the rewound history carries nothing from the branch it
//! left, and the edits go out whole.

use super::request::RequestContext;
use crate::session::History;
use crate::strategies::keep::PromptCache;
use crate::strategies::rewind;

/// Brings the session's index up to the request's history and its price sheet (whether its
/// provider caches the prompt, which the keep rules ask: `crate::strategies::keep`); when the
/// history lost calls the index had read, drops what no longer has its reason in it.
pub(super) fn sync(cx: &mut RequestContext) {
    let cache = PromptCache::of(cx.session.priced_by(cx.rules));
    let (rules, messages, slot) = (cx.rules, cx.mirror.messages(), &mut *cx.slot);
    let index = &mut cx.session.history.index;
    // Only the calls of the messages that changed can have been lost: those before are read
    // again as they were.
    let before = index.call_ids_from(cx.mirror.kept());
    let synced = index.sync(messages, cx.mirror.kept(), slot.resets(), rules);
    index.set_prompt_cache(cache);
    if !synced {
        return;
    }
    tracing::debug!(session = cx.sid, rebuilds = index.rebuilds(), "index rebuilt: what it had read changed");
    if !before.iter().any(|id| index.position(id).is_none()) {
        return;
    }
    let stale = rewind::stale_prunes(&History::new(messages), slot.state(), rules);
    for id in &stale {
        slot.drop_prune(id);
    }
    let ranges = rewind::stale_blocks(messages, &slot.state().blocks);
    for id in &ranges {
        slot.drop_block(*id);
    }
    if !(stale.is_empty() && ranges.is_empty()) {
        tracing::info!(
            session = cx.sid,
            prunes = stale.len(),
            ranges = ranges.len(),
            "the history was rewound: dropped what its branch had pruned"
        );
    }
}
