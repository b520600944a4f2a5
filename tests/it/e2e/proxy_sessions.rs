//! The real clients' long sessions through `dcp proxy`, with dcp's defaults: Claude Code and
//! Codex (the pinned releases and the newest on npm) and OpenCode 1.18 without the plugin,
//! each in a session of two prompts and many tool calls, some of them in parallel, in which
//! the person writes while the agent works. From the fake upstream's log: no tool output
//! reaches the model hidden before the model has answered it once, and the person's message
//! reaches it. With `DCP_RECORD_CLIENTS` set, each session's last request is written as a
//! fixture (`tests/data/clients/`, see `crate::turns`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use super::clients::{record, recording, seen, AppServer, Driven, Seen, QUEUED};
use super::proxy::{claude, client_dirs_with, codex, codex_config, Release};
use super::proxy_upstream::{FakeUpstream, Step};
use crate::proxy::ProxyProcess;

/// The person's two prompts.
const PROMPTS: [&str; 2] = ["Survey the project.", "Now the tests."];

/// Writes the project the sessions work on: twenty files of about 20 KB, each its own.
fn project(dir: &Path) {
    for i in 1..=20 {
        std::fs::write(dir.join(format!("big{i}.txt")), format!("file {i}: a line the model reads once\n").repeat(560))
            .unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "see the docs\n".repeat(20)).unwrap();
}

/// A session's script: `tools(k)` calls the k-th command. The second step waits four seconds
/// (the person writes then); the first prompt's turn is ten steps, the second's five.
fn script(run: &dyn Fn(&str) -> (&'static str, Value), read: &dyn Fn(&str) -> (&'static str, Value)) -> Vec<Step> {
    let cat = |i: usize| run(&format!("cat big{i}.txt"));
    let mut steps = vec![
        Step::Tools(vec![cat(1), cat(2), read("big3.txt")]),
        Step::Tools(vec![run("sleep 4; cat big4.txt")]),
        Step::Tools(vec![cat(5), read("notes.txt"), run("ls -la")]),
    ];
    steps.extend((6..=11).map(|i| Step::Tools(vec![cat(i)])));
    steps.push(Step::Text("Surveyed."));
    steps.push(Step::Tools(vec![cat(12), cat(13)]));
    steps.extend((14..=16).map(|i| Step::Tools(vec![cat(i)])));
    steps.push(Step::Text("Done."));
    steps
}

/// The scripted requests of `upstream`'s log, checked.
fn checked(upstream: &FakeUpstream) -> (Seen, Vec<Value>) {
    let log = upstream.log();
    let bodies: Vec<Value> = log.iter().filter(|l| l.step.is_some()).map(|l| l.body.clone()).collect();
    let seen = seen(&bodies.iter().collect::<Vec<_>>());
    assert_eq!(upstream.remaining(), 0, "every scripted step was asked for");
    let first = bodies.iter().position(|b| b.to_string().contains(QUEUED));
    assert_eq!(first, Some(2), "the person's message reached the model with step 1's results");
    let kept = bodies[2..].iter().all(|b| b.to_string().contains(QUEUED));
    assert!(kept, "the person's message reached the model on every request after");
    assert!(seen.hidden_first.is_empty(), "outputs hidden before the model answered them: {seen:?}");
    (seen, bodies)
}

/// The user agent of the first scripted request.
fn user_agent(upstream: &FakeUpstream) -> String {
    let log = upstream.log();
    let first = log.iter().find(|l| l.step.is_some()).unwrap();
    first.headers.iter().find(|(k, _)| k == "user-agent").map(|(_, v)| v.clone()).unwrap_or_default()
}

/// The port the client talks to: the proxy's, or the upstream's when it is recorded.
fn through(proxy: &ProxyProcess, upstream: &FakeUpstream) -> u16 {
    if recording() {
        upstream.port
    } else {
        proxy.port
    }
}

/// Waits until `upstream` has answered step `step`.
fn answered(upstream: &FakeUpstream, step: usize) {
    let done = || upstream.log().iter().any(|l| l.step == Some(step));
    assert!(crate::support::poll(done, Duration::from_secs(120)), "step {step} was never asked for");
}

#[test]
fn claude_code_s_long_session_hides_no_output_before_its_first_answer() {
    claude_code_session(Release::Pinned);
}

#[test]
fn the_newest_claude_code_s_long_session_hides_no_output_before_its_first_answer() {
    claude_code_session(Release::Newest);
}

/// Claude Code in print mode reading its prompts as stream-json: the second user message,
/// sent while a command runs, is the person writing while the agent works.
fn claude_code_session(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = client_dirs_with(root, "{}");
    project(&root.join("proj"));
    let proj = root.join("proj").display().to_string();
    let run = |c: &str| ("Bash", json!({"command": c, "description": "Run it"}));
    let read = |f: &str| ("Read", json!({"file_path": format!("{proj}/{f}")}));
    let upstream = FakeUpstream::start(script(&run, &read));
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    let mut command = Command::new(claude(release));
    command
        .args(["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"])
        .args(["--allowedTools", "Bash,Read", "--model", "claude-sonnet-4-5"])
        .current_dir(root.join("proj"))
        .envs(super::proxy::claude_env(root, &env, format!("http://127.0.0.1:{}", through(&proxy, &upstream))))
        .stderr(std::process::Stdio::null());
    let mut claude = Driven::spawn(command);
    let prompt = |text: &str| json!({"type": "user", "message": {"role": "user", "content": text}});
    let result = |m: &Value| m["type"] == "result";
    claude.send(&prompt(PROMPTS[0]));
    answered(&upstream, 1);
    std::thread::sleep(Duration::from_secs(1));
    claude.send(&prompt(QUEUED));
    claude.wait_for(Duration::from_secs(180), result);
    claude.send(&prompt(PROMPTS[1]));
    claude.wait_for(Duration::from_secs(180), result);
    claude.finish(Duration::from_secs(20));
    let (seen, bodies) = checked(&upstream);
    let agent = user_agent(&upstream);
    eprintln!("{agent}: {seen:?}");
    let version = agent.split(['/', ' ']).nth(1).unwrap_or("unknown").to_string();
    record(&format!("claude-code-{version}"), bodies.last().unwrap(), &agent, root, &PROMPTS);
    assert!(proxy.stop());
}

#[test]
fn codex_s_long_session_hides_no_output_before_its_first_answer() {
    codex_session(Release::Pinned);
}

#[test]
fn the_newest_codex_s_long_session_hides_no_output_before_its_first_answer() {
    codex_session(Release::Newest);
}

/// Codex through its app server: `turn/steer`, sent while a command runs, is the person
/// writing while the agent works (the TUI's Enter during a turn).
fn codex_session(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let env = client_dirs_with(root, "{}");
    project(&root.join("proj"));
    let run = |c: &str| ("exec_command", json!({"cmd": c}));
    let read = |f: &str| ("exec_command", json!({"cmd": format!("cat {f}")}));
    let upstream = FakeUpstream::start(script(&run, &read));
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env.clone());
    codex_config(root, through(&proxy, &upstream));
    let mut command = Command::new(codex(release));
    command
        .arg("app-server")
        .current_dir(root.join("proj"))
        .envs(env.iter().cloned())
        .env("CODEX_HOME", root.join("codex"))
        .env("FAKE_API_KEY", "dummy")
        .stderr(std::process::Stdio::null());
    let mut codex = AppServer::start(command);
    let cwd = root.join("proj").display().to_string();
    let thread =
        codex.call("thread/start", json!({"cwd": cwd, "approvalPolicy": "never", "sandbox": "danger-full-access"}));
    let thread = thread["thread"]["id"].as_str().unwrap().to_string();
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let turn = codex.call("turn/start", json!({"threadId": thread, "input": text(PROMPTS[0])}));
    let turn = turn["turn"]["id"].as_str().unwrap().to_string();
    answered(&upstream, 1);
    std::thread::sleep(Duration::from_secs(1));
    codex.call("turn/steer", json!({"threadId": thread, "expectedTurnId": turn, "input": text(QUEUED)}));
    codex.turn_completed();
    codex.call("turn/start", json!({"threadId": thread, "input": text(PROMPTS[1])}));
    codex.turn_completed();
    codex.driven.finish(Duration::from_secs(10));
    let (seen, bodies) = checked(&upstream);
    let agent = user_agent(&upstream);
    eprintln!("{agent}: {seen:?}");
    let version = agent.split(['/', ' ']).nth(1).unwrap_or("unknown").to_string();
    record(&format!("codex-{version}"), bodies.last().unwrap(), &agent, root, &PROMPTS);
    assert!(proxy.stop());
}
