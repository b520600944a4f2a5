//! Hostile input: corrupt state files, broken configs, odd session ids, malformed protocol
//! lines and damaged databases. Each gets an error that names its source, nothing panics,
//! nothing hangs, and OpenCode's data is never touched.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dcp::state::persist::{self, LoadOutcome};
use serde_json::{json, Value};

use crate::support::{Sandbox, DB_SESSION, TREE_SESSION};

/// The largest state file dcp reads, plus one byte.
const OVER_LIMIT: u64 = persist::MAX_STATE_BYTES + 1;

/// Runs `dcp ARGS --data-dir DATA` in the sandbox with a private home and config, and fails
/// the test if it takes longer than `limit`.
fn dcp_in(sandbox: &Sandbox, data: &Path, args: &[&str], limit: Duration) -> Output {
    let root = sandbox.dir.path();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dcp"));
    command
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .current_dir(root.join("project"))
        .env_clear()
        .env("HOME", root.join("home"))
        .env("XDG_CONFIG_HOME", root.join("home/.config"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    run_with_limit(command, limit)
}

/// `dcp ARGS` on the sandbox's data dir, within 20 s.
fn dcp(sandbox: &Sandbox, args: &[&str]) -> Output {
    dcp_in(sandbox, &sandbox.data(), args, Duration::from_secs(20))
}

/// Runs `command` to completion, killing it and failing the test if it outlives `limit`.
fn run_with_limit(mut command: Command, limit: Duration) -> Output {
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{command:?} still ran after {limit:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a run failed with exit 1, a `dcp:` error mentioning every one of `needles`, and
/// no panic.
fn assert_error(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("dcp: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}: {err}");
    }
}

/// Every file under `dir` with its bytes, by path relative to `dir`.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel.join(""), Vec::new());
                walk(root, &path, out);
            } else if meta.is_file() && meta.len() <= 16 * 1024 * 1024 {
                out.insert(rel, std::fs::read(&path).unwrap());
            } else {
                out.insert(rel, format!("<{} bytes>", meta.len()).into_bytes());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Adds a copy of the recorded session to the sandbox's `opencode.db` under `id`, so a state
/// file named after `id` belongs to a session that can be swept.
fn clone_session(sandbox: &Sandbox, id: &str) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute_batch(&format!(
        "INSERT INTO session SELECT '{id}', project_id, workspace_id, parent_id, slug, directory, path, title, version, share_url, summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created, time_updated, time_compacting, time_archived FROM session WHERE id = '{DB_SESSION}';
         INSERT INTO message SELECT '{id}' || id, '{id}', time_created, time_updated, data FROM message WHERE session_id = '{DB_SESSION}';
         INSERT INTO part SELECT '{id}' || id, '{id}' || message_id, '{id}', time_created, time_updated, data FROM part WHERE session_id = '{DB_SESSION}';"
    ))
    .unwrap();
}

/// A hostile state file: its session id, how to write it, and what the reason must say.
struct BadState {
    id: &'static str,
    write: fn(&Path),
    reason: &'static str,
}

/// The first bytes of the oversized state file, so a set-aside copy can be recognised.
const HUGE_HEAD: &[u8] = b"{\"sessionName\": \"huge\", \"pad\": \"";

fn bad_states() -> Vec<BadState> {
    vec![
        BadState {
            id: "ses_hostileTruncatedState",
            write: |p| std::fs::write(p, br#"{"prune": {"toolIds": ["call_1", "ca"#).unwrap(),
            reason: "not valid JSON",
        },
        BadState {
            id: "ses_hostileNotUtf8State",
            write: |p| std::fs::write(p, b"{\"sessionName\": \"caf\xe9 \xff\xfe\"}").unwrap(),
            reason: "not UTF-8",
        },
        BadState {
            id: "ses_hostileHugeState",
            write: |p| {
                // A sparse file: it claims more than the limit but costs no disk.
                let mut file = std::fs::File::create(p).unwrap();
                file.write_all(HUGE_HEAD).unwrap();
                file.set_len(OVER_LIMIT).unwrap();
            },
            reason: "larger than the",
        },
        BadState {
            id: "ses_hostileDeepState",
            write: |p| std::fs::write(p, "[".repeat(100_000)).unwrap(),
            reason: "not valid JSON",
        },
        BadState {
            id: "ses_hostileWrongTypes",
            write: |p| std::fs::write(p, br#"{"prune": {"toolIds": ["call_1"]}, "dcp": {"pruned": [1, 2]}}"#).unwrap(),
            reason: "`dcp.pruned` must be an object",
        },
    ]
}

#[test]
fn hostile_state_files_load_as_corrupt_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    for bad in bad_states() {
        let path = dir.path().join(format!("{}.json", bad.id));
        (bad.write)(&path);
        match persist::load(dir.path(), bad.id).unwrap() {
            LoadOutcome::Corrupt { path: named, reason } => {
                assert_eq!(named, path);
                assert!(reason.contains(bad.reason), "{}: {reason}", bad.id);
                assert!(reason.len() < 400, "{}: an unreadably long reason: {reason}", bad.id);
            }
            other => panic!("{}: {other:?}", bad.id),
        }
    }
}

#[test]
fn dcp_stats_warns_about_each_hostile_state_file_by_name() {
    let s = Sandbox::new();
    for bad in bad_states() {
        (bad.write)(&s.state_dir().join(format!("{}.json", bad.id)));
    }
    let out = dcp(&s, &["stats"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for bad in bad_states() {
        let file = s.state_dir().join(format!("{}.json", bad.id));
        let line = err
            .lines()
            .find(|l| l.contains(&file.display().to_string()))
            .unwrap_or_else(|| panic!("no warning names {}: {err}", file.display()));
        assert!(line.contains("warning") && line.contains(bad.reason), "{line}");
    }
    let out = dcp(&s, &["stats", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The fixtures' two corrupt files, and ours.
    assert_eq!(v["all_time"]["corrupt"].as_array().unwrap().len(), 2 + bad_states().len());
}

#[test]
fn dcp_sweep_sets_each_hostile_state_file_aside_byte_for_byte() {
    let s = Sandbox::new();
    for bad in bad_states() {
        let path = s.state_dir().join(format!("{}.json", bad.id));
        (bad.write)(&path);
        let small = std::fs::metadata(&path).unwrap().len() < OVER_LIMIT;
        let original = if small { std::fs::read(&path).unwrap() } else { Vec::new() };
        clone_session(&s, bad.id);
        let out = dcp(&s, &["sweep", "--session", bad.id, "2"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{}: {err}", bad.id);
        assert!(err.contains(&path.display().to_string()), "{}: the warning does not name the file: {err}", bad.id);
        let aside: Vec<PathBuf> = std::fs::read_dir(s.state_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{}.json.corrupt-", bad.id)))
            .collect();
        assert_eq!(aside.len(), 1, "{}: {aside:?} {err}", bad.id);
        if small {
            assert!(std::fs::read(&aside[0]).unwrap() == original, "{}: the set-aside bytes differ", bad.id);
        } else {
            assert_eq!(std::fs::metadata(&aside[0]).unwrap().len(), OVER_LIMIT);
            let mut head = vec![0; HUGE_HEAD.len()];
            std::io::Read::read_exact(&mut std::fs::File::open(&aside[0]).unwrap(), &mut head).unwrap();
            assert_eq!(head, HUGE_HEAD);
        }
        // The new state file is a good one.
        assert!(matches!(persist::load_path(&path), LoadOutcome::Loaded(_)), "{}", bad.id);
    }
}

#[cfg(unix)]
#[test]
fn a_state_file_that_is_a_fifo_does_not_hang() {
    let s = Sandbox::new();
    let id = "ses_hostileFifoState";
    let path = s.state_dir().join(format!("{id}.json"));
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    match persist::load_path(&path) {
        LoadOutcome::Corrupt { reason, .. } => assert!(reason.contains("not a regular file"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let out = dcp_in(&s, &s.data(), &["stats"], Duration::from_secs(10));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&path.display().to_string()) && err.contains("not a regular file"), "{err}");
}

/// Writes `bytes` as the project's `.opencode/dcp.jsonc` and returns its path.
fn project_config(sandbox: &Sandbox, bytes: &[u8]) -> PathBuf {
    let dir = sandbox.dir.path().join("project/.opencode");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dcp.jsonc");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn hostile_config_files_are_errors_naming_the_file_and_key() {
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("truncated", br#"{"strategies": {"purgeErrors": {"turns": 4"#.to_vec(), &["is not valid JSONC"]),
        ("not UTF-8", b"{\"debug\": \"\xff\"}".to_vec(), &["is not valid JSONC", "not UTF-8"]),
        ("deeply nested objects", "{\"a\":".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        ("deeply nested lists", "[".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        (
            "nesting behind a quote in a comment",
            format!("// \"\n{}", "[".repeat(100_000)).into_bytes(),
            &["is not valid JSONC", "nest"],
        ),
        ("the top level a list", b"[1, 2]".to_vec(), &["is not valid JSONC", "top level"]),
        (
            "a wrongly typed value",
            br#"{"strategies": {"purgeErrors": {"turns": "four"}}}"#.to_vec(),
            &["`strategies.purgeErrors.turns` must be a whole number"],
        ),
        ("a wrongly typed section", br#"{"rewrite": [1]}"#.to_vec(), &["`rewrite` must be an object"]),
        (
            "a huge number",
            br#"{"rewrite": {"expectedRequests": 1e999}}"#.to_vec(),
            &["Number is out of range", "line 1"],
        ),
        ("a ratio out of range", br#"{"rewrite": {"pressureRatio": -0.5}}"#.to_vec(), &["rewrite.pressureRatio"]),
    ];
    let s = Sandbox::new();
    for (what, bytes, needles) in cases {
        let path = project_config(&s, &bytes);
        let out = dcp(&s, &["stats"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.starts_with("dcp: config ") && err.contains(&path.display().to_string()), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        for n in needles {
            assert!(err.contains(n), "{what}: no {n:?} in {err}");
        }
        assert!(err.len() < 1000, "{what}: an unreadably long error: {err}");
    }
}

#[test]
fn a_huge_config_of_whitespace_and_comments_is_read_quickly() {
    let s = Sandbox::new();
    let mut text = String::with_capacity(21 << 20);
    text.push_str("// padding\n");
    text.push_str(&" \n".repeat(5 << 20));
    text.push_str("/* ");
    text.push_str(&"x".repeat(10 << 20));
    text.push_str(" */\n{\"pruneNotification\": \"minimal\"}\n");
    project_config(&s, text.as_bytes());
    let start = Instant::now();
    let out = dcp_in(&s, &s.data(), &["stats"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(15), "{:?}", start.elapsed());
}

/// Session ids that must never reach a file name. A NUL byte cannot be passed on a command
/// line, so the CLI gets the others and the sidecar gets all of them.
fn bad_ids() -> Vec<String> {
    vec!["../x".into(), "a/b".into(), "a\0b".into(), "x".repeat(10 * 1024), "..".into(), String::new()]
}

#[test]
fn odd_session_ids_are_refused_by_the_cli_and_nothing_is_written() {
    let s = Sandbox::new();
    let before = tree(s.dir.path());
    for id in bad_ids().iter().filter(|id| !id.contains('\0')) {
        for args in [
            vec!["context", "--session", id],
            vec!["sweep", "--session", id],
            vec!["sweep", "--session", id, "1"],
            vec!["stats", "--session", id],
        ] {
            let out = dcp(&s, &args);
            assert_error(&out, &["invalid session id"]);
            assert!(stderr(&out).len() < 400, "{}", stderr(&out));
        }
    }
    assert!(tree(s.dir.path()) == before, "something was written");
}

/// `dcp serve` on a sandbox, driven line by line.
struct Sidecar {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Sidecar {
    fn spawn(sandbox: &Sandbox, envs: &[(&str, &str)]) -> Sidecar {
        let root = sandbox.dir.path();
        let mut child = Command::new(env!("CARGO_BIN_EXE_dcp"))
            .args(["serve", "--data-dir"])
            .arg(sandbox.data())
            .current_dir(root.join("project"))
            .env_clear()
            .env("HOME", root.join("home"))
            .env("XDG_CONFIG_HOME", root.join("home/.config"))
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Sidecar { child, stdin, stdout }
    }

    /// Sends one line of raw bytes and reads the answer.
    fn send(&mut self, line: &[u8]) -> Value {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }

    /// Sends a request and returns its error, failing if it succeeded.
    fn error(&mut self, line: &[u8]) -> (i64, String) {
        let answer = self.send(line);
        let e =
            answer.get("error").unwrap_or_else(|| panic!("no error for {}: {answer}", String::from_utf8_lossy(line)));
        (e["code"].as_i64().unwrap(), e["message"].as_str().unwrap().to_string())
    }

    /// Checks the sidecar still serves: a valid request afterwards works.
    fn still_serves(&mut self) {
        let answer = self.send(br#"{"jsonrpc":"2.0","id":"alive","method":"system","params":{}}"#);
        assert_eq!(answer["id"], "alive", "{answer}");
        assert!(answer["result"]["system"].is_array(), "{answer}");
    }

    fn shutdown(mut self) {
        let answer = self.send(br#"{"jsonrpc":"2.0","id":"bye","method":"shutdown"}"#);
        assert_eq!(answer["result"], json!({}));
        assert!(self.child.wait().unwrap().success());
    }
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes()
}

#[test]
fn odd_session_ids_are_refused_by_the_sidecar_and_nothing_is_written() {
    let s = Sandbox::new();
    let before = tree(s.dir.path());
    let mut sidecar = Sidecar::spawn(&s, &[]);
    let messages = json!([{"info": {"id": "msg_1", "role": "user", "time": {"created": 1}}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}]);
    for id in bad_ids() {
        for line in [
            request(1, "transform", json!({"sessionID": id, "messages": messages})),
            request(2, "tool", json!({"sessionID": id, "name": "discard", "args": {"ids": ["1"]}})),
            request(3, "command", json!({"sessionID": id, "arguments": "sweep"})),
            request(4, "command", json!({"sessionID": id, "arguments": "stats"})),
        ] {
            let (code, message) = sidecar.error(&line);
            assert_eq!(code, -32602, "{message}");
            assert!(message.starts_with("invalid session id"), "{message}");
            assert!(message.len() < 400, "{message}");
        }
    }
    sidecar.still_serves();
    sidecar.shutdown();
    assert!(tree(s.dir.path()) == before, "something was written");
}

#[test]
fn malformed_protocol_lines_get_errors_and_the_sidecar_goes_on() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &[]);
    let ok_message = json!({"info": {"id": "msg_1", "role": "user"}, "parts": []});
    let cases: Vec<(&str, Vec<u8>, i64, &str)> = vec![
        ("invalid JSON", b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".to_vec(), -32700, "not a JSON-RPC object"),
        ("a bare string", b"\"hello\"".to_vec(), -32600, "must be a JSON object, not a string"),
        ("unknown method", request(2, "frobnicate", json!({})), -32601, "\"frobnicate\""),
        ("missing method", br#"{"jsonrpc":"2.0","id":3}"#.to_vec(), -32600, "missing method"),
        (
            "a method that is a number",
            br#"{"jsonrpc":"2.0","id":4,"method":7}"#.to_vec(),
            -32600,
            "method must be a string",
        ),
        ("missing messages", request(5, "transform", json!({"sessionID": "ses_a"})), -32602, "`messages`"),
        ("missing sessionID", request(6, "transform", json!({"messages": []})), -32602, "`sessionID`"),
        (
            "messages not a list",
            request(7, "transform", json!({"sessionID": "ses_a", "messages": 5})),
            -32602,
            "invalid type",
        ),
        (
            "a message that is a string",
            request(8, "transform", json!({"sessionID": "ses_a", "messages": ["x"]})),
            -32602,
            "messages[0] is not an object",
        ),
        (
            "parts not a list",
            request(9, "transform", json!({"sessionID": "ses_a", "messages": [{"info": {"id": "m"}, "parts": {}}]})),
            -32602,
            "messages[0].parts is not a list",
        ),
        (
            "a tool name that is a number",
            request(10, "tool", json!({"sessionID": "ses_a", "name": 3})),
            -32602,
            "invalid type",
        ),
        ("params that are a string", request(11, "command", json!("stats")), -32602, "invalid params"),
        ("an unsupported protocol", request(12, "initialize", json!({"protocol": 99})), -32600, "protocol 99"),
        ("a wrong jsonrpc version", br#"{"jsonrpc":"1.0","id":13,"method":"system"}"#.to_vec(), -32600, "\"1.0\""),
        (
            "deeply nested params",
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"system\",\"params\":{}1{}}}",
                "[".repeat(100_000),
                "]".repeat(100_000)
            )
            .into_bytes(),
            -32700,
            "recursion limit",
        ),
        (
            "an unresolvable reference",
            request(15, "transform", json!({"sessionID": "ses_a", "messages": [{"id": "msg_9", "parts": []}]})),
            -32001,
            "msg_9",
        ),
        (
            "a valid request to check the mirror",
            request(16, "transform", json!({"sessionID": "ses_a", "messages": [ok_message]})),
            0,
            "",
        ),
    ];
    for (what, line, code, needle) in cases {
        if code == 0 {
            let answer = sidecar.send(&line);
            assert!(answer.get("result").is_some(), "{what}: {answer}");
            continue;
        }
        let (got, message) = sidecar.error(&line);
        assert_eq!(got, code, "{what}: {message}");
        assert!(message.contains(needle), "{what}: no {needle:?} in {message}");
        sidecar.still_serves();
    }
    // A notification with bad params gets no answer, and the next request still works.
    sidecar.stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"transform\",\"params\":5}\n").unwrap();
    sidecar.still_serves();
    sidecar.shutdown();
}

#[test]
fn a_part_that_is_a_number_is_an_invalid_params_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &[]);
    let line = request(
        1,
        "transform",
        json!({"sessionID": "ses_a", "messages": [{"info": {"id": "msg_1", "role": "user"}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}, 7]}]}),
    );
    let (code, message) = sidecar.error(&line);
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("messages[0].parts[1] is not an object"), "{message}");
    sidecar.still_serves();
    sidecar.shutdown();
}

#[test]
fn a_json_array_line_is_not_a_request() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &[]);
    // serde would read a struct from a list by position: this must not run `system`.
    let (code, message) = sidecar.error(br#"["2.0", 1, "system", {}]"#);
    assert_eq!(code, -32600, "{message}");
    assert!(message.contains("must be a JSON object, not a list"), "{message}");
    let (code, message) = sidecar.error(b"[]");
    assert_eq!(code, -32600, "{message}");
    sidecar.still_serves();
    sidecar.shutdown();
}

#[test]
fn a_line_that_is_not_utf8_is_a_parse_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &[]);
    // The bytes sit inside a JSON string, where a lossy decoding would hide them.
    let (code, message) = sidecar
        .error(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"command\",\"params\":{\"sessionID\":\"ses_a\",\"arguments\":\"st\xffats\"}}");
    assert_eq!(code, -32700, "{message}");
    assert!(message.contains("UTF-8"), "{message}");
    sidecar.still_serves();
    sidecar.shutdown();
}

#[test]
fn an_oversized_line_is_skipped_and_the_sidecar_goes_on() {
    let s = Sandbox::new();
    // The real limit is 256 MiB; the line loop runs in process here, with a 4,096-byte limit,
    // so this costs nothing.
    let home = s.dir.path().join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::Options { data_dir: s.data(), env, project: None };
    let mut input = br#"{"jsonrpc":"2.0","id":1,"method":"system","params":{"pad":""#.to_vec();
    input.extend(std::iter::repeat_n(b'x', 10_000));
    input.extend(b"\"}}\n");
    input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"system\",\"params\":{}}\n");
    let mut output = Vec::new();
    dcp::sidecar::serve_on(options, std::io::Cursor::new(input), &mut output, 4096).unwrap();
    let answers: Vec<Value> =
        output.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert_eq!(answers[0]["error"]["code"], -32002, "{message}");
    assert!(message.contains("4096"), "{message}");
    // The next line is served.
    assert_eq!(answers[1]["id"], 2);
    assert!(answers[1]["result"]["system"].is_array(), "{}", answers[1]);
}

/// Runs `sql` on the sandbox's `opencode.db`.
fn edit_db(sandbox: &Sandbox, sql: &str) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// One message row of the recorded session, and one part row.
fn first_rows(sandbox: &Sandbox) -> (String, String) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    let m: String = conn
        .query_row(
            "SELECT id FROM message WHERE session_id = ?1 ORDER BY time_created DESC LIMIT 1",
            [DB_SESSION],
            |r| r.get(0),
        )
        .unwrap();
    let p: String = conn
        .query_row("SELECT id FROM part WHERE session_id = ?1 ORDER BY time_created, id LIMIT 1", [DB_SESSION], |r| {
            r.get(0)
        })
        .unwrap();
    (m, p)
}

/// Stores the SQL `value` as the data of the recorded session's first message and part, and
/// runs `dcp context` on it. Returns the two row ids and the run.
fn context_with_bad_rows(s: &Sandbox, value: &str) -> (String, String, Output) {
    let (m, p) = first_rows(s);
    edit_db(
        s,
        &format!(
            "UPDATE message SET data = {value} WHERE id = '{m}'; UPDATE part SET data = {value} WHERE id = '{p}';"
        ),
    );
    (m, p, dcp(s, &["context", "--session", DB_SESSION]))
}

#[test]
fn malformed_rows_in_opencode_db_are_skipped_with_a_warning() {
    for (what, value) in
        [("not JSON", "'{\"role\": '"), ("a JSON array", "'[1, 2]'"), ("a number", "42"), ("empty", "''")]
    {
        let s = Sandbox::new();
        let (m, p, out) = context_with_bad_rows(&s, value);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        let db = s.data().join("opencode.db").display().to_string();
        for id in [&m, &p] {
            assert!(
                err.lines().any(|l| l.contains("warning") && l.contains(&db) && l.contains(id.as_str())),
                "{what}: {id}: {err}"
            );
        }
    }
}

#[test]
fn a_blob_or_invalid_utf8_row_in_opencode_db_is_skipped_not_fatal() {
    for (what, value) in [("a blob", "X'FFFE00'"), ("text that is not UTF-8", "CAST(X'7B22FF227D' AS TEXT)")] {
        let s = Sandbox::new();
        let (m, p, out) = context_with_bad_rows(&s, value);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        for id in [&m, &p] {
            assert!(err.lines().any(|l| l.contains("warning") && l.contains(id.as_str())), "{what}: {id}: {err}");
        }
    }
}

#[test]
fn a_null_row_in_opencode_db_is_skipped_not_fatal() {
    let s = Sandbox::new();
    // OpenCode's schema says NOT NULL; drop the constraint in this copy to store a NULL.
    edit_db(
        &s,
        &format!(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = replace(sql, '`data` text NOT NULL', '`data` text') WHERE name IN ('message', 'part');
             PRAGMA writable_schema = OFF;"
        ),
    );
    let (m, p, out) = context_with_bad_rows(&s, "NULL");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for id in [&m, &p] {
        assert!(
            err.lines().any(|l| l.contains("warning") && l.contains(id.as_str()) && l.contains("NULL")),
            "{id}: {err}"
        );
    }
}

#[test]
fn a_locked_opencode_db_fails_after_the_busy_timeout_naming_the_db() {
    let s = Sandbox::new();
    let db = s.data().join("opencode.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    // The fixture is in rollback-journal mode: an exclusive lock keeps every reader out.
    conn.execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = title;").unwrap();
    let start = Instant::now();
    let out = dcp_in(&s, &s.data(), &["sessions"], Duration::from_secs(12));
    let waited = start.elapsed();
    assert_error(&out, &[&db.display().to_string(), "locked"]);
    assert!(waited >= dcp::host::sqlite::BUSY_TIMEOUT / 2, "gave up at once: {waited:?}");
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_locked_opencode_db_in_wal_mode_is_still_read() {
    let s = Sandbox::new();
    let conn = rusqlite::Connection::open(s.data().join("opencode.db")).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    // In WAL mode, OpenCode's writer does not block readers: dcp reads the last commit.
    conn.execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = 'uncommitted';").unwrap();
    let out = dcp_in(&s, &s.data(), &["sessions", "--json"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(DB_SESSION) && !text.contains("uncommitted"), "{text}");
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn an_opencode_db_that_is_not_sqlite_is_an_error_naming_it() {
    let s = Sandbox::new();
    let db = s.data().join("opencode.db");
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&db, &noise).unwrap();
    for args in [
        vec!["sessions"],
        vec!["context", "--session", DB_SESSION],
        vec!["sweep", "--session", DB_SESSION, "--dry-run"],
    ] {
        let out = dcp(&s, &args);
        assert_error(&out, &[&db.display().to_string(), "not a database"]);
    }
    assert!(std::fs::read(&db).unwrap() == noise, "the file was changed");
}

#[test]
fn a_missing_db_or_data_dir_is_an_error() {
    let s = Sandbox::new();
    let missing = s.dir.path().join("no/such/dir");
    let out = dcp_in(&s, &missing, &["sessions"], Duration::from_secs(10));
    assert_error(&out, &["no OpenCode data in", &missing.display().to_string()]);
    assert!(!missing.exists(), "the data dir was created");
    // A data dir without opencode.db and without storage/.
    let bare = s.dir.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    for args in [vec!["sessions"], vec!["context"], vec!["context", "--session", DB_SESSION]] {
        let out = dcp_in(&s, &bare, &args, Duration::from_secs(10));
        assert_error(&out, &["no OpenCode data in", &bare.display().to_string()]);
    }
    assert!(std::fs::read_dir(&bare).unwrap().next().is_none(), "something was written in {}", bare.display());
}

#[test]
fn opencode_data_stays_untouched_by_every_command() {
    let s = Sandbox::new();
    let data = s.data();
    let is_dcp = |p: &Path| p.starts_with("storage/plugin/dcp");
    let opencode = |t: &BTreeMap<PathBuf, Vec<u8>>| -> BTreeMap<PathBuf, Vec<u8>> {
        t.iter().filter(|(p, _)| !is_dcp(p)).map(|(p, b)| (p.clone(), b.clone())).collect()
    };
    let original = tree(&data);
    assert!(original.contains_key(Path::new("opencode.db")));
    let commands: Vec<Vec<&str>> = vec![
        vec!["sessions"],
        vec!["sessions", "--json"],
        vec!["context"],
        vec!["context", "--session", TREE_SESSION],
        vec!["context", "--json"],
        vec!["sweep", "--session", DB_SESSION, "--dry-run"],
        vec!["sweep", "--session", DB_SESSION],
        vec!["sweep", "--session", TREE_SESSION, "3"],
        vec!["stats"],
        vec!["stats", "--session", DB_SESSION],
        vec!["stats", "--json", "--session", TREE_SESSION],
    ];
    for args in commands {
        let before = tree(&data);
        let out = dcp(&s, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let after = tree(&data);
        assert!(opencode(&after) == opencode(&before), "{args:?} changed OpenCode's data");
        let new: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p) && !is_dcp(p)).collect();
        assert!(new.is_empty(), "{args:?} created {new:?}");
        let sidecars: Vec<&PathBuf> = after
            .keys()
            .filter(|p| {
                p.to_string_lossy().ends_with("-wal")
                    || p.to_string_lossy().ends_with("-shm")
                    || p.to_string_lossy().ends_with("-journal")
            })
            .collect();
        assert!(sidecars.is_empty(), "{args:?} left {sidecars:?}");
    }
    assert!(opencode(&tree(&data)) == opencode(&original));
}

#[test]
fn a_wrongly_typed_state_field_with_multibyte_text_names_the_key() {
    // The value is cut for the message at byte 60, which falls inside an `é`.
    let text = format!("{{\"prune\": \"{}\"}}", "é".repeat(40));
    let error = persist::parse(text.as_bytes()).unwrap_err();
    assert_eq!(error.key(), Some("prune"));
    let reason = error.to_string();
    assert!(reason.starts_with("`prune` must be an object, not \"éé"), "{reason}");
    assert!(reason.ends_with('…') && reason.len() < 120, "{reason}");
}

#[test]
fn a_long_malformed_message_is_cut_in_the_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &[]);
    let info = "é".repeat(100_000);
    let line = request(1, "transform", json!({"sessionID": "ses_a", "messages": [{"info": info}]}));
    let (code, message) = sidecar.error(&line);
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("messages[0].info is not an object") && message.len() < 200, "{message}");
    sidecar.still_serves();
    sidecar.shutdown();
}

#[test]
fn rendering_a_state_file_twice_gives_the_same_bytes() {
    // Found by the `state_file` fuzz target on the fixtures' 0.3 layout: `Map::remove` swapped
    // the last key into the removed one's place, so every save reordered the file.
    const WHEN: &str = "2026-01-01T00:00:00.000Z";
    for file in std::fs::read_dir(crate::support::fixtures().join("data/storage/plugin/dcp")).unwrap() {
        let bytes = std::fs::read(file.unwrap().path()).unwrap();
        let Ok(state) = persist::parse(&bytes) else {
            continue;
        };
        let once = persist::render(&state, WHEN);
        let twice = persist::render(&persist::parse(&once).unwrap(), WHEN);
        assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once).unwrap());
    }
}

#[test]
fn a_state_file_with_the_largest_id_does_not_overflow() {
    let bytes = format!(r#"{{"dcp": {{"ids": {{"call_1": {max}}}, "nextId": {max}}}}}"#, max = u32::MAX);
    let mut state = persist::parse(bytes.as_bytes()).unwrap();
    assert_eq!(state.next_id, u32::MAX);
    assert_eq!(state.id_for("call_1"), u32::MAX);
    // No id is left to hand out: the next one is clamped rather than overflowing.
    state.id_for("call_2");
}

#[test]
fn an_unknown_float_field_survives_saves_exactly() {
    // Found by the `state_file` fuzz target: without serde_json's `float_roundtrip`, a float
    // kept from an unknown field lost its last digit on every save.
    const WHEN: &str = "2026-01-01T00:00:00.000Z";
    let state = persist::parse(br#"{"theirs": 2.2222222001722586e28}"#).unwrap();
    let once = persist::render(&state, WHEN);
    let twice = persist::render(&persist::parse(&once).unwrap(), WHEN);
    assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once.clone()).unwrap());
    assert!(String::from_utf8(once).unwrap().contains("2.2222222001722586e+28"));
}
