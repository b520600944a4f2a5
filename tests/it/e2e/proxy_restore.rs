//! Recoverable hiding through `dcp proxy` with the real Claude Code (issue 38, part 2): the
//! proxy masks an old read, its placeholder tells the agent to run `dcp restore N`, the
//! scripted model runs it with Claude Code's own Bash tool, and the next request carries the
//! read's output as Claude Code first sent it (its Bash tool trims the trailing white space of
//! what a command prints).

use std::process::Command;

use serde_json::json;

use super::proxy::{claude, tool_results, Release};
use super::proxy_upstream::{FakeUpstream, Step};
use super::tail;
use crate::proxy::ProxyProcess;

/// Every decision on the next request, and masking down to the newest output.
const MASK_ALL_BUT_ONE: &str = r#"{"rewrite": {"mode": "immediate"},
    "strategies": {"masking": {"keepLast": 1, "keepTokens": 0, "keepUserTurns": 0}}}"#;

/// The dirs of the client and of the proxy under `root`, and the environment both run in:
/// `dcp` on the agent's `PATH`, and the cache dir through which `dcp restore` finds the proxy.
fn dirs(root: &std::path::Path) -> Vec<(&'static str, std::ffi::OsString)> {
    for d in ["home", "proj", "xdg/data", "xdg/cache", "xdg/config/opencode"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("xdg/config/opencode/dcp.jsonc"), MASK_ALL_BUT_ONE).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_dcp")).parent().unwrap().to_path_buf();
    let path = std::env::var_os("PATH").unwrap();
    let paths = std::iter::once(bin).chain(std::env::split_paths(&path));
    vec![
        ("HOME", root.join("home").into()),
        ("XDG_DATA_HOME", root.join("xdg/data").into()),
        ("XDG_CONFIG_HOME", root.join("xdg/config").into()),
        ("XDG_CACHE_HOME", root.join("xdg/cache").into()),
        ("PATH", std::env::join_paths(paths).unwrap()),
    ]
}

/// `claude -p PROMPT` through the proxy at `port`, in `root`'s dirs.
fn run_claude(root: &std::path::Path, env: &[(&'static str, std::ffi::OsString)], port: u16) -> std::process::Output {
    Command::new(claude(Release::Pinned))
        .args([
            "-p",
            "Read config.txt, then restore it.",
            "--allowedTools",
            "Read,Grep,Bash",
            "--model",
            "claude-sonnet-4-5",
        ])
        .current_dir(root.join("proj"))
        .envs(super::proxy::claude_env(root, &env, format!("http://127.0.0.1:{port}")))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn claude_code_restores_a_read_the_proxy_hid_with_dcp_restore_in_its_shell() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = dirs(root);
    let file = root.join("proj/config.txt");
    std::fs::write(&file, "mode = fast\nretries = 3\ntimeout = 30\n".repeat(40)).unwrap();
    let steps = vec![
        Step::Tool("Read", json!({"file_path": file.display().to_string()})),
        Step::Tool("Grep", json!({"pattern": "retries", "path": root.join("proj").display().to_string()})),
        Step::Tool("Bash", json!({"command": "dcp restore {{restore}}", "description": "Restore the hidden read"})),
        Step::Text("Restored it."),
    ];
    let upstream = FakeUpstream::start(steps);
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    let out = run_claude(root, &env, proxy.port);
    let log = upstream.log();
    let shown: Vec<String> = log.iter().map(|l| format!("{} step {:?}", l.path, l.step)).collect();
    assert!(out.status.success(), "claude -p failed: {}\n{}\n{shown:?}", tail(&out.stderr), tail(&out.stdout));
    assert_eq!(upstream.remaining(), 0, "every scripted step was asked for: {shown:?}");
    // The Read's output as Claude Code sent it, before the proxy hid it.
    let first = log.iter().find(|l| l.step == Some(1)).unwrap();
    let (read_id, original) = tool_results(&first.body)[0].clone();
    assert!(original.contains("retries = 3"), "{original}");
    // The request that ran `dcp restore` saw the read hidden behind a placeholder naming it.
    let asked = log.iter().find(|l| l.step == Some(2)).unwrap();
    let hidden = tool_results(&asked.body).into_iter().find(|(id, _)| *id == read_id).unwrap().1;
    assert!(hidden.starts_with("[Output masked; run `dcp restore "), "{hidden}");
    // The next request carries what `dcp restore` printed: the original, but for the trailing
    // white space Claude Code's Bash tool trims from every command's output (`dcp restore`
    // prints it: `proxy_restore::a_restore_through_the_proxy_prints_the_hidden_output_byte_for_byte`).
    let last = log.iter().find(|l| l.step == Some(3)).unwrap();
    let restored = tool_results(&last.body).last().unwrap().1.clone();
    assert_eq!(restored, original.trim_end(), "the restored read, as Claude Code sent it first");
    assert!(original.len() - original.trim_end().len() <= 1, "only the read's last tab differs");
    assert!(proxy.stop(), "the proxy stops cleanly on SIGTERM");
}
