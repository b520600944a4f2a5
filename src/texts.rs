//! What dcp says to the model and in the session: the agent's instructions, tool answers and
//! refusals, the prunable list, nudges, notifications and the `/dcp` answers. All of it lives
//! here, in Rust; the plugin only carries it (but for the two lines it shows when the sidecar
//! cannot answer). The CLI's and `/dcp`'s reports are tables, drawn by [`crate::report`].

use std::fmt::Write as _;

use crate::config::{Notification, Tools};
use crate::format;
use crate::state::{PruneRecord, Strategy};

/// Added to the system prompt when discard or extract is enabled. Constant, so the prompt
/// prefix stays byte-stable.
pub fn system(tools: &Tools) -> String {
    let (discard, extract) = (tools.discard.enabled, tools.extract.enabled);
    let mut text = String::from(
        "Context management: tool outputs stay in your context until removed. The last message of a request may hold a \
         <prunable-tools> list, one line per tool call you may remove: `<id>: <tool>, <key argument>`.",
    );
    if discard {
        text.push_str(
            " Call `discard` with the ids of outputs you no longer need (reason \"completion\" when the work they served is done, \
             \"noise\" when they never helped).",
        );
    }
    if extract {
        text.push_str(
            " Call `extract` with ids and one short distillation per id, in the same order, to keep only the facts you still need \
             from large outputs.",
        );
    }
    text.push_str(
        " Call them alongside your next tool call rather than as a step of their own, so pruning costs no extra round trip. \
         Only remove what you will not need again; ids not in the list cannot be removed.",
    );
    text
}

pub const DISCARD_DESCRIPTION: &str =
    "Remove tool outputs you no longer need from the conversation context, by the ids of the \
<prunable-tools> list. reason: \"completion\" (the task they served is done) or \"noise\" (they never helped).";

pub const EXTRACT_DESCRIPTION: &str =
    "Replace tool outputs with short distillations of what matters in them, by the ids of \
the <prunable-tools> list: distillation[i] replaces the output of ids[i].";

/// The `<prunable-tools>` block appended at the tail of a request.
pub fn prunable_list<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::from("<prunable-tools>\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("</prunable-tools>");
    text
}

/// A reminder to prune, when many tool results piled up since the last one.
pub fn nudge(items: usize, tokens: u64) -> String {
    format!(
        "<dcp-nudge>{items} tool outputs ({} tokens) are in your context. If some are no longer needed, discard or extract them.</dcp-nudge>",
        format::tokens(tokens)
    )
}

/// The answer to a successful `discard` or `extract`.
pub fn tool_done(verb: &str, done: &[(u32, &str, Option<&str>)], tokens: u64) -> String {
    let mut text = format!(
        "{verb} {} tool output{} ({} tokens):",
        done.len(),
        if done.len() == 1 { "" } else { "s" },
        format::tokens(tokens)
    );
    for (id, tool, key) in done {
        let _ = write!(text, " {id}: {tool}");
        if let Some(k) = key {
            let _ = write!(text, " {}", crate::report::shorten(k, 80));
        }
        text.push(';');
    }
    text.pop();
    text.push('.');
    text
}

/// The notification shown to the user (never sent to the model) for the prunes of one
/// request: those `applied` to it, and those `waiting`, recorded now but rewritten only when
/// that pays for the prompt cache. `older_waiting` counts prunes recorded earlier that still
/// wait. At least one of `applied` and `waiting` is not empty. `level` is never `Off`; it
/// would read as `Minimal`.
pub fn notification(
    level: Notification,
    applied: &[(&str, &PruneRecord)],
    waiting: &[(&str, &PruneRecord)],
    older_waiting: usize,
) -> String {
    const LATER: &str = "applied later, when it pays";
    let tokens = |of: &[(&str, &PruneRecord)]| -> u64 { of.iter().map(|(_, r)| r.tokens).sum() };
    let shown = if applied.is_empty() { waiting } else { applied };
    let mut text =
        format!("▣ DCP | -{} tokens, {}", format::compact(tokens(shown)), format::count(shown.len() as u64, "tool"));
    if applied.is_empty() {
        let _ = write!(text, ", {LATER}");
    }
    if level != Notification::Detailed {
        return text;
    }
    for strategy in Strategy::ALL {
        let of: Vec<_> = shown.iter().filter(|(_, r)| r.strategy == strategy).copied().collect();
        if !of.is_empty() {
            let _ = write!(
                text,
                "\n→ {}: {} ({})",
                strategy.name(),
                format::tokens(tokens(&of)),
                format::count(of.len() as u64, "tool")
            );
        }
    }
    let more = if applied.is_empty() { older_waiting } else { waiting.len() + older_waiting };
    if more > 0 {
        let tools = if more == 1 { "tool" } else { "tools" };
        let _ = write!(text, "\n→ {more} more {tools} recorded, {LATER}");
    }
    text
}

pub const COMMAND_DESCRIPTION: &str = "Dynamic context pruning: /dcp stats | context | sweep [N] | help";

pub const HELP: &str = "DCP commands:
  /dcp stats      tokens and tools pruned, this session and all-time
  /dcp context    what the model is sent, by category, before and after pruning
  /dcp sweep [N]  prune every tool output since your last message, or the last N
  /dcp help       this help";

/// Why the agent's `discard` or `extract` was refused.
#[derive(Debug, Clone, Copy)]
pub enum Problem<'a> {
    NoIds,
    /// Ids not on the list, as the agent wrote them.
    UnknownIds(&'a [&'a str]),
    /// `extract` got a different number of ids and distillations.
    Counts {
        ids: usize,
        distillations: usize,
    },
    EmptyDistillation,
    RepeatedId,
}

/// The answer to a refused `discard` or `extract`, with the ids the agent may use.
pub fn refusal(problem: Problem<'_>, valid: &[u32]) -> String {
    let mut text = match problem {
        Problem::NoIds => "No ids were given.".to_string(),
        Problem::UnknownIds(bad) => format!(
            "Unknown, protected or already pruned id{}: {}.",
            if bad.len() > 1 { "s" } else { "" },
            bad.join(", ")
        ),
        Problem::Counts { ids, distillations } => {
            format!("Got {ids} ids but {distillations} distillations; give one distillation per id, in the same order.")
        }
        Problem::EmptyDistillation => "A distillation is empty.".to_string(),
        Problem::RepeatedId => "An id is repeated.".to_string(),
    };
    text.push_str(" Nothing was pruned.");
    if valid.is_empty() {
        text.push_str(" There are no prunable tool outputs right now.");
    } else {
        let ids: Vec<String> = valid.iter().map(u32::to_string).collect();
        let _ = write!(text, " Valid ids: {}.", ids.join(", "));
    }
    text
}

/// The answer to an agent tool that `dcp.jsonc` disabled.
pub fn tool_disabled(tool: &str) -> String {
    format!("{tool} is disabled in dcp.jsonc; nothing was pruned.")
}

/// The answer to an agent tool called before the sidecar saw the session's history.
pub const TOOL_BEFORE_HISTORY: &str =
    "dcp has not seen this session's history yet; nothing was pruned. Try again on the next step.";

/// The answer to a `discard` with a reason that is neither of the two.
pub fn unknown_reason(reason: &str) -> String {
    format!("Unknown reason {reason:?}: use \"completion\" or \"noise\". Nothing was pruned.")
}

/// The answer to `/dcp` when `commands.enabled` is off.
pub const COMMANDS_DISABLED: &str = "DCP commands are disabled in dcp.jsonc (commands.enabled).";

/// The answer to `/dcp sweep` with an argument that is not a number.
pub fn sweep_not_a_number(arg: &str) -> String {
    format!("/dcp sweep takes a number of tool calls, not {arg:?}.\n\n{HELP}")
}

/// The answer to a `/dcp` command that does not exist.
pub fn unknown_command(arguments: &str) -> String {
    format!("Unknown /dcp command {arguments:?}.\n\n{HELP}")
}

/// The answer to `/dcp sweep` when nothing is left to sweep.
pub const NOTHING_TO_SWEEP: &str = "Nothing to sweep.";

/// The answer to a `/dcp sweep` that pruned `n` outputs.
pub fn swept(n: usize, tokens: u64) -> String {
    format!("Swept {} ({} tokens).", format::count(n as u64, "tool output"), format::tokens(tokens))
}

/// The title of `/dcp context`'s report: the session's title, if it has one, and its id.
pub fn context_title(session_id: &str, title: Option<&str>) -> String {
    match title {
        Some(title) => format!("Session \"{title}\" ({session_id})"),
        None => format!("Session {session_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Action;

    fn record(strategy: Strategy, tokens: u64) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens, tool: "read".into(), applied: false }
    }

    #[test]
    fn a_notification_says_when_its_rewrite_waits() {
        let dedup = record(Strategy::Deduplication, 805);
        let one = [("call_1", &dedup)];
        assert_eq!(
            notification(Notification::Minimal, &[], &one, 0),
            "▣ DCP | -805 tokens, 1 tool, applied later, when it pays"
        );
        assert_eq!(
            notification(Notification::Detailed, &one, &[], 2),
            "▣ DCP | -805 tokens, 1 tool\n→ deduplication: ~805 (1 tool)\n→ 2 more tools recorded, applied later, when it pays"
        );
        let write = record(Strategy::SupersedeWrites, 1_250);
        let two = [("call_1", &dedup), ("call_2", &write)];
        assert_eq!(
            notification(Notification::Detailed, &two, &[], 0),
            "▣ DCP | -2.1K tokens, 2 tools\n→ deduplication: ~805 (1 tool)\n→ supersede-writes: ~1.3K (1 tool)"
        );
    }
}
