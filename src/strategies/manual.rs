//! The agent-invoked strategies: `discard` and `extract` (which `discard` does when given a
//! `distillation`), and the list of calls they may name.
//!
//! The agent names calls by the small integer ids of the `<prunable-tools>` list, which stay
//! stable for the session ([`crate::state::SessionState::id_for`]), or by any other name of a
//! call the model can see (its call id, its message's id), listed or not. A request applies
//! what it can and names what it could not: one bad id no longer voids the call.

use super::{finished, open_for_pruning, output_tokens, Decision, Rules};
use crate::session::{History, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::texts::refusals;
pub use crate::texts::PrunedCall;
use crate::tokens::TokenCounter;

/// What an agent's `discard` or `extract` looks at: the history it saw and what dcp knows.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub history: &'a History<'a>,
    pub state: &'a SessionState,
    pub rules: &'a Rules,
}

/// What a `discard` or `extract` did: the decisions to record, the calls they prune, and
/// what was wrong with the rest of the request. One bad id never voids the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub decisions: Vec<Decision>,
    pub done: Vec<PrunedCall>,
    pub problems: Vec<String>,
}

/// The calls an agent's name stands for: a list id (`7`, even one no longer listed), a tool
/// call id as the model sees it (`call_…`), or a message id (`m0012`: every call of that
/// message). Unknown names give an error for the agent.
fn named_calls(ctx: &Ctx<'_>, raw: &str) -> Result<Vec<usize>, String> {
    let name = raw.trim();
    let calls = &ctx.history.calls;
    let by_id = |call_id: &str| calls.iter().position(|c| c.call_id == call_id);
    if let Ok(n) = name.parse::<u32>() {
        let call_id = ctx.state.call_for(n).ok_or_else(|| refusals::no_such_id(name))?;
        return by_id(call_id).map(|i| vec![i]).ok_or_else(|| refusals::gone(name));
    }
    if let Some(i) = by_id(name) {
        return Ok(vec![i]);
    }
    let message = name
        .strip_prefix(['m', 'M'])
        .and_then(|d| d.parse::<usize>().ok())
        .filter(|n| *n > 0 && *n <= ctx.history.messages.len());
    match message {
        Some(n) => {
            let found: Vec<usize> = (0..calls.len()).filter(|i| calls[*i].message == n - 1).collect();
            if found.is_empty() {
                Err(refusals::no_tool_calls(name))
            } else {
                Ok(found)
            }
        }
        None if name.is_empty() => Err(refusals::EMPTY_ID.to_string()),
        None => Err(refusals::no_such_id(name)),
    }
}

/// Why the agent may not prune `call`'s output, if it may not. Turn protection and the
/// list's size threshold do not apply: the agent asked for this call by name.
fn refuse(ctx: &Ctx<'_>, call: &ToolCall<'_>) -> Option<&'static str> {
    if ctx.state.pruned.contains_key(call.call_id) {
        Some(refusals::ALREADY_PRUNED)
    } else if ctx.state.blocks.active().any(|b| b.applied && b.effective_tools.iter().any(|t| t == call.call_id)) {
        Some(refusals::IN_A_RANGE)
    } else if call.compacted {
        Some(refusals::CLEARED)
    } else if call.status != ToolStatus::Completed {
        Some(refusals::NO_OUTPUT)
    } else if ctx.rules.config().tools_protect(call.tool) {
        Some(refusals::PROTECTED_TOOL)
    } else if ctx.rules.protects_file(call) {
        Some(refusals::PROTECTED_FILE)
    } else {
        None
    }
}

/// Resolves the agent's names to prunable calls, in the order given, each once; what cannot
/// be pruned goes to `problems`.
fn resolve<'c>(ctx: &'c Ctx<'_>, names: &[String], problems: &mut Vec<String>) -> Vec<(String, &'c ToolCall<'c>)> {
    let mut out: Vec<(String, &ToolCall<'_>)> = Vec::new();
    for raw in names {
        match named_calls(ctx, raw) {
            Err(problem) => problems.push(problem),
            Ok(found) => {
                for i in found {
                    let call = &ctx.history.calls[i];
                    if out.iter().any(|(_, c)| c.call_id == call.call_id) {
                        continue;
                    }
                    match refuse(ctx, call) {
                        Some(why) => problems.push(refusals::refused(raw.trim(), call.tool, why)),
                        None => out.push((raw.trim().to_string(), call)),
                    }
                }
            }
        }
    }
    out
}

fn done(name: String, call: &ToolCall<'_>) -> PrunedCall {
    PrunedCall { name, tool: call.tool.to_string(), key: call.key_argument().map(str::to_string) }
}

/// `ids` without DCP 1.2's reason: a leading `"completion"` or `"noise"` says why the agent
/// discards, and names no call.
pub fn without_reason(ids: &[String]) -> &[String] {
    match ids.first().map(|first| first.trim()) {
        Some("completion" | "noise") => &ids[1..],
        _ => ids,
    }
}

/// `discard {ids}`: every nameable output becomes the placeholder.
pub fn discard(ctx: &Ctx<'_>, ids: &[String], counter: &mut TokenCounter) -> Applied {
    let mut out = Applied::default();
    if ids.is_empty() {
        out.problems.push(refusals::NO_IDS.to_string());
    }
    for (name, call) in resolve(ctx, ids, &mut out.problems) {
        let removed = output_tokens(call, counter);
        let tokens = removed.saturating_sub(counter.count(super::OUTPUT_PLACEHOLDER));
        out.decisions.push(Decision::new(call, Strategy::Discard, Action::Output, tokens));
        out.done.push(done(name, call));
    }
    out
}

/// `extract {ids, distillation}`, or `discard` given a `distillation`: each output becomes its
/// distillation, matched by position.
/// A pair with a bad id or an empty distillation is skipped and named; ids beyond the
/// distillations (or the other way round) are named too.
pub fn extract(ctx: &Ctx<'_>, ids: &[String], distillation: &[String], counter: &mut TokenCounter) -> Applied {
    let mut out = Applied::default();
    if ids.is_empty() {
        out.problems.push(refusals::NO_IDS.to_string());
    }
    if ids.len() != distillation.len() {
        out.problems.push(refusals::unpaired(ids.len(), distillation.len()));
    }
    for (raw, text) in ids.iter().zip(distillation) {
        if text.trim().is_empty() {
            out.problems.push(refusals::empty_distillation(raw.trim()));
            continue;
        }
        let resolved = resolve(ctx, std::slice::from_ref(raw), &mut out.problems);
        if resolved.len() > 1 {
            out.problems.push(refusals::many_calls(raw.trim(), resolved.len()));
            continue;
        }
        for (name, call) in resolved {
            if out.decisions.iter().any(|d| d.call_id == call.call_id) {
                continue;
            }
            let removed = output_tokens(call, counter);
            let action = Action::Distill { distillation: text.clone() };
            let tokens = removed.saturating_sub(counter.count(text));
            out.decisions.push(Decision::new(call, Strategy::Extract, action, tokens));
            out.done.push(done(name, call));
        }
    }
    out
}

/// Whether `call` is finished and neither protected nor pruned: what sweep may take.
pub(super) fn sweepable(call: &ToolCall<'_>, state: &SessionState, rules: &Rules) -> bool {
    finished(call)
        && open_for_pruning(call, state)
        && !rules.config().sweep_protects(call.tool)
        && !rules.protects_file(call)
}
