//! `dcp proxy` between real clients and scripted fake upstreams: OpenCode 1.18 with no
//! plugin and its provider's `baseURL` at the proxy (Chat Completions), and Claude Code from
//! npm with `ANTHROPIC_BASE_URL` at it (Anthropic Messages, streaming), and Codex CLI from npm
//! with a model provider whose `base_url` is the proxy (OpenAI Responses, streaming).

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use super::fake_llm::Turn;
use super::proxy_upstream::{FakeUpstream, Step};
use super::scenarios::{call_id_of, read};
use super::{tail, Lab};
use crate::proxy::ProxyProcess;

/// Every decision applied on the next request, so that one short run shows it.
const IMMEDIATE: &str = r#"{ "rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}} }"#;

/// Points the lab's OpenCode at `port` instead of the fake model, and loads no plugin.
pub(super) fn through_proxy(lab: &Lab, port: u16) {
    let path = lab.root().join("xdg/config/opencode/opencode.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("plugin");
    config["provider"]["fake"]["options"]["baseURL"] = json!(format!("http://127.0.0.1:{port}/v1"));
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// The proxied conversations' state files in state dir `dir`: `proxy/<client>/proxy-<client>-*.json`,
/// each in its own client's folder.
pub fn proxied_states(dir: &Path) -> Vec<(String, Value)> {
    let mut found: Vec<(String, Value)> = Vec::new();
    let Ok(clients) = std::fs::read_dir(dir.join("proxy")) else { return found };
    for client in clients.filter_map(Result::ok) {
        let folder = client.file_name().into_string().unwrap();
        for e in std::fs::read_dir(client.path()).unwrap().filter_map(Result::ok) {
            let name = e.file_name().into_string().unwrap();
            let Some(id) = name.strip_suffix(".json") else { continue };
            assert!(id.starts_with(&format!("proxy-{folder}-")), "{name} is in the folder of {folder}");
            found.push((id.to_string(), serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap()));
        }
    }
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
    assert!(crate::restore::is_pruned(last.tool_result(&first).as_deref()), "the first read is deduplicated");
    assert!(crate::restore::is_pruned(last.tool_result(&second).as_deref()), "the second read is deduplicated");
    let third = call_id_of(&lab, "r3");
    assert!(last.tool_result(&third).is_some_and(|t| t.contains("retries = 3")), "the newest read is kept");
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    // The session's own requests, and OpenCode's side request that summarises it (a first
    // user message of its own), are conversations of their own, both under OpenCode's id.
    let states = proxied_states(&lab.state_dir());
    let names: Vec<&String> = states.iter().map(|s| &s.0).collect();
    let session = lab.session_id();
    assert!(names.iter().all(|n| n.starts_with(&format!("proxy-opencode-{session}-"))), "{names:?}");
    let (sid, _) = states.iter().find(|(_, state)| state["dcp"]["pruned"].get(&first).is_some()).unwrap();
    let stats = stats_of(&lab.env(), &lab.data_dir(), sid);
    assert_eq!(stats["session"]["tools_pruned"], 2, "{stats}");
    assert_eq!(stats["all_time"]["files"], states.len(), "{stats}");
    assert!(!lab.root().join("xdg/config/opencode/node_modules/dcp-opencode").exists());
}

/// Makes a client's dirs under `root` (home, project, dcp's data and config, with every
/// decision applied at once) and returns the environment that points the proxy at them.
fn client_dirs(root: &Path) -> Vec<(&'static str, std::ffi::OsString)> {
    client_dirs_with(root, IMMEDIATE)
}

/// As [`client_dirs`], with `config` as dcp's.
pub(super) fn client_dirs_with(root: &Path, config: &str) -> Vec<(&'static str, std::ffi::OsString)> {
    for d in ["codex", "home", "proj", "xdg/data", "xdg/config/opencode"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("xdg/config/opencode/dcp.jsonc"), config).unwrap();
    vec![
        ("HOME", root.join("home").into()),
        ("XDG_DATA_HOME", root.join("xdg/data").into()),
        ("XDG_CONFIG_HOME", root.join("xdg/config").into()),
    ]
}

/// The Claude Code `.ci/run` installs.
const CLAUDE_CODE_VERSION: &str = "2.1.197";

/// Which release of a client from npm: the one CI pins, or the newest on the registry (which
/// `.ci/run` installs anew when the registry has a newer one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Pinned,
    Newest,
}

/// Claude Code from npm (`@anthropic-ai/claude-code`), installed into `target/e2e/claude`, or
/// the newest into `target/e2e/claude-latest`.
pub(super) fn claude(release: Release) -> std::path::PathBuf {
    match release {
        Release::Pinned => npm_client("claude", "claude", &format!("@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}")),
        Release::Newest => npm_client("claude-latest", "claude", "@anthropic-ai/claude-code@latest"),
    }
}

/// The environment Claude Code runs in under `root` (its config dir, no traffic but the model's),
/// beside `env`, with its API at `base_url`.
pub(super) fn claude_env(
    root: &Path,
    env: &[(&'static str, std::ffi::OsString)],
    base_url: String,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let fixed = [
        ("ANTHROPIC_BASE_URL", base_url.into()),
        ("ANTHROPIC_API_KEY", "dummy".into()),
        ("CLAUDE_CONFIG_DIR", root.join("home/.claude").into_os_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
    ];
    env.iter().cloned().chain(fixed).map(|(k, v)| (k.into(), v)).collect()
}

/// The client `bin` of npm package `spec`, installed into `target/e2e/<dir>` unless there.
fn npm_client(dir: &str, bin: &str, spec: &str) -> std::path::PathBuf {
    let dir = super::e2e_dir().join(dir);
    let path = dir.join("node_modules/.bin").join(bin);
    if !path.exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(spec)
            .status()
            .unwrap_or_else(|e| panic!("npm is needed to install {spec} for the end-to-end tests: {e}"));
        assert!(status.success(), "npm install {spec} failed");
    }
    path
}

#[test]
fn claude_code_is_pruned_through_the_proxy() {
    claude_code_pruned(Release::Pinned);
}

#[test]
fn the_newest_claude_code_is_pruned_through_the_proxy() {
    claude_code_pruned(Release::Newest);
}

fn claude_code_pruned(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = client_dirs(root);
    let file = root.join("proj/config.txt");
    std::fs::write(&file, "mode = fast\nretries = 3\ntimeout = 30\n".repeat(40)).unwrap();
    let read = || Step::Tool("Read", json!({"file_path": file.display().to_string()}));
    // Two reads of an unchanged file (see below), then three identical searches.
    let grep = || {
        Step::Tool(
            "Grep",
            json!({"pattern": "retries", "path": root.join("proj").display().to_string(), "output_mode": "content"}),
        )
    };
    let steps = vec![read(), read(), grep(), grep(), grep(), Step::Text("Read it three times.")];
    let upstream = FakeUpstream::start(steps);
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    let out = Command::new(claude(release))
        .args(["-p", "Read config.txt three times.", "--allowedTools", "Read,Grep", "--model", "claude-sonnet-4-5"])
        .current_dir(root.join("proj"))
        .envs(claude_env(root, &env, format!("http://127.0.0.1:{}", proxy.port)))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let log = upstream.log();
    let shown: Vec<String> = log.iter().map(|l| format!("{} step {:?}", l.path, l.step)).collect();
    assert!(out.status.success(), "claude -p failed: {}\n{}\n{shown:?}", tail(&out.stderr), tail(&out.stdout));
    assert_eq!(upstream.remaining(), 0, "every scripted step was asked for: {shown:?}");
    let last = log.iter().find(|l| l.step == Some(5)).unwrap();
    let results = tool_results(&last.body);
    assert_eq!(results.len(), 5, "{results:?}");
    // Claude Code 2.1.197 answers the second read of an unchanged file with a note pointing
    // back at the first, whose output must then stay; 2.1.332 reads the file again, and the
    // first read is deduplicated like the searches.
    let points_back = results[1].1.to_ascii_lowercase().contains("unchanged since");
    if points_back {
        assert!(results[0].1.contains("retries = 3"), "the read a later one points back at is kept: {:?}", results[0]);
    } else {
        assert!(crate::restore::is_pruned(Some(&results[0].1)), "the first read is deduplicated by the second");
        assert!(results[1].1.contains("retries = 3"), "the newest read is kept: {:?}", results[1]);
    }
    assert!(crate::restore::is_pruned(Some(&results[2].1)), "the first search is deduplicated");
    assert!(crate::restore::is_pruned(Some(&results[3].1)), "the second search is deduplicated");
    assert!(results[4].1.contains("retries"), "the newest search is kept: {:?}", results[4]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Read it three times."));
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    let states = proxied_states(&root.join("xdg/data/opencode/storage/plugin/dcp"));
    let (sid, state) = conversation(&states, "proxy-claude-code-");
    let stats = stats_of(&env, &root.join("xdg/data/opencode"), sid);
    assert_eq!(stats["session"]["tools_pruned"], if points_back { 2 } else { 3 }, "{stats}");
    super::meter::upstream_usage_recorded(state, &log, |b| (b.last, b.cached, b.written - b.last));
}

/// The state of the proxied conversation whose id starts with `prefix`: the one with the most
/// requests (a client's first request may be a conversation of its own).
fn conversation<'a>(states: &'a [(String, Value)], prefix: &str) -> &'a (String, Value) {
    let named = states.iter().filter(|s| s.0.starts_with(prefix));
    let names: Vec<&String> = states.iter().map(|s| &s.0).collect();
    named.max_by_key(|s| s.1["stats"]["requests"].as_u64()).unwrap_or_else(|| panic!("{names:?}"))
}

/// The `tool_result`s of an Anthropic request, in order: tool use id and text.
pub(super) fn tool_results(body: &Value) -> Vec<(String, String)> {
    let blocks =
        body["messages"].as_array().into_iter().flatten().flat_map(|m| m["content"].as_array().into_iter().flatten());
    blocks
        .filter(|b| b["type"] == "tool_result")
        .map(|b| (b["tool_use_id"].as_str().unwrap_or("").to_string(), super::fake_llm::content_text(&b["content"])))
        .collect()
}

/// The Codex CLI `.ci/run` installs.
const CODEX_VERSION: &str = "0.169.0";

/// Codex CLI from npm (`@openai/codex`), installed into `target/e2e/codex`, or the newest into
/// `target/e2e/codex-latest`.
pub(super) fn codex(release: Release) -> std::path::PathBuf {
    match release {
        Release::Pinned => npm_client("codex", "codex", &format!("@openai/codex@{CODEX_VERSION}")),
        Release::Newest => npm_client("codex-latest", "codex", "@openai/codex@latest"),
    }
}

/// Codex's config in `root/codex`: its model provider is the proxy on `port`.
pub(super) fn codex_config(root: &Path, port: u16) {
    let config = format!(
        "model = \"gpt-5-codex\"\nmodel_provider = \"dcp\"\n[model_providers.dcp]\nname = \"dcp proxy\"\n\
         base_url = \"http://127.0.0.1:{port}/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_API_KEY\"\n"
    );
    std::fs::write(root.join("codex/config.toml"), config).unwrap();
}

#[test]
fn codex_is_pruned_through_the_proxy() {
    codex_pruned(Release::Pinned);
}

#[test]
fn the_newest_codex_is_pruned_through_the_proxy() {
    codex_pruned(Release::Newest);
}

fn codex_pruned(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = client_dirs(root);
    std::fs::write(root.join("proj/config.txt"), "mode = fast\nretries = 3\ntimeout = 30\n".repeat(40)).unwrap();
    let cat = || Step::Tool("exec_command", json!({"cmd": "cat config.txt"}));
    let upstream = FakeUpstream::start(vec![cat(), cat(), cat(), Step::Text("Read it three times.")]);
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    codex_config(root, proxy.port);
    let out = Command::new(codex(release))
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "Read config.txt three times.",
        ])
        .current_dir(root.join("proj"))
        .envs(env.iter().cloned())
        .env("CODEX_HOME", root.join("codex"))
        .env("FAKE_API_KEY", "dummy")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let log = upstream.log();
    let shown: Vec<String> = log.iter().map(|l| format!("{} step {:?}", l.path, l.step)).collect();
    assert!(out.status.success(), "codex exec failed: {}\n{}\n{shown:?}", tail(&out.stderr), tail(&out.stdout));
    assert_eq!(upstream.remaining(), 0, "every scripted step was asked for: {shown:?}");
    let last = log.iter().find(|l| l.step == Some(3)).unwrap();
    let outputs: Vec<&str> = last.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    assert!(crate::restore::is_pruned(Some(&outputs[0])), "the first run is deduplicated");
    assert!(crate::restore::is_pruned(Some(&outputs[1])), "the second run is deduplicated");
    assert!(outputs[2].contains("retries = 3"), "the newest run is kept: {:?}", outputs[2]);
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
    let states = proxied_states(&root.join("xdg/data/opencode/storage/plugin/dcp"));
    let names: Vec<&String> = states.iter().map(|s| &s.0).collect();
    let (sid, state) = states.iter().find(|s| s.0.starts_with("proxy-codex-")).unwrap_or_else(|| panic!("{names:?}"));
    let session_header = last.headers.iter().find(|(k, _)| k == "session-id").map(|(_, v)| v.as_str());
    let named = session_header.is_some_and(|h| sid.starts_with(&format!("proxy-codex-{h}-")));
    assert!(named, "named by Codex's own session id: {sid} {session_header:?}");
    let stats = stats_of(&env, &root.join("xdg/data/opencode"), sid);
    assert_eq!(stats["session"]["tools_pruned"], 2, "{stats}");
    super::meter::upstream_usage_recorded(state, &log, |b| (b.prompt - b.cached, b.cached, 0));
}
