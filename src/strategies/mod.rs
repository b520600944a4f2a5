//! The pruning engine: pure functions from (messages, state, config) to prune decisions, and
//! from decisions to the rewritten messages.
//!
//! Each strategy lives in its own module and only proposes [`Decision`]s; the caller records
//! them in the session's state. [`apply`] then rewrites the messages in place, touching only
//! the fields a decision names, so the same input always gives byte-identical output: prompt
//! caches depend on it. What every strategy must leave alone is decided in one place,
//! [`Rules`].

pub mod compress;
pub mod dedup;
pub mod incremental;
pub mod keep;
pub mod manual;
pub mod masking;
pub mod prunable;
pub mod purge_errors;
pub mod rewind;
pub mod supersede_writes;
pub mod sweep;
pub mod turns;
pub mod windows;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

use crate::config::Config;
use crate::session::{slim, History, Message, Node, ToolCall, ToolStatus};
use crate::state::{Action, PruneRecord, SessionState, Strategy};
use crate::texts::restore::{self, Handle, Via};
use crate::tokens::{Field, TokenCounter};

pub use crate::texts::placeholders::{
    ERROR_INPUT as ERROR_INPUT_PLACEHOLDER, OUTPUT as OUTPUT_PLACEHOLDER, WRITE_CONTENT as WRITE_CONTENT_PLACEHOLDER,
};

/// A proposed prune of one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub call_id: String,
    pub record: PruneRecord,
}

impl Decision {
    fn new(call: &ToolCall<'_>, strategy: Strategy, action: Action, tokens: u64) -> Decision {
        Decision {
            call_id: call.call_id.to_string(),
            record: PruneRecord { strategy, action, tokens, tool: call.tool.to_string(), applied: false },
        }
    }

    /// The prune of `call` by `action`, its tokens counted honestly ([`saved_tokens`]), or
    /// none when the replacement would be no smaller than what it replaces.
    pub fn honest(
        call: &ToolCall<'_>,
        strategy: Strategy,
        action: Action,
        counter: &mut TokenCounter,
    ) -> Option<Decision> {
        let tokens = saved_tokens(call, &action, counter);
        (tokens > 0).then(|| Decision::new(call, strategy, action, tokens))
    }
}

/// Tokens a prune of `call` by `action` takes out of every request: what leaves minus what
/// replaces it, each counted as [`crate::context::measure`] counts a part (an output as its
/// text, the inputs as their JSON), so the tokens of a session's applied prunes add up to
/// what `dcp context` shows removed. 0 when the action does not apply to the part or its
/// replacement is no smaller.
pub fn saved_tokens(call: &ToolCall<'_>, action: &Action, counter: &mut TokenCounter) -> u64 {
    let edits = field_edits(call.part(), action, None);
    let touches = |field: &str| edits.iter().any(|e| e.path.get(1).map(String::as_str) == Some(field));
    let (mut before, mut after) = (0u64, 0u64);
    if touches("output") {
        before += output_tokens(call, counter);
        for e in edits.iter().filter(|e| e.path.get(1).map(String::as_str) == Some("output")) {
            after += counter.count(e.value.as_str().unwrap_or(""));
        }
    }
    if touches("input") {
        let input = call.input();
        before += match slim::input_count(input) {
            Some(n) => n,
            None => counter.count_part(call.part_id, Field::Input, &input.to_string()),
        };
        let mut rewritten = input.clone();
        for e in edits.iter().filter(|e| e.path.get(1).map(String::as_str) == Some("input")) {
            if let Some(slot) = e.path.get(2).and_then(|k| rewritten.get_mut(k.as_str())) {
                *slot = Node::from(&e.value);
            }
        }
        after += counter.count(&rewritten.to_string());
    }
    before.saturating_sub(after)
}

#[derive(Debug, thiserror::Error)]
#[error("protectedFilePatterns: invalid glob {pattern:?}")]
pub struct PatternError {
    pattern: String,
    #[source]
    source: globset::Error,
}

/// The rules every strategy judges by: the config, and what it protects (file globs and
/// young turns), compiled once. Protected tool names differ per strategy and come from the
/// config. The fields are private: the compiled protection always matches the config.
#[derive(Debug, Clone)]
pub struct Rules {
    config: Config,
    /// The price sheet of the sessions these rules serve: `prices` over the default
    /// (`crate::prices`).
    sheet: crate::prices::Sheet,
    files: GlobSet,
    /// Calls younger than this many model steps are left alone (0: no turn protection).
    turns: u32,
}

impl Rules {
    pub fn new(config: Config) -> Result<Rules, PatternError> {
        let mut builder = GlobSetBuilder::new();
        for pattern in &config.protected_file_patterns {
            let glob = Glob::new(pattern).map_err(|source| PatternError { pattern: pattern.clone(), source })?;
            builder.add(glob);
        }
        let files = builder.build().map_err(|source| PatternError { pattern: String::new(), source })?;
        let turns = if config.turn_protection.enabled { config.turn_protection.turns } else { 0 };
        // The config was checked when it was read; one made in code with a bad `prices`
        // keeps the default sheet.
        let sheet = config.sheet(crate::prices::Sheet::default()).unwrap_or_default();
        Ok(Rules { config, sheet, files, turns })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The sessions' price sheet.
    pub fn sheet(&self) -> &crate::prices::Sheet {
        &self.sheet
    }

    /// Whether the call's file matches a protected pattern.
    pub fn protects_file(&self, call: &ToolCall<'_>) -> bool {
        !self.files.is_empty() && call.file_path().is_some_and(|p| self.files.is_match(p))
    }

    /// Model steps a call stays protected for (0: none).
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Whether the call is too young to prune, `current` being the newest model step.
    pub fn protects_turn(&self, call: &ToolCall<'_>, current: u32) -> bool {
        self.turns > 0 && current.saturating_sub(call.turn) < self.turns
    }
}

/// Whether `call` can be pruned at all: OpenCode has not cleared it already, and it has not
/// been pruned by dcp.
fn open_for_pruning(call: &ToolCall<'_>, state: &SessionState) -> bool {
    !call.compacted && !state.pruned.contains_key(call.call_id)
}

/// The ids of `state`'s pruned calls, for loops over every call of a long history: a hash
/// lookup costs much less than a search of the ordered map.
fn pruned_ids(state: &SessionState) -> rustc_hash::FxHashSet<&str> {
    state.pruned.keys().map(String::as_str).collect()
}

/// [`open_for_pruning`], given [`pruned_ids`].
fn open_in(call: &ToolCall<'_>, pruned: &rustc_hash::FxHashSet<&str>) -> bool {
    !call.compacted && !pruned.contains(call.call_id)
}

/// Tokens of a call's output, counted once per part.
pub fn output_tokens(call: &ToolCall<'_>, counter: &mut TokenCounter) -> u64 {
    // A slimmed output holds its count (see `crate::session::slim`).
    if let Some(m) = call.output().and_then(slim::marker) {
        return m.tokens;
    }
    counter.count_part_with(call.part_id, Field::Output, || call.output().unwrap_or(""))
}

/// Runs every enabled automatic strategy (deduplication, supersede-writes, purge-errors) in
/// that order. Returns the new decisions, not yet recorded.
pub fn automatic(
    history: &History<'_>,
    state: &SessionState,
    rules: &Rules,
    counter: &mut TokenCounter,
) -> Vec<Decision> {
    // The three never propose the same call: deduplication takes completed calls of tools
    // other than `write` (always protected from it), supersede-writes completed `write`s, and
    // purge-errors errored calls. So each can run on `state` as it is, with no copy of it on
    // the request path.
    [Strategy::Deduplication, Strategy::SupersedeWrites, Strategy::PurgeErrors]
        .into_iter()
        .flat_map(|strategy| automatic_one(strategy, history, state, rules, counter))
        .collect()
}

/// Runs one automatic strategy, if it is enabled. Masking, which [`automatic`] leaves out
/// because the sidecar times it with the policy, runs here too.
pub fn automatic_one(
    strategy: Strategy,
    history: &History<'_>,
    state: &SessionState,
    rules: &Rules,
    counter: &mut TokenCounter,
) -> Vec<Decision> {
    let s = &rules.config().strategies;
    match strategy {
        Strategy::Deduplication if s.deduplication.enabled => dedup::decide(history, state, rules, counter),
        Strategy::SupersedeWrites if s.supersede_writes.enabled => {
            supersede_writes::decide(history, state, rules, counter)
        }
        Strategy::PurgeErrors if s.purge_errors.enabled => purge_errors::decide(history, state, rules, counter),
        Strategy::Masking if s.masking.enabled => masking::decide_over_history(history, state, rules, counter),
        _ => Vec::new(),
    }
}

/// Rewrites `messages` in place for every pruned call of `state` that `include` accepts.
/// Only the fields a decision names change; everything else stays byte for byte. The
/// placeholders name no handle (see [`apply_with`]).
pub fn apply(messages: &mut [Message], state: &SessionState, include: impl Fn(&PruneRecord) -> bool) {
    apply_with(messages, state, include, None);
}

/// [`apply`], the placeholders naming each call's handle (its agent-facing id in `state`)
/// and saying how to restore it `via` this, as the model is sent them.
pub fn apply_with(
    messages: &mut [Message],
    state: &SessionState,
    include: impl Fn(&PruneRecord) -> bool,
    via: Option<Via>,
) {
    if state.pruned.is_empty() {
        return;
    }
    for message in messages.iter_mut() {
        for part in message.parts.iter_mut() {
            let Some(call_id) = part.get("callID").and_then(Node::as_str) else {
                continue;
            };
            let Some(record) = state.pruned.get(call_id) else {
                continue;
            };
            if include(record) {
                rewrite_part(part, &record.action, handle_of(state, call_id, via));
            }
        }
    }
}

/// One field change of a rewrite: the JSON path inside the part, and the new value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldEdit {
    pub path: Vec<String>,
    pub value: Value,
}

/// The field changes `action` makes to a tool part. Parts that do not have the shape the
/// action needs get none. With a `handle`, the placeholders name it and say how the agent
/// restores what they hide ([`crate::texts::restore`]); an agent's distillation stands as
/// written.
pub fn field_edits(part: &Node, action: &Action, handle: Option<Handle>) -> Vec<FieldEdit> {
    let edit = |path: &[&str], value: &str| FieldEdit {
        path: path.iter().map(|s| s.to_string()).collect(),
        value: Value::String(value.to_string()),
    };
    if part.get("type").and_then(Node::as_str) != Some("tool") {
        return Vec::new();
    }
    let Some(state) = part.get("state").and_then(Node::as_object) else {
        return Vec::new();
    };
    let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
    let status = state.get("status").and_then(Node::as_str).unwrap_or("");
    let input = state.get("input").and_then(Node::as_object);
    let tool = part.get("tool").and_then(Node::as_str).unwrap_or("");
    match action {
        Action::Output | Action::Distill { .. } | Action::Mask => {
            if status != "completed" || compacted {
                return Vec::new();
            }
            let text = match (action, handle) {
                (Action::Distill { distillation }, _) => distillation.clone(),
                (Action::Mask, Some(h)) if tool != masking::INVALID => restore::masked_output(h),
                (Action::Mask, _) => masking::placeholder(part),
                _ => restore::with_handle(OUTPUT_PLACEHOLDER, handle),
            };
            let mut edits = vec![edit(&["state", "output"], &text)];
            // A masked `invalid` call's input repeats the error its output held.
            if *action == Action::Mask && tool == masking::INVALID {
                edits.extend(masking::masked_inputs(tool, input).map(|(k, v)| edit(&["state", "input", k], v)));
            }
            edits
        }
        Action::WriteContent => match input.and_then(|i| i.get("content")) {
            Some(content) if content.is_string() => {
                vec![edit(&["state", "input", "content"], &restore::with_handle(WRITE_CONTENT_PLACEHOLDER, handle))]
            }
            _ => Vec::new(),
        },
        Action::MaskInputs => {
            if status != "completed" || compacted {
                return Vec::new();
            }
            let text = |v: &str| restore::with_handle(v, handle);
            masking::masked_inputs(tool, input).map(|(k, v)| edit(&["state", "input", k], &text(v))).collect()
        }
        // A newer dcp's action: this version cannot make its rewrite.
        Action::Unknown => Vec::new(),
        Action::ErrorInputs => input
            .into_iter()
            .flat_map(|i| i.iter())
            .filter(|(_, v)| v.is_string())
            .map(|(k, _)| edit(&["state", "input", k], ERROR_INPUT_PLACEHOLDER))
            .collect(),
    }
}

/// Applies one action to one tool part, in place, its placeholders naming `handle`.
pub fn rewrite_part(part: &mut Node, action: &Action, handle: Option<Handle>) {
    for FieldEdit { path, value } in field_edits(part, action, handle) {
        if let Some(slot) = pointer_mut(part, &path) {
            *slot = Node::from(value);
        }
    }
}

/// The value at `path` inside `value`, if every step exists.
pub fn pointer_mut<'a>(value: &'a mut Node, path: &[String]) -> Option<&'a mut Node> {
    path.iter().try_fold(value, |v, key| v.get_mut(key.as_str()))
}

/// The handle the placeholders of `call_id` name: its agent-facing id, when it has one and
/// the agent can restore `via` something.
pub fn handle_of(state: &SessionState, call_id: &str, via: Option<Via>) -> Option<Handle> {
    Some(Handle { id: *state.ids.get(call_id)?, via: via? })
}

/// Whether a call has finished, one way or the other.
fn finished(call: &ToolCall<'_>) -> bool {
    matches!(call.status, ToolStatus::Completed | ToolStatus::Error)
}

/// Tokens of an output, estimated as characters / 4: the list's threshold needs no more,
/// and the tokenizer would cost the request path more than the rest of it.
pub fn approx_tokens(output: Option<&str>) -> u64 {
    output.map_or(0, |o| crate::session::slim::chars(o) as u64).div_ceil(4)
}
