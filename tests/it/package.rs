//! The npm packages' manifests agree with the crate: one version everywhere.

use std::path::Path;

use serde_json::Value;

fn manifest(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn npm_versions_match_the_crate() {
    let version = env!("CARGO_PKG_VERSION");
    let main = manifest("npm/package.json");
    assert_eq!(main["version"], version, "npm/package.json");
    assert_eq!(manifest("plugin/package.json")["version"], version, "plugin/package.json");
    let optional = main["optionalDependencies"].as_object().unwrap();
    assert!(optional.len() >= 6, "{optional:?}");
    for (name, v) in optional {
        assert!(name.starts_with("dcp-opencode-"), "{name}");
        assert_eq!(v, version, "{name}");
    }
    let platform = dcp::doctor::platform().unwrap();
    assert!(optional.contains_key(&format!("dcp-opencode-{platform}")), "no package for {platform}");
}

#[test]
fn the_main_package_loads_the_plugin() {
    let main = manifest("npm/package.json");
    assert_eq!(main["name"], dcp::doctor::PACKAGE);
    assert_eq!(main["main"], "plugin/index.js");
    assert_eq!(main["type"], "module");
    assert!(main["files"].as_array().unwrap().contains(&Value::from("plugin/")));
}
