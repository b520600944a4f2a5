//! A recorded session as the requests OpenCode made: one per model step.
//!
//! Each assistant message is one model step, and the request that produced it carried the
//! messages before it (in history order), after compaction filtering, as OpenCode's session
//! loop hands them to plugins. An assistant message with `summary: true` holds a compaction
//! summary: its request went to the summariser, not to the agent, and is left out. The
//! history is taken as it stood at the step: an output OpenCode cleared later
//! (`state.time.compacted` after the request) is still whole in it.
//!
//! A session recorded with dcp's plugin holds the agent's `discard`/`extract` calls. Modes
//! without those tools replay it as it would have gone without them: their tool parts are
//! dropped, and so is a step that made no other call (the model would have gone on to its
//! next action instead).
//!
//! A [`Timeline`] holds the messages once; each request is a range of them and a time, so a
//! long session is not copied for every request.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

use super::pieces::Edit;
use crate::session::node::NULL;
use crate::session::{str_field, visible_start, Message, Node, Role};

pub use crate::measure::AGENT_TOOLS;
use crate::measure::{agent_only, is_agent_call, is_unavailable_agent_call as unavailable};

/// The provider's token counts stored on an assistant message (`tokens.input`,
/// `tokens.cache.read`, `tokens.cache.write`; `tokens.output`), as OpenCode keeps them
/// whatever the API: `input` is the uncached input, cached reads apart. The part of the writes
/// that went to Anthropic's 1-hour cache (`tokens.cache.write1h`, which `dcp-testkit import`
/// keeps from Claude Code's `cache_creation`) and the money the message cost (`cost`, where
/// the harness recorded it) are given only when known.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Recorded {
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_1h: u64,
    #[serde(skip)]
    pub output: u64,
    #[serde(skip_serializing_if = "is_nothing")]
    pub cost: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_nothing(x: &f64) -> bool {
    *x == 0.0
}

impl Recorded {
    fn of(info: &Node) -> Option<Recorded> {
        let tokens = info.get("tokens")?;
        let n = |v: Option<&Node>| v.and_then(Node::as_u64).unwrap_or(0);
        let cache = tokens.get("cache");
        let r = Recorded {
            input: n(tokens.get("input")),
            cache_read: n(cache.and_then(|c| c.get("read"))),
            cache_write: n(cache.and_then(|c| c.get("write"))),
            cache_write_1h: n(cache.and_then(|c| c.get("write1h"))),
            output: n(tokens.get("output")),
            cost: info.get("cost").and_then(Node::as_f64).unwrap_or(0.0),
        };
        (r.prompt() > 0).then_some(r)
    }

    /// The counts of two requests (or sessions) together.
    pub fn sum(self, other: Recorded) -> Recorded {
        Recorded {
            input: self.input + other.input,
            cache_read: self.cache_read + other.cache_read,
            cache_write: self.cache_write + other.cache_write,
            cache_write_1h: self.cache_write_1h + other.cache_write_1h,
            output: self.output + other.output,
            cost: self.cost + other.cost,
        }
    }

    /// Every prompt token the provider counted.
    pub fn prompt(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

/// One call of a dcp agent tool, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCall {
    pub tool: String,
    pub args: Value,
    /// What the agent was told, as recorded (the output, or the error).
    pub answer: Option<String>,
}

/// One model request of the session.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The assistant message the request produced, by index in the timeline's messages.
    pub message: usize,
    /// When the request was sent: the assistant message's `time.created`, in ms.
    pub time: i64,
    pub recorded: Option<Recorded>,
    /// The dcp agent tools the model called in this step.
    pub agent_calls: Vec<AgentCall>,
    /// Where the history of this request starts (compaction filtering).
    start: usize,
}

/// Whether the replayed run offers the agent dcp's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentTools {
    Offered,
    Absent,
}

/// A session's messages and the requests made over them.
#[derive(Debug)]
pub struct Timeline {
    messages: Vec<Message>,
    /// By message: the parts OpenCode cleared, and when.
    cleared: Vec<Vec<(usize, i64)>>,
    requests: Vec<RecordedRequest>,
}

impl Timeline {
    /// The timeline of `messages` (in history order), with or without dcp's agent tools.
    pub fn new(messages: &[Message], tools: AgentTools) -> Timeline {
        let mut messages = messages.to_vec();
        if tools == AgentTools::Absent {
            messages.retain(|m| !agent_only(m));
            for m in &mut messages {
                m.parts.retain(|p| !is_agent_call(p));
            }
        }
        let cleared = messages.iter_mut().map(take_cleared).collect();
        let mut requests = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if m.role() != Role::Assistant || m.is_compaction_summary() {
                continue;
            }
            requests.push(RecordedRequest {
                message: i,
                time: m.time_created(),
                recorded: Recorded::of(&m.info),
                agent_calls: agent_calls(m),
                start: visible_start(&messages[..i]),
            });
        }
        Timeline { messages, cleared, requests }
    }

    pub fn requests(&self) -> &[RecordedRequest] {
        &self.requests
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages request `r` carried.
    pub fn range(&self, r: &RecordedRequest) -> Range<usize> {
        r.start..r.message
    }

    /// How many of message `i`'s parts OpenCode had cleared at `time`: a message is the same
    /// in two requests when this is.
    pub fn version(&self, i: usize, time: i64) -> usize {
        self.cleared[i].iter().filter(|(_, at)| *at <= time).count()
    }

    /// Message `i` as it stood at `time`.
    pub fn message_at(&self, i: usize, time: i64) -> Cow<'_, Message> {
        let m = &self.messages[i];
        if self.version(i, time) == 0 {
            return Cow::Borrowed(m);
        }
        let mut m = m.clone();
        for (p, at) in self.cleared[i].iter().filter(|(_, at)| *at <= time) {
            let time = m.parts[*p].get_mut("state").and_then(|s| s.get_mut("time")).and_then(Node::as_object_mut);
            if let Some(t) = time {
                t.insert("compacted", Node::from(*at));
            }
        }
        Cow::Owned(m)
    }
}

fn agent_calls(m: &Message) -> Vec<AgentCall> {
    m.parts
        .iter()
        .filter(|p| is_agent_call(p) && !unavailable(p))
        .map(|p| {
            let state = p.get("state").unwrap_or(&NULL);
            AgentCall {
                tool: str_field(p, "tool").unwrap_or("").to_string(),
                args: state.get("input").map_or(Value::Null, Node::to_value),
                answer: str_field(state, "output").or_else(|| str_field(state, "error")).map(str::to_string),
            }
        })
        .collect()
}

/// Takes `state.time.compacted` out of every part of `m` (it is put back as of each
/// request's time): the parts it was on, and when. A `compacted` that is not a time is kept.
fn take_cleared(m: &mut Message) -> Vec<(usize, i64)> {
    let mut out = Vec::new();
    for (i, p) in m.parts.iter_mut().enumerate() {
        let Some(t) = p.get_mut("state").and_then(|s| s.get_mut("time")).and_then(Node::as_object_mut) else {
            continue;
        };
        if let Some(at) = t.get("compacted").and_then(Node::as_i64) {
            t.remove("compacted");
            out.push((i, at));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(id: &str, role: &str, created: i64, parts: Vec<Value>) -> Message {
        let info = Node::from(json!({"id": id, "role": role, "time": {"created": created}}));
        Message { info, parts: parts.into_iter().map(Node::from).collect() }
    }

    fn tool(name: &str, compacted: Option<i64>) -> Value {
        let mut time = json!({"start": 1, "end": 2});
        if let Some(c) = compacted {
            time["compacted"] = json!(c);
        }
        json!({"type": "tool", "callID": format!("c_{name}"), "tool": name,
               "state": {"status": "completed", "input": {"ids": ["1"]}, "output": "done", "time": time}})
    }

    #[test]
    fn each_assistant_step_is_a_request_over_the_messages_before_it() {
        let messages = vec![
            msg("m1", "user", 10, vec![json!({"type": "text", "text": "hi"})]),
            msg("m2", "assistant", 20, vec![tool("read", Some(35))]),
            msg("m3", "assistant", 30, vec![tool("discard", None)]),
            msg("m4", "assistant", 40, vec![json!({"type": "text", "text": "done"})]),
        ];
        let t = Timeline::new(&messages, AgentTools::Offered);
        let rs = t.requests();
        assert_eq!(rs.iter().map(|r| r.message).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(rs[1].agent_calls[0].tool, "discard");
        assert_eq!(t.range(&rs[2]), 0..3);
        // At 30 ms the read's output was not cleared yet; at 40 it was.
        let compacted = |time| t.message_at(1, time).parts[0]["state"]["time"].get("compacted").map(Node::to_value);
        assert_eq!((compacted(30), compacted(40)), (None, Some(json!(35))));
        assert_eq!((t.version(1, 30), t.version(1, 40)), (0, 1));
        // Without dcp's tools, the discard-only step is gone.
        let t = Timeline::new(&messages, AgentTools::Absent);
        let ids: Vec<&str> = t.messages().iter().map(Message::id).collect();
        assert_eq!(ids, vec!["m1", "m2", "m4"]);
        assert_eq!(t.requests().len(), 2);
    }

    #[test]
    fn after_a_compaction_a_request_starts_at_the_compaction_and_its_summary_is_no_request() {
        let mut summary = msg("m4", "assistant", 40, vec![json!({"type": "text", "text": "summary"})]);
        let info = summary.info.as_object_mut().unwrap();
        info.insert("summary", Node::from(true));
        info.insert("finish", Node::from("stop"));
        info.insert("parentID", Node::from("m3"));
        let messages = vec![
            msg("m1", "user", 10, vec![json!({"type": "text", "text": "hi"})]),
            msg("m2", "assistant", 20, vec![tool("read", None)]),
            msg("m3", "user", 30, vec![json!({"type": "compaction", "auto": true})]),
            summary,
            msg("m5", "assistant", 50, vec![json!({"type": "text", "text": "go on"})]),
        ];
        let t = Timeline::new(&messages, AgentTools::Offered);
        let rs = t.requests();
        assert_eq!(rs.iter().map(|r| r.message).collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(t.range(&rs[0]), 0..1);
        assert_eq!(t.range(&rs[1]), 2..4);
    }

    #[test]
    fn a_call_to_a_dcp_tool_the_session_was_not_offered_is_no_request_without_dcp() {
        let invalid = json!({"type": "tool", "callID": "c9", "tool": "invalid", "state": {"status": "completed",
            "input": {"tool": "discard", "error": "Model tried to call unavailable tool 'discard'."}, "output": "x"}});
        let messages = vec![
            msg("m1", "user", 10, vec![json!({"type": "text", "text": "go"})]),
            msg("m2", "assistant", 20, vec![tool("read", None)]),
            msg("m3", "assistant", 30, vec![invalid]),
            msg("m4", "assistant", 40, vec![json!({"type": "text", "text": "done"})]),
        ];
        let t = Timeline::new(&messages, AgentTools::Offered);
        assert_eq!(t.requests().len(), 3);
        assert!(t.requests()[1].agent_calls.is_empty(), "it pruned nothing: not sent again");
        let t = Timeline::new(&messages, AgentTools::Absent);
        assert_eq!(t.messages().iter().map(Message::id).collect::<Vec<_>>(), vec!["m1", "m2", "m4"]);
    }
}

/// What a run hands its visitor for each request.
pub struct Step<'a> {
    pub timeline: &'a Timeline,
    pub request: &'a RecordedRequest,
    /// The engine's edits of the history (none without an engine).
    pub edits: &'a [Edit],
    /// Compressed ranges: history positions `from..=to` replaced by one message.
    pub replace: &'a [(usize, usize, Message)],
    /// The messages the engine appended after the history.
    pub append: &'a [Message],
    /// Why the engine applied pending rewrites on this request, if it did.
    pub applied: Option<&'a str>,
    /// The request carries dcp's head (its instructions and tool definitions).
    pub offered: bool,
}

/// Whether message `m` of the request is inside a compressed range: `Some(Some(summary))` at
/// the range's first message, `Some(None)` at the others.
pub(super) fn replaced<'a>(step: &Step<'a>, m: usize) -> Option<Option<&'a Message>> {
    let (from, _, summary) = step.replace.iter().find(|(f, t, _)| *f <= m && m <= *t)?;
    Some((*from == m).then_some(summary))
}

pub(super) fn edits_by_message(edits: &[Edit]) -> rustc_hash::FxHashMap<usize, Vec<&Edit>> {
    let mut by_message: rustc_hash::FxHashMap<usize, Vec<&Edit>> = Default::default();
    for e in edits {
        by_message.entry(e.m).or_default().push(e);
    }
    // As the plugin does: every value first, then the appends (message id tags).
    for of in by_message.values_mut() {
        of.sort_by_key(|e| e.append.is_some());
    }
    by_message
}
