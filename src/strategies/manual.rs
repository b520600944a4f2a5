//! The agent-invoked strategies: `discard` and `extract`, and the list of calls they may
//! name.
//!
//! The agent names calls by the small integer ids of the `<prunable-tools>` list, which stay
//! stable for the session ([`crate::state::SessionState::id_for`]). A request that names an
//! unknown, protected or already pruned id changes nothing: the error lists the valid ids.

use std::fmt::Write as _;

use super::{finished, open_for_pruning, output_tokens, pruned_ids, Decision, Protection};
use crate::config::Config;
use crate::session::{tool_calls, History, Message, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::TokenCounter;

/// Why the agent discards outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The task the outputs served is done.
    Completion,
    /// The outputs were never useful.
    Noise,
}

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

/// Whether the list shows `call`: the agent may prune it (`open`: dcp has not pruned it), and
/// its output is large enough to be worth a line.
pub fn listable(
    call: &ToolCall<'_>,
    open: bool,
    config: &Config,
    protection: &Protection,
    listing: &Listing<'_>,
    current: u32,
) -> bool {
    call.status == ToolStatus::Completed
        && open
        && !call.compacted
        && !config.tools_protect(call.tool)
        && !protection.protects_file(call)
        && !protection.protects_turn(call, current)
        && (listing.min_tokens == 0 || approx_tokens(call.output()) >= listing.min_tokens)
}

/// Tokens of an output, estimated as characters / 4: the list's threshold needs no more,
/// and the tokenizer would cost the request path more than the rest of it.
pub fn approx_tokens(output: Option<&str>) -> u64 {
    output.map_or(0, |o| o.chars().count() as u64).div_ceil(4)
}

/// The list entry of `call`, with its id (assigned now if it has none).
pub fn item(call: &ToolCall<'_>, state: &mut SessionState, listing: &Listing<'_>) -> Prunable {
    let key = call.key_argument().map(|k| match listing.project {
        Some(root) => {
            k.strip_prefix(root).and_then(|rest| rest.strip_prefix('/')).filter(|r| !r.is_empty()).unwrap_or(k)
        }
        None => k,
    });
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
    config: &Config,
    protection: &Protection,
    listing: &Listing<'_>,
) -> Vec<Prunable> {
    let current = history.current;
    let listed: Vec<&ToolCall<'_>> = {
        let pruned = pruned_ids(state);
        history
            .calls
            .iter()
            .filter(|call| {
                let open = !pruned.contains(call.call_id);
                listable(call, open, config, protection, listing, current)
            })
            .collect()
    };
    listed.into_iter().map(|call| item(call, state, listing)).collect()
}

/// Why a discard or extract was refused. The message is meant for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

fn refusal(problem: &str, valid: &[Prunable]) -> Refusal {
    let mut text = format!("{problem} Nothing was pruned.");
    if valid.is_empty() {
        text.push_str(" There are no prunable tool outputs right now.");
    } else {
        text.push_str(" Valid ids: ");
        let ids: Vec<String> = valid.iter().map(|p| p.id.to_string()).collect();
        text.push_str(&ids.join(", "));
        text.push('.');
    }
    Refusal(text)
}

/// Resolves the agent's ids to prunable calls, refusing the whole request if any is bad.
fn resolve(ids: &[String], valid: &[Prunable]) -> Result<Vec<String>, Refusal> {
    if ids.is_empty() {
        return Err(refusal("No ids were given.", valid));
    }
    let mut out: Vec<String> = Vec::new();
    let mut bad = Vec::new();
    for raw in ids {
        let found = raw.trim().parse::<u32>().ok().and_then(|n| valid.iter().find(|p| p.id == n));
        match found {
            Some(p) if !out.contains(&p.call_id) => out.push(p.call_id.clone()),
            Some(_) => {}
            None => bad.push(raw.as_str()),
        }
    }
    if !bad.is_empty() {
        let mut problem = String::from("Unknown, protected or already pruned id");
        if bad.len() > 1 {
            problem.push('s');
        }
        let _ = write!(problem, ": {}.", bad.join(", "));
        return Err(refusal(&problem, valid));
    }
    Ok(out)
}

/// Splits DCP 1.2's form, where a leading `"completion"` or `"noise"` inside `ids` is the
/// reason, from the ids proper.
pub fn split_reason(ids: &[String], reason: Option<Reason>) -> (Vec<String>, Option<Reason>) {
    let leading = ids.first().and_then(|first| match first.trim() {
        "completion" => Some(Reason::Completion),
        "noise" => Some(Reason::Noise),
        _ => None,
    });
    match leading {
        Some(r) => (ids[1..].to_vec(), reason.or(Some(r))),
        None => (ids.to_vec(), reason),
    }
}

/// Decisions for `discard {ids}`. `valid` is the current prunable list.
pub fn discard(
    messages: &[Message],
    ids: &[String],
    valid: &[Prunable],
    counter: &mut TokenCounter,
) -> Result<Vec<Decision>, Refusal> {
    let chosen = resolve(ids, valid)?;
    let calls = tool_calls(messages);
    Ok(chosen
        .iter()
        .filter_map(|c| calls.iter().find(|call| call.call_id == c))
        .map(|call| Decision::new(call, Strategy::Discard, Action::Output, output_tokens(call, counter)))
        .collect())
}

/// Decisions for `extract {ids, distillation}`: each output becomes its distillation,
/// matched by position.
pub fn extract(
    messages: &[Message],
    ids: &[String],
    distillation: &[String],
    valid: &[Prunable],
    counter: &mut TokenCounter,
) -> Result<Vec<Decision>, Refusal> {
    if ids.len() != distillation.len() {
        return Err(refusal(
            &format!(
                "Got {} ids but {} distillations; give one distillation per id, in the same order.",
                ids.len(),
                distillation.len()
            ),
            valid,
        ));
    }
    if distillation.iter().any(|d| d.trim().is_empty()) {
        return Err(refusal("A distillation is empty.", valid));
    }
    let chosen = resolve(ids, valid)?;
    if chosen.len() != ids.len() {
        return Err(refusal("An id is repeated.", valid));
    }
    let calls = tool_calls(messages);
    let mut out = Vec::new();
    for (call_id, text) in chosen.iter().zip(distillation) {
        let Some(call) = calls.iter().find(|c| c.call_id == call_id) else {
            continue;
        };
        let removed = output_tokens(call, counter);
        let added = counter.count(text);
        let action = Action::Distill { distillation: text.clone() };
        out.push(Decision::new(call, Strategy::Extract, action, removed.saturating_sub(added)));
    }
    Ok(out)
}

/// Whether `call` is finished and neither protected nor pruned: what sweep may take.
pub(super) fn sweepable(call: &ToolCall<'_>, state: &SessionState, config: &Config, protection: &Protection) -> bool {
    finished(call)
        && open_for_pruning(call, state)
        && !config.sweep_protects(call.tool)
        && !protection.protects_file(call)
}
