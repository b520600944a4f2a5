//! Tokens by category: what the model is sent for a message list, counted the way it sees it.
//!
//! [`measure`] splits a message list into text, reasoning, tool inputs, tool outputs and tool
//! errors (an output OpenCode already cleared counts as its short replacement). It sits below
//! both the strategies (range compression sizes its blocks with it) and the reports (`dcp
//! context`, replay, the sidecar's savings), which all count the same way.

use serde::Serialize;

use crate::session::node::NULL;
use crate::session::{slim, str_field, Message, Node, Role};
use crate::tokens::{Field, TokenCounter};

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

/// How [`measure`] counts: a text, and a completed tool output (which may be cached by part).
trait Count {
    fn text(&mut self, text: &str) -> u64;
    fn output(&mut self, part_id: &str, output: &str) -> u64;
}

impl Count for &TokenCounter {
    fn text(&mut self, text: &str) -> u64 {
        slim::count(text, self)
    }

    fn output(&mut self, _part_id: &str, output: &str) -> u64 {
        slim::count(output, self)
    }
}

/// Counts outputs through the counter's per-part cache, as the strategies do
/// (`crate::strategies::output_tokens`): an output counted once is not tokenized again.
struct Cached<'a>(&'a mut TokenCounter);

impl Count for Cached<'_> {
    fn text(&mut self, text: &str) -> u64 {
        slim::count(text, self.0)
    }

    fn output(&mut self, part_id: &str, output: &str) -> u64 {
        match slim::marker(output) {
            Some(m) => m.tokens,
            None => self.0.count_part_with(part_id, Field::Output, || output),
        }
    }
}

/// Counts what the model would be sent for `messages`.
pub fn measure(messages: &[Message], counter: &TokenCounter) -> Breakdown {
    measure_with(messages, counter)
}

/// [`measure`], with completed tool outputs counted once per part and kept in `counter`'s
/// cache, where the strategies and the sidecar's count ahead find them.
pub fn measure_cached(messages: &[Message], counter: &mut TokenCounter) -> Breakdown {
    measure_with(messages, Cached(counter))
}

fn measure_with(messages: &[Message], mut count: impl Count) -> Breakdown {
    let mut b = Breakdown::default();
    for message in messages {
        let role = message.role();
        for part in &message.parts {
            match str_field(part, "type") {
                Some("text") => {
                    if part.get("ignored").and_then(Node::as_bool) == Some(true) {
                        continue;
                    }
                    let n = count.text(str_field(part, "text").unwrap_or(""));
                    if role == Role::User {
                        b.user_text += n;
                    } else {
                        b.assistant_text += n;
                    }
                }
                Some("reasoning") => b.reasoning += count.text(str_field(part, "text").unwrap_or("")),
                Some("tool") => tool_part(part, &mut count, &mut b),
                _ => {}
            }
        }
    }
    b.total = b.user_text + b.assistant_text + b.reasoning + b.tool_inputs + b.tool_outputs + b.tool_errors;
    b
}

/// Adds a tool part's input and its output or error to `b`.
fn tool_part(part: &Node, count: &mut impl Count, b: &mut Breakdown) {
    let state = part.get("state").unwrap_or(&NULL);
    if let Some(input) = state.get("input") {
        b.tool_inputs += slim::input_count(input).unwrap_or_else(|| count.text(&input.to_string()));
    }
    let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
    match str_field(state, "status") {
        Some("completed") if compacted => b.tool_outputs += count.text(OPENCODE_CLEARED),
        Some("completed") => {
            let id = str_field(part, "id").unwrap_or("");
            b.tool_outputs += count.output(id, str_field(state, "output").unwrap_or(""))
        }
        Some("error") => b.tool_errors += count.text(str_field(state, "error").unwrap_or("")),
        _ => {}
    }
}

/// The tools dcp gives the agent.
pub const AGENT_TOOLS: [&str; 3] = ["discard", "extract", "compress"];

/// A call of one of dcp's agent tools, made or attempted: a session not offered them records
/// the model's call as OpenCode's `invalid` tool naming it (see [`is_unavailable_agent_call`]).
/// A run without dcp would not have it: `dcp replay`'s `none` run and the live savings' "without
/// dcp" leave it out.
pub fn is_agent_call(part: &Node) -> bool {
    str_field(part, "type") == Some("tool")
        && (str_field(part, "tool").is_some_and(|t| AGENT_TOOLS.contains(&t)) || is_unavailable_agent_call(part))
}

/// A call of a dcp tool the session was not offered: OpenCode turned it into its `invalid`
/// tool, with the name the model used in the input.
pub fn is_unavailable_agent_call(part: &Node) -> bool {
    let named = part.get("state").and_then(|s| s.get("input")).and_then(|i| str_field(i, "tool"));
    str_field(part, "tool") == Some("invalid") && named.is_some_and(|t| AGENT_TOOLS.contains(&t))
}

/// An assistant message whose tool calls are all dcp agent tools: a model step that would not
/// have been made without dcp (the model would have gone on to its next action instead).
pub fn agent_only(m: &Message) -> bool {
    let mut calls = m.parts.iter().filter(|p| str_field(p, "type") == Some("tool")).peekable();
    m.role() == Role::Assistant && calls.peek().is_some() && calls.all(is_agent_call)
}
