//! What one answered request adds to the session's savings (`crate::state::savings`): the
//! tokens dcp kept out of it, net of what it added, its size without dcp, and the policy's
//! balance for it. Counted as the replay counts a request (`crate::replay`), so that the
//! figures a live session records and those a replay of it gives agree.

use super::mirror::Mirror;
use super::{head, Session};
use crate::state::savings::{Mark, Request};
use crate::state::store::Slot;
use crate::strategies::{compress, Rules};

/// Characters / 4 of OpenCode 1.18.33's system prompt and tool definitions, which every
/// request carries besides the history and the sidecar never sees (`dcp replay`'s estimate,
/// `crate::replay::OPENCODE_OVERHEAD_CHARS`).
const OPENCODE_OVERHEAD_CHARS: u64 = 7_355;

/// Tokens a request spends around a text message besides its text (`dcp replay`'s frame).
const FRAME_TEXT: u64 = 8;

/// What the transform knows of the request it answered.
pub(super) struct Answered<'a> {
    pub mirror: &'a Mirror,
    pub appended: &'a [super::protocol::Synthetic],
    pub offered: bool,
    pub cold: bool,
    /// The change of the session's balance against no pruning on this request.
    pub saved: f64,
    pub rewrite: bool,
    pub compacted: bool,
}

/// The server's parts the figures need: its rules and the size of dcp's head, counted once.
pub(super) struct Counting<'a> {
    pub rules: &'a Rules,
    pub head: &'a mut Option<u64>,
}

/// Adds request `a` to the session's savings.
pub(super) fn record(c: Counting<'_>, session: &Session, slot: &mut Slot, a: &Answered<'_>) {
    let messages = a.mirror.messages();
    let without = a.mirror.sizes().iter().sum::<u64>() + OPENCODE_OVERHEAD_CHARS;
    let mut added: u64 =
        a.appended.iter().flat_map(|m| m.parts.iter().map(|p| slot.tokens.count(&p.text) + FRAME_TEXT)).sum();
    if a.offered {
        added += head::tokens(c.head, c.rules, &slot.tokens);
        added += tags(c.rules, slot, messages);
    }
    // A pruned call inside a compressed range is gone with the range: counted once.
    let ranges = compress::spans(messages, &slot.state.blocks, |b| b.applied);
    let outside = |m: usize| !ranges.iter().any(|s| s.from <= m && m <= s.to);
    let index = &session.index;
    let calls =
        slot.state.pruned.iter().filter(|(id, r)| r.applied && index.position(id).is_some_and(|at| outside(at.0)));
    let removed = calls.map(|(_, r)| r.tokens).sum::<u64>()
        + ranges.iter().map(|s| slot.state.blocks.by_id[&s.block].net_tokens()).sum::<u64>();
    let mark = match (a.compacted, a.rewrite) {
        (true, _) => Mark::Compaction,
        (false, true) => Mark::Rewrite,
        (false, false) => Mark::None,
    };
    let time = session.last_request_ms.unwrap_or_default();
    let request = Request { time, without, removed, added, cold: a.cold, saved: a.saved, mark };
    slot.state.savings.add(&request);
}

/// Tokens of the message id tags a request carries when the agent may compress ranges: one
/// per message that has a field the model sees, each the same few tokens.
fn tags(rules: &Rules, slot: &Slot, messages: &[crate::session::Message]) -> u64 {
    if !rules.config().tools.compress.enabled {
        return 0;
    }
    let sites = compress::tag_sites(messages, 0);
    let each = sites.last().map_or(0, |s| slot.tokens.count(&s.text));
    sites.len() as u64 * each
}
