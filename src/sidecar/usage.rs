//! What the provider reported it billed, request by request: kept beside what dcp counted
//! (`crate::state::savings`, `dcp.reported`), raw, for the price sheets to price.
//!
//! It comes two ways. The `usage` notification (PROTOCOL.md): the plugin forwards each model
//! step OpenCode finished (its `message.updated` event, with the step's `tokens` and `cost`
//! and the model's prices as OpenCode's model data gives them), and `dcp proxy` what the
//! upstream's answer said (`crate::proxy::usage`). And the history: a step's message carries
//! the same `tokens` and `cost` when the next request sends it, which fills in what a lost
//! notification left out (a step that ended as its process did is learned at the session's
//! next run). A step's usage goes to the request dcp answered right after the step's message
//! was created ([`Savings::request_at`]); the proxy's, which has no message, to the session's
//! last request.

use serde::Deserialize;

pub use super::model::{ModelWire, PricesWire};
use super::protocol::RpcError;
use super::{validate_session_id, Server};
use crate::session::{str_field, Message, Node, Role};
use crate::state::savings::{Model, Savings, Usage};

/// `usage`: what the provider reported for one request of a session.
#[derive(Debug, Deserialize)]
pub struct UsageParams {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// When the model step was created (ms since the epoch): its usage goes to the request made
    /// right after. Absent: to the session's last request.
    #[serde(default)]
    pub created: Option<i64>,
    pub usage: UsageWire,
    #[serde(default)]
    pub model: Option<ModelWire>,
}

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

impl Server {
    /// `usage`: records what the provider reported for a request of the session.
    pub fn usage(&mut self, p: UsageParams) -> Result<(), RpcError> {
        validate_session_id(&p.session_id)?;
        let (usage, model) = (p.usage.usage(), p.model.as_ref().map(ModelWire::model));
        self.record_usage(&p.session_id, p.created, usage, model);
        Ok(())
    }

    /// Records `usage` for the request of session `sid` that a step created at `created`
    /// produced, or (no time) for its last request; with the model it went to.
    pub fn record_usage(&mut self, sid: &str, created: Option<i64>, usage: Usage, model: Option<Model>) {
        if validate_session_id(sid).is_err() {
            return;
        }
        self.with_session(sid, |server, session| {
            let Ok(slot) = server.store.slot(sid) else { return };
            let savings = &mut slot.state.savings;
            let request = match created {
                Some(created) => savings.request_at(created),
                None => Some(savings.requests),
            };
            if request.is_some_and(|r| savings.report(r, usage, model.as_ref())) {
                slot.mark_changed();
                server.save(session, sid);
            }
        });
    }
}

/// Records the usage of the model steps among `messages` (those new since the last request)
/// whose requests have none recorded yet. Returns whether any was.
pub(super) fn from_history(savings: &mut Savings, messages: &[Message]) -> bool {
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
