//! The model a client names on the wire (`transform` and `usage`, PROTOCOL.md): its provider
//! and id, its prices per million tokens and its context window, as OpenCode's model data
//! gives them. Apart from `super::usage` so that the protocol's params can name it.

use serde::Deserialize;

use crate::state::savings::{Model, ModelPrices};

/// The model a request went to, and its prices per million tokens when the client knows them.
#[derive(Debug, Default, Deserialize)]
pub struct ModelWire {
    pub provider: String,
    pub id: String,
    #[serde(default)]
    pub cost: Option<PricesWire>,
    #[serde(default)]
    pub context: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PricesWire {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

impl ModelWire {
    pub fn model(&self) -> Model {
        let valid = |p: f64| p.is_finite() && p >= 0.0;
        let prices =
            self.cost.as_ref().filter(|c| [c.input, c.output, c.cache_read, c.cache_write].into_iter().all(valid));
        let prices = prices.map(|c| ModelPrices {
            input: c.input,
            output: c.output,
            cache_read: c.cache_read,
            cache_write: c.cache_write,
        });
        Model { provider: self.provider.clone(), id: self.id.clone(), prices, context: self.context }
    }
}
