//! What the agent is told when part of a `discard`, `extract` or `compress` call cannot be
//! applied: one phrase per problem, gathered into the answer's "Not pruned:" or "Not
//! applied:" line ([`super::tool_done`], [`super::compress_answer`]).

pub fn no_such_id(name: &str) -> String {
    format!("{name}: no tool call has this id")
}
pub fn gone(name: &str) -> String {
    format!("{name}: the call is no longer in the conversation")
}
pub fn no_tool_calls(name: &str) -> String {
    format!("{name}: that message has no tool calls")
}
pub const EMPTY_ID: &str = "an empty id";
pub const ALREADY_PRUNED: &str = "already pruned";
pub const IN_A_RANGE: &str = "inside a compressed range";
pub const CLEARED: &str = "already cleared by OpenCode";
pub const NO_OUTPUT: &str = "has no output to prune (it failed or has not finished)";
pub const PROTECTED_TOOL: &str = "a protected tool";
pub const PROTECTED_FILE: &str = "a protected file";
/// `name` stands for a call of `tool` that may not be pruned, `why`.
pub fn refused(name: &str, tool: &str, why: &str) -> String {
    format!("{name} ({tool}): {why}")
}
pub const NO_IDS: &str = "no ids were given";
pub fn unpaired(ids: usize, distillations: usize) -> String {
    format!(
        "got {ids} ids but {distillations} distillations: only the first {} pairs were used",
        ids.min(distillations)
    )
}
pub fn empty_distillation(name: &str) -> String {
    format!("{name}: the distillation is empty")
}
pub fn many_calls(name: &str, calls: usize) -> String {
    format!("{name}: names {calls} calls; name one call per distillation")
}
pub const NO_RANGES: &str = "No ranges were given: pass range (from..to) and summary.";
/// How a compress answer names range `n` (from 0) of `of`.
pub fn range_label(n: usize, of: usize) -> String {
    if of == 1 {
        "The range".to_string()
    } else {
        format!("Range {}", n + 1)
    }
}
pub fn range_problem(label: &str, start: &str, end: &str, problem: &str) -> String {
    format!("{label} ({start}..{end}): {problem}")
}
pub const EMPTY_SUMMARY: &str = "the summary is empty";
pub const EMPTY_HISTORY: &str = "the history is empty";
/// A range whose `startId` or `endId` (`which`) is missing: named as its start or end,
/// whichever argument names the agent used.
pub fn no_range_end(which: &str) -> String {
    let end = which.strip_suffix("Id").unwrap_or(which);
    format!("no {end} id")
}
pub fn not_a_message_id(raw: &str) -> String {
    format!("{raw:?} is not a message id (m1) or a block id (b1)")
}
pub fn past_the_newest(raw: &str, newest: &str) -> String {
    format!("{raw} is not in the conversation (the newest message is {newest})")
}
pub fn not_a_block(raw: &str) -> String {
    format!("{raw} is not a compressed block in the conversation")
}
pub fn widened(label: &str, from: &str, to: &str) -> String {
    format!("{label} was widened to {from}..{to} so that it holds whole compressed blocks.")
}
/// A range whose summary would not make it smaller: `summary` tokens for the `replaced` the
/// model is sent of it now. Compressing it would only lose what it says.
pub fn summary_not_shorter(summary: u64, replaced: u64) -> String {
    format!(
        "the summary ({summary} tokens) is not shorter than what it would replace ({replaced} tokens); name a longer range or write a shorter summary"
    )
}
