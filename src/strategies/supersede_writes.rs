//! Supersede-writes: a `write` whose file a later `read` covers. The read's output holds the
//! file as it is now, so the write's `content` input is dead weight and is pruned.
//!
//! `write` is a protected tool, but protection guards a tool's *output*; this strategy only
//! touches the write's input, and only once a read has shown the same file again. Protected
//! file patterns and turn protection still apply.

use super::{open_for_pruning, Decision, Protection};
use crate::session::{current_turn, str_field, tool_calls, Message, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::{Field, TokenCounter};

pub fn decide(
    messages: &[Message],
    state: &SessionState,
    protection: &Protection,
    counter: &mut TokenCounter,
) -> Vec<Decision> {
    let calls = tool_calls(messages);
    let current = current_turn(messages);
    let mut out = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        if call.tool != "write" || call.status != ToolStatus::Completed {
            continue;
        }
        let (Some(path), Some(content)) = (str_field(call.input, "filePath"), str_field(call.input, "content")) else {
            continue;
        };
        if !open_for_pruning(call, state) || protection.protects_file(call) || protection.protects_turn(call, current) {
            continue;
        }
        let read_later = calls[i + 1..].iter().any(|later| {
            later.tool == "read"
                && later.status == ToolStatus::Completed
                && str_field(later.input, "filePath") == Some(path)
        });
        if !read_later {
            continue;
        }
        let tokens = counter.count_part(call.part_id, Field::Input, content);
        out.push(Decision::new(call, Strategy::SupersedeWrites, Action::WriteContent, tokens));
    }
    out
}
