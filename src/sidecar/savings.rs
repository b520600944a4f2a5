//! What one answered request adds to the session's savings (`crate::state::savings`): the
//! tokens dcp kept out of it, net of what it added, and its size with and without dcp, in
//! tokens. Counted as `dcp replay` counts a request (`crate::replay`: o200k, the frames around
//! each part, OpenCode's own system prompt and tools as a fixed estimate), so that the figures
//! a live session records and those a replay of it gives agree. Each message is counted once,
//! when it is new or changed.

use super::mirror::Mirror;
use super::{head, Session};
use crate::session::{str_field, Message};
use crate::state::savings::{Mark, Request};
use crate::state::store::Slot;
use crate::strategies::{compress, Rules};
use crate::tokens::TokenCounter;

/// Tokens of OpenCode 1.18.33's system prompt and tool definitions, which every request
/// carries besides the history and the sidecar never sees (`dcp replay`'s estimate,
/// `crate::replay::OPENCODE_OVERHEAD`).
const OPENCODE_OVERHEAD: u64 = 6_700;

/// Tokens a request spends around a text message, a tool call and a tool result besides their
/// text (`dcp replay`'s frames, `crate::replay::pieces`).
const FRAME_TEXT: u64 = 8;
const FRAME_TOOL: u64 = 25 + 17;

/// What the transform knows of the request it answered.
pub(super) struct Answered<'a> {
    pub mirror: &'a Mirror,
    pub appended: &'a [super::protocol::Synthetic],
    pub offered: bool,
    pub cold: bool,
    /// The tail a rewrite applied on this request re-bills (the mirror's unit), if it applied one.
    pub rewritten: Option<u64>,
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
    let appended: u64 =
        a.appended.iter().flat_map(|m| m.parts.iter().map(|p| slot.tokens.count(&p.text) + FRAME_TEXT)).sum();
    let head = if a.offered { head::tokens(c.head, c.rules, &slot.tokens) } else { 0 };
    let added = appended + head + if a.offered { tags(c.rules, slot, messages) } else { 0 };
    let removed = removed(session, slot, messages, messages.len());
    let history = history_tokens(&mut slot.state.savings.meter.messages, a.mirror, &slot.tokens);
    // What stays cached in front of a rewrite: the messages before the first one it changed,
    // as they were sent (the prunes already in force there applied).
    let rewritten = a.rewritten.map(|tail| {
        let first = first_rewritten(a.mirror.sizes(), tail);
        let counted = &slot.state.savings.meter.messages;
        let before: u64 = counted[..first.min(counted.len())].iter().sum();
        OPENCODE_OVERHEAD + head + before.saturating_sub(removed_before(session, slot, messages, first))
    });
    let mark = match (a.compacted, a.rewritten.is_some()) {
        (true, _) => Mark::Compaction,
        (false, true) => Mark::Rewrite,
        (false, false) => Mark::None,
    };
    let request = Request {
        time: session.last_request_ms.unwrap_or_default(),
        without: history + OPENCODE_OVERHEAD,
        removed,
        added,
        appended,
        offered: a.offered,
        fixed: OPENCODE_OVERHEAD,
        cold: a.cold,
        rewritten,
        mark,
    };
    slot.state.savings.add(&request);
}

/// Tokens the prunes and ranges in force take out of the first `upto` messages of this
/// request's history.
fn removed(session: &Session, slot: &Slot, messages: &[Message], upto: usize) -> u64 {
    // A pruned call inside a compressed range is gone with the range: counted once.
    let ranges = compress::spans(messages, &slot.state.blocks, |b| b.applied);
    let outside = |m: usize| !ranges.iter().any(|s| s.from <= m && m <= s.to);
    let index = &session.index;
    let in_history = |id: &str| index.position(id).is_some_and(|at| at.0 < upto && outside(at.0));
    let calls = slot.state.pruned.iter().filter(|(id, r)| r.applied && in_history(id));
    let ranges = ranges.iter().filter(|s| s.to < upto);
    calls.map(|(_, r)| r.tokens).sum::<u64>()
        + ranges.map(|s| slot.state.blocks.by_id[&s.block].net_tokens()).sum::<u64>()
}

/// What the prunes in force before message `first` took out, those this request applied
/// (none lie before the first message it changed) aside.
fn removed_before(session: &Session, slot: &Slot, messages: &[Message], first: usize) -> u64 {
    removed(session, slot, messages, first)
}

/// The first message a rewrite that re-bills `tail` (the mirror's unit) changed: where the
/// history from there on weighs `tail`.
fn first_rewritten(sizes: &[u64], tail: u64) -> usize {
    let mut rest: u64 = sizes.iter().sum();
    for (i, size) in sizes.iter().enumerate() {
        if rest <= tail {
            return i;
        }
        rest -= size;
    }
    sizes.len()
}

/// Tokens of the history as OpenCode sent it: the messages the last request had unchanged are
/// not counted again.
fn history_tokens(counted: &mut Vec<u64>, mirror: &Mirror, counter: &TokenCounter) -> u64 {
    let messages = mirror.messages();
    counted.truncate(mirror.kept().min(messages.len()));
    for message in &messages[counted.len()..] {
        counted.push(message_tokens(message, counter));
    }
    counted.iter().sum()
}

/// A message's tokens as `dcp replay` counts them: its texts, inputs and results, and the
/// frame of each.
fn message_tokens(message: &Message, counter: &TokenCounter) -> u64 {
    let frames: u64 = message
        .parts
        .iter()
        .map(|p| match str_field(p, "type") {
            Some("text") => FRAME_TEXT,
            Some("tool") => FRAME_TOOL,
            _ => 0,
        })
        .sum();
    crate::context::measure(std::slice::from_ref(message), counter).total + frames
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
