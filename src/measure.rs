//! Tokens by category: what the model is sent for a message list, counted the way it sees it.
//!
//! [`measure`] splits a message list into text, reasoning, tool inputs, tool outputs and tool
//! errors (an output OpenCode already cleared counts as its short replacement). It sits below
//! both the strategies (range compression sizes its blocks with it) and the reports (`dcp
//! context`, replay, the sidecar's savings), which all count the same way.

use serde::Serialize;

use crate::session::node::NULL;
use crate::session::{slim, str_field, Message, Node, Role};
use crate::tokens::TokenCounter;

/// Tokens of OpenCode 1.18.33's system prompt and tool definitions for its `build` agent, as
/// the lab's requests carry them (o200k: 4,673 for the tool definitions, 2,020 for the system
/// prompt): the estimate of what every request holds besides the history, which neither
/// `dcp replay` nor the sidecar sees.
pub const OPENCODE_OVERHEAD: u64 = 6_700;
/// The same in characters / 4 (29,419 characters).
pub const OPENCODE_OVERHEAD_CHARS: u64 = 7_355;

/// Tokens a request spends around each piece besides its text: the role, the tool call's id
/// and name, the JSON of the provider's message format. Measured on the lab's requests
/// (OpenAI chat format, characters / 4 of everything outside the texts): about 100
/// characters per tool call, 67 per tool result, 30 per text message. Replay and the
/// sidecar's savings count with the same frames, so their figures agree.
pub const FRAME_CALL: u64 = 25;
pub const FRAME_RESULT: u64 = 17;
pub const FRAME_TEXT: u64 = 8;

/// What OpenCode sends in place of an output it cleared itself.
pub const OPENCODE_CLEARED: &str = "[Old tool result content cleared]";

/// Tokens by category.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    pub user_text: u64,
    pub assistant_text: u64,
    pub reasoning: u64,
    pub tool_inputs: u64,
    pub tool_outputs: u64,
    pub tool_errors: u64,
    pub total: u64,
}

impl Breakdown {
    /// The categories with their names, in display order.
    pub fn rows(&self) -> [(&'static str, u64); 6] {
        [
            ("user text", self.user_text),
            ("assistant text", self.assistant_text),
            ("reasoning", self.reasoning),
            ("tool inputs", self.tool_inputs),
            ("tool outputs", self.tool_outputs),
            ("tool errors", self.tool_errors),
        ]
    }
}

/// Whether `part` is text the model is never sent.
pub fn is_ignored(part: &Node) -> bool {
    part.get("ignored").and_then(Node::as_bool) == Some(true)
}

/// Counts what the model would be sent for `messages`.
pub fn measure(messages: &[Message], counter: &TokenCounter) -> Breakdown {
    let mut b = Breakdown::default();
    for message in messages {
        let role = message.role();
        for part in &message.parts {
            match str_field(part, "type") {
                Some("text") => {
                    if part.get("ignored").and_then(Node::as_bool) == Some(true) {
                        continue;
                    }
                    let n = slim::count(str_field(part, "text").unwrap_or(""), counter);
                    if role == Role::User {
                        b.user_text += n;
                    } else {
                        b.assistant_text += n;
                    }
                }
                Some("reasoning") => b.reasoning += slim::count(str_field(part, "text").unwrap_or(""), counter),
                Some("tool") => {
                    let state = part.get("state").unwrap_or(&NULL);
                    if let Some(input) = state.get("input") {
                        b.tool_inputs += slim::input_count(input).unwrap_or_else(|| counter.count(&input.to_string()));
                    }
                    let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
                    match str_field(state, "status") {
                        Some("completed") if compacted => b.tool_outputs += counter.count(OPENCODE_CLEARED),
                        Some("completed") => {
                            b.tool_outputs += slim::count(str_field(state, "output").unwrap_or(""), counter)
                        }
                        Some("error") => b.tool_errors += slim::count(str_field(state, "error").unwrap_or(""), counter),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
    b.total = b.user_text + b.assistant_text + b.reasoning + b.tool_inputs + b.tool_outputs + b.tool_errors;
    b
}
