//! What the provider reported it billed per request, and the models the requests went to:
//! raw, as reported, for the price sheets to price (see `super`).

/// What the provider reported it billed for one request (its `usage`): tokens by kind, and
/// the cost the client computed from them when it did (OpenCode's `cost`, in the currency of
/// the model's prices). Raw, as reported: pricing it is the price sheets' business.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens neither read from the provider's cache nor written to it.
    pub input: u64,
    pub output: u64,
    /// Reasoning tokens, where the provider counts them apart from `output`.
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: Option<f64>,
}

impl Usage {
    /// Every prompt token the provider counted.
    pub fn prompt(&self) -> u64 {
        self.input.saturating_add(self.cache_read).saturating_add(self.cache_write)
    }

    /// Whether it reports nothing at all (an aborted request, a client that does not count).
    pub fn is_empty(&self) -> bool {
        self.prompt() == 0 && self.output == 0 && self.reasoning == 0 && self.cost.is_none_or(|c| c == 0.0)
    }

    /// Adds another request's usage.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.reasoning = self.reasoning.saturating_add(other.reasoning);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cost = match (self.cost, other.cost) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
}

/// One request's reported usage: `request` is its number among the session's requests, from
/// 1 (its point in the trail is `request - 1`), `model` the index of the model it went to in
/// the session's list, when known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reported {
    pub request: u64,
    pub usage: Usage,
    pub model: Option<u32>,
}

impl Reported {
    /// The entry as `dcp.reported` holds it: `"<request> <input> <output> <reasoning>
    /// <cacheRead> <cacheWrite> <cost> <model>"`, the cost and the model `-` when unknown.
    pub fn to_line(self) -> String {
        let u = self.usage;
        let cost = u.cost.map_or_else(|| "-".to_string(), |c| format!("{c}"));
        let model = self.model.map_or_else(|| "-".to_string(), |m| m.to_string());
        let counts = [self.request, u.input, u.output, u.reasoning, u.cache_read, u.cache_write];
        let counts: Vec<String> = counts.iter().map(u64::to_string).collect();
        format!("{} {cost} {model}", counts.join(" "))
    }

    pub fn from_line(line: &str) -> Option<Reported> {
        let mut fields = line.split(' ');
        let mut count = || fields.next()?.parse::<u64>().ok();
        let (request, input, output, reasoning, cache_read, cache_write) =
            (count()?, count()?, count()?, count()?, count()?, count()?);
        let cost = match fields.next()? {
            "-" => None,
            c => Some(c.parse::<f64>().ok().filter(|c| c.is_finite() && *c >= 0.0)?),
        };
        let model = match fields.next()? {
            "-" => None,
            m => Some(m.parse::<u32>().ok()?),
        };
        let usage = Usage { input, output, reasoning, cache_read, cache_write, cost };
        (fields.next().is_none() && request > 0).then_some(Reported { request, usage, model })
    }
}

/// A model the session's requests went to, as the client named it, with the prices and the
/// context window it told (OpenCode's model data: `cost`, per million tokens, and
/// `limit.context`); a proxied request names only the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub provider: String,
    pub id: String,
    pub prices: Option<ModelPrices>,
    pub context: Option<u64>,
}

/// A model's prices per million tokens, in the client's currency (dollars for models.dev's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelPrices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_usage_round_trips_through_its_line_and_a_bad_line_is_refused() {
        let usage = Usage { input: 120, output: 40, reasoning: 3, cache_read: 9_000, cache_write: 800, cost: None };
        let r = Reported { request: 7, usage, model: None };
        assert_eq!(r.to_line(), "7 120 40 3 9000 800 - -");
        assert_eq!(Reported::from_line(&r.to_line()), Some(r));
        let priced = Reported { request: 1, usage: Usage { cost: Some(0.01234), ..usage }, model: Some(2) };
        assert_eq!(priced.to_line(), "1 120 40 3 9000 800 0.01234 2");
        assert_eq!(Reported::from_line(&priced.to_line()), Some(priced));
        for bad in [
            "",
            "7 120 40 3 9000 800 -",
            "0 1 1 1 1 1 - -",
            "7 1 1 1 1 1 x -",
            "7 1 1 1 1 1 -1 -",
            "7 1 1 1 1 1 - m",
            "7 1 1 1 1 1 - - 8",
        ] {
            assert_eq!(Reported::from_line(bad), None, "{bad:?}");
        }
    }
}
