use super::*;
use serde_json::json;

#[test]
fn every_family_has_its_cache_prices_and_ttl() {
    let of = |name: &str| family(name).unwrap();
    assert_eq!(
        (of("anthropic-5m").rates, of("anthropic-5m").ttl),
        (Rates { read: 0.1, write: 1.25 }, Ttl::Seconds(300))
    );
    assert_eq!(
        (of("anthropic-1h").rates, of("anthropic-1h").ttl),
        (Rates { read: 0.1, write: 2.0 }, Ttl::Seconds(3600))
    );
    assert_eq!(of("openai").rates, Rates { read: 0.1, write: 1.0 });
    assert_eq!(of("openai-24h").ttl, Ttl::Seconds(86_400));
    assert_eq!((of("none").caches, of("none").cold_after(), of("none").rates.read), (false, 0, 1.0));
    assert_eq!((of("local").unit, of("local").rates.read, of("local").cold_after()), (Unit::Prefill, 0.0, u64::MAX));
    assert!(FAMILIES.iter().all(|f| family(f).is_some()));
    assert_eq!(Sheet::default().name, "anthropic-5m");
}

#[test]
fn a_model_id_finds_its_sheet_with_or_without_provider_and_date() {
    let opus = for_model("anthropic/claude-opus-4-5-20251101").unwrap();
    assert_eq!((opus.name.as_str(), opus.money.as_ref().map(|m| m.input)), ("claude-opus-4-5", Some(5.0)));
    // The longest entry wins: Opus 4.6 is not Opus 4's price.
    assert_eq!(for_model("claude-opus-4-6").unwrap().money.unwrap().input, 5.0);
    assert_eq!(for_model("claude-opus-4-20250514").unwrap().money.unwrap().input, 15.0);
    assert_eq!(for_model("gpt-4.1-mini").unwrap().rates.read, 0.25);
    assert_eq!(for_model("gpt-5-codex").unwrap().rates, Rates { read: 0.1, write: 1.0 });
    assert!(!for_model("gpt-4-turbo-2024-04-09").unwrap().caches);
    assert_eq!(for_model("deepseek/deepseek-chat").unwrap().name, "deepseek-chat");
    assert_eq!(for_model("llama-3-70b"), None);
    assert_eq!(for_provider("google").unwrap().name, "gemini");
}

#[test]
fn an_override_replaces_what_it_sets_and_prices_the_cache_as_shares_of_input() {
    let o = Override { cache_read: Some(0.3), cache_write: Some(3.75), input: Some(3.0), ..Default::default() };
    let s = o.apply(Sheet::default()).unwrap();
    assert_eq!((s.name.as_str(), s.money.as_ref().unwrap().input), ("custom", 3.0));
    assert!((s.rates.read - 0.1).abs() < 1e-12 && (s.rates.write - 1.25).abs() < 1e-12);
    let ttl = Override { ttl_seconds: Some(3600), ..Default::default() }.apply(Sheet::default()).unwrap();
    assert_eq!((ttl.name.as_str(), ttl.ttl), ("anthropic-5m", Ttl::Seconds(3600)));
    let named = Override { sheet: Some("openai".into()), ..Default::default() }.apply(Sheet::default()).unwrap();
    assert_eq!(named.rates.write, 1.0);
    // A model's sheet given back exactly, and a custom one.
    let opus = for_model("claude-opus-4-5").unwrap();
    assert_eq!(Override::exactly(&opus).apply(Sheet::default()).unwrap(), opus);
    let custom = Override::exactly(&s).apply(family("none").unwrap()).unwrap();
    assert_eq!((custom.name.as_str(), custom.rates, custom.money), ("custom", s.rates, s.money.clone()));
}

#[test]
fn a_bad_override_names_its_key() {
    let err = Override { sheet: Some("antropic".into()), ..Default::default() }.apply(Sheet::default()).unwrap_err();
    assert!(err.to_string().starts_with("`sheet` names no price sheet (\"antropic\")"), "{err}");
    let err = Override { cache_read: Some(0.3), ..Default::default() }.apply(Sheet::default()).unwrap_err();
    assert_eq!(err, PriceError::Needs { key: "cacheRead".into(), needs: "input".into() });
    let err = Override::from_json(&json!({"input": 3, "cacheRead": "cheap"})).unwrap_err();
    assert!(err.to_string().starts_with("`cacheRead` must be a number >= 0"), "{err}");
    let err = Override::from_json(&json!({"ttl": 3600})).unwrap_err();
    assert!(err.to_string().starts_with("`ttl` is not a price key"), "{err}");
    let ok = Override::from_json(&json!({"sheet": "anthropic-1h", "ttlSeconds": 600})).unwrap();
    assert_eq!(ok.apply(Sheet::default()).unwrap().ttl, Ttl::Seconds(600));
}
