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

/// `npm/pack.sh` with `DCP_PACK_BIN_DIR`, as the release workflow runs it: one package per
/// platform found there, each with its manifest's `os`/`cpu`/`libc`, and the main package
/// holding the plugin without its tests.
#[test]
fn pack_sh_packs_every_platform_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    for (platform, exe) in [("darwin-arm64", "dcp"), ("linux-x64-musl", "dcp"), ("win32-x64", "dcp.exe")] {
        let bin = dir.path().join("bins").join(platform).join(exe);
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, format!("a {platform} binary")).unwrap();
    }
    let out_dir = dir.path().join("out");
    let out = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("npm/pack.sh"))
        .env("DCP_PACK_BIN_DIR", dir.path().join("bins"))
        .env("DCP_NPM_OUT", &out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let version = env!("CARGO_PKG_VERSION");
    let list = |name: &str| -> Vec<String> {
        let tgz = out_dir.join(format!("{name}-{version}.tgz"));
        let out = std::process::Command::new("tar").arg("tzf").arg(&tgz).output().unwrap();
        assert!(out.status.success(), "{}", tgz.display());
        let mut files: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        files.sort();
        files
    };
    let manifest = |name: &str| -> Value {
        let tgz = out_dir.join(format!("{name}-{version}.tgz"));
        let out = std::process::Command::new("tar").arg("xzOf").arg(&tgz).arg("package/package.json").output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(list("dcp-opencode-win32-x64"), ["package/README.md", "package/bin/dcp.exe", "package/package.json"]);
    let musl = manifest("dcp-opencode-linux-x64-musl");
    assert_eq!((&musl["os"][0], &musl["cpu"][0], &musl["libc"][0]), (&"linux".into(), &"x64".into(), &"musl".into()));
    let darwin = manifest("dcp-opencode-darwin-arm64");
    assert_eq!((&darwin["os"][0], &darwin["cpu"][0], darwin.get("libc")), (&"darwin".into(), &"arm64".into(), None));
    assert!(
        !out_dir.join(format!("dcp-opencode-linux-x64-{version}.tgz")).exists(),
        "no binary was given for linux-x64"
    );
    let main = list("dcp-opencode");
    assert!(
        main.contains(&"package/plugin/index.js".to_string()) && main.contains(&"package/plugin/cli.js".to_string())
    );
    assert!(main.contains(&"package/plugin/package.json".to_string()), "the plugin's version travels with it");
    assert!(!main.iter().any(|f| f.contains("test")), "{main:?}");
}
