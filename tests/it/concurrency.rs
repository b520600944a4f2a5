//! Two processes updating the same session's state: no update is lost, and the sidecar sees
//! another process's changes before its next request. `DCP_UPDATES` sets how many updates
//! each process makes (default 1,000).

use std::path::Path;
use std::process::{Child, Stdio};

use dcp::state::persist;
use dcp::state::{SessionState, Strategy};
use serde_json::{json, Value};

use crate::sidecar::{apply, IMMEDIATE};
use crate::support::Sidecar;
use crate::support::{duplicate_reads, Sandbox, SessionBuilder};

fn updates() -> u64 {
    std::env::var("DCP_UPDATES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000)
}

/// `count` saves of session `id`, each adding prune `<prefix><i>` worth `i`.
fn save_loop(data: &Path, id: &str, prefix: &str, count: u64) -> Child {
    crate::support::save_loop(data, id, prefix, Some(count))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn read_state(sandbox: &Sandbox, id: &str) -> SessionState {
    let bytes = std::fs::read(sandbox.state_dir().join(format!("{id}.json"))).unwrap();
    persist::parse(&bytes).unwrap()
}

#[test]
fn two_processes_saving_one_session_lose_no_update() {
    let n = updates();
    let s = Sandbox::new();
    let mut a = save_loop(&s.data(), "ses_shared", "a", n);
    let mut b = save_loop(&s.data(), "ses_shared", "b", n);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let state = read_state(&s, "ses_shared");
    for prefix in ["a", "b"] {
        let missing: Vec<u64> = (1..=n).filter(|i| !state.pruned.contains_key(&format!("{prefix}{i}"))).collect();
        assert!(missing.is_empty(), "process {prefix} lost prunes {missing:?}");
    }
    assert_eq!(state.pruned.len() as u64, 2 * n);
    let sweep = state.stats.by_strategy[&Strategy::Sweep];
    assert_eq!(sweep.tools, 2 * n, "a lost stats update");
    assert_eq!(sweep.tokens, n * (n + 1));
    assert_eq!(state.stats.tokens(), n * (n + 1));
    // The lock file stays (it is empty); no temp file is left behind.
    let names: Vec<String> = std::fs::read_dir(s.state_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");
}

#[test]
fn the_sidecar_and_another_process_lose_no_update() {
    let n = updates();
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let mut other = save_loop(&s.data(), "ses_test", "s", n);
    for i in 1..=n {
        let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": duplicate_reads(i)}));
        assert_eq!(crate::sidecar::prunes(&result, "edits").len(), 1, "request {i}: {result}");
    }
    assert!(other.wait().unwrap().success());
    sidecar.shutdown();
    let state = read_state(&s, "ses_test");
    let lost: Vec<u64> = (1..=n).filter(|i| !state.pruned.contains_key(&format!("d{i}a"))).collect();
    assert!(lost.is_empty(), "the sidecar's prunes {lost:?} were lost");
    let lost: Vec<u64> = (1..=n).filter(|i| !state.pruned.contains_key(&format!("s{i}"))).collect();
    assert!(lost.is_empty(), "the other process's prunes {lost:?} were lost");
    assert_eq!(state.stats.by_strategy[&Strategy::Deduplication].tools, n);
    assert_eq!(state.stats.by_strategy[&Strategy::Sweep].tools, n);
    assert_eq!(state.stats.by_strategy[&Strategy::Sweep].tokens, n * (n + 1) / 2);
}

#[test]
fn the_sidecar_sees_another_processs_prune_before_its_next_request() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, IMMEDIATE);
    let output = "line of a long log\n".repeat(100);
    let session = SessionBuilder::new().user("go").tool("x1", "bash", json!({"command": "make"}), &output).build();
    let mut messages: Vec<Value> = session.iter().map(|m| serde_json::to_value(m).unwrap()).collect();
    let first = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": messages.clone()}));
    assert!(crate::sidecar::prunes(&first, "edits").is_empty(), "{first}");
    // Another process prunes call `x1` (save-loop names its prunes `<prefix><i>`).
    assert!(save_loop(&s.data(), "ses_test", "x", 1).wait().unwrap().success());
    let second = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": messages.clone()}));
    apply(&mut messages, &second);
    let output = crate::sidecar::untag(&messages[1]["parts"][1]["state"]["output"]);
    assert!(crate::restore::is_pruned(output.as_str()), "{second}");
    sidecar.shutdown();
    // The sidecar's own save kept the other process's prune.
    assert!(read_state(&s, "ses_test").pruned.contains_key("x1"));
}
