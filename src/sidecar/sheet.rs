//! A live session's price sheet: the one its client's model gives (the plugin's OpenCode
//! model data on each `transform`, or the sheet `dcp proxy` read off the request), with
//! `prices` in `dcp.jsonc` over it; the config's sheet until the client names a model. The
//! policy's decisions, the cold cache's TTL and the savings are priced by it
//! (`crate::prices::live`).

use super::model::ModelWire;
use super::{LiveSession, Server};
use crate::prices::live::{for_client, Given};
use crate::prices::Sheet;
use crate::strategies::Rules;

impl LiveSession {
    /// The sheet the session is priced by.
    pub(super) fn priced_by<'a>(&'a self, rules: &'a Rules) -> &'a Sheet {
        self.about.sheet.as_ref().unwrap_or_else(|| rules.sheet())
    }
}

impl Server {
    /// Takes the sheet a request gives (`sheet`, from the proxy) or the model it names
    /// (`model`, from the plugin), with `prices` over it; neither keeps the session's.
    pub(super) fn pick_sheet(&self, session: &mut LiveSession, model: Option<&ModelWire>, sheet: Option<Sheet>) {
        let base = match (sheet, model) {
            (Some(sheet), _) => sheet,
            (None, Some(m)) => {
                let given = m.cost.as_ref().map(|c| Given {
                    input: c.input,
                    output: c.output,
                    cache_read: c.cache_read,
                    cache_write: c.cache_write,
                });
                for_client(&m.provider, &m.id, given.as_ref())
            }
            (None, None) => return,
        };
        // `prices` was checked as the config loaded; a sheet it cannot go over keeps the config's.
        let sheet = self.rules.config().sheet(base).unwrap_or_else(|_| self.rules.sheet().clone());
        if session.about.sheet.as_ref() != Some(&sheet) {
            tracing::debug!(sheet = %sheet.name, "the session's price sheet");
            session.about.sheet = Some(sheet);
        }
    }
}
