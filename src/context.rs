//! What the model is sent, by category, before and after pruning: the `context` report.
//!
//! [`measure`](crate::measure) counts a message list's tokens by category; [`analyse`] applies the
//! decisions in force (those requests carry now, compressed ranges included), then those recorded
//! but waiting for the policy, then each automatic strategy's proposals in turn, and measures after
//! every step, so the report says what the model is sent now apart from what would follow, and what
//! each strategy saves on its own. It names the compressed ranges too ([`Range`]), the agent's and
//! dcp's finished turns, by their `b<id>` and the `m<n>` ids of the messages they span, for they
//! often hold most of what is in force.

use serde::Serialize;

use crate::measure::is_ignored;
pub use crate::measure::{measure, Breakdown, OPENCODE_CLEARED};
use crate::session::{History, Message, ToolCall};
use crate::state::blocks::{Block, Origin};
use crate::state::{Action, PruneRecord, SessionState, Strategy};
use crate::strategies::compress::message_ref;
use crate::strategies::{self, Rules};
use crate::tokens::TokenCounter;

/// One step of the report: the context after a strategy has run.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StrategyStep {
    /// `in force` or `waiting` (the decisions already in the state file, applied or not), or
    /// a strategy name (its proposals).
    pub step: &'static str,
    pub tokens: u64,
    pub saved: u64,
    pub tools: u64,
}

/// One call the report prunes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Pruned {
    pub call_id: String,
    pub tool: String,
    pub key: Option<String>,
    pub strategy: &'static str,
    pub action: &'static str,
    pub tokens: u64,
    /// Already in the session's state file, rather than proposed now.
    pub recorded: bool,
    pub status: PruneStatus,
}

/// Where a prune stands: requests carry it, it waits for the policy, or a strategy proposes
/// it now.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PruneStatus {
    InForce,
    Waiting,
    Proposed,
}

impl PruneStatus {
    pub fn name(self) -> &'static str {
        match self {
            PruneStatus::InForce => "in force",
            PruneStatus::Waiting => "waiting",
            PruneStatus::Proposed => "proposed",
        }
    }
}

/// One compressed range of the session: the agent's summary or dcp's line of a finished turn.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Range {
    /// The range's id, as `/dcp decompress` and the agent name it (`b3`).
    pub block: String,
    /// Who made it: `compress` (the agent) or `finished-turns` (dcp), as the stats count it.
    pub strategy: &'static str,
    #[serde(skip)]
    pub origin: Origin,
    /// The first and last message it spans in this history, as the agent's tags name them
    /// (`m12`, `m20`); `None` when none of its messages is in the history any more.
    pub from: Option<String>,
    pub to: Option<String>,
    pub messages: usize,
    /// Tokens it takes out of each request: what it covers minus its summary.
    pub tokens: u64,
    /// The agent's topic; empty for a finished turn.
    pub topic: String,
    pub status: RangeStatus,
}

/// Where a range stands: requests carry its summary, it waits for the policy, or the user
/// restored its messages with `/dcp decompress`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RangeStatus {
    InForce,
    Waiting,
    Restored,
}

impl RangeStatus {
    pub fn name(self) -> &'static str {
        match self {
            RangeStatus::InForce => "in force",
            RangeStatus::Waiting => "waiting",
            RangeStatus::Restored => "restored",
        }
    }
}

/// The whole `context` report.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub estimator: &'static str,
    /// Messages the model is sent: those with a part that is not ignored text (a `/dcp`
    /// answer or a notification of ours is never sent).
    pub messages: usize,
    pub tool_calls: usize,
    pub before: Breakdown,
    /// What requests carry now: the prunes in force applied.
    pub in_force: Breakdown,
    /// With every prune applied: in force, waiting and proposed.
    pub after: Breakdown,
    pub steps: Vec<StrategyStep>,
    pub pruned: Vec<Pruned>,
    /// The active ranges and those the user restored, in history order (ranges a newer one
    /// took in are part of it, and not listed).
    pub ranges: Vec<Range>,
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Output => "output",
        Action::WriteContent => "write-content",
        Action::ErrorInputs => "error-inputs",
        Action::Distill { .. } => "distill",
        Action::Mask => "mask",
        Action::MaskInputs => "mask-inputs",
        Action::Unknown => "other",
    }
}

/// Measures `messages` before pruning, with the decisions in force, with those waiting, and
/// after each automatic strategy's proposals.
pub fn analyse(messages: &[Message], state: &SessionState, rules: &Rules, counter: &mut TokenCounter) -> Analysis {
    let history = History::new(messages);
    let calls = &history.calls;
    let before = measure(messages, counter);
    let mut scratch = state.clone();
    // Only the recorded decisions for calls still in the history matter here.
    scratch.pruned.retain(|id, _| calls.iter().any(|c| c.call_id == id));
    let mut pruned: Vec<Pruned> = Vec::new();
    let mut steps = Vec::new();
    let mut previous = before.total;
    let in_force = measure(&rewritten(messages, &in_force_only(&scratch)), counter);
    if !scratch.pruned.is_empty() || scratch.blocks.active().next().is_some() {
        for status in [PruneStatus::InForce, PruneStatus::Waiting] {
            let applied = status == PruneStatus::InForce;
            let upto = if applied { in_force_only(&scratch) } else { scratch.clone() };
            let after = measure(&rewritten(messages, &upto), counter).total;
            let of: Vec<_> = scratch.pruned.iter().filter(|(_, r)| r.applied == applied).collect();
            let tools = of.len() as u64 + ranged_in(&history, &scratch, status);
            steps.push(StrategyStep {
                step: status.name(),
                tokens: after,
                saved: previous.saturating_sub(after),
                tools,
            });
            previous = after;
            pruned.extend(of.into_iter().map(|(id, record)| describe(calls, id, record, status)));
        }
    }
    for strategy in [Strategy::Deduplication, Strategy::SupersedeWrites, Strategy::PurgeErrors, Strategy::Masking] {
        let mut found = strategies::automatic_one(strategy, &history, &scratch, rules, counter);
        if strategy == Strategy::Masking {
            // A range stands for its calls: the sidecar never masks them (`mask_pending`).
            let ranged: std::collections::HashSet<&str> = scratch.blocks.active_calls().collect();
            found.retain(|d| !ranged.contains(d.call_id.as_str()));
        }
        for d in &found {
            scratch.pruned.insert(d.call_id.clone(), d.record.clone());
            pruned.push(describe(calls, &d.call_id, &d.record, PruneStatus::Proposed));
        }
        let after = if found.is_empty() { previous } else { measure(&rewritten(messages, &scratch), counter).total };
        steps.push(StrategyStep {
            step: strategy.name(),
            tokens: after,
            saved: previous.saturating_sub(after),
            tools: found.len() as u64,
        });
        previous = after;
    }
    Analysis {
        estimator: counter.estimator().name(),
        messages: messages.iter().filter(|m| m.parts.iter().any(|p| !is_ignored(p))).count(),
        tool_calls: calls.len(),
        before,
        in_force,
        after: measure(&rewritten(messages, &scratch), counter),
        steps,
        pruned,
        ranges: ranges(messages, state),
    }
}

/// The active ranges of `state` and those the user restored, with the messages of `messages`
/// each spans, in history order.
fn ranges(messages: &[Message], state: &SessionState) -> Vec<Range> {
    let blocks = state.blocks.by_id.values().filter(|b| b.active || (b.deactivated_by_user && b.parents.is_empty()));
    let blocks: Vec<&Block> = blocks.collect();
    if blocks.is_empty() {
        return Vec::new();
    }
    let at: std::collections::HashMap<&str, usize> = messages.iter().enumerate().map(|(i, m)| (m.id(), i)).collect();
    let mut spans: Vec<(Option<(usize, usize)>, &Block)> = blocks
        .into_iter()
        .map(|b| {
            let found = b.effective_messages.iter().filter_map(|id| at.get(id.as_str()).copied());
            (found.clone().min().zip(found.max()), b)
        })
        .collect();
    // In history order, as the user reads the session; those no longer in it last.
    spans.sort_by_key(|(span, b)| (span.is_none(), *span, b.id));
    spans
        .into_iter()
        .map(|(span, b)| {
            let status = match (b.active, b.applied) {
                (false, _) => RangeStatus::Restored,
                (true, true) => RangeStatus::InForce,
                (true, false) => RangeStatus::Waiting,
            };
            Range {
                block: b.name(),
                strategy: b.origin.strategy().name(),
                origin: b.origin,
                from: span.map(|(from, _)| message_ref(from)),
                to: span.map(|(_, to)| message_ref(to)),
                messages: b.effective_messages.len(),
                tokens: b.net_tokens(),
                topic: if b.origin == Origin::Agent { b.topic.clone() } else { String::new() },
                status,
            }
        })
        .collect()
}

/// How many calls of the history the active ranges of `state` in force or waiting (as
/// `status` says) stand for. `/dcp stats` counts them among the tools pruned, besides the
/// prunes recorded one by one (a call pruned, then taken into a range, counts in both), and so
/// does the report's Tools column.
fn ranged_in(history: &History<'_>, state: &SessionState, status: PruneStatus) -> u64 {
    let applied = status == PruneStatus::InForce;
    let blocks = state.blocks.active().filter(|b| b.applied == applied);
    let ids: std::collections::HashSet<&str> =
        blocks.flat_map(|b| b.effective_tools.iter().map(String::as_str)).collect();
    history.calls.iter().filter(|c| ids.contains(&*c.call_id)).count() as u64
}

/// `state` with only its prunes and ranges in force.
fn in_force_only(state: &SessionState) -> SessionState {
    let mut only = state.clone();
    only.pruned.retain(|_, r| r.applied);
    only.blocks.by_id.retain(|_, b| b.applied);
    only
}

/// The report line of a pruned call, found among `calls` when it is still in the history.
fn describe(calls: &[ToolCall<'_>], call_id: &str, record: &PruneRecord, status: PruneStatus) -> Pruned {
    let call = calls.iter().find(|c| c.call_id == call_id);
    Pruned {
        call_id: call_id.to_string(),
        tool: call.map(|c| c.tool.to_string()).unwrap_or_else(|| record.tool.clone()),
        key: call.and_then(|c| c.key_argument()).map(str::to_string),
        strategy: record.strategy.name(),
        action: action_name(&record.action),
        tokens: record.tokens,
        recorded: status != PruneStatus::Proposed,
        status,
    }
}

/// `messages` with every prune and range of `state` applied.
fn rewritten(messages: &[Message], state: &SessionState) -> Vec<Message> {
    let mut copy = messages.to_vec();
    strategies::apply(&mut copy, state, |_| true);
    strategies::compress::replace_spans(&mut copy, &state.blocks, |_| true);
    copy
}
