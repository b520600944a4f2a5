//! Purge-errors: an errored call older than `strategies.purgeErrors.turns` model steps keeps
//! its error message, but its string inputs (often a large command or file body that failed)
//! are replaced by the failed-call placeholder.
//!
//! Protected tools are purged too: protection guards a tool's output, and a failed call has
//! none, only its error, which stays. Most failed calls of real sessions are `edit`s and
//! `write`s whose arguments (a whole file body, a long old/new string pair) are the biggest
//! dead weight there is. Only `strategies.purgeErrors.protectedTools` and protected file
//! patterns keep a failed call's inputs.

use super::{open_for_pruning, Decision, Rules, ERROR_INPUT_PLACEHOLDER};
use crate::session::{History, Node, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::TokenCounter;

/// The string inputs of a call, joined: what purging removes.
pub fn string_inputs(input: &Node) -> String {
    let Some(map) = input.as_object() else {
        return String::new();
    };
    let mut out = String::new();
    for value in map.values() {
        if let Some(s) = value.as_str() {
            if s != ERROR_INPUT_PLACEHOLDER {
                out.push_str(s);
            }
        }
    }
    out
}

/// The model step from which errored `call` is old enough to purge.
pub fn ready_at(call: &ToolCall<'_>, rules: &Rules) -> u32 {
    call.turn.saturating_add(rules.config().strategies.purge_errors.turns.max(rules.turns()))
}

/// The purge of errored `call`: none if its tool or file is protected or it has no string
/// input to remove.
pub fn prune(call: &ToolCall<'_>, rules: &Rules, counter: &mut TokenCounter) -> Option<Decision> {
    if rules.config().purge_protects(call.tool) || rules.protects_file(call) {
        return None;
    }
    if string_inputs(call.input()).is_empty() {
        return None;
    }
    Decision::honest(call, Strategy::PurgeErrors, Action::ErrorInputs, counter)
}

pub fn decide(history: &History<'_>, state: &SessionState, rules: &Rules, counter: &mut TokenCounter) -> Vec<Decision> {
    let current = history.current;
    let mut out = Vec::new();
    for call in &history.calls {
        if call.status != ToolStatus::Error || current < ready_at(call, rules) {
            continue;
        }
        if !open_for_pruning(call, state) {
            continue;
        }
        out.extend(prune(call, rules, counter));
    }
    out
}
