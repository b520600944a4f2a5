//! A proxied conversation that asks Anthropic's 1-hour cache (`cache_control` with `"ttl":
//! "1h"`) is priced by it through `dcp proxy`: after a 10-minute pause its cache is still
//! warm, so a waiting rewrite is not free and waits, where the same conversation on the
//! 5-minute cache has gone cold and takes it at no extra cost (issue 37's 1-hour pause, on the
//! proxy's path; `policy::tests` has it for the policy alone).

use serde_json::{json, Value};

use crate::proxy::{ProxyProcess, Recorder};
use crate::restore::is_pruned;

/// An Anthropic request of conversation `sid`: main.rs read, eight big greps, and main.rs read
/// again when `again` (which makes the first read obsolete), then `more` small greps. Its
/// system prompt asks the 1-hour cache when `hour`.
fn request(sid: &str, hour: bool, again: bool, more: usize) -> Value {
    let main = "fn main() { run(); }\n".repeat(40);
    let mut steps = vec![("toolu_r0".to_string(), json!({"file_path": "/p/src/main.rs"}), main.clone())];
    for i in 1..9 {
        steps.push((
            format!("toolu_g{i}"),
            json!({"pattern": format!("p{i}")}),
            format!("hit {i} of many\n").repeat(600),
        ));
    }
    if again {
        steps.push(("toolu_r9".into(), json!({"file_path": "/p/src/main.rs"}), main));
    }
    steps.extend((0..more).map(|i| (format!("toolu_m{i}"), json!({"pattern": format!("m{i}")}), "one hit\n".into())));
    let cache = if hour { json!({"type": "ephemeral", "ttl": "1h"}) } else { json!({"type": "ephemeral"}) };
    let system = json!([{"type": "text", "text": "You are Claude Code.", "cache_control": cache}]);
    crate::proxy::claude_request(sid, &steps, system)
}

/// Whether the first read of main.rs reached the upstream pruned in its last request.
fn first_read_pruned(upstream: &Recorder) -> bool {
    let body = upstream.last();
    let blocks =
        body["messages"].as_array().unwrap().iter().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
    let first = blocks.into_iter().find(|b| b["tool_use_id"] == "toolu_r0").unwrap();
    is_pruned(first["content"].as_str())
}

/// Moves every time the state files under `dir` keep of the last request 10 minutes back: the
/// pause between the proxy's two runs.
fn pause_ten_minutes(dir: &std::path::Path) -> usize {
    let mut moved = 0;
    for entry in walk(dir) {
        let mut state: Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
        let Some(last) = state["dcp"]["ledger"]["lastRequest"].as_i64() else { continue };
        state["dcp"]["ledger"]["lastRequest"] = json!(last - 600_000);
        std::fs::write(&entry, state.to_string()).unwrap();
        moved += 1;
    }
    moved
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_proxied_request_on_the_one_hour_cache_counts_no_rewrite_free_after_a_ten_minute_pause() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
    let env = [
        ("HOME", dir.path().join("home")),
        ("XDG_CONFIG_HOME", dir.path().join("config")),
        ("XDG_DATA_HOME", dir.path().join("data")),
    ];
    let url = format!("http://127.0.0.1:{}", upstream.port);
    let post = |port: u16, body: &Value| {
        let answer = crate::proxy::post_bytes(port, "/v1/messages", body.to_string().as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    };
    let proxy = ProxyProcess::start(&url, env.clone());
    for (sid, hour) in [("hour", true), ("five", false)] {
        post(proxy.port, &request(sid, hour, false, 0));
        post(proxy.port, &request(sid, hour, true, 0));
        assert!(!first_read_pruned(&upstream), "{sid}: a warm run waits with the read main.rs made obsolete");
    }
    assert!(proxy.stop());
    assert_eq!(pause_ten_minutes(&dir.path().join("data")), 2, "both conversations' state files");
    let proxy = ProxyProcess::start(&url, env);
    post(proxy.port, &request("five", false, true, 1));
    assert!(first_read_pruned(&upstream), "on the 5-minute cache, 10 minutes went cold: the rewrite is free and goes");
    post(proxy.port, &request("hour", true, true, 1));
    assert!(
        !first_read_pruned(&upstream),
        "on the 1-hour cache, 10 minutes are warm: the rewrite is not free, it waits"
    );
    assert!(proxy.stop());
}
