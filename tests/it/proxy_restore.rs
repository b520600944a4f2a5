//! `dcp restore N` through `dcp proxy` (issue 38, part 2): the proxy's placeholders tell the
//! agent to run it in its shell, and it prints the exact original from the last request the
//! proxy holds in memory, to a holder of the key the proxy published alone.

use std::process::Command;

use serde_json::Value;

use crate::proxy::{as_chat, immediate_env, post_bytes, proxied_outputs, reads, ProxyProcess, Recorder};

fn restore(env: &[(&'static str, std::path::PathBuf)], handle: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["restore", handle])
        .env_clear()
        .envs(env.iter().cloned())
        .output()
        .unwrap()
}

#[test]
fn a_restore_through_the_proxy_prints_the_hidden_output_byte_for_byte() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let env = immediate_env(dir.path());
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    let messages = reads(8);
    let sent = as_chat(&messages);
    assert!(post_bytes(proxy.port, "/v1/chat/completions", sent.to_string().as_bytes()).starts_with("HTTP/1.1 200"));
    let outputs = proxied_outputs(&upstream.last());
    let (call, placeholder) =
        outputs.iter().find(|(_, o)| o.contains("dcp restore")).expect("a placeholder to restore");
    let handle = placeholder.split("dcp restore ").nth(1).unwrap().trim_end_matches(['`', ']']);
    let original = proxied_outputs(&sent).into_iter().find(|(id, _)| id == call).unwrap().1;
    let out = restore(&env, handle);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), original, "restore {handle}");
    let out = restore(&env, "9999");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Nothing to restore for \"9999\""), "{out:?}");
    // Another key is refused.
    let access: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("cache/dcp/proxy.json")).unwrap()).unwrap();
    assert_eq!(access["url"], format!("http://127.0.0.1:{}", proxy.port));
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    std::io::Write::write_all(
        &mut conn,
        b"GET /dcp/restore?id=1 HTTP/1.1\r\nHost: x\r\nx-dcp-key: nope\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(proxy.stop());
    assert!(!dir.path().join("cache/dcp/proxy.json").exists(), "the proxy took its key with it");
    // The restore is counted in the conversation's state.
    let stats = Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["stats", "--json"])
        .env_clear()
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["all_time"]["restores"], 1, "{stats}");
}
