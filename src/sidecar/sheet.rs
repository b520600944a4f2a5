//! A live session's price sheet: the one its client's model gives (the plugin's OpenCode
//! model data on each `transform`, or the sheet `dcp proxy` read off the request), with
//! `prices` in `dcp.jsonc` over it. OpenCode asks for a request's messages before it names the
//! model, so a process's first request of a session has no model data yet: it is priced by
//! the model its history's last prompt names, with the prices the session's state remembers
//! for it (every model the plugin names is kept in `dcp.models`), else by the model the state
//! names last, when the client gave its prices; the config's sheet otherwise. The policy's decisions, the cold
//! cache's TTL and the savings are priced by it (`crate::prices::live`).

use super::model::ModelWire;
use super::{LiveSession, Server};
use crate::prices::live::{for_client, Given};
use crate::prices::Sheet;
use crate::session::{str_field, Node};
use crate::state::savings::Model;
use crate::strategies::Rules;

impl LiveSession {
    /// The sheet the session is priced by.
    pub(super) fn priced_by<'a>(&'a self, rules: &'a Rules) -> &'a Sheet {
        self.about.sheet.as_ref().unwrap_or_else(|| rules.sheet())
    }
}

/// What a request says of its sheet: the sheet itself (from the proxy), the model (from the
/// plugin), and the messages it sends (whose prompts name their model).
pub(super) struct Named<'a> {
    pub sheet: Option<Sheet>,
    pub model: Option<&'a ModelWire>,
    pub messages: &'a [Node],
}

impl Server {
    /// Takes the sheet a request gives or the model it names, with `prices` over it; neither
    /// keeps the session's. A model the plugin names is remembered in the session's state.
    pub(super) fn pick_sheet(&mut self, session: &mut LiveSession, sid: &str, named: Named<'_>) {
        let base = match (named.sheet, named.model) {
            (Some(sheet), _) => sheet,
            (None, Some(m)) => {
                self.remember_model(sid, &m.model());
                let given = m.cost.as_ref().map(|c| Given {
                    input: c.input,
                    output: c.output,
                    cache_read: c.cache_read,
                    cache_write: c.cache_write,
                });
                for_client(&m.provider, &m.id, given.as_ref())
            }
            (None, None) if session.about.sheet.is_none() => match self.remembered_model(sid, named.messages) {
                Some(model) => crate::stats::money::model_sheet(&model),
                None => return,
            },
            (None, None) => return,
        };
        // `prices` was checked as the config loaded; a sheet it cannot go over keeps the config's.
        let sheet = self.rules.config().sheet(base).unwrap_or_else(|_| self.rules.sheet().clone());
        if session.about.sheet.as_ref() != Some(&sheet) {
            tracing::debug!(sheet = %sheet.name, "the session's price sheet");
            session.about.sheet = Some(sheet);
        }
    }

    /// Keeps `model` in the session's state, so that a later process prices its first request
    /// by it.
    fn remember_model(&mut self, sid: &str, model: &Model) {
        if let Ok(slot) = self.store.slot(sid) {
            slot.remember_model(model);
        }
    }

    /// The model a request without model data is priced by (see the module's header): one the
    /// client named with its prices, so that a caller that names none (`dcp replay`) keeps
    /// the config's sheet.
    fn remembered_model(&mut self, sid: &str, messages: &[Node]) -> Option<Model> {
        let prompted = messages.iter().rev().find_map(prompt_model);
        let savings = &self.store.slot(sid).ok()?.state().savings;
        let model = match prompted {
            Some((provider, id)) => savings.known_model(provider, id),
            None => savings.last_model(),
        };
        model.filter(|m| m.prices.is_some()).cloned()
    }
}

/// The provider and model a user message (`{info, parts}`) names: OpenCode's `info.model`.
fn prompt_model(message: &Node) -> Option<(&str, &str)> {
    let info = message.get("info")?;
    if str_field(info, "role") != Some("user") {
        return None;
    }
    let model = info.get("model")?;
    Some((str_field(model, "providerID")?, str_field(model, "modelID")?))
}
