//! The `prices` section: each key checked, and the section as a whole.

use super::*;

fn write(dir: &Path, text: &str) -> Locations {
    std::fs::write(dir.join("dcp.jsonc"), text).unwrap();
    Locations { global: Some(dir.to_path_buf()), config_dir: None, project: None }
}

#[test]
fn a_prices_key_of_the_wrong_kind_is_named_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(&write(dir.path(), r#"{"prices": {"cacheRead": -1}}"#)).unwrap_err().to_string();
    assert!(err.contains("dcp.jsonc: `prices.cacheRead` must be a price per million tokens"), "{err}");
    let err = load(&write(dir.path(), r#"{"prices": {"sheet": "anthropic-2h"}}"#)).unwrap_err().to_string();
    assert!(err.contains("`prices.sheet` must be a price sheet (anthropic-5m, anthropic-1h"), "{err}");
}

#[test]
fn a_cache_price_without_an_input_price_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(&write(dir.path(), r#"{"prices": {"cacheWrite": 6}}"#)).unwrap_err().to_string();
    assert!(err.contains("`prices.cacheWrite` is a price per million tokens, which needs `prices.input`"), "{err}");
    // A model's sheet has its input price: its cache may be priced.
    let ok = load(&write(dir.path(), r#"{"prices": {"sheet": "claude-opus-4-5", "cacheWrite": 10}}"#)).unwrap();
    let sheet = ok.config.sheet(crate::prices::Sheet::default()).unwrap();
    assert_eq!((sheet.name.as_str(), sheet.rates.write), ("claude-opus-4-5", 2.0));
}

#[test]
fn prices_and_the_cold_cache_default_to_the_sheets() {
    let loaded = load(&Locations::default()).unwrap();
    let sheet = loaded.config.sheet(crate::prices::family("anthropic-1h").unwrap()).unwrap();
    assert_eq!(loaded.config.rewrite.cold_after(&sheet), 3600);
    let dir = tempfile::tempdir().unwrap();
    let set =
        load(&write(dir.path(), r#"{"rewrite": {"coldCacheSeconds": 120}, "prices": {"sheet": "none"}}"#)).unwrap();
    let sheet = set.config.sheet(crate::prices::Sheet::default()).unwrap();
    assert_eq!((sheet.caches, set.config.rewrite.cold_after(&sheet)), (false, 120));
}
