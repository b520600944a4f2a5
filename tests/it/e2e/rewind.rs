//! A rewound history keeps no prunes from the branch it left, with the real clients: OpenCode
//! with the plugin, whose revert (`/undo` in its TUI: `POST /session/{id}/revert` to the last
//! prompt) is cleaned up when the next prompt comes, and Claude Code through `dcp proxy`,
//! resumed at an earlier message of the same session (`--resume ID --resume-session-at
//! MESSAGE`, its rewind in print mode).

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use super::fake_llm::Turn;
use super::opencode_queued::Serve;
use super::proxy::{claude, client_dirs_with, Release};
use super::proxy_upstream::{FakeUpstream, Step};
use super::scenarios::read;
use super::{tail, Lab};
use crate::proxy::ProxyProcess;

/// Every decision at once, and no masking: the rewind's effect alone.
const IMMEDIATE: &str = r#"{ "rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}} }"#;

#[test]
fn opencode_s_undo_keeps_no_prune_from_the_turn_it_undid() {
    let lab = Lab::new(IMMEDIATE);
    lab.llm.push(vec![read("a0", "config.txt"), Turn::text("a1", "It is the config.")]);
    let greps = (1..4).map(|i| Turn::tool(&format!("b{i}"), "grep", json!({"pattern": format!("retries{i}")})));
    lab.llm.push(greps.collect());
    lab.llm.push(vec![read("b4", "config.txt"), Turn::text("b5", "Read it again."), Turn::text("c0", "Fine.")]);
    let serve = Serve::start(&lab);
    let created: Value = serde_json::from_str(&serve.post("/session", &json!({}))).unwrap();
    let session = created["id"].as_str().unwrap().to_string();
    let asked = |label: &str| lab.llm.main_requests().iter().any(|l| l.label.as_deref() == Some(label));
    let wait = |label: &str| assert!(crate::support::poll(|| asked(label), Duration::from_secs(120)), "{label}");
    serve.prompt(&session, "Look at the config.");
    wait("a1");
    std::thread::sleep(Duration::from_secs(2));
    serve.prompt(&session, "Look around it.");
    wait("b5");
    std::thread::sleep(Duration::from_secs(2));
    let first = super::scenarios::call_id_of(&lab, "a0");
    let before = lab.llm.request_for("b5");
    assert!(crate::restore::is_pruned(before.tool_result(&first).as_deref()), "b4 reads config.txt again");
    // `/undo`: the revert to the last prompt; the next prompt's cleanup removes it and what
    // followed it.
    // (dcp's own notices are user messages too: the prompt is found by its text.)
    let messages = serve.get(&format!("/session/{session}/message"));
    let typed = |m: &&Value| m["parts"].as_array().is_some_and(|p| p.iter().any(|p| p["text"] == "Look around it."));
    let prompt = messages.as_array().unwrap().iter().find(typed).unwrap()["info"]["id"].as_str().unwrap().to_string();
    serve.post(&format!("/session/{session}/revert"), &json!({"messageID": prompt}));
    serve.prompt(&session, "Look at the tests instead.");
    wait("c0");
    let after = lab.llm.request_for("c0");
    let log = std::fs::read(lab.root().join("serve.log")).unwrap_or_default();
    assert!(!after.text().contains("Look around it."), "the undone prompt is gone: {}", tail(&log));
    let output = after.tool_result(&first).unwrap_or_default();
    assert!(output.contains("retries = 3"), "the only read of config.txt is whole again: {output:.80}");
}

#[test]
fn claude_code_s_rewind_keeps_no_prune_from_the_branch_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = client_dirs_with(root, IMMEDIATE);
    std::fs::write(root.join("proj/config.txt"), "mode = fast\nretries = 3\ntimeout = 30\n".repeat(40)).unwrap();
    let cat = || Step::Tool("Bash", json!({"command": "cat config.txt", "description": "Read it"}));
    let grep =
        |p: &str| Step::Tool("Bash", json!({"command": format!("grep -c {p} config.txt"), "description": "Count"}));
    let steps = vec![cat(), grep("mode"), grep("timeout"), cat(), Step::Text("Read it twice."), Step::Text("Fine.")];
    let upstream = FakeUpstream::start(steps);
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    let run = |args: &[&str]| {
        let out = Command::new(claude(Release::Pinned))
            .args(args)
            .args(["--allowedTools", "Bash", "--model", "claude-sonnet-4-5", "--output-format", "json"])
            .current_dir(root.join("proj"))
            .envs(super::proxy::claude_env(root, &env, format!("http://127.0.0.1:{}", proxy.port)))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "claude {args:?}: {}\n{}", tail(&out.stderr), tail(&out.stdout));
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    let first = run(&["-p", "Read config.txt, count some keys, read it again."]);
    let session = first["session_id"].as_str().expect("a session id").to_string();
    let results = |step: usize| {
        let log = upstream.log();
        super::clients::results(&log.iter().find(|l| l.step == Some(step)).unwrap().body)
    };
    assert!(crate::restore::is_pruned(Some(&results(4)[0].1)), "the second cat repeats the first");
    // The rewind: the same session, resumed at its second model message (step 1's call), named
    // by its uuid in Claude Code's transcript.
    let at = transcript_uuid(&root.join("home/.claude"), &session, "msg_toolu_01");
    run(&["-p", "--resume", &session, "--resume-session-at", &at, "Now count the retries."]);
    let rewound = results(5);
    assert_eq!(rewound.len(), 2, "the history is cut back to step 1: {rewound:?}");
    assert!(rewound[0].1.contains("retries = 3"), "the only cat is whole again: {:.80}", rewound[0].1);
    assert!(proxy.stop());
}

/// The uuid of the transcript entry of Claude Code session `session` (under its config dir
/// `config`) that holds the model's message `message_id`.
fn transcript_uuid(config: &std::path::Path, session: &str, message_id: &str) -> String {
    let name = format!("{session}.jsonl");
    let mut found = None;
    let mut dirs = vec![config.join("projects")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == name.as_str()) {
                found = Some(path);
            }
        }
    }
    let transcript = std::fs::read_to_string(found.expect("Claude Code's transcript")).unwrap();
    let entries = transcript.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok());
    let entry = entries.filter(|e| e["message"]["id"] == message_id).last().expect("the model's message");
    entry["uuid"].as_str().unwrap().to_string()
}
