//! `dcp proxy` between real clients and scripted fake upstreams: OpenCode 1.18 with no
//! plugin and its provider's `baseURL` at the proxy (Chat Completions).

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, read};
use super::{tail, Lab};
use crate::proxy::ProxyProcess;
use dcp::strategies::OUTPUT_PLACEHOLDER;

/// Every decision applied on the next request, so that one short run shows it.
const IMMEDIATE: &str = r#"{ "rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}} }"#;

/// Points the lab's OpenCode at `port` instead of the fake model, and loads no plugin.
fn through_proxy(lab: &Lab, port: u16) {
    let path = lab.root().join("xdg/config/opencode/opencode.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("plugin");
    config["provider"]["fake"]["options"]["baseURL"] = json!(format!("http://127.0.0.1:{port}/v1"));
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// The proxied conversations' state files in `dir`: `proxy-*.json`.
pub fn proxied_states(dir: &Path) -> Vec<(String, Value)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(String, Value)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_prefix("proxy-")?.strip_suffix(".json")?.to_string();
            Some((format!("proxy-{id}"), serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// `dcp stats --session SID --json` in the lab's environment.
pub fn stats_of(env: &[(&'static str, std::ffi::OsString)], data_dir: &Path, sid: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["stats", "--json", "--session", sid, "--data-dir"])
        .arg(data_dir)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert!(out.status.success(), "dcp stats: {}", tail(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn opencode_without_the_plugin_is_pruned_through_the_proxy() {
    let lab = Lab::new(IMMEDIATE);
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", lab.llm.port), lab.env());
    through_proxy(&lab, proxy.port);
    lab.prompt(
        None,
        "Read config.txt three times.",
        vec![
            read("r1", "config.txt"),
            read("r2", "config.txt"),
            read("r3", "config.txt"),
            Turn::text("done", "Read it three times."),
        ],
    );
    let (first, second) = (call_id_of(&lab, "r1"), call_id_of(&lab, "r2"));
    let last = lab.llm.request_for("done");
    assert_eq!(last.tool_result(&first).as_deref(), Some(OUTPUT_PLACEHOLDER), "the first read is deduplicated");
    assert_eq!(last.tool_result(&second).as_deref(), Some(OUTPUT_PLACEHOLDER), "the second read is deduplicated");
    let third = call_id_of(&lab, "r3");
    assert!(last.tool_result(&third).is_some_and(|t| t.contains("retries = 3")), "the newest read is kept");
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    let states = proxied_states(&lab.state_dir());
    assert_eq!(
        states.len(),
        1,
        "one conversation, one state file: {:?}",
        states.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    let (sid, state) = &states[0];
    assert!(state["dcp"]["pruned"].get(&first).is_some(), "{state}");
    let stats = stats_of(&lab.env(), &lab.data_dir(), sid);
    assert_eq!(stats["session"]["tools_pruned"], 2, "{stats}");
    assert_eq!(stats["all_time"]["sessions"], 1, "{stats}");
    assert!(!lab.root().join("xdg/config/opencode/node_modules/dcp-opencode").exists());
}
