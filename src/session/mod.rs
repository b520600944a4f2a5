//! The session model: a session is its ordered messages, each `{info, parts}`.
//!
//! This is exactly the shape OpenCode hands to plugins in
//! `experimental.chat.messages.transform`, so one engine serves both the CLI (which builds it
//! from `opencode.db` or the JSON tree) and the sidecar (which receives it from the plugin).
//! Messages and parts stay `serde_json::Value`s so that unknown part types and fields survive a
//! round trip untouched; this module only adds typed, borrowing views over them.

mod history;

pub use history::visible_history;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a session: OpenCode's message info plus its parts, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub info: Value,
    #[serde(default)]
    pub parts: Vec<Value>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    Other,
}

impl Message {
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
        self.role() == Role::Assistant && self.info.get("summary") == Some(&Value::Bool(true))
    }

    /// `time.created` in milliseconds, or 0 when missing.
    pub fn time_created(&self) -> i64 {
        self.info.get("time").and_then(|t| t.get("created")).and_then(Value::as_i64).unwrap_or(0)
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
    pub input: &'a Value,
    pub output: Option<&'a str>,
    pub error: Option<&'a str>,
    /// OpenCode already cleared this output itself (`state.time.compacted`).
    pub compacted: bool,
    /// The model step the call belongs to: the number of assistant messages up to and
    /// including the call's message, starting at 1.
    pub turn: u32,
}

static NULL: Value = Value::Null;

impl<'a> ToolCall<'a> {
    /// Builds a view of `part` if it is a tool part with a call id. Returns `None` for any
    /// other part, including malformed tool parts, which are left alone.
    pub fn from_part(message: usize, part_index: usize, part: &'a Value, turn: u32) -> Option<Self> {
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
        Some(ToolCall {
            message,
            part: part_index,
            part_id: str_field(part, "id").unwrap_or(""),
            call_id,
            tool,
            status,
            input: state.get("input").unwrap_or(&NULL),
            output: str_field(state, "output"),
            error: str_field(state, "error"),
            compacted,
            turn,
        })
    }

    /// The argument that best names what the call touched: a file path, a command, a pattern
    /// or a URL. This is what the `<prunable-tools>` list and the CLI show.
    pub fn key_argument(&self) -> Option<&'a str> {
        const KEYS: &[&str] = &["filePath", "command", "pattern", "path", "url", "query", "description", "prompt"];
        KEYS.iter().find_map(|k| str_field(self.input, k))
    }

    /// The file this call reads or writes, if its input names one.
    pub fn file_path(&self) -> Option<&'a str> {
        str_field(self.input, "filePath").or_else(|| str_field(self.input, "path"))
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
    messages.iter().rposition(|m| {
        m.role() == Role::User
            && m.parts.iter().any(|p| {
                str_field(p, "type") == Some("text")
                    && p.get("ignored") != Some(&Value::Bool(true))
                    && p.get("synthetic") != Some(&Value::Bool(true))
            })
    })
}

/// A string field of a JSON object, if present and a string.
pub fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}
