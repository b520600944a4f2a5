//! Range compression: the agent replaces a run of older messages with its own summary.
//! dcp makes ranges of its own too, of a finished turn's calls, whose message names them
//! ([`turn_block`], `crate::strategies::turns`); they wait for the policy like the agent's,
//! and their line carries its `<bN>` only when the agent's `compress` is on to use it.
//!
//! The agent names a range's ends by the tool call ids it sees in them, or by short ids that ride
//! at the end of each message's text (`<m7>`) once the history is long enough for a range to free
//! much (`tools.compress.tagsFrom`): `m<n>` is the n-th message of the history OpenCode sends,
//! counted from 1, as the published DCP 3.x counts them (it writes `m0007` into state files; both
//! forms are read). The tag is a few tokens, because it is in every request: with the published
//! plugin's `<dcp-message-id>m0007</dcp-message-id>`, `dcp replay` of the recorded fixture session
//! (no compress call) cost 3.6% more than without tags; with `<m7>`, 1.1%. OpenCode only appends to
//! a history (a compaction or a revert cuts it, and then the prompt cache is lost anyway), so a
//! message keeps its id and its tag from the first request that carries it on: the prompt prefix
//! stays byte-stable. A compressed range is a [`Block`]; its summary message carries `b<id>`, so a
//! newer range can name it.
//!
//! `compress {range: "from..to", summary}`, as it is registered, or in the published DCP's
//! form `{topic, content: [{startId, endId, summary}]}`, or with `from` and `to`, is
//! forgiving: every range that can be applied is, and the answer says what was wrong with the
//! others. A range that starts or ends inside an older block grows to take the whole block; a
//! range that covers older blocks consumes them (nested ranges), and undoing it brings them
//! back.
//!
//! Everything here is a pure function of the history and the state; the sidecar applies the
//! result: [`tag_sites`] are appended to the message fields, [`spans`] replace whole messages.
//! Reading the agent's arguments into [`RangeRequest`]s is `args.rs`.

use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::measure;
use crate::session::node::NULL;
use crate::session::{str_field, tool_calls, Message, Node, Role};
use crate::state::blocks::{Block, Blocks, Origin, TURN_TOPIC};
use crate::state::SessionState;
use crate::texts::refusals;
use crate::texts::restore::Via;
use crate::tokens::TokenCounter;

mod args;

pub use self::args::{range_ends, ranges_from_args, RangeRequest};

/// The agent-facing id of the message at `index` of the history.
pub fn message_ref(index: usize) -> String {
    format!("m{}", index + 1)
}

/// The tag that shows the agent a message's or a block's id.
pub fn tag(name: &str) -> String {
    format!("<{name}>")
}

/// Whether `text` is an id tag (`<m12>`, `<b3>`).
pub fn is_tag(text: &str) -> bool {
    let inner = text.strip_prefix('<').and_then(|t| t.strip_suffix('>'));
    inner.is_some_and(|t| {
        t.len() > 1 && (t.starts_with('m') || t.starts_with('b')) && t[1..].bytes().all(|b| b.is_ascii_digit())
    })
}

/// Where a message's id tag goes: appended to the string at `path` of part `part`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSite {
    pub message: usize,
    pub part: usize,
    pub path: Vec<String>,
    pub text: String,
}

/// Where the tag of message `index` goes, if the message has a field the model sees: a user
/// message's last text part the model is sent; an assistant message's last finished tool
/// result, else its last text part. `None` for a message with neither (it keeps no id).
pub fn tag_site(message: &Message, index: usize) -> Option<TagSite> {
    let texts = |m: &Message| {
        m.parts.iter().rposition(|p| {
            str_field(p, "type") == Some("text")
                && p.get("ignored").and_then(Node::as_bool) != Some(true)
                && str_field(p, "text").is_some_and(|t| !t.trim().is_empty())
        })
    };
    let site = |part: usize, path: &[&str], sep: &str| TagSite {
        message: index,
        part,
        path: path.iter().map(|s| s.to_string()).collect(),
        text: format!("{sep}{}", tag(&message_ref(index))),
    };
    match message.role() {
        Role::User => texts(message).map(|p| site(p, &["text"], "\n")),
        Role::Assistant => {
            let tool = message.parts.iter().rposition(|p| {
                let state = p.get("state").unwrap_or(&NULL);
                let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
                str_field(p, "type") == Some("tool")
                    && !compacted
                    && matches!(str_field(state, "status"), Some("completed" | "error"))
            });
            match tool {
                Some(p) => {
                    let field = if str_field(&message.parts[p]["state"], "status") == Some("error") {
                        "error"
                    } else {
                        "output"
                    };
                    Some(site(p, &["state", field], "\n"))
                }
                None => texts(message).map(|p| site(p, &["text"], "\n")),
            }
        }
        Role::Other => None,
    }
}

/// The tag sites of `messages[from..]`.
pub fn tag_sites(messages: &[Message], from: usize) -> Vec<TagSite> {
    messages.iter().enumerate().skip(from).filter_map(|(i, m)| tag_site(m, i)).collect()
}

/// Where a block stands in this history: its summary replaces `messages[from..=to]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub block: u32,
    pub from: usize,
    pub to: usize,
}

/// The spans of the active blocks that `include` accepts, in history order. A block none of
/// whose messages is in the history (a revert dropped them) has none.
pub fn spans(messages: &[Message], blocks: &Blocks, include: impl Fn(&Block) -> bool) -> Vec<Span> {
    if blocks.is_empty() {
        return Vec::new();
    }
    let at: FxHashMap<&str, usize> = messages.iter().enumerate().map(|(i, m)| (m.id(), i)).collect();
    let mut out: Vec<Span> = blocks
        .active()
        .filter(|b| include(b))
        .filter_map(|b| {
            let found = b.effective_messages.iter().filter_map(|id| at.get(id.as_str()).copied());
            let (from, to) = found.fold(None, |acc: Option<(usize, usize)>, i| match acc {
                None => Some((i, i)),
                Some((f, t)) => Some((f.min(i), t.max(i))),
            })?;
            Some(Span { block: b.id, from, to })
        })
        .collect();
    out.sort_unstable_by_key(|s| s.from);
    out
}

/// The message that stands in for a block's range: a synthetic user message with the summary,
/// dated like the range's first message so that it sorts where the range was.
pub fn summary_message(session_id: &str, block: &Block, first: &Message) -> Value {
    let id = format!("msg_dcp_block_{}", block.id);
    let mut info =
        json!({"id": id, "sessionID": session_id, "role": "user", "time": {"created": first.time_created()}});
    for key in ["agent", "model"] {
        if let Some(v) = first.info.get(key) {
            info[key] = v.to_value();
        }
    }
    let part = json!({
        "id": format!("prt_dcp_block_{}", block.id),
        "sessionID": session_id,
        "messageID": id,
        "type": "text",
        "text": block.summary,
        "synthetic": true,
    });
    json!({"info": info, "parts": [part]})
}

/// Replaces the spans of the active blocks `include` accepts with their summary messages,
/// as the plugin does with the sidecar's `replace` list.
pub fn replace_spans(messages: &mut Vec<Message>, blocks: &Blocks, include: impl Fn(&Block) -> bool) {
    let found = spans(messages, blocks, include);
    for span in found.iter().rev() {
        let block = &blocks.by_id[&span.block];
        let first = &messages[span.from];
        let session = first.session_id().unwrap_or("").to_string();
        let Ok(summary) = serde_json::from_value::<Message>(summary_message(&session, block, first)) else {
            continue;
        };
        messages.splice(span.from..=span.to, [summary]);
    }
}

/// The text the model sees in place of a compressed range; its head says how to restore the
/// range's messages `via` this, when the agent can.
pub fn summary_text(id: u32, topic: &str, summary: &str, via: Option<Via>) -> String {
    let head = crate::texts::restore::summary_head(&crate::texts::summary_head(topic.trim()), id, via);
    format!("{head}\n{}\n{}", summary.trim(), tag(&format!("b{id}")))
}

/// What the agent's `compress` call is about, besides its ranges.
#[derive(Debug, Clone, Copy)]
pub struct CompressCall<'a> {
    pub session_id: &'a str,
    pub topic: &'a str,
    /// The assistant message and tool call of the `compress` call, when known.
    pub message_id: Option<&'a str>,
    pub call_id: Option<&'a str>,
    pub now: i64,
    /// How the agent restores a range's messages, if it can (see `crate::texts::restore`).
    pub restore: Option<Via>,
}

pub use crate::state::blocks::Outcome;

/// What an agent's id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Message(usize),
    Block(u32),
}

/// Reads `m12`, `m0012`, `<m12>`, `M12`, `12` (a message) or `b3` (a block); a tool call id
/// is looked up before (see `resolve`).
fn parse_ref(raw: &str) -> Option<Named> {
    let s = raw.trim().trim_matches(|c| c == '<' || c == '>' || c == '"' || c == '\'');
    let (kind, digits) = match s.chars().next()? {
        'm' | 'M' => ('m', &s[1..]),
        'b' | 'B' => ('b', &s[1..]),
        _ => ('m', s),
    };
    let n: u32 = digits.parse().ok().filter(|n| *n > 0)?;
    Some(if kind == 'b' { Named::Block(n) } else { Named::Message(n as usize - 1) })
}

/// Applies the agent's ranges to `state.blocks`, each on its own: the valid ones become
/// blocks (held back for the policy: `applied: false`, but for one that takes in a block in
/// force, which takes its place at once), the others are named in [`Outcome::problems`]. `messages` is the history the agent saw.
pub fn compress(
    messages: &[Message],
    state: &mut SessionState,
    request: &CompressCall<'_>,
    ranges: &[RangeRequest],
    counter: &mut TokenCounter,
) -> Outcome {
    let mut out = Outcome::default();
    if ranges.is_empty() {
        out.problems.push(refusals::NO_RANGES.into());
    }
    for (n, range) in ranges.iter().enumerate() {
        let label = refusals::range_label(n, ranges.len());
        match resolve(messages, &state.blocks, range) {
            Err(problem) => out.problems.push(refusals::range_problem(&label, &range.start, &range.end, &problem)),
            Ok(resolved) => {
                let (summary, replaced) =
                    (summary_tokens(range, request, counter), range_tokens(messages, state, &resolved, counter));
                if summary >= replaced {
                    let problem = refusals::summary_not_shorter(summary, replaced);
                    out.problems.push(refusals::range_problem(&label, &range.start, &range.end, &problem));
                    continue;
                }
                if resolved.grown {
                    let (from, to) =
                        (ref_of(messages, &state.blocks, resolved.from), ref_of(messages, &state.blocks, resolved.to));
                    out.notes.push(refusals::widened(&label, &from, &to));
                }
                let id = make_block(messages, state, request, Made::Agent(range), &resolved, counter);
                out.made.push(id);
            }
        }
    }
    out
}

/// Whether the line of a finished turn's range ends with its `<bN>` tag: only with the agent's
/// `compress` on, which can name the range and take it into a larger one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnTag {
    Shown,
    Omitted,
}

/// Makes `messages[from..=to]`, which no range covers, a range of dcp's own whose message is
/// `line` (`crate::strategies::turns`), `tag` saying whether its `<bN>` follows: waiting for
/// the policy like the agent's. Returns its id.
pub fn turn_block(
    messages: &[Message],
    state: &mut SessionState,
    (from, to): (usize, usize),
    (line, tag): (&str, TurnTag),
    now: i64,
    counter: &mut TokenCounter,
) -> u32 {
    let request =
        CompressCall { session_id: "", topic: TURN_TOPIC, message_id: None, call_id: None, now, restore: None };
    let resolved = Resolved { from, to, consumed: Vec::new(), grown: false };
    make_block(messages, state, &request, Made::Turn(line, tag), &resolved, counter)
}

/// Who a new range is made for, and so what its message says.
#[derive(Debug, Clone, Copy)]
enum Made<'a> {
    /// The agent's `compress` range: its summary under the topic's head, then its `<bN>`.
    Agent(&'a RangeRequest),
    /// dcp's range of a finished turn: the line naming its calls, and its `<bN>` or not.
    Turn(&'a str, TurnTag),
}

impl Made<'_> {
    /// The fields of block `id`, made under `topic` of range `r`, that say who made it: its
    /// origin, its ends (as the agent named them, or by message) and its message.
    fn block(self, id: u32, request: &CompressCall<'_>, r: &Resolved) -> Block {
        let (start_ref, end_ref) = match self {
            Made::Agent(range) => (range.start.trim().to_string(), range.end.trim().to_string()),
            Made::Turn(..) => (message_ref(r.from), message_ref(r.to)),
        };
        let (origin, summary) = (self.origin(), self.summary(id, request.topic, request.restore));
        Block { id, origin, start_ref, end_ref, summary, ..Block::default() }
    }

    /// The text of the message that replaces block `id`, made under `topic`.
    fn summary(self, id: u32, topic: &str, via: Option<Via>) -> String {
        match self {
            Made::Agent(range) => summary_text(id, topic, &range.summary, via),
            Made::Turn(line, TurnTag::Shown) => format!("{line}\n{}", tag(&format!("b{id}"))),
            Made::Turn(line, TurnTag::Omitted) => line.to_string(),
        }
    }

    fn origin(self) -> Origin {
        match self {
            Made::Agent(_) => Origin::Agent,
            Made::Turn(..) => Origin::FinishedTurn,
        }
    }
}

/// A range, in history positions, with the blocks it covers.
struct Resolved {
    from: usize,
    to: usize,
    consumed: Vec<u32>,
    /// Whether the range grew to take whole blocks.
    grown: bool,
}

fn resolve(messages: &[Message], blocks: &Blocks, range: &RangeRequest) -> Result<Resolved, String> {
    if range.summary.trim().is_empty() {
        return Err(refusals::EMPTY_SUMMARY.into());
    }
    let spans = spans(messages, blocks, |_| true);
    let newest = messages.len().checked_sub(1).ok_or(refusals::EMPTY_HISTORY)?;
    let calls = tool_calls(messages);
    let position = |raw: &str, end: bool| -> Result<usize, String> {
        if raw.trim().is_empty() {
            return Err(refusals::no_range_end(if end { "endId" } else { "startId" }));
        }
        // A tool call id names the message that holds the call.
        if let Some(call) = calls.iter().find(|c| c.call_id == raw.trim()) {
            return Ok(call.message);
        }
        match parse_ref(raw) {
            None => Err(refusals::not_a_message_id(raw)),
            Some(Named::Message(i)) if i > newest => Err(refusals::past_the_newest(raw, &message_ref(newest))),
            Some(Named::Message(i)) => Ok(i),
            Some(Named::Block(b)) => match spans.iter().find(|s| s.block == b) {
                Some(s) => Ok(if end { s.to } else { s.from }),
                None => Err(refusals::not_a_block(raw)),
            },
        }
    };
    let mut from = position(&range.start, false)?;
    let mut to = position(&range.end, true)?;
    if from > to {
        std::mem::swap(&mut from, &mut to);
    }
    let (asked_from, asked_to) = (from, to);
    for s in &spans {
        if s.from <= from && from <= s.to {
            from = s.from;
        }
        if s.from <= to && to <= s.to {
            to = s.to;
        }
    }
    let consumed = spans.iter().filter(|s| from <= s.from && s.to <= to).map(|s| s.block).collect();
    let grown = (from, to) != (asked_from, asked_to)
        && !matches!(parse_ref(&range.start), Some(Named::Block(_)))
        && !matches!(parse_ref(&range.end), Some(Named::Block(_)));
    Ok(Resolved { from, to, consumed, grown })
}

/// The name of position `i` as the agent sees it: a block's id inside a block, else the
/// message's.
fn ref_of(messages: &[Message], blocks: &Blocks, i: usize) -> String {
    match spans(messages, blocks, |_| true).iter().find(|s| s.from <= i && i <= s.to) {
        Some(s) => format!("b{}", s.block),
        None => message_ref(i),
    }
}

/// Tokens of each message of `messages` as the model is sent it, prunes in force applied.
fn sent_tokens(messages: &[Message], state: &SessionState, counter: &TokenCounter) -> Vec<u64> {
    let mut copy = messages.to_vec();
    super::apply(&mut copy, state, |r| r.applied);
    copy.iter().map(|m| measure::measure(std::slice::from_ref(m), counter).total).collect()
}

/// Tokens of the message that would stand for `range`: its summary under the topic's head.
fn summary_tokens(range: &RangeRequest, request: &CompressCall<'_>, counter: &TokenCounter) -> u64 {
    counter.count(&summary_text(0, request.topic, &range.summary, request.restore))
}

/// Tokens the model is sent of `messages[r.from..=r.to]` now: its messages, prunes in force
/// applied, and of the ranges it takes in, their summaries.
fn range_tokens(messages: &[Message], state: &SessionState, r: &Resolved, counter: &TokenCounter) -> u64 {
    let inner: Vec<Span> = spans(messages, &state.blocks, |b| r.consumed.contains(&b.id));
    let tokens = sent_tokens(&messages[r.from..=r.to], state, counter);
    let outside =
        tokens.iter().enumerate().filter(|(k, _)| !inner.iter().any(|s| s.from <= r.from + k && r.from + k <= s.to));
    let direct: u64 = outside.map(|(_, t)| *t).sum();
    direct + inner.iter().map(|s| counter.count(&state.blocks.by_id[&s.block].summary)).sum::<u64>()
}

/// Makes `messages[r.from..=r.to]` a block for `made`, waiting for the policy unless it takes
/// in a block in force. Returns its id.
fn make_block(
    messages: &[Message],
    state: &mut SessionState,
    request: &CompressCall<'_>,
    made: Made<'_>,
    r: &Resolved,
    counter: &mut TokenCounter,
) -> u32 {
    let covered = &messages[r.from..=r.to];
    // What the range costs now: the summaries of the blocks it consumes, not their messages.
    let inner: Vec<Span> = spans(messages, &state.blocks, |b| r.consumed.contains(&b.id));
    let tokens = sent_tokens(covered, state, counter);
    let mut compressed = 0;
    let mut direct_messages = Vec::new();
    let mut direct_tools = Vec::new();
    for (k, message) in covered.iter().enumerate() {
        let i = r.from + k;
        if inner.iter().any(|s| s.from <= i && i <= s.to) {
            continue;
        }
        compressed += tokens[k];
        direct_messages.push(message.id().to_string());
        direct_tools.extend(tool_calls(std::slice::from_ref(message)).iter().map(|c| c.call_id.to_string()));
    }
    for s in &inner {
        let summary = &state.blocks.by_id[&s.block].summary;
        compressed += counter.count(summary);
    }
    // A range over a block in force takes its place in force at once: were it to wait, the
    // consumed block's messages would be sent whole again until the policy applied it.
    let applied = r.consumed.iter().any(|b| state.blocks.by_id.get(b).is_some_and(|b| b.active && b.applied));
    let (id, run_id) = state.blocks.allocate();
    let made = made.block(id, request, r);
    let effective_tools = tool_calls(covered).iter().map(|c| c.call_id.to_string()).collect();
    let block = Block {
        run_id,
        active: true,
        applied,
        compressed_tokens: compressed,
        summary_tokens: counter.count(&made.summary),
        topic: request.topic.trim().to_string(),
        anchor: covered[0].id().to_string(),
        compress_message_id: request.message_id.map(str::to_string),
        compress_call_id: request.call_id.map(str::to_string),
        consumed: r.consumed.clone(),
        direct_messages,
        direct_tools,
        effective_messages: covered.iter().map(|m| m.id().to_string()).collect(),
        effective_tools,
        created_at: request.now,
        ..made
    };
    let message_tokens: Vec<(String, u64)> =
        covered.iter().zip(&tokens).map(|(m, t)| (m.id().to_string(), *t)).collect();
    state.blocks.insert(block, message_tokens);
    id
}
