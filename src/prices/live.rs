//! The sheet a live session is priced by, from what its client says of the model: the
//! plugin's OpenCode model data (its prices per million tokens, its provider and id), or
//! what a proxied request asks of the cache (its API, its model, an Anthropic
//! `cache_control.ttl` of `"1h"`, an OpenAI `prompt_cache_retention` of `"24h"`).
//!
//! The model's id finds its sheet in the table ([`super::for_model`]), else its provider's
//! family ([`super::for_provider`]), else the API's family, else Anthropic's 5-minute cache
//! ([`Sheet::default`]). Prices the client gives replace the table's: the cache's shares are
//! the client's cache prices over its input price, a cache write at no price being no write
//! premium where the client prices cache reads. A client that prices nothing (OpenCode's
//! zeros for a model it knows no cost of) leaves the table's sheet. `prices` in `dcp.jsonc`
//! is applied over the result by the caller (`crate::config::Config::sheet`).

use super::{family, for_model, for_provider, MoneyPrices, Rates, Sheet};

/// A model's prices per million tokens, as the client gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Given {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// The sheet of model `id` served by `provider`, with the prices the client gives, if any.
pub fn for_client(provider: &str, id: &str, given: Option<&Given>) -> Sheet {
    let base = for_model(id).or_else(|| for_provider(provider)).unwrap_or_default();
    match given.filter(|g| g.input > 0.0 && g.input.is_finite()) {
        Some(g) => priced(base, g),
        None => base,
    }
}

/// `base` with the client's prices: its money, and the cache's shares of the input price.
fn priced(mut base: Sheet, g: &Given) -> Sheet {
    let share = |p: f64| (p.is_finite() && p > 0.0).then(|| p / g.input);
    let currency = base.money.as_ref().map_or_else(|| "USD".to_string(), |m| m.currency.clone());
    base.money = Some(MoneyPrices { currency, input: g.input, output: Some(g.output).filter(|o| o.is_finite()) });
    let read = share(g.cache_read);
    // A client that prices reads and not writes bills writes as input (OpenAI's, Gemini's).
    let write = share(g.cache_write).or(read.map(|_| 1.0));
    base.rates = Rates { read: read.unwrap_or(base.rates.read), write: write.unwrap_or(base.rates.write) };
    base.name = "client".to_string();
    base
}

/// The API a proxied request speaks, as far as its cache goes: Anthropic's Messages, OpenAI's
/// Responses, or Chat Completions, which many providers serve (its sheet is the model's, else
/// the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheApi {
    Anthropic,
    OpenAi,
    Chat,
}

/// What a proxied request asks of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// An Anthropic `cache_control` with `"ttl": "1h"`.
    pub one_hour: bool,
    /// An OpenAI `prompt_cache_retention` of `"24h"`.
    pub retention_24h: bool,
}

/// The sheet of a proxied request to `api` for `model`, given what it asks of the cache: the
/// model's sheet (its money prices) with the TTL and write price the request's cache asks for.
pub fn for_request(api: CacheApi, model: Option<&str>, asked: Asked) -> Sheet {
    let api_family = match api {
        CacheApi::Anthropic => family("anthropic-5m"),
        CacheApi::OpenAi => family("openai"),
        CacheApi::Chat => None,
    };
    let base = model.and_then(for_model).or(api_family).unwrap_or_default();
    let longer = match api {
        CacheApi::Anthropic if asked.one_hour => family("anthropic-1h"),
        CacheApi::OpenAi | CacheApi::Chat if asked.retention_24h => family("openai-24h"),
        _ => None,
    };
    let Some(longer) = longer else { return base };
    // The longer cache's TTL and write premium over the model's own read share and money.
    let rates = Rates { read: base.rates.read, write: longer.rates.write.max(base.rates.write) };
    let name = if base.money.is_some() { format!("{}+{}", base.name, longer.name) } else { longer.name.clone() };
    Sheet { name, rates, ttl: longer.ttl, ..base }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prices::Ttl;

    #[test]
    fn opencode_s_prices_make_the_sheet_and_a_model_without_prices_keeps_the_table_s() {
        let anthropic = Given { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 };
        let s = for_client("anthropic", "claude-sonnet-4-5", Some(&anthropic));
        assert!((s.rates.read - 0.1).abs() < 1e-9 && s.rates.write == 1.25 && s.ttl == Ttl::Seconds(300), "{s:?}");
        assert_eq!(s.money.as_ref().map(|m| m.input), Some(3.0));
        // OpenAI's data prices cache reads and no writes: no write premium.
        let openai = Given { input: 1.25, output: 10.0, cache_read: 0.125, cache_write: 0.0 };
        let s = for_client("openai", "gpt-5", Some(&openai));
        assert!((s.rates.read - 0.1).abs() < 1e-9 && s.rates.write == 1.0, "{s:?}");
        // A model OpenCode has no cost for (zeros) keeps the table's sheet, or the provider's.
        let zeros = Given { input: 0.0, output: 0.0, cache_read: 0.0, cache_write: 0.0 };
        assert_eq!(for_client("deepseek", "deepseek-chat", Some(&zeros)), for_model("deepseek-chat").unwrap());
        assert_eq!(for_client("google", "some-new-model", None).name, "gemini");
        assert_eq!(for_client("fake", "fake-model", Some(&zeros)), Sheet::default());
    }

    #[test]
    fn a_request_s_cache_asks_pick_the_longer_sheets() {
        let plain = for_request(CacheApi::Anthropic, Some("claude-sonnet-4-5"), Asked::default());
        assert_eq!((plain.rates.write, plain.ttl), (1.25, Ttl::Seconds(300)));
        let hour =
            for_request(CacheApi::Anthropic, Some("claude-sonnet-4-5"), Asked { one_hour: true, ..Asked::default() });
        assert_eq!((hour.rates, hour.ttl), (Rates { read: 0.1, write: 2.0 }, Ttl::Seconds(3600)));
        assert_eq!(hour.money.as_ref().map(|m| m.input), Some(3.0), "the model's money stays");
        let unknown = for_request(CacheApi::Anthropic, None, Asked { one_hour: true, ..Asked::default() });
        assert_eq!(unknown, family("anthropic-1h").unwrap());
        let day = for_request(CacheApi::OpenAi, Some("gpt-5"), Asked { retention_24h: true, ..Asked::default() });
        assert_eq!((day.rates.write, day.ttl), (1.0, Ttl::Seconds(86_400)));
        // A retention asked of Anthropic, or a TTL of OpenAI, is no such cache.
        let wrong = for_request(CacheApi::OpenAi, Some("gpt-5"), Asked { one_hour: true, ..Asked::default() });
        assert_eq!(wrong.ttl, Ttl::Seconds(300));
        // Chat Completions, which many providers serve, takes the model's sheet, else the default.
        assert_eq!(for_request(CacheApi::Chat, Some("deepseek-chat"), Asked::default()).name, "deepseek-chat");
        assert_eq!(for_request(CacheApi::Chat, Some("fake-model"), Asked::default()), Sheet::default());
    }
}
