//! The agent-invoked strategies: `discard` and `extract`, and the list of calls they may
//! name.
//!
//! The agent names calls by the small integer ids of the `<prunable-tools>` list, which stay
//! stable for the session ([`crate::state::SessionState::id_for`]). A request that names an
//! unknown, protected or already pruned id changes nothing: the error lists the valid ids.

use super::prunable::Prunable;
use super::{finished, open_for_pruning, output_tokens, Decision, Rules};
use crate::session::{tool_calls, Message, ToolCall};
use crate::state::{Action, SessionState, Strategy};
use crate::texts::{self, Problem};
use crate::tokens::TokenCounter;

/// Why the agent discards outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscardReason {
    /// The task the outputs served is done.
    Completion,
    /// The outputs were never useful.
    Noise,
}

/// Why a discard or extract was refused. The message is meant for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

fn refusal(problem: Problem<'_>, valid: &[Prunable]) -> Refusal {
    let ids: Vec<u32> = valid.iter().map(|p| p.id).collect();
    Refusal(texts::refusal(problem, &ids))
}

/// Resolves the agent's ids to prunable calls, refusing the whole request if any is bad.
fn resolve(ids: &[String], valid: &[Prunable]) -> Result<Vec<String>, Refusal> {
    if ids.is_empty() {
        return Err(refusal(Problem::NoIds, valid));
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
        return Err(refusal(Problem::UnknownIds(&bad), valid));
    }
    Ok(out)
}

/// Splits DCP 1.2's form, where a leading `"completion"` or `"noise"` inside `ids` is the
/// reason, from the ids proper.
pub fn split_reason(ids: &[String], reason: Option<DiscardReason>) -> (Vec<String>, Option<DiscardReason>) {
    let leading = ids.first().and_then(|first| match first.trim() {
        "completion" => Some(DiscardReason::Completion),
        "noise" => Some(DiscardReason::Noise),
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
        return Err(refusal(Problem::Counts { ids: ids.len(), distillations: distillation.len() }, valid));
    }
    if distillation.iter().any(|d| d.trim().is_empty()) {
        return Err(refusal(Problem::EmptyDistillation, valid));
    }
    let chosen = resolve(ids, valid)?;
    if chosen.len() != ids.len() {
        return Err(refusal(Problem::RepeatedId, valid));
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
pub(super) fn sweepable(call: &ToolCall<'_>, state: &SessionState, rules: &Rules) -> bool {
    finished(call)
        && open_for_pruning(call, state)
        && !rules.config().sweep_protects(call.tool)
        && !rules.protects_file(call)
}
