//! What one answered request adds to the session's savings (`crate::state::savings`): its size
//! without dcp and as dcp sent it, in tokens, and what of each the provider still had cached.
//! Counted as `dcp replay` counts a request (`crate::replay`: o200k, the frames around each
//! part, OpenCode's own system prompt and tools as a fixed estimate), so that the figures a
//! live session records and those a replay of it gives agree:
//!
//! - without dcp, the history as OpenCode sent it but for dcp's own agent calls (a run without
//!   dcp has none: `measure::is_agent_call`); and a request whose model step turned out to call
//!   nothing but dcp's tools (`measure::agent_only`) would not have been made at all: once the
//!   next request shows that step, it is taken out of the figures without dcp
//!   ([`Savings::unmade`](crate::state::savings::Savings::unmade));
//! - as sent, what was sent, counted: each message with the edits the plugin holds applied
//!   (the answer's, kept as the plugin keeps them: the same, added to, kept before a changed
//!   message and added to, or all anew), each
//!   compressed range as its summary message, then dcp's head and what it appended. Not what
//!   the prunes were recorded to save: a range whose summary is longer than its messages, the
//!   frames of the messages a range takes, the message id tags, all count as they were sent.
//!
//! The cached prefix of a request is what the one before it sent up to the first piece this
//! one changed, as replay finds it: the first message changed by a prune or range put in force
//! since (found by id, as the views of the prunes are kept), a range taken away, or a message
//! OpenCode changed (the plugin's `base`); inside a message a prune's edits changed, up to its
//! first edited piece ([`piece`]: its texts and inputs, then its results). A
//! process's first request takes the prunes and ranges the state file had in force before it
//! as sent before ([`Meter::seed`]). Each message is counted when it is new or its edits
//! changed.

use rustc_hash::FxHashSet as HashSet;

use super::facts::RequestFacts;
use super::in_force::Views;
use super::mirror::Mirror;
use super::protocol::{Edit, EditsAnswer, Replace, Transformed};
use super::ranges::spans::SpanCache;
use crate::measure::{agent_only, is_agent_call, FRAME_CALL, FRAME_RESULT, FRAME_TEXT, OPENCODE_OVERHEAD};
use crate::prices::Rates;
use crate::session::node::NULL;
use crate::session::{str_field, Message, Node, Role};
use crate::state::saver::SaveTiming;
use crate::state::savings::{Mark, RequestFigures, Savings, Unmade};
use crate::state::store::{ChangesMark, Slot};
use crate::strategies::compress::Span;
use crate::strategies::incremental::Index;
use crate::tokens::TokenCounter;

mod piece;
#[cfg(test)]
mod tests;

/// A tool part is sent as a call and its result, each in its frame.
const FRAME_TOOL: u64 = FRAME_CALL + FRAME_RESULT;

/// What counting a session's next request needs of the last one, in this process: a
/// restarted sidecar counts the history once more.
#[derive(Debug, Default)]
pub(super) struct Meter {
    /// By message of the last request's history: its tokens as OpenCode sent it, those without
    /// dcp's agent calls, and those dcp sent with its edits (see [`Meter::count_sent`]).
    whole: Vec<u64>,
    without: Vec<u64>,
    sent: Vec<u64>,
    /// By message: the edits the plugin holds, and those the last request's answer replaced
    /// (of the messages whose edits it changed).
    edits: Vec<Vec<Edit>>,
    replaced: Vec<(usize, Vec<Edit>)>,
    /// The compressed ranges of the last request, with their summary messages' tokens.
    ranges: Vec<RangeSent>,
    /// Whether the last request carried dcp's head; `None` before the first.
    offered: Option<bool>,
    /// The prunes and ranges in force at the last request (before the first, as the state file
    /// had them: `seeded`), and the slot's revision then.
    applied: HashSet<String>,
    blocks: HashSet<u32>,
    seeded: bool,
    revision: u64,
    /// Where the slot's changes were at the last look (see [`Slot::changes`]).
    changes: Option<ChangesMark>,
    /// The newest compaction the last request's history had.
    compaction: i64,
    /// The last request, until the next one shows whether its step called only dcp's tools.
    last: Option<Last>,
}

/// A compressed range as sent: messages `from..=to` became a summary of `tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RangeSent {
    from: usize,
    to: usize,
    /// The summary's length in bytes: the same range with the same length has the same count.
    bytes: usize,
    tokens: u64,
}

/// The last request as counted, should its step turn out to call only dcp's tools.
#[derive(Debug, Clone, Copy)]
struct Last {
    /// Its history's length: the step it produced is the first assistant message after it.
    history: usize,
    unmade: Unmade,
}

impl Meter {
    /// Before a process's first request of a session is decided: what the state file has in
    /// force was sent before, so that what this request puts in force is told from it.
    pub(super) fn seed(&mut self, slot: &Slot) {
        if self.offered.is_some() || self.seeded {
            return;
        }
        let pruned = slot.state().pruned.iter().filter(|(_, r)| r.applied);
        self.applied = pruned.map(|(id, _)| id.clone()).collect();
        self.blocks = slot.state().blocks.active().filter(|b| b.applied).map(|b| b.id).collect();
        (self.revision, self.changes, self.seeded) = (slot.revision(), Some(slot.changes_mark()), true);
    }
}

impl Meter {
    /// A request that never reached the model (its upstream failed): nothing of it counts, but
    /// the edits its `answer` gave for a history of `messages` are held, as the client holds
    /// them, and every message is counted anew with the next request (this one may have
    /// changed any).
    pub(super) fn unsent(&mut self, answer: Option<&Transformed>, messages: usize) {
        if let Some(answer) = answer {
            self.hold_edits(&answer.edits, messages);
        }
        self.whole.clear();
        self.without.clear();
        self.sent.clear();
    }
}

/// What counting a request's savings reads and changes of its session: its slot, its meter,
/// the spans of its ranges, its index, its save timing, its mirror, and the request's facts.
pub(super) struct Counting<'a> {
    pub slot: &'a mut Slot,
    pub meter: &'a mut Meter,
    pub spans: &'a mut SpanCache,
    pub index: &'a Index,
    pub saves: &'a mut SaveTiming,
    pub mirror: &'a Mirror,
    pub views: Views,
    pub facts: &'a RequestFacts,
    /// Whether the request carried dcp's head, and the head's tokens then (0 without).
    pub offered: bool,
    pub head: u64,
}

/// Adds the request `answer` answered to the session's savings.
pub(super) fn record(c: Counting<'_>, answer: &Transformed) {
    let Counting { slot, meter, spans, index, saves, mirror, views, facts: request, offered, head } = c;
    let messages = mirror.messages();
    let seen = meter.offered.is_some();
    let history = meter.whole.len();
    let kept = if seen { mirror.kept().min(history) } else { 0 };
    meter.count_history(messages, kept, &mut slot.tokens);
    let edited = meter.hold_edits(&answer.edits, messages.len());
    meter.count_sent(messages, kept, &edited, &mut slot.tokens);
    let ranges_changed = meter.hold_ranges(&answer.replace, &slot.tokens);
    if let Some(last) = meter.last.take() {
        let step = messages.get(last.history..).and_then(|rest| rest.iter().find(|m| m.role() == Role::Assistant));
        if step.is_some_and(agent_only) {
            slot.savings_mut().unmade(&last.unmade);
        }
    }
    let spans = spans.spans(mirror, (&slot.state().blocks, slot.resets()), views, |b| b.applied);
    let put_in_force = first_applied_now(meter, index, slot, &spans, views);
    let rewritten = [put_in_force, ranges_changed.filter(|_| seen)].into_iter().flatten().min();
    // A message OpenCode changed (an output it cleared, a compaction) is sent anew from there on.
    let host = (seen && kept < history).then_some(kept);
    // A rewrite that edits a message leaves its pieces in front of the first edited one as sent.
    let within = match rewritten {
        Some(m) if ranges_changed.is_none_or(|r| r > m) && host.is_none_or(|h| h > m) => {
            meter.unchanged_in_front(messages, m, &mut slot.tokens)
        }
        _ => 0,
    };
    let facts = Facts {
        offered,
        head,
        appended: appended(answer, &slot.tokens),
        cold: request.gap_went_cold,
        compacted: seen && mirror.newest_compaction() != meter.compaction,
        time: slot.ledger().last_request.unwrap_or_default(),
        rates: request.rates,
    };
    let request = meter.figures(&slot.state().savings, &facts, Changed { rewritten, host, within });
    let context_before = slot.state().savings.last_context;
    let billed = slot.savings_mut().add(&request);
    // The steps new to this request say what the provider billed for the ones before.
    super::usage::steps::from_history(slot.savings_mut(), &messages[kept.min(messages.len())..]);
    let unmade = Unmade { request: slot.state().savings.requests, without: request.without, billed, context_before };
    meter.last = Some(Last { history: messages.len(), unmade });
    (meter.offered, meter.compaction) = (Some(offered), mirror.newest_compaction());
    // The figures ride along with the session's next save, as the policy's ledger does;
    // when this request's answer handed one out already (without them), another follows
    // once the save interval is up.
    saves.defer();
}

/// The first message of the history a request changed since the last one: by dcp's rewrites,
/// and by OpenCode.
#[derive(Debug, Clone, Copy)]
struct Changed {
    rewritten: Option<usize>,
    host: Option<usize>,
    /// Tokens of the first rewritten message's pieces in front of its first changed one.
    within: u64,
}

/// What a request's figures need besides the meter's counts.
struct Facts {
    offered: bool,
    /// Tokens of dcp's head, when the request carries it, and of what it appended.
    head: u64,
    appended: u64,
    /// The provider's cache had gone cold; OpenCode compacted the session since the last
    /// request.
    cold: bool,
    compacted: bool,
    time: i64,
    /// The session's cache prices.
    rates: Rates,
}

impl Meter {
    /// The request's figures: its sizes, and the prefixes of each the provider still had
    /// cached, given what it `changed`.
    fn figures(&self, savings: &Savings, f: &Facts, changed: Changed) -> RequestFigures {
        let Changed { rewritten, host, within } = changed;
        let n = self.whole.len();
        let fixed = OPENCODE_OVERHEAD;
        let without = fixed + self.without.iter().sum::<u64>();
        let with = fixed + f.head + self.sent_before(n) + f.appended;
        // The history the last request sent: what it sent but for what it appended.
        let sent_before = savings.last_sent.saturating_sub(savings.last_appended);
        let head_moved = self.offered.is_some_and(|o| o != f.offered);
        // A history shorter than the last one without dcp was cut (a compaction, a revert).
        let cut = f.compacted || without < savings.last_context;
        let cached_without = match (f.cold, cut) {
            (true, _) => 0,
            (false, true) => fixed,
            (false, false) => (fixed + self.without[..host.unwrap_or(n)].iter().sum::<u64>()).min(savings.last_context),
        };
        let first = rewritten.into_iter().chain(host).min();
        let prefix = first.map(|m| fixed + f.head + self.sent_before(m) + within);
        let cached_with = match (f.cold, head_moved, cut) {
            (true, _, _) => 0,
            // The head sits before the history: a head that came or went leaves OpenCode's
            // own system prompt and tools cached, and nothing after.
            (false, true, _) => fixed,
            (false, false, true) => fixed + f.head,
            (false, false, false) => prefix.unwrap_or(with).min(sent_before),
        };
        let rewrote = rewritten.is_some_and(|m| fixed + f.head + self.sent_before(m) + within < sent_before);
        let mark = match (f.compacted, rewrote) {
            (true, _) => Mark::Compaction,
            (false, true) => Mark::Rewrite,
            (false, false) => Mark::None,
        };
        let (time, appended, rates) = (f.time, f.appended, f.rates);
        RequestFigures { time, without, with, appended, cached_without, cached_with, mark, rates }
    }

    /// Counts the messages from `kept` on, which are new or changed: whole, and without dcp's
    /// agent calls (none of a step that called only them).
    fn count_history(&mut self, messages: &[Message], kept: usize, counter: &mut TokenCounter) {
        self.whole.truncate(kept);
        self.without.truncate(kept);
        for message in &messages[kept.min(messages.len())..] {
            let whole = message_tokens(message, counter);
            let agent: u64 = message.parts.iter().filter(|p| is_agent_call(p)).map(|p| part_tokens(p, counter)).sum();
            let without = if agent_only(message) { 0 } else { whole.saturating_sub(agent) };
            self.whole.push(whole);
            self.without.push(without);
        }
    }

    /// Keeps the edits the plugin holds after `edits`, by message, for a history of `n`
    /// messages; returns the messages whose edits changed.
    fn hold_edits(&mut self, edits: &EditsAnswer, n: usize) -> Vec<usize> {
        self.edits.resize_with(n, Vec::new);
        let edited: Vec<usize> = match edits {
            EditsAnswer::Same => Vec::new(),
            EditsAnswer::Add(new) => edited_by(new, n),
            EditsAnswer::Keep { before, add } => {
                let before = (*before).min(n);
                let mut edited = edited_by(add, before);
                edited.extend((before..n).filter(|&m| !self.edits[m].is_empty() || add.iter().any(|e| e.m == m)));
                edited
            }
            EditsAnswer::Full(all) => {
                let mut by_message: Vec<Vec<Edit>> = vec![Vec::new(); n];
                all.iter().filter(|e| e.m < n).for_each(|e| hold(&mut by_message[e.m], e));
                let edited: Vec<usize> = (0..n).filter(|&m| self.edits[m] != by_message[m]).collect();
                let before = std::mem::replace(&mut self.edits, by_message);
                self.replaced = replaced_of(before, &edited);
                return edited;
            }
        };
        self.replaced = edited.iter().map(|&m| (m, self.edits[m].clone())).collect();
        match edits {
            EditsAnswer::Same | EditsAnswer::Full(_) => {}
            EditsAnswer::Add(new) => new.iter().filter(|e| e.m < n).for_each(|e| hold(&mut self.edits[e.m], e)),
            EditsAnswer::Keep { before, add } => {
                self.edits.iter_mut().skip(*before).for_each(|held| *held = Vec::new());
                add.iter().filter(|e| e.m < n).for_each(|e| hold(&mut self.edits[e.m], e));
            }
        }
        edited
    }

    /// Tokens of message `m`'s pieces in front of the first one its edits changed at this
    /// request, when the first change of the history is one of them (see [`piece`]).
    fn unchanged_in_front(&self, messages: &[Message], m: usize, counter: &mut TokenCounter) -> u64 {
        let in_a_range = self.ranges.iter().any(|r| (r.from..=r.to).contains(&m));
        let Some((_, before)) = self.replaced.iter().find(|(at, _)| *at == m).filter(|_| !in_a_range) else {
            return 0;
        };
        messages.get(m).map_or(0, |message| piece::unchanged_in_front(message, before, &self.edits[m], counter))
    }

    /// Counts what dcp sent of the messages from `kept` on and of those whose edits changed
    /// (`edited`): each with its edits applied.
    fn count_sent(&mut self, messages: &[Message], kept: usize, edited: &[usize], counter: &mut TokenCounter) {
        self.sent.truncate(kept);
        for (m, message) in messages.iter().enumerate().skip(self.sent.len()) {
            self.sent.push(sent_tokens(message, &self.edits[m], self.whole[m], counter));
        }
        for &m in edited.iter().filter(|&&m| m < kept) {
            self.sent[m] = sent_tokens(&messages[m], &self.edits[m], self.whole[m], counter);
        }
    }

    /// Keeps this request's compressed ranges, counting a summary only when it is new; returns
    /// where the first range that came, went or changed since the last request starts.
    fn hold_ranges(&mut self, replace: &[Replace], counter: &TokenCounter) -> Option<usize> {
        let old = std::mem::take(&mut self.ranges);
        for r in replace {
            let (bytes, texts) = summary_texts(&r.message);
            let same = old.iter().find(|o| (o.from, o.to, o.bytes) == (r.from, r.to, bytes));
            let tokens = same.map_or_else(|| texts.iter().map(|t| counter.count(t) + FRAME_TEXT).sum(), |o| o.tokens);
            self.ranges.push(RangeSent { from: r.from, to: r.to, bytes, tokens });
        }
        let gone = old.iter().filter(|o| !self.ranges.contains(o));
        let came = self.ranges.iter().filter(|r| !old.contains(r));
        gone.chain(came).map(|r| r.from).min()
    }

    /// Tokens dcp sent of the history's first `upto` messages: each as sent, a range's
    /// messages as its summary.
    fn sent_before(&self, upto: usize) -> u64 {
        let upto = upto.min(self.sent.len());
        let mut total: u64 = self.sent[..upto].iter().sum();
        for r in self.ranges.iter().filter(|r| r.from < upto && r.to < self.sent.len()) {
            let covered: u64 = self.sent[r.from..=r.to.min(upto - 1)].iter().sum();
            total = total.saturating_sub(covered) + r.tokens;
        }
        total
    }
}

/// The messages of a history of `n` that `edits` point at, each once, in order.
/// Adds `edit` to a message's held edits at their exact length: a message holds an edit or
/// two, and a vector grown by pushes keeps room for four, which over a long history was most
/// of what the meter held.
fn hold(held: &mut Vec<Edit>, edit: &Edit) {
    held.reserve_exact(1);
    held.push(edit.clone());
}

/// The edits `before` held of each message of `edited`, taken out of it.
fn replaced_of(mut before: Vec<Vec<Edit>>, edited: &[usize]) -> Vec<(usize, Vec<Edit>)> {
    edited.iter().map(|&m| (m, before.get_mut(m).map(std::mem::take).unwrap_or_default())).collect()
}

fn edited_by(edits: &[Edit], n: usize) -> Vec<usize> {
    let mut edited: Vec<usize> = edits.iter().filter(|e| e.m < n).map(|e| e.m).collect();
    edited.sort_unstable();
    edited.dedup();
    edited
}

/// The bytes of a summary message's texts and the texts, as the model is sent them.
fn summary_texts(message: &serde_json::Value) -> (usize, Vec<&str>) {
    let parts = message["parts"].as_array().map(Vec::as_slice).unwrap_or_default();
    let sent = parts.iter().filter(|p| p["type"] == "text" && p["ignored"] != true);
    let texts: Vec<&str> = sent.filter_map(|p| p["text"].as_str()).collect();
    (texts.iter().map(|t| t.len()).sum(), texts)
}

/// Tokens of the messages dcp appended after the history (the prunable list, a nudge).
fn appended(answer: &Transformed, tokens: &TokenCounter) -> u64 {
    answer.append.iter().flat_map(|m| m.parts.iter().map(|p| tokens.count(&p.text) + FRAME_TEXT)).sum()
}

/// The first message of the history that a prune or range put in force since the last request
/// changed, if one did. Before its first request a process takes what the state file had in
/// force as sent (see [`Meter::seed`]).
fn first_applied_now(meter: &mut Meter, index: &Index, slot: &Slot, ranges: &[Span], views: Views) -> Option<usize> {
    let seen = meter.offered.is_some() || meter.seeded;
    if slot.revision() == meter.revision && seen {
        return None;
    }
    meter.revision = slot.revision();
    let mut first: Option<usize> = None;
    let mut at = |m: usize| first = Some(first.map_or(m, |f| f.min(m)));
    // A prune inside a range the last request sent as its summary changes nothing sent.
    let sent_as_summary: Vec<&Span> = ranges.iter().filter(|s| meter.blocks.contains(&s.block)).collect();
    let summarised = |m: usize| sent_as_summary.iter().any(|s| (s.from..=s.to).contains(&m));
    let mut note = |id: &String| {
        if !meter.applied.contains(id.as_str()) {
            meter.applied.insert(id.clone());
            if let Some(position) = index.position(id).filter(|p| seen && !summarised(p.0)) {
                at(position.0);
            }
        }
    };
    // What was put in force since the last look is among the slot's changes since, unless
    // the prunes were reset between: then every prune in force is looked at.
    let since = meter.changes.filter(|_| views == Views::Kept).and_then(|mark| slot.changes_since(mark));
    meter.changes = Some(slot.changes_mark());
    let pruned = &slot.state().pruned;
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

/// A message's tokens as `dcp replay` counts them: its texts, inputs and results, and the
/// frame of each. Its outputs' counts stay in `counter`, where the count ahead finds them.
fn message_tokens(message: &Message, counter: &mut TokenCounter) -> u64 {
    crate::measure::measure_cached(std::slice::from_ref(message), counter).total + frames(message)
}

/// The frames of a message's parts as replay counts them: a text the model is sent or a
/// reasoning, and a tool's call and result.
fn frames(message: &Message) -> u64 {
    let frame = |p: &Node| match str_field(p, "type") {
        Some("text") if !crate::measure::is_ignored(p) => FRAME_TEXT,
        Some("reasoning") => FRAME_TEXT,
        Some("tool") => FRAME_TOOL,
        _ => 0,
    };
    message.parts.iter().map(frame).sum()
}

/// One part's tokens, as [`message_tokens`] counts it; an edited copy's (`cached` off) is
/// tokenized anew, never taken from the per-part cache of the original.
fn part_tokens(part: &Node, counter: &mut TokenCounter) -> u64 {
    message_tokens(&Message { info: NULL.clone(), parts: vec![part.clone()] }, counter)
}

fn edited_part_tokens(part: &Node, counter: &TokenCounter) -> u64 {
    let message = Message { info: NULL.clone(), parts: vec![part.clone()] };
    crate::measure::measure(std::slice::from_ref(&message), counter).total + frames(&message)
}

/// A message's tokens as dcp sent it: `whole`, with each part an edit changed counted as
/// changed, and the message id tags it appended.
fn sent_tokens(message: &Message, edits: &[Edit], whole: u64, counter: &mut TokenCounter) -> u64 {
    if edits.is_empty() {
        return whole;
    }
    let mut tokens = whole;
    let mut parts: Vec<usize> = edits.iter().filter(|e| e.value.is_some()).map(|e| e.p).collect();
    parts.sort_unstable();
    parts.dedup();
    for p in parts {
        let Some(part) = message.parts.get(p) else { continue };
        let mut edited = part.clone();
        edits.iter().filter(|e| e.p == p && e.value.is_some()).for_each(|e| e.apply(&mut edited));
        tokens = tokens.saturating_sub(part_tokens(part, counter)) + edited_part_tokens(&edited, counter);
    }
    tokens + edits.iter().filter_map(|e| e.append.as_deref()).map(|a| counter.count(a)).sum::<u64>()
}
