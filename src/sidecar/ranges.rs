//! What range compression adds to a transform: the message id tags the agent names ranges
//! by, the summaries that replace applied ranges, and the ranges still waiting for the policy.
//!
//! The tags are edits that append to a field, sent once per message like any other edit (the
//! plugin keeps them), so a long history costs one tag edit per new message. They start once
//! the history is long enough for a range to free much ([`tags_start`]); before, the agent
//! names a range by the tool call ids in it. The summaries are sent in full with every answer:
//! there are few, and they are short.
//!
//! Where each range stands in the history (its [`Span`]) is found by reading every message id,
//! so it is kept between requests ([`spans::SpanCache`]) and found again only when the ranges changed
//! or a message it read changed, or came back after a revert.

pub(super) mod spans;

use super::mirror::Mirror;
use super::protocol::{Edit, Replace};
use super::request::RequestContext;
use crate::policy;
use crate::session::Message;
use crate::state::blocks::Blocks;
use crate::state::store::Slot;
use crate::strategies::compress::{Span, TurnTag};
use crate::strategies::{compress, masking, turns, Rules};
use crate::texts;
use crate::texts::restore::Via;

/// Makes the turn right before the latest prompt a range of dcp's own when its steps may
/// become one line (`crate::strategies::turns`), with `strategies.masking.collapseTurns` on.
/// Whether it made one.
pub(super) fn collapse_turn(cx: &mut RequestContext) -> bool {
    let masking = &cx.rules.config().strategies.masking;
    // A turn is finished by the prompt after it: with fewer than two, there is none to look
    // for, and no walk back through a long run of one prompt on each of its requests.
    if !(masking.enabled && masking.collapse_turns) || cx.session.history.index.prompts() < 2 {
        return false;
    }
    // The agent can name the range by its tag, and take it into a larger one, only with its
    // `compress` on; otherwise the tag would be tokens in every request for nothing.
    let tag = if cx.rules.config().tools.compress.enabled { TurnTag::Shown } else { TurnTag::Omitted };
    let (messages, slot) = (cx.mirror.messages(), &mut *cx.slot);
    let (index, rules) = (&cx.session.history.index, cx.rules);
    let named = |c: &crate::session::ToolCall<'_>| index.keeps_named(c.call_id, rules);
    let runs = turns::finished_turn(messages, cx.mirror.sizes(), &slot.state().blocks, rules, &named);
    for turn in &runs {
        let restorable = cx.restore.map(|via| restorable_line(&messages[turn.from..=turn.to], slot, via));
        let summary = restorable.as_deref().unwrap_or(&turn.summary);
        let (range, line) = ((turn.from, turn.to), (summary, tag));
        let (state, tokens) = slot.state_for_strategies();
        let id = compress::turn_block(messages, state, range, line, super::protocol::now_ms(), tokens);
        let block = &slot.state().blocks.by_id[&id];
        let (tools, tokens) = (block.direct_tools.clone(), block.net_tokens());
        slot.record_block(id, &tools, tokens);
    }
    !runs.is_empty()
}

/// The line of a finished turn's `steps` whose outputs the agent can restore `via` this:
/// each call with its agent-facing id (assigned now), the first [`turns::NAMED`] with their
/// tool and key argument.
fn restorable_line(steps: &[Message], slot: &mut Slot, via: Via) -> String {
    let calls = crate::session::tool_calls(steps);
    let mut ids = calls.iter().map(|c| slot.id_for(c.call_id));
    let named: Vec<(u32, String)> = calls
        .iter()
        .take(turns::NAMED)
        .filter_map(|c| Some((ids.next()?, masking::call_label(c, turns::KEY_CHARS))))
        .collect();
    let rest: Vec<u32> = ids.collect();
    texts::restore::collapsed_turn(&named, &rest, via)
}

/// The first message that carries an id tag on a request whose messages weigh `sizes`, if
/// messages carry tags at all: with `compress` offered ([`tags_start`]).
pub(super) fn tags(rules: &Rules, offered: bool, sizes: &[u64]) -> Option<usize> {
    let compress = &rules.config().tools.compress;
    (offered && compress.enabled).then(|| tags_start(sizes, compress.tags_from.into()))
}

/// The first message that carries an id tag: the first after which the history before it
/// (as OpenCode sends it, before dcp's prunes: these sizes do not change) reaches `from` tokens
/// (`tools.compress.tagsFrom`). The history only grows, so a message tagged once stays
/// tagged, and one sent without its tag never gets it: the prompt prefix stays byte-stable.
pub(super) fn tags_start(sizes: &[u64], from: u64) -> usize {
    let mut before = 0;
    for (i, size) in sizes.iter().enumerate() {
        if before >= from {
            return i;
        }
        before += size;
    }
    sizes.len()
}

/// The tag edits of `messages[from..]`.
pub(super) fn tag_edits(messages: &[Message], from: usize) -> Vec<Edit> {
    compress::tag_sites(messages, from)
        .into_iter()
        .map(|site| Edit { m: site.message, p: site.part, path: site.path, value: None, append: Some(site.text) })
        .collect()
}

/// The applied ranges of a request: each replaces its messages with its summary.
pub(super) fn applied(cx: &mut RequestContext) -> Vec<Replace> {
    let (blocks, resets) = (&cx.slot.state().blocks, cx.slot.resets());
    let spans = cx.session.caches.spans.spans(cx.mirror, (blocks, resets), cx.views, |b| b.applied);
    replacements(cx.sid, cx.mirror.messages(), blocks, spans)
}

/// The applied ranges, at `spans` in `messages`: each replaces its messages with its summary.
pub(super) fn replacements(sid: &str, messages: &[Message], blocks: &Blocks, spans: Vec<Span>) -> Vec<Replace> {
    spans
        .into_iter()
        .map(|span| {
            let block = &blocks.by_id[&span.block];
            let message = compress::summary_message(sid, block, &messages[span.from]);
            Replace { from: span.from, to: span.to, message }
        })
        .collect()
}

/// The ranges waiting for the policy, at `spans`, with where each starts and what it costs and
/// saves: applying one rewrites the history from its first message on.
pub(super) fn pending(spans: Vec<Span>, blocks: &Blocks, mirror: &Mirror) -> Vec<(usize, u32, policy::Pending)> {
    spans
        .into_iter()
        .map(|span| {
            let tokens = blocks.by_id[&span.block].net_tokens();
            (span.from, span.block, policy::Pending { tokens, tail: mirror.tail(span.from), ..Default::default() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_start_after_the_history_before_them_reaches_the_threshold_and_never_move() {
        let sizes = [3_000, 9_000, 10_000, 500, 700];
        assert_eq!(tags_start(&sizes, 0), 0, "0 tags every message");
        assert_eq!(tags_start(&sizes, 20_000), 3, "12,000 before the third message, 22,000 before the fourth");
        assert_eq!(tags_start(&sizes[..3], 20_000), 3, "none yet: the history has not reached it");
        assert_eq!(tags_start(&sizes, 1_000_000), 5);
        // A longer history never moves the start: what was sent untagged stays so.
        assert_eq!(tags_start(&sizes[..4], 20_000), tags_start(&sizes, 20_000));
    }
}
