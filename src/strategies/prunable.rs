//! The `<prunable-tools>` list: which calls the agent may discard or extract, their small
//! ids, and their lines.
//!
//! The batch [`prunable`] looks at a whole history (the agent tools check ids against it);
//! the sidecar's [`crate::strategies::incremental::Index`] keeps the same list up to date one
//! message at a time, with the same [`listable`] and [`item`]. [`crate::texts::prunable_list`]
//! renders it.

use super::{approx_tokens, masking, pruned_ids, Rules};
use crate::session::{History, ToolCall, ToolStatus};
use crate::state::SessionState;

/// One call the agent may prune, as the `<prunable-tools>` list shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Prunable {
    pub id: u32,
    pub call_id: String,
    pub tool: String,
    pub key: Option<String>,
}

impl Prunable {
    /// The list line: `<id>: <tool>, <key argument>`.
    pub fn line(&self) -> String {
        match &self.key {
            Some(key) => format!("{}: {}, {}", self.id, self.tool, one_line(key, 100)),
            None => format!("{}: {}", self.id, self.tool),
        }
    }
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max).collect();
    cut.push('…');
    cut
}

/// How the prunable list is built.
#[derive(Debug, Clone, Copy, Default)]
pub struct Listing<'a> {
    /// Paths under this directory are shown relative to it: shorter lines, fewer tokens.
    pub project: Option<&'a str>,
    /// Outputs smaller than this many tokens (estimated by [`approx_tokens`]) are not listed:
    /// a list line is re-sent (uncached) with every request, so listing a small output costs
    /// more than pruning it saves.
    pub min_tokens: u64,
}

/// Whether the list shows `call`, if dcp has not pruned it: the agent may prune it, and its
/// output is large enough to be worth a line.
pub fn listable(call: &ToolCall<'_>, rules: &Rules, listing: &Listing<'_>, current: u32) -> bool {
    call.status == ToolStatus::Completed
        && !call.compacted
        && !rules.config().tools_protect(call.tool)
        && !rules.protects_file(call)
        && !rules.protects_turn(call, current)
        && (listing.min_tokens == 0 || approx_tokens(call.output()) >= listing.min_tokens)
}

/// A call's key argument as the list shows it: a path inside `project` relative to it.
pub fn shown_key<'k>(key: &'k str, project: Option<&str>) -> &'k str {
    let inside = project.and_then(|root| key.strip_prefix(root)?.strip_prefix('/'));
    inside.filter(|rest| !rest.is_empty()).unwrap_or(key)
}

/// The list entry of `call`, with its id (assigned now if it has none).
pub fn item(call: &ToolCall<'_>, state: &mut SessionState, listing: &Listing<'_>) -> Prunable {
    let key = call.key_argument().map(|k| shown_key(k, listing.project));
    Prunable {
        id: state.id_for(call.call_id),
        call_id: call.call_id.to_string(),
        tool: call.tool.to_string(),
        key: key.map(str::to_string),
    }
}

/// The calls the agent may discard or extract, oldest first, with their ids. Assigns ids to
/// calls seen for the first time, so it takes the state mutably.
pub fn prunable(
    history: &History<'_>,
    state: &mut SessionState,
    rules: &Rules,
    listing: &Listing<'_>,
) -> Vec<Prunable> {
    let current = history.current;
    // Calls beyond the masking window are left to masking, as in the sidecar's list.
    let window = masking::window_start(history, rules, masking::Window::Kept);
    let listed: Vec<&ToolCall<'_>> = {
        let pruned = pruned_ids(state);
        history.calls[window..]
            .iter()
            .filter(|call| !pruned.contains(call.call_id) && listable(call, rules, listing, current))
            .collect()
    };
    listed.into_iter().map(|call| item(call, state, listing)).collect()
}
