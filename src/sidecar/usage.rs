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

pub(super) mod steps;

pub use self::steps::UsageWire;
pub use super::model::{ModelWire, PricesWire};
use super::protocol::RpcError;
use super::{validate_session_id, Server};

use crate::state::savings::{Model, Usage};

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
            if slot.report_usage(created, usage, model.as_ref()) {
                server.save(session, sid);
            }
        });
    }
}
