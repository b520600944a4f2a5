//! Supersede-writes: a `write` whose file a later `read` covers. The read's output holds the
//! file as it is now, so the write's `content` input is dead weight and is pruned.
//!
//! `write` is a protected tool, but protection guards a tool's *output*; this strategy only
//! touches the write's input, and only once a read has shown the same file again. Protected
//! file patterns and turn protection still apply.

use super::{open_for_pruning, Decision, Rules};
use rustc_hash::FxHashMap as HashMap;

use crate::session::{str_field, History, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::TokenCounter;

pub fn decide(history: &History<'_>, state: &SessionState, rules: &Rules, counter: &mut TokenCounter) -> Vec<Decision> {
    let calls = &history.calls;
    let current = history.current;
    // The last completed read of each path, so each write is checked in one lookup.
    let mut last_read: HashMap<&str, usize> = HashMap::default();
    for (i, c) in calls.iter().enumerate() {
        if c.tool == "read" && c.status == ToolStatus::Completed {
            if let Some(path) = c.file_path() {
                last_read.insert(path, i);
            }
        }
    }
    let mut out = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        if call.tool != "write" || call.status != ToolStatus::Completed {
            continue;
        }
        let Some(path) = call.file_path() else {
            continue;
        };
        if last_read.get(path).is_none_or(|&r| r <= i) {
            continue;
        }
        if !open_for_pruning(call, state) || rules.protects_turn(call, current) {
            continue;
        }
        out.extend(prune(call, rules, counter));
    }
    out
}

/// The prune of write `call`, once a later read covers its file: none if the file is
/// protected or the write has no `content`.
pub fn prune(call: &ToolCall<'_>, rules: &Rules, counter: &mut TokenCounter) -> Option<Decision> {
    if rules.protects_file(call) {
        return None;
    }
    str_field(call.input(), "content")?;
    Decision::honest(call, Strategy::SupersedeWrites, Action::WriteContent, counter)
}
