//! The session model: a session is its ordered messages, each `{info, parts}`.
//!
//! This is exactly the shape OpenCode hands to plugins in
//! `experimental.chat.messages.transform`, so one engine serves both the CLI (which builds it
//! from `opencode.db` or the JSON tree) and the sidecar (which receives it from the plugin).
//! Messages and parts stay JSON values, compact [`Node`]s, so that unknown part types and fields
//! survive a round trip untouched; this module only adds typed, borrowing views over them.

mod history;
pub mod node;
pub mod slim;

pub use history::{visible_history, visible_start};
pub use node::{Kind, Node, Object};

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use self::node::NULL;

/// One message of a session: OpenCode's message info plus its parts, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub info: Node,
    #[serde(default)]
    pub parts: Vec<Node>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    Other,
}

impl Message {
    /// The message of `info` and `parts`, as `serde_json::Value`s.
    pub fn from_values(info: serde_json::Value, parts: Vec<serde_json::Value>) -> Message {
        Message { info: Node::from(info), parts: parts.into_iter().map(Node::from).collect() }
    }

    pub fn id(&self) -> &str {
        str_field(&self.info, "id").unwrap_or("")
    }

    pub fn role(&self) -> Role {
        match str_field(&self.info, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => Role::Other,
        }
    }

    /// An assistant message with `summary: true` holds a compaction summary. (A user message's
    /// `summary` is an object of diffs, which is not a compaction.)
    pub fn is_compaction_summary(&self) -> bool {
        self.role() == Role::Assistant && self.info.get("summary").and_then(Node::as_bool) == Some(true)
    }

    /// `time.created` in milliseconds, or 0 when missing.
    pub fn time_created(&self) -> i64 {
        self.info.get("time").and_then(|t| t.get("created")).and_then(Node::as_i64).unwrap_or(0)
    }

    pub fn session_id(&self) -> Option<&str> {
        str_field(&self.info, "sessionID")
    }
}

/// The lifecycle state of a tool call, from `part.state.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Pending,
    Running,
    Completed,
    Error,
    Unknown,
}

/// A borrowed view of one tool part, with its position in the session.
#[derive(Debug, Clone)]
pub struct ToolCall<'a> {
    /// Index of the message in the slice the view was built from.
    pub message: usize,
    /// Index of the part inside that message.
    pub part: usize,
    pub part_id: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub status: ToolStatus,
    /// OpenCode already cleared this output itself (`state.time.compacted`).
    pub compacted: bool,
    /// The model step the call belongs to: the number of assistant messages up to and
    /// including the call's message, starting at 1.
    pub turn: u32,
    /// The part itself; input, output and error are read from it when asked for.
    value: &'a Node,
    key: Option<&'a str>,
    file_path: Option<&'a str>,
}

/// What a tool part says about itself, owned, so that it can be kept across requests: a
/// completed part never changes, so the sidecar reads each part once (see
/// `crate::strategies::incremental`) instead of on every request. A long session holds tens
/// of thousands, so each string is held at its length, and those the index also keys its
/// tables by (the call id, the tool and the key argument) are shared with them, not copied.
#[derive(Debug, Clone)]
pub struct CallFacts {
    pub part: usize,
    pub part_id: Box<str>,
    pub call_id: Arc<str>,
    pub tool: Arc<str>,
    pub status: ToolStatus,
    pub compacted: bool,
    pub key: Option<Arc<str>>,
    pub file_path: Option<Box<str>>,
}

impl CallFacts {
    /// The facts of every tool part of `message`.
    pub fn of(message: &Message) -> Vec<CallFacts> {
        message
            .parts
            .iter()
            .enumerate()
            .filter_map(|(pi, part)| ToolCall::from_part(0, pi, part, 0))
            .map(|c| CallFacts {
                part: c.part,
                part_id: c.part_id.into(),
                call_id: c.call_id.into(),
                tool: c.tool.into(),
                status: c.status,
                compacted: c.compacted,
                key: c.key.map(Arc::from),
                file_path: c.file_path.map(Box::from),
            })
            .collect()
    }
}

/// The input fields that name what a call touched, in the order [`ToolCall::key_argument`]
/// looks for them. The sidecar's slim mirror keeps exactly these verbatim
/// (`slim::KEPT_INPUTS`), so that the list and masking's placeholder never show a marker.
pub(crate) const KEY_ARGUMENTS: &[&str] =
    &["filePath", "command", "pattern", "path", "url", "query", "description", "prompt"];

fn key_argument(input: &Node) -> Option<&str> {
    KEY_ARGUMENTS.iter().find_map(|k| str_field(input, k))
}

impl<'a> ToolCall<'a> {
    /// Builds a view of `part` if it is a tool part with a call id. Returns `None` for any
    /// other part, including malformed tool parts, which are left alone.
    pub fn from_part(message: usize, part_index: usize, part: &'a Node, turn: u32) -> Option<Self> {
        if str_field(part, "type") != Some("tool") {
            return None;
        }
        let call_id = str_field(part, "callID")?;
        let tool = str_field(part, "tool").unwrap_or("");
        let state = part.get("state").unwrap_or(&NULL);
        let status = match str_field(state, "status") {
            Some("pending") => ToolStatus::Pending,
            Some("running") => ToolStatus::Running,
            Some("completed") => ToolStatus::Completed,
            Some("error") => ToolStatus::Error,
            _ => ToolStatus::Unknown,
        };
        let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
        let input = state.get("input").unwrap_or(&NULL);
        Some(ToolCall {
            message,
            part: part_index,
            part_id: str_field(part, "id").unwrap_or(""),
            call_id,
            tool,
            status,
            compacted,
            turn,
            value: part,
            key: key_argument(input),
            file_path: str_field(input, "filePath").or_else(|| str_field(input, "path")),
        })
    }

    /// The view of a part whose facts were read before.
    pub fn from_facts(message: usize, facts: &'a CallFacts, part: &'a Node, turn: u32) -> Self {
        ToolCall {
            message,
            part: facts.part,
            part_id: &facts.part_id,
            call_id: &facts.call_id,
            tool: &facts.tool,
            status: facts.status,
            compacted: facts.compacted,
            turn,
            value: part,
            key: facts.key.as_deref(),
            file_path: facts.file_path.as_deref(),
        }
    }

    /// The tool part itself.
    pub fn part(&self) -> &'a Node {
        self.value
    }

    fn state(&self) -> &'a Node {
        self.value.get("state").unwrap_or(&NULL)
    }

    /// The call's arguments (`state.input`), or `null`.
    pub fn input(&self) -> &'a Node {
        self.state().get("input").unwrap_or(&NULL)
    }

    /// The call's output, once completed.
    pub fn output(&self) -> Option<&'a str> {
        str_field(self.state(), "output")
    }

    /// The call's error, if it failed.
    pub fn error(&self) -> Option<&'a str> {
        str_field(self.state(), "error")
    }

    /// The argument that best names what the call touched: a file path, a command, a pattern
    /// or a URL. This is what the `<prunable-tools>` list and the CLI show.
    pub fn key_argument(&self) -> Option<&'a str> {
        self.key
    }

    /// The file this call reads or writes, if its input names one.
    pub fn file_path(&self) -> Option<&'a str> {
        self.file_path
    }
}

/// A history's tool calls and its current model step, found in one walk, for every strategy
/// that looks at the same request.
#[derive(Debug)]
pub struct History<'a> {
    pub messages: &'a [Message],
    pub calls: Vec<ToolCall<'a>>,
    /// The current model step: the number of assistant messages.
    pub current: u32,
}

impl<'a> History<'a> {
    pub fn new(messages: &'a [Message]) -> History<'a> {
        let calls = tool_calls(messages);
        History { messages, calls, current: current_turn(messages) }
    }
}

/// Every tool call of `messages`, in history order.
pub fn tool_calls(messages: &[Message]) -> Vec<ToolCall<'_>> {
    let mut out = Vec::new();
    let mut turn = 0u32;
    for (mi, message) in messages.iter().enumerate() {
        if message.role() == Role::Assistant {
            turn += 1;
        }
        for (pi, part) in message.parts.iter().enumerate() {
            if let Some(call) = ToolCall::from_part(mi, pi, part, turn) {
                out.push(call);
            }
        }
    }
    out
}

/// The current model step: the number of assistant messages in `messages`.
pub fn current_turn(messages: &[Message]) -> u32 {
    messages.iter().filter(|m| m.role() == Role::Assistant).count() as u32
}

/// Index of the last real user message: one that is not a compaction request and not only
/// synthetic or ignored text (such as a notification of ours).
pub fn last_user_prompt(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(is_prompt)
}

/// Whether `m` is a prompt the user typed: a user message with text that is neither
/// synthetic nor ignored (a compaction request or a notification of ours is not).
pub fn is_prompt(m: &Message) -> bool {
    m.role() == Role::User
        && m.parts.iter().any(|p| {
            str_field(p, "type") == Some("text")
                && p.get("ignored").and_then(Node::as_bool) != Some(true)
                && p.get("synthetic").and_then(Node::as_bool) != Some(true)
        })
}

/// Whether message `i` of `messages` starts a user turn: a prompt ([`is_prompt`]) the person
/// sent while the agent was not at work. A user message sent after a model step that called
/// tools, before the model has answered their results (the person typing while the agent
/// works, a queued message, a client's reminder beside the results), belongs to the turn in
/// progress: those results are that turn's, and the model has yet to read them. A step that
/// ended in an error (the person stopped the agent) leaves no turn in progress.
pub fn starts_turn(messages: &[Message], i: usize) -> bool {
    let Some(message) = messages.get(i) else { return false };
    let before = messages[..i].iter().rev().find(|m| m.role() != Role::User);
    is_prompt(message) && !before.is_some_and(awaits_results)
}

/// The message that started the current user turn ([`starts_turn`]), if one did.
pub fn turn_start(messages: &[Message]) -> Option<usize> {
    (0..messages.len()).rev().find(|&i| starts_turn(messages, i))
}

/// Whether `m` is a model step that called tools the model has not answered yet: an assistant
/// message with a tool part the client ran (not one the provider ran and answered itself),
/// which did not end in an error.
fn awaits_results(m: &Message) -> bool {
    let client_ran = |p: &Node| {
        str_field(p, "type") == Some("tool")
            && p.get("metadata").and_then(|m| m.get("providerExecuted")).and_then(Node::as_bool) != Some(true)
    };
    m.role() == Role::Assistant && m.info.get("error").is_none_or(Node::is_null) && m.parts.iter().any(client_ran)
}

/// A string field of a JSON object, if present and a string.
pub fn str_field<'a, V: Fields + ?Sized>(value: &'a V, key: &str) -> Option<&'a str> {
    value.str_field(key)
}

/// A JSON object's string fields, read the same from a [`Node`] and a `serde_json::Value`
/// (the CLI reads both: a session's messages and its other records).
pub trait Fields {
    fn str_field(&self, key: &str) -> Option<&str>;
}

impl Fields for Node {
    fn str_field(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Node::as_str)
    }
}

impl<T: Fields + ?Sized> Fields for &T {
    fn str_field(&self, key: &str) -> Option<&str> {
        (**self).str_field(key)
    }
}

impl Fields for serde_json::Value {
    fn str_field(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(serde_json::Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Message {
        Message::from_values(json!({"role": "user"}), vec![json!({"type": "text", "text": text})])
    }

    /// A model step: `text`, then a call of a tool the client ran (`"client"`) or the provider
    /// ran (`"provider"`), if any; `error` set when the step ended in one.
    fn step(text: Option<&str>, call: Option<&str>, error: bool) -> Message {
        let mut info = json!({"role": "assistant"});
        if error {
            info["error"] = json!({"name": "MessageAbortedError"});
        }
        let mut parts: Vec<serde_json::Value> = text.map(|t| json!({"type": "text", "text": t})).into_iter().collect();
        parts.extend(call.map(|ran| {
            let metadata = json!({"providerExecuted": ran == "provider"});
            json!({"type": "tool", "callID": "c", "tool": "bash", "state": {"status": "completed"}, "metadata": metadata})
        }));
        Message::from_values(info, parts)
    }

    /// Which messages of `messages` start a turn.
    fn starts(messages: &[Message]) -> Vec<usize> {
        (0..messages.len()).filter(|&i| starts_turn(messages, i)).collect()
    }

    #[test]
    fn a_message_sent_while_the_agent_works_joins_the_turn_in_progress() {
        let working = [user("fix it"), step(Some("Looking."), Some("client"), false), user("also check the docs")];
        assert_eq!(starts(&working), [0], "the model has not answered the call's output yet");
        let again = [&working[..], &[step(None, Some("client"), false), user("and the tests")]].concat();
        assert_eq!(starts(&again), [0]);
        assert_eq!(turn_start(&again), Some(0));
        let answered = [&working[..], &[step(Some("Done."), None, false), user("now the docs")]].concat();
        assert_eq!(starts(&answered), [0, 4], "a prompt after the answer starts a turn");
    }

    #[test]
    fn a_prompt_after_a_stopped_step_or_one_the_provider_answered_starts_a_turn() {
        let stopped = [user("fix it"), step(None, Some("client"), true), user("no, the other file")];
        assert_eq!(starts(&stopped), [0, 2]);
        let searched = [user("look it up"), step(Some("Found it."), Some("provider"), false), user("thanks")];
        assert_eq!(starts(&searched), [0, 2]);
        let reminder = Message::from_values(
            json!({"role": "user"}),
            vec![json!({"type": "text", "text": "<system-reminder>x</system-reminder>", "synthetic": true})],
        );
        assert_eq!(starts(&[user("fix it"), step(Some("Done."), None, false), reminder]), [0], "no person's text");
    }
}
