//! Price sheets: what a provider charges for a request's input, its output and its prompt
//! cache, and how long it keeps a cached prefix.
//!
//! Every cost dcp weighs or reports is priced by one [`Sheet`]: the policy prices each rewrite
//! with the session's (`crate::policy`), `dcp replay` bills each session with its own, and the
//! savings count with it. A sheet holds the cache's prices as shares of the input price
//! ([`Rates`]: what the policy needs), the money prices per million tokens where they are known
//! ([`MoneyPrices`]), the cache's TTL and whether the provider caches at all. A local model pays in
//! prefill, not money ([`Unit::Prefill`]): a token read from its KV cache costs nothing, one it
//! must prefill costs one.
//!
//! Where a sheet comes from, first match wins: `prices` in `dcp.jsonc` ([`Override`], over the
//! sheet the rest gives), `dcp replay --prices SHEET|FILE`, the model's id ([`for_model`], a
//! table of known models in [`models`]), the provider's id ([`for_provider`]), and last
//! Anthropic's 5-minute cache ([`Sheet::default`]), the sheet dcp's policy was built on.
//!
//! The families ([`family`], by name):
//!
//! | name | cache read | cache write | TTL | source |
//! |---|---|---|---|---|
//! | `anthropic-5m` | 0.1x | 1.25x | 300 s | Anthropic's prompt-caching prices (reads 0.1x the input price, 5-minute writes 1.25x) |
//! | `anthropic-1h` | 0.1x | 2x | 3,600 s | the same page: 1-hour writes (`cache_control.ttl: "1h"`) 2x |
//! | `openai` | 0.1x | 1x | 300 s | OpenAI's prompt caching: no write fee before GPT-5.6, cached input 0.1x for the GPT-5 family (0.25x GPT-4.1, 0.5x GPT-4o: [`models`]); kept 5 to 10 minutes idle, so 300 s |
//! | `openai-24h` | 0.1x | 1x | 86,400 s | the same with `prompt_cache_retention: "24h"` |
//! | `gemini` | 0.1x | 1x | 300 s | Gemini's implicit caching: 90% off cached tokens, no write fee; its TTL is not published (300 s is a guess) |
//! | `deepseek` | 0.1x | 1x | 3,600 s | DeepSeek's context cache: hit $0.028, miss $0.28 per million for `deepseek-chat`, no write fee; unused entries are cleared "within hours" (3,600 s is a guess) |
//! | `none` | 1x | 1x | none | no cache: every token at the input price |
//! | `local` | 0x | 1x | never | a local model's prefill: a prefix its KV cache holds is free, the rest is prefilled |
//!
//! Sources, as read in the docs index: Anthropic's ratios and TTLs from its prompt-caching
//! documentation (as summarised by portkey.ai and the `synaps` crate, which cites
//! anthropic.com/pricing); OpenAI's from its prompt-caching guide and Azure OpenAI's (no write
//! fee before GPT-5.6; in-memory retention 5 to 10 minutes, extended 24 h); Gemini's from Google
//! Cloud's context-cache overview (implicit caching, 90% discount); DeepSeek's and Gemini 3
//! Pro's money prices checked against the cost the held-out logs recorded per message
//! (`bench/real/holdout`), the docs index holding only an older DeepSeek page.

pub mod live;
pub mod models;

use serde::{Deserialize, Serialize};

pub use self::models::{for_model, for_provider};

/// How long a provider keeps a prefix after its last use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    Seconds(u64),
    Never,
}

impl Ttl {
    /// The TTL in seconds, `u64::MAX` for one that never expires.
    pub fn seconds(self) -> u64 {
        match self {
            Ttl::Seconds(s) => s,
            Ttl::Never => u64::MAX,
        }
    }
}

/// The cache's prices, as shares of the input price: what every cost the policy weighs is
/// made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// A token read from the provider's cache.
    pub read: f64,
    /// A token written to it (or sent uncached).
    pub write: f64,
}

impl Rates {
    /// Anthropic's 5-minute cache: reads at 0.1x, writes at 1.25x.
    pub const ANTHROPIC_5M: Rates = Rates { read: 0.1, write: 1.25 };
}

impl Default for Rates {
    fn default() -> Rates {
        Rates::ANTHROPIC_5M
    }
}

/// What a sheet's costs are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Money, at the provider's prices.
    Money,
    /// Tokens a local model prefills: no money.
    Prefill,
}

/// Money prices per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoneyPrices {
    pub currency: String,
    pub input: f64,
    /// The output price, where known.
    pub output: Option<f64>,
}

/// One price sheet (see the module header).
#[derive(Debug, Clone, PartialEq)]
pub struct Sheet {
    /// A family's name (`anthropic-5m`), a model's id from the table, or `custom`.
    pub name: String,
    pub unit: Unit,
    /// The money prices, where known; the cache's follow from [`Sheet::rates`].
    pub money: Option<MoneyPrices>,
    pub rates: Rates,
    pub ttl: Ttl,
    /// Whether the provider caches at all: without a cache every request is cold.
    pub caches: bool,
}

impl Default for Sheet {
    /// Anthropic's 5-minute cache, the sheet the policy was built on.
    fn default() -> Sheet {
        family(ANTHROPIC_5M).unwrap_or_else(|| sheet(ANTHROPIC_5M, Rates::ANTHROPIC_5M, Ttl::Seconds(300)))
    }
}

/// The default family's name.
pub const ANTHROPIC_5M: &str = "anthropic-5m";

/// Every family by name, with what it is (`dcp replay --help`, the config's errors).
pub const FAMILIES: [&str; 8] =
    [ANTHROPIC_5M, "anthropic-1h", "openai", "openai-24h", "gemini", "deepseek", "none", "local"];

fn sheet(name: &str, rates: Rates, ttl: Ttl) -> Sheet {
    Sheet { name: name.to_string(), unit: Unit::Money, money: None, rates, ttl, caches: true }
}

/// The family named `name` (see the module header), without money prices.
pub fn family(name: &str) -> Option<Sheet> {
    let free = |read| Rates { read, write: 1.0 };
    Some(match name {
        ANTHROPIC_5M => sheet(name, Rates::ANTHROPIC_5M, Ttl::Seconds(300)),
        "anthropic-1h" => sheet(name, Rates { read: 0.1, write: 2.0 }, Ttl::Seconds(3600)),
        "openai" | "gemini" => sheet(name, free(0.1), Ttl::Seconds(300)),
        "openai-24h" => sheet(name, free(0.1), Ttl::Seconds(86_400)),
        "deepseek" => sheet(name, free(0.1), Ttl::Seconds(3600)),
        "none" => Sheet { caches: false, ..sheet(name, free(1.0), Ttl::Seconds(0)) },
        "local" => Sheet { unit: Unit::Prefill, ..sheet(name, free(0.0), Ttl::Never) },
        _ => return None,
    })
}

impl Sheet {
    /// Seconds after which the provider's cache is cold: the TTL, or at once without a cache.
    pub fn cold_after(&self) -> u64 {
        if self.caches {
            self.ttl.seconds()
        } else {
            0
        }
    }

    /// The same sheet with another TTL.
    pub fn with_ttl(self, ttl: Ttl) -> Sheet {
        Sheet { ttl, ..self }
    }

    /// What `tokens` input tokens cost at the input price, in money when the sheet knows it.
    pub fn money_of(&self, tokens: f64) -> Option<f64> {
        self.money.as_ref().map(|m| tokens * m.input / 1_000_000.0)
    }
}

/// What is wrong with a price override, naming its key (without the `prices.` of the config).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriceError {
    #[error("`{key}` names no price sheet ({name:?}); sheets: {}", FAMILIES.join(", "))]
    UnknownSheet { key: String, name: String },
    #[error("`{key}` is a price per million tokens, which needs `{needs}` above 0 (the input price it is a share of)")]
    Needs { key: String, needs: String },
    #[error("`{key}` must be {expected}, not {found}")]
    Type { key: String, expected: String, found: String },
    #[error("`{key}` is not a price key; keys: sheet, input, output, cacheRead, cacheWrite, currency, ttlSeconds")]
    Unknown { key: String },
}

/// A sheet set by hand: `prices` in `dcp.jsonc`, or the file `dcp replay --prices FILE`
/// names. Each key set replaces the sheet's: `sheet` a family or a model's id, `input` and
/// `output` per million tokens, `cacheRead` and `cacheWrite` per million tokens (shares of
/// `input`), `currency`, `ttlSeconds`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Override {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
}

/// The keys of an [`Override`], as written.
pub const KEYS: [&str; 7] = ["sheet", "input", "output", "cacheRead", "cacheWrite", "currency", "ttlSeconds"];

impl Override {
    pub fn is_unset(&self) -> bool {
        *self == Override::default()
    }

    /// The override that gives `sheet` whatever it is applied to (a `custom` one: applied to a
    /// sheet that caches).
    pub fn exactly(sheet: &Sheet) -> Override {
        let money = sheet.money.as_ref();
        Override {
            sheet: named(&sheet.name).is_some().then(|| sheet.name.clone()),
            input: money.map(|m| m.input),
            output: money.and_then(|m| m.output),
            cache_read: money.map(|m| m.input * sheet.rates.read),
            cache_write: money.map(|m| m.input * sheet.rates.write),
            currency: money.map(|m| m.currency.clone()),
            ttl_seconds: None,
        }
        .with_ttl(sheet)
    }

    fn with_ttl(mut self, sheet: &Sheet) -> Override {
        self.ttl_seconds = match sheet.ttl {
            Ttl::Seconds(s) => Some(s),
            Ttl::Never => None,
        };
        self
    }

    /// `base` with what this override sets: a `sheet` named replaces it first (a family, or a
    /// model of the table), then each price. A cache price is a share of the input price, so
    /// one set without any input price known is an error naming it.
    pub fn apply(&self, base: Sheet) -> Result<Sheet, PriceError> {
        let mut sheet = match &self.sheet {
            Some(name) => {
                named(name).ok_or_else(|| PriceError::UnknownSheet { key: "sheet".into(), name: name.clone() })?
            }
            None => base,
        };
        if self.sheet.is_some() || self.input.is_some() || self.cache_read.is_some() || self.cache_write.is_some() {
            sheet.name = self.sheet.clone().unwrap_or_else(|| "custom".to_string());
        }
        if let Some(input) = self.input {
            let currency = self.currency.clone().or_else(|| sheet.money.as_ref().map(|m| m.currency.clone()));
            let output = sheet.money.as_ref().and_then(|m| m.output);
            sheet.money = Some(MoneyPrices { currency: currency.unwrap_or_else(|| "USD".into()), input, output });
        }
        if let (Some(output), Some(money)) = (self.output, sheet.money.as_mut()) {
            money.output = Some(output);
        }
        if let (Some(currency), Some(money)) = (&self.currency, sheet.money.as_mut()) {
            money.currency = currency.clone();
        }
        let input = sheet.money.as_ref().map(|m| m.input).filter(|i| *i > 0.0);
        for (key, price, rate) in [
            ("cacheRead", self.cache_read, &mut sheet.rates.read),
            ("cacheWrite", self.cache_write, &mut sheet.rates.write),
        ] {
            let Some(price) = price else { continue };
            let needs = || PriceError::Needs { key: key.into(), needs: "input".into() };
            *rate = price / input.ok_or_else(needs)?;
        }
        if let Some(s) = self.ttl_seconds {
            sheet.ttl = Ttl::Seconds(s);
        }
        Ok(sheet)
    }

    /// An override from a JSON object (a `dcp replay --prices FILE`): every key checked, an
    /// unknown one or a value of the wrong type an error naming it.
    pub fn from_json(value: &serde_json::Value) -> Result<Override, PriceError> {
        let Some(map) = value.as_object() else {
            let found = crate::format::excerpt(value);
            return Err(PriceError::Type { key: "(top level)".into(), expected: "an object".into(), found });
        };
        let mut out = Override::default();
        for (key, v) in map {
            let wrong = |expected: &str| PriceError::Type {
                key: key.clone(),
                expected: expected.into(),
                found: crate::format::excerpt(v),
            };
            let price = || v.as_f64().filter(|p| p.is_finite() && *p >= 0.0).ok_or_else(|| wrong("a number >= 0"));
            let text = || v.as_str().map(str::to_string).ok_or_else(|| wrong("a string"));
            match key.as_str() {
                "sheet" => out.sheet = Some(text()?),
                "input" => out.input = Some(price()?),
                "output" => out.output = Some(price()?),
                "cacheRead" => out.cache_read = Some(price()?),
                "cacheWrite" => out.cache_write = Some(price()?),
                "currency" => out.currency = Some(text()?),
                "ttlSeconds" => out.ttl_seconds = Some(v.as_u64().ok_or_else(|| wrong("a whole number >= 0"))?),
                _ => return Err(PriceError::Unknown { key: key.clone() }),
            }
        }
        Ok(out)
    }
}

/// The sheet a name gives: a family, else a model of the table.
pub fn named(name: &str) -> Option<Sheet> {
    family(name).or_else(|| for_model(name))
}

#[cfg(test)]
mod tests;
