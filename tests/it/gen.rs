//! The synthetic session and state generator (`dcp_testkit::gen`, `dcp gen`): deterministic, in
//! OpenCode's shape, with the mix the benchmarks rely on, and state files `dcp stats` sums.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use dcp::session::{tool_calls, Message, ToolStatus};
use dcp_testkit::gen::{self, SessionSpec};
use serde_json::Value;

/// `dcp-testkit <args> --json`, in process.
fn testkit(args: &[&str]) -> Value {
    let mut out = Vec::new();
    dcp_testkit::cli::run(args.iter().chain(&["--json"]), &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn dcp(args: &[&str], home: &Path) -> Value {
    let env = [("HOME", home.to_path_buf()), ("XDG_CONFIG_HOME", home.join(".config"))];
    let args = args.iter().chain(&["--json"]);
    let out = crate::support::run_dcp(args, home, &env, std::time::Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, seed: &str| {
        let path = dir.path().join(name);
        let args = ["gen", "session", "--messages", "300", "--steps", "10", "--seed", seed, "--out"];
        let mut args: Vec<&str> = args.to_vec();
        let path_str = path.to_str().unwrap().to_string();
        args.push(&path_str);
        let summary = testkit(&args);
        assert_eq!(summary["messages"], 300);
        assert_eq!(summary["steps"], 10);
        std::fs::read(&path).unwrap()
    };
    let a = file("a.json", "5");
    let b = file("b.json", "5");
    let c = file("c.json", "6");
    assert!(a == b, "same seed, different bytes");
    assert!(a != c, "different seeds, same bytes");
    let parsed: Value = serde_json::from_slice(&a).unwrap();
    assert!(parsed["sessionID"].as_str().unwrap().starts_with("ses_"));
    assert_eq!(parsed["messages"].as_array().unwrap().len(), 300);
    assert_eq!(parsed["steps"].as_array().unwrap().len(), 10);
}

#[test]
fn histories_have_the_requested_length_and_opencode_shape() {
    for n in [0, 1, 2, 37, 400] {
        let s = gen::session(&SessionSpec { messages: n, steps: 7, seed: 3 });
        assert_eq!(s.messages.len(), n);
        assert_eq!(s.steps.len(), 7);
        check_shape(&s.session_id, s.messages.iter().chain(s.steps.iter().flatten()));
        if n > 0 {
            assert_eq!(s.messages[0].info["role"], "user");
        }
    }
    let s = gen::session(&SessionSpec { messages: 600, steps: 50, seed: 4 });
    let users = s.messages.iter().filter(|m| m.info["role"] == "user").count();
    // A prompt every 10 to 30 messages.
    assert!((600 / 30..=600 / 10 + 1).contains(&users), "{users} user messages");
    for step in &s.steps {
        assert_eq!(step.len(), 1);
        let calls = tool_calls(step);
        assert!((1..=2).contains(&calls.len()));
        assert!(calls.iter().all(|c| c.status == ToolStatus::Completed));
        assert_eq!(step[0].info["role"], "assistant");
    }
    // Some steps read a file the history already read: pruning has work to do.
    let read_before: HashSet<Value> =
        tool_calls(&s.messages).iter().filter(|c| c.tool == "read").map(|c| c.input().to_value()).collect();
    let repeated = s
        .steps
        .iter()
        .filter(|st| tool_calls(st).iter().any(|c| c.tool == "read" && read_before.contains(&c.input().to_value())))
        .count();
    assert!(repeated >= 5, "{repeated} steps repeat a read");
}

fn check_shape<'a>(session: &str, messages: impl Iterator<Item = &'a Message>) {
    let mut ids = HashSet::new();
    for m in messages {
        let id = m.info["id"].as_str().unwrap();
        assert!(id.starts_with("msg_") && id.len() == 30, "{id}");
        assert!(ids.insert(id.to_string()), "duplicate id {id}");
        assert_eq!(m.info["sessionID"], session);
        assert!(m.info["time"]["created"].as_i64().unwrap() > 1_700_000_000_000);
        match m.info["role"].as_str().unwrap() {
            "user" => assert!(m.info["model"]["modelID"].is_string()),
            "assistant" => {
                for key in ["parentID", "modelID", "providerID", "finish", "tokens", "mode", "agent", "path"] {
                    assert!(m.info.get(key).is_some(), "assistant info without {key}");
                }
                assert!(m.info["time"]["completed"].is_i64());
                assert_eq!(m.parts.first().unwrap()["type"], "step-start");
            }
            other => panic!("role {other}"),
        }
        for p in &m.parts {
            let pid = p["id"].as_str().unwrap();
            assert!(pid.starts_with("prt_") && pid.len() == 30, "{pid}");
            assert_eq!(p["messageID"], m.info["id"]);
            assert_eq!(p["sessionID"], session);
            if p["type"] == "tool" {
                assert!(p["callID"].as_str().unwrap().starts_with("call_"));
                let state = &p["state"];
                assert!(state["input"].is_object());
                assert!(state["time"]["start"].is_i64() && state["time"]["end"].is_i64());
                match state["status"].as_str().unwrap() {
                    "completed" => {
                        assert!(
                            state["output"].is_string() && state["title"].is_string() && state["metadata"].is_object()
                        );
                    }
                    "error" => assert!(state["error"].is_string() && state.get("output").is_none()),
                    other => panic!("status {other}"),
                }
            }
        }
    }
}

#[test]
fn the_mix_has_what_pruning_works_on() {
    let s = gen::session(&SessionSpec { messages: 2_000, steps: 0, seed: 1 });
    let calls = tool_calls(&s.messages);
    // Output sizes: 200 B to 50 KB, most small, some large.
    let sizes: Vec<usize> = calls
        .iter()
        .filter(|c| ["read", "grep", "glob", "bash"].contains(&c.tool))
        .filter_map(|c| c.output().map(str::len))
        .collect();
    assert!(sizes.len() > 1_000);
    assert!(sizes.iter().all(|n| (gen::MIN_OUTPUT..=gen::MAX_OUTPUT).contains(n)), "an output out of range");
    assert!(*sizes.iter().min().unwrap() < 400);
    assert!(*sizes.iter().max().unwrap() > 30_000);
    let small = sizes.iter().filter(|n| **n < 2_000).count();
    assert!(small * 2 > sizes.len(), "{small} of {} small", sizes.len());
    // Outputs look like text, not one repeated character.
    let largest = calls.iter().filter_map(|c| c.output()).max_by_key(|o| o.len()).unwrap();
    let distinct: HashSet<&str> = largest.split_whitespace().collect();
    assert!(distinct.len() > 200, "{} distinct words", distinct.len());

    // Repeated reads with identical input.
    let mut reads: HashMap<String, usize> = HashMap::new();
    for c in calls.iter().filter(|c| c.tool == "read" && c.status == ToolStatus::Completed) {
        *reads.entry(c.input().to_string()).or_default() += 1;
    }
    assert!(reads.values().any(|n| *n >= 3));
    // Errored calls.
    let errors = calls.iter().filter(|c| c.status == ToolStatus::Error).count();
    assert!(errors >= 10 && errors * 10 < calls.len(), "{errors} errors of {}", calls.len());
    // Writes read back later.
    let mut read_back = 0;
    for (i, w) in calls.iter().enumerate().filter(|(_, c)| c.tool == "write") {
        let path = &w.input()["filePath"];
        if calls[i + 1..].iter().any(|c| c.tool == "read" && &c.input()["filePath"] == path) {
            read_back += 1;
        }
    }
    assert!(read_back >= 10, "{read_back} writes read back");
    assert!(calls.iter().any(|c| c.tool == "bash"));
}

#[test]
fn stats_sums_generated_state_files() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let state_dir = data.join("storage/plugin/dcp");
    let summary = testkit(&["gen", "states", "--count", "250", "--seed", "9", "--dir", state_dir.to_str().unwrap()]);
    assert_eq!(summary["files"], 250);
    assert!(summary["tools_pruned"].as_u64().unwrap() > 250);
    let stats = dcp(&["stats", "--data-dir", data.to_str().unwrap()], home.path());
    let all = &stats["all_time"];
    assert_eq!(all["files"], 250);
    assert_eq!(all["corrupt"].as_array().unwrap().len(), 0);
    assert_eq!(all["pruned_tokens"], summary["tokens_saved"]);
    for key in ["tools_pruned", "sessions", "bytes"] {
        assert_eq!(all[key], summary[key], "{key}");
    }
    // Some sessions pruned nothing, so sessions counts fewer than the files.
    assert!(all["sessions"].as_u64().unwrap() < 250);
    // The same seed writes the same files.
    let again = home.path().join("again");
    gen::write_states(250, 9, &again).unwrap();
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    assert_eq!(names(&state_dir), names(&again));
    for name in names(&again) {
        assert_eq!(std::fs::read(state_dir.join(&name)).unwrap(), std::fs::read(again.join(&name)).unwrap());
    }
}
