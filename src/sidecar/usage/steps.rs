//! What a model step's message says the provider reported (OpenCode's `tokens` and `cost`),
//! and the wire form a usage comes in ([`UsageWire`]): read from the history the next
//! request sends (see [`super`]), which the savings count (`crate::sidecar::savings`).

use serde::Deserialize;

use crate::session::{str_field, Message, Node, Role};
use crate::state::savings::{Model, Savings, Usage};

/// A request's usage on the wire: tokens by kind, and the cost the client computed.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageWire {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub reasoning: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    #[serde(default)]
    pub cost: Option<f64>,
}

impl UsageWire {
    /// The usage as the state keeps it: a cost of 0 is none (a model without prices), and a
    /// cost that is not a number of 0 or more is dropped.
    pub fn usage(&self) -> Usage {
        let cost = self.cost.filter(|c| c.is_finite() && *c > 0.0);
        let (input, output, reasoning) = (self.input, self.output, self.reasoning);
        Usage { input, output, reasoning, cache_read: self.cache_read, cache_write: self.cache_write, cost }
    }
}

/// Records the usage of the model steps among `messages` (those new since the last request)
/// whose requests have none recorded yet. Returns whether any was.
pub(in crate::sidecar) fn from_history(savings: &mut Savings, messages: &[Message]) -> bool {
    let mut recorded = false;
    for message in messages.iter().filter(|m| m.role() == Role::Assistant && !m.is_compaction_summary()) {
        let Some(usage) = step_usage(&message.info) else { continue };
        let Some(request) = savings.request_at(message.time_created()) else { continue };
        if savings.reported.binary_search_by_key(&request, |r| r.request).is_ok() {
            continue;
        }
        let model = step_model(savings, &message.info);
        recorded |= savings.report(request, usage, model.as_ref());
    }
    recorded
}

/// What a model step's message says the provider reported: OpenCode's `tokens` (`input`,
/// `output`, `reasoning`, `cache.read`, `cache.write`) and `cost`.
fn step_usage(info: &Node) -> Option<Usage> {
    let tokens = info.get("tokens")?;
    let n = |v: Option<&Node>| v.and_then(Node::as_u64).unwrap_or(0);
    let cache = tokens.get("cache");
    let wire = UsageWire {
        input: n(tokens.get("input")),
        output: n(tokens.get("output")),
        reasoning: n(tokens.get("reasoning")),
        cache_read: n(cache.and_then(|c| c.get("read"))),
        cache_write: n(cache.and_then(|c| c.get("write"))),
        cost: info.get("cost").and_then(Node::as_f64),
    };
    Some(wire.usage()).filter(|u| !u.is_empty())
}

/// The model a step went to: the one the session's usage named already (with its prices), or
/// the step's own provider and model.
fn step_model(savings: &Savings, info: &Node) -> Option<Model> {
    let (provider, id) = (str_field(info, "providerID")?, str_field(info, "modelID")?);
    let known = savings.models.iter().rev().find(|m| m.provider == provider && m.id == id);
    Some(known.cloned().unwrap_or_else(|| Model { provider: provider.into(), id: id.into(), ..Model::default() }))
}
