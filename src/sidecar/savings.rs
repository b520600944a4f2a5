//! What one answered request adds to the session's savings (`crate::state::savings`): the
//! tokens dcp kept out of it, net of what it added, and its size with and without dcp, in
//! tokens. Counted as `dcp replay` counts a request (`crate::replay`: o200k, the frames around
//! each part, OpenCode's own system prompt and tools as a fixed estimate), so that the figures
//! a live session records and those a replay of it gives agree. Each message is counted once,
//! when it is new or changed.

use rustc_hash::FxHashSet as HashSet;

use super::in_force::{InForce, Sources, Views};
use super::mirror::Mirror;
use super::protocol::Transformed;
use super::request::RequestContext;
use crate::measure::{FRAME_CALL, FRAME_RESULT, FRAME_TEXT, OPENCODE_OVERHEAD};
use crate::session::{str_field, Message};
use crate::state::savings::{Mark, RequestFigures};
use crate::state::store::{ChangesMark, Slot};
use crate::strategies::compress::{self, Span};
use crate::strategies::incremental::Index;
use crate::strategies::Rules;
use crate::tokens::TokenCounter;

/// A tool part is sent as a call and its result, each in its frame.
const FRAME_TOOL: u64 = FRAME_CALL + FRAME_RESULT;

/// What counting a session's next request needs of the last one, in this process: a
/// restarted sidecar counts the history once more.
#[derive(Debug, Default)]
pub(super) struct Meter {
    /// Tokens of each message of the last request's history, as OpenCode sent it.
    messages: Vec<u64>,
    /// Tokens dcp appended after the last request's history.
    appended: u64,
    /// Whether the last request carried dcp's head; `None` before the first.
    offered: Option<bool>,
    /// The prunes and ranges in force at the last request, and the slot's revision then.
    applied: HashSet<String>,
    blocks: HashSet<u32>,
    revision: u64,
    /// Where the slot's changes were at the last look (see [`Slot::changes`]).
    changes: Option<ChangesMark>,
    /// The newest compaction the last request's history had.
    compaction: i64,
}

impl Meter {
    /// Forgets the counts of the messages past the first `kept`: a request that was never
    /// counted may have changed them.
    pub(super) fn forget_after(&mut self, kept: usize) {
        self.messages.truncate(kept);
    }
}

/// Adds the request `answer` answered to the session's savings.
pub(super) fn record(cx: &mut RequestContext, answer: &Transformed) {
    let offered = cx.offered();
    let head = if offered { cx.head_tokens() } else { 0 };
    let (rules, slot, session, mirror) = (cx.rules, &mut *cx.slot, &mut *cx.session, cx.mirror);
    let messages = mirror.messages();
    let appended: u64 =
        answer.append.iter().flat_map(|m| m.parts.iter().map(|p| slot.tokens.count(&p.text) + FRAME_TEXT)).sum();
    let added = appended + head + if offered { tags(rules, slot, mirror) } else { 0 };
    let index = &session.index;
    let ranges = session.spans.spans(mirror, (&slot.state.blocks, slot.resets()), cx.views, |b| b.applied);
    session.in_force.update(Sources { slot, index, mirror, sizes: &mut session.sizes }, cx.views);
    let in_force = removed(&session.in_force, slot, &ranges, messages.len());
    let meter = &mut session.savings;
    let history = history_tokens(&mut meter.messages, mirror, &mut slot.tokens);
    // A rewrite changes what was sent before from its first changed message on; what is in
    // front of it, as it was sent, stays cached.
    let first = first_applied_now(meter, index, slot, &ranges, cx.views);
    let before = |first: usize| meter.messages[..first.min(meter.messages.len())].iter().sum::<u64>();
    let in_force_view = &session.in_force;
    let rewritten =
        first.map(|f| OPENCODE_OVERHEAD + head + before(f).saturating_sub(removed(in_force_view, slot, &ranges, f)));
    let compacted = meter.offered.is_some() && mirror.newest_compaction() != meter.compaction;
    let mark = match (compacted, rewritten.is_some()) {
        (true, _) => Mark::Compaction,
        (false, true) => Mark::Rewrite,
        (false, false) => Mark::None,
    };
    let request = RequestFigures {
        time: session.ledger.last_request.unwrap_or_default(),
        without: history + OPENCODE_OVERHEAD,
        removed: in_force,
        added,
        appended,
        appended_before: meter.appended,
        head_moved: meter.offered.is_some_and(|o| o != offered),
        fixed: OPENCODE_OVERHEAD,
        cold: cx.facts.gap_went_cold,
        rewritten,
        mark,
        rates: cx.facts.rates,
    };
    (meter.appended, meter.offered, meter.compaction) = (appended, Some(offered), mirror.newest_compaction());
    slot.state.savings.add(&request);
    // The figures ride along with the session's next save, as the policy's ledger does;
    // when this request's answer handed one out already (without them), another follows
    // once the save interval is up.
    session.saves.defer();
}

/// Tokens the prunes and the ranges in force (`ranges`, their spans in this request's
/// history) take out of the first `upto` messages of it.
fn removed(in_force: &InForce, slot: &Slot, ranges: &[Span], upto: usize) -> u64 {
    // A pruned call inside a compressed range is gone with the range: counted once.
    let calls = in_force.tokens(upto, ranges);
    calls + ranges.iter().filter(|s| s.to < upto).map(|s| slot.state.blocks.by_id[&s.block].net_tokens()).sum::<u64>()
}

/// The first message of the history that a prune or range put in force since the last request
/// changed, if one did. The first request a process answers takes what is in force as it
/// finds it: those rewrites were sent before.
fn first_applied_now(meter: &mut Meter, index: &Index, slot: &Slot, ranges: &[Span], views: Views) -> Option<usize> {
    if slot.revision() == meter.revision && meter.offered.is_some() {
        return None;
    }
    let seen = meter.offered.is_some();
    meter.revision = slot.revision();
    let mut first: Option<usize> = None;
    let mut at = |m: usize| first = Some(first.map_or(m, |f| f.min(m)));
    let mut note = |id: &String| {
        if !meter.applied.contains(id.as_str()) {
            meter.applied.insert(id.clone());
            if let Some(position) = index.position(id).filter(|_| seen) {
                at(position.0);
            }
        }
    };
    // What was put in force since the last look is among the slot's changes since, unless
    // the prunes were reset between: then every prune in force is looked at.
    let since = meter.changes.filter(|_| views == Views::Kept).and_then(|mark| slot.changes_since(mark));
    meter.changes = Some(slot.changes_mark());
    let pruned = &slot.state.pruned;
    match since {
        Some(changes) => changes.iter().filter(|id| pruned.get(*id).is_some_and(|r| r.applied)).for_each(&mut note),
        None => pruned.iter().filter(|(_, r)| r.applied).for_each(|(id, _)| note(id)),
    }
    for span in ranges {
        if meter.blocks.insert(span.block) && seen {
            at(span.from);
        }
    }
    first
}

/// Tokens of the history as OpenCode sent it: the messages the last request had unchanged are
/// not counted again.
fn history_tokens(counted: &mut Vec<u64>, mirror: &Mirror, counter: &mut TokenCounter) -> u64 {
    let messages = mirror.messages();
    counted.truncate(mirror.kept().min(messages.len()));
    for message in &messages[counted.len()..] {
        counted.push(message_tokens(message, counter));
    }
    counted.iter().sum()
}

/// A message's tokens as `dcp replay` counts them: its texts, inputs and results, and the
/// frame of each. Its outputs' counts stay in `counter`, where the count ahead finds them.
fn message_tokens(message: &Message, counter: &mut TokenCounter) -> u64 {
    let frames: u64 = message
        .parts
        .iter()
        .map(|p| match str_field(p, "type") {
            Some("text") => FRAME_TEXT,
            Some("tool") => FRAME_TOOL,
            _ => 0,
        })
        .sum();
    crate::measure::measure_cached(std::slice::from_ref(message), counter).total + frames
}

/// Tokens of the message id tags a request carries when the agent may compress ranges: one
/// per message that has a field the model sees, each the same few tokens (the mirror finds
/// them once per message).
fn tags(rules: &Rules, slot: &Slot, mirror: &Mirror) -> u64 {
    if !rules.config().tools.compress.enabled {
        return 0;
    }
    let (sites, last) = mirror.tag_sites();
    let last = last.and_then(|at| compress::tag_site(&mirror.messages()[at], at));
    let each = last.map_or(0, |s| slot.tokens.count(&s.text));
    sites as u64 * each
}
