//! Finished turns: once the person has answered a turn with a new prompt, the tool calls that
//! turn made become one line that names them, and the turn keeps its prompt and its answer.
//!
//! The calls of a turn are how the agent got to its answer. Masking takes their outputs, but
//! every call still sends its input and a placeholder (tens of tokens each), and by the second
//! or third prompt of a session those frames weigh more than the outputs masking leaves. The
//! answer says what came of them; the files they read and the commands they ran are still
//! there to run again. So once the person sends a new prompt, the steps between the previous
//! prompt and the agent's answer to it are replaced by one message naming their calls: a
//! compressed range that dcp makes, not the agent (`crate::strategies::compress`), and that
//! the cache-aware policy applies like any other (`crate::policy`). A turn just finished sits
//! near the tail, so its rewrite pays on the request that finds it.
//!
//! Only the turn right before the latest prompt is looked at: each turn is when it has just
//! finished. It is left alone when it has no answer (its last step called tools), when a step
//! of it is no assistant message or a compaction, when one of its calls has not finished, is
//! of a protected tool (edits and writes excepted: what they did is on disk and the line
//! names them) or touches a protected file, when part of it is in a range already, or when
//! the line would not be much smaller than what it replaces, or when the user restored a range
//! of it. A step that shows a file the new prompt names (its latest read or write, an edit
//! after it) stays as it is, and the steps around it become lines of their own: the person
//! is asking about that file (`crate::strategies::keep`, "Named by the person").

use super::{masking, Rules};
use crate::session::{starts_turn, str_field, tool_calls, Message, Node, Role, ToolCall, ToolStatus};
use crate::state::blocks::Blocks;
use crate::texts::placeholders;

/// Calls the line names; the rest it counts.
pub const NAMED: usize = 12;

/// Longest key argument the line quotes, in characters: a command or a path whole, as the
/// agent may write it again.
pub const KEY_CHARS: usize = 2_000;

/// A finished turn's steps, `messages[from..=to]`, and the line that replaces them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collapse {
    pub from: usize,
    pub to: usize,
    pub summary: String,
}

/// The runs of steps of the finished turn right before the latest prompt that may become one
/// line each (see the module header). `sizes`: each message's size as sent, in the same unit
/// as the line's characters / 4. `named`: whether a call shows a file the latest prompt names
/// (`crate::strategies::keep`); its step stays.
pub fn finished_turn(
    messages: &[Message],
    sizes: &[u64],
    blocks: &Blocks,
    rules: &Rules,
    named: &dyn Fn(&ToolCall<'_>) -> bool,
) -> Vec<Collapse> {
    let mut prompts = (0..messages.len()).rev().filter(|&i| starts_turn(messages, i));
    let (Some(latest), Some(previous)) = (prompts.next(), prompts.next()) else { return Vec::new() };
    let Some(answer) = (previous + 1..latest).rev().find(|&i| is_answer(&messages[i])) else { return Vec::new() };
    let mut runs = Vec::new();
    let mut from = previous + 1;
    for i in previous + 1..=answer {
        let collapsible = |c: &ToolCall<'_>| collapsible(c, rules) && !named(c);
        if i < answer && calls_only(&messages[i]) && tool_calls(&messages[i..=i]).iter().all(collapsible) {
            continue;
        }
        runs.extend(run(messages, sizes, (from, i), blocks));
        from = i + 1;
    }
    runs
}

/// The steps `messages[from..to]`, every one of them calls only, as one line, if they may be.
fn run(messages: &[Message], sizes: &[u64], (from, to): (usize, usize), blocks: &Blocks) -> Option<Collapse> {
    let steps = messages.get(from..to).filter(|s| !s.is_empty())?;
    let calls = tool_calls(steps);
    if calls.is_empty() || in_a_range(steps, blocks) {
        return None;
    }
    let summary = line(&calls);
    let size: u64 = sizes.get(from..to)?.iter().sum();
    let to = to - 1;
    (size >= 2 * (summary.chars().count() as u64).div_ceil(4)).then_some(Collapse { from, to, summary })
}

/// An assistant step that only called tools: no text, no compaction.
fn calls_only(m: &Message) -> bool {
    m.role() == Role::Assistant
        && !m.is_compaction_summary()
        && m.parts.iter().any(|p| part_type(p) == Some("tool"))
        && !m.parts.iter().any(has_text)
}

fn part_type(p: &Node) -> Option<&str> {
    str_field(p, "type")
}

/// A text part that says something.
fn has_text(p: &Node) -> bool {
    part_type(p) == Some("text") && str_field(p, "text").is_some_and(|t| !t.trim().is_empty())
}

/// An assistant message that answers: text and no tool call.
fn is_answer(m: &Message) -> bool {
    m.role() == Role::Assistant && !m.parts.iter().any(|p| part_type(p) == Some("tool")) && m.parts.iter().any(has_text)
}

/// Whether a finished turn's line may stand in for `call`.
fn collapsible(call: &ToolCall<'_>, rules: &Rules) -> bool {
    let finished = matches!(call.status, ToolStatus::Completed | ToolStatus::Error);
    finished && !rules.config().masking_protects(call.tool) && !rules.protects_file(call)
}

/// Whether a message of `steps` is in an active range already, or was in one the user
/// restored (`/dcp decompress`): what the user brought back stays.
fn in_a_range(steps: &[Message], blocks: &Blocks) -> bool {
    let ids: Vec<&str> = steps.iter().map(Message::id).collect();
    let mut ranges = blocks.by_id.values().filter(|b| b.active || b.deactivated_by_user);
    ranges.any(|b| b.effective_messages.iter().any(|m| ids.contains(&m.as_str())))
}

/// The line that names a finished turn's calls.
fn line(calls: &[ToolCall<'_>]) -> String {
    let named: Vec<String> = calls.iter().take(NAMED).map(|c| masking::call_label(c, KEY_CHARS)).collect();
    placeholders::collapsed_turn(&named, calls.len().saturating_sub(NAMED))
}

#[cfg(test)]
mod tests;
