//! Where `dcp proxy` keeps its conversations' state: a folder per client under the state dir
//! (`proxy/<client>/`), in the plugin's format, and `dcp stats`, `dcp report` and all-time
//! find them there.

use std::process::Command;

use serde_json::{json, Value};

use crate::proxy::{as_chat, post_bytes, reads, ProxyProcess, Recorder};

/// Sends `body` to `path` as the client of `agent` would.
fn post_as(port: u16, agent: &str, path: &str, body: &Value) -> String {
    let body = body.to_string();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {agent}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    std::io::Write::write_all(&mut conn, head.as_bytes()).unwrap();
    std::io::Write::write_all(&mut conn, body.as_bytes()).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    answer
}

fn dcp(dir: &std::path::Path, args: &[&str]) -> Value {
    serde_json::from_str(&dcp_text(dir, &[args, &["--json"]].concat())).unwrap()
}

/// What `dcp ARGS` prints, run on the proxy's data under `dir`.
fn dcp_text(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(args)
        .arg("--data-dir")
        .arg(dir.join("data/opencode"))
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .unwrap();
    assert!(out.status.success(), "dcp {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn each_client_s_conversations_are_kept_in_its_own_folder_and_dcp_stats_and_report_list_them() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let env = crate::proxy::immediate_env(dir.path());
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env);
    let chat = as_chat(&reads(8));
    assert!(post_as(proxy.port, "codex_exec/0.169.0", "/v1/chat/completions", &chat).starts_with("HTTP/1.1 200"));
    let mut other = chat.clone();
    other["messages"][1]["content"] = json!("another task");
    assert!(post_bytes(proxy.port, "/v1/chat/completions", other.to_string().as_bytes()).starts_with("HTTP/1.1 200"));
    assert!(proxy.stop());
    let state_dir = dir.path().join("data/opencode/storage/plugin/dcp");
    let names = |folder: &str| -> Vec<String> {
        let entries = std::fs::read_dir(state_dir.join(folder)).map(|e| e.flatten().collect::<Vec<_>>());
        entries
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json"))
            .collect()
    };
    let (codex, openai) = (names("proxy/codex"), names("proxy/openai"));
    assert!(names("").is_empty(), "no proxied state file sits in the state dir itself");
    assert!(codex.len() == 1 && codex[0].starts_with("proxy-codex-"), "{codex:?}");
    assert!(openai.len() == 1 && openai[0].starts_with("proxy-openai-"), "{openai:?}");
    let sid = codex[0].strip_suffix(".json").unwrap();
    let stats = dcp(dir.path(), &["stats", "--session", sid]);
    assert_eq!(stats["session"]["tools_pruned"], 4, "{stats}");
    assert_eq!(stats["all_time"]["files"], 2, "both clients' conversations count all-time: {stats}");
    assert_eq!(stats["all_time"]["proxied"], json!({"codex": 1, "openai": 1}), "labelled by client: {stats}");
    let text = dcp_text(dir.path(), &["stats"]);
    assert!(text.contains("Through the proxy: codex 1, openai 1"), "{text}");
    let report = dcp(dir.path(), &["report", "--out", dir.path().join("r.html").to_str().unwrap()]);
    let html = std::fs::read_to_string(report["report"].as_str().unwrap()).unwrap();
    assert!(html.contains(sid), "the report lists the conversation by its client-labelled id");
}
