//! Builders for synthetic sessions, and sandboxes holding a copy of the fixtures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dcp::session::node::NULL;
use dcp::session::{Message, Node};
use serde_json::{json, Value};

/// The repository's `fixtures/` dir.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The session recorded from OpenCode 1.18 into `fixtures/data/opencode.db`.
pub const DB_SESSION: &str = "ses_dfedb2935ffeIhuHRntLhlCv3U";
/// The session of the JSON storage tree in `fixtures/data/storage/`.
pub const TREE_SESSION: &str = "ses_204d30935ffeIhuHRntLhlCv3U";

/// A process's result as the snapshots show it: the exit status, stdout and stderr together.
pub fn rendered(out: &std::process::Output) -> String {
    format!(
        "success: {}\nexit_code: {}\n----- stdout -----\n{}----- stderr -----\n{}",
        out.status.success(),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Copies `src` into `dst` recursively.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// A temp dir with a private copy of `fixtures/data` in `data/`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixtures().join("data"), &dir.path().join("data"));
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        Sandbox { dir }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.data().join("storage/plugin/dcp")
    }
}

/// Builds a session message by message, numbering ids and times.
#[derive(Default, Clone)]
pub struct SessionBuilder {
    pub messages: Vec<Message>,
    clock: i64,
}

impl SessionBuilder {
    pub fn new() -> Self {
        SessionBuilder { messages: Vec::new(), clock: 1_790_000_000_000 }
    }

    /// Goes on from an existing session, with later ids and times.
    pub fn continuing(messages: Vec<Message>) -> Self {
        let clock = messages.iter().map(Message::time_created).max().unwrap_or(1_790_000_000_000);
        SessionBuilder { messages, clock }
    }

    fn next(&mut self) -> (String, i64) {
        self.clock += 1000;
        (format!("msg_{:04}", self.messages.len() + 1), self.clock)
    }

    pub fn user(mut self, text: &str) -> Self {
        let (id, t) = self.next();
        self.messages.push(Message::from_values(
            json!({"id": id, "sessionID": "ses_test", "role": "user", "time": {"created": t}}),
            vec![json!({"id": format!("prt_{id}_0"), "type": "text", "text": text})],
        ));
        self
    }

    pub fn text(mut self, text: &str) -> Self {
        let (id, t) = self.next();
        self.messages.push(Message::from_values(
            json!({"id": id, "sessionID": "ses_test", "role": "assistant", "time": {"created": t}, "finish": "stop"}),
            vec![json!({"id": format!("prt_{id}_0"), "type": "text", "text": text})],
        ));
        self
    }

    /// An assistant step with one completed tool call.
    pub fn tool(self, call: &str, tool: &str, input: Value, output: &str) -> Self {
        self.tool_state(call, tool, json!({"status": "completed", "input": input, "output": output, "title": "", "metadata": {}, "time": {"start": 1, "end": 2}}))
    }

    /// An assistant step with one errored tool call.
    pub fn error(self, call: &str, tool: &str, input: Value, error: &str) -> Self {
        self.tool_state(
            call,
            tool,
            json!({"status": "error", "input": input, "error": error, "time": {"start": 1, "end": 2}}),
        )
    }

    pub fn tool_state(mut self, call: &str, tool: &str, state: Value) -> Self {
        let (id, t) = self.next();
        self.messages.push(Message::from_values(
            json!({"id": id, "sessionID": "ses_test", "role": "assistant", "time": {"created": t}, "finish": "tool-calls"}),
            vec![
                json!({"id": format!("prt_{id}_0"), "type": "step-start"}),
                json!({"id": format!("prt_{id}_1"), "type": "tool", "callID": call, "tool": tool, "state": state}),
            ],
        ));
        self
    }

    /// A compaction: the user's request and the summary that answers it.
    pub fn compaction(mut self, summary: &str) -> Self {
        let (uid, t) = self.next();
        self.messages.push(Message::from_values(
            json!({"id": uid, "sessionID": "ses_test", "role": "user", "time": {"created": t}}),
            vec![json!({"id": format!("prt_{uid}_0"), "type": "compaction", "auto": false})],
        ));
        let (aid, t) = self.next();
        self.messages.push(Message::from_values(
            json!({"id": aid, "sessionID": "ses_test", "role": "assistant", "parentID": uid, "summary": true, "mode": "compaction", "agent": "compaction", "time": {"created": t}, "finish": "stop"}),
            vec![json!({"id": format!("prt_{aid}_0"), "type": "text", "text": summary})],
        ));
        self
    }

    /// Lets `ms` milliseconds pass before the next message.
    pub fn advance(mut self, ms: u64) -> Self {
        self.clock += ms as i64;
        self
    }

    pub fn build(self) -> Vec<Message> {
        self.messages
    }
}

/// The output of call `call_id` in `messages`, as the model would see it.
pub fn output_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Node {
    part_of(messages, call_id).pointer("/state/output").unwrap_or(&NULL)
}

/// The input of call `call_id` in `messages`.
pub fn input_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Node {
    part_of(messages, call_id).pointer("/state/input").unwrap_or(&NULL)
}

fn part_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Node {
    messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .find(|p| p.get("callID").and_then(Node::as_str) == Some(call_id))
        .unwrap_or_else(|| panic!("no call {call_id}"))
}

/// A request of session `ses_test` whose newest call `d<i>b` reads the same file as `d<i>a`.
pub fn duplicate_reads(i: u64) -> Vec<Value> {
    let path = json!({"filePath": format!("/p/f{i}.rs")});
    let output = format!("fn f{i}() {{}}\n").repeat(40);
    SessionBuilder::new()
        .user(&format!("request {i}"))
        .tool(&format!("d{i}a"), "read", path.clone(), &output)
        .tool(&format!("d{i}b"), "read", path, &output)
        .build()
        .into_iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .map(|mut m| {
            // Distinct message and part ids per request, as in a real session.
            let id = format!("{}_{i}", m["info"]["id"].as_str().unwrap());
            m["info"]["id"] = json!(id);
            for (k, p) in m["parts"].as_array_mut().unwrap().iter_mut().enumerate() {
                p["id"] = json!(format!("prt_{id}_{k}"));
            }
            m
        })
        .collect()
}

/// Checks `done` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn poll(mut done: impl FnMut() -> bool, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `dcp_testkit::save_loop` in a child process, for the tests that kill it or race two of
/// them: session `id` of the data dir `data`, `count` saves (the default: until killed),
/// prune ids `<prefix><i>`. The child is this test binary again, running only
/// [`save_loop_child`], so the save loop stays out of the shipped `dcp` binary.
pub fn save_loop(data: &Path, id: &str, prefix: &str, count: Option<u64>) -> std::process::Command {
    let mut args = vec!["save-loop".to_string(), "--session".into(), id.into(), "--prefix".into(), prefix.into()];
    if let Some(n) = count {
        args.extend(["--count".to_string(), n.to_string()]);
    }
    args.extend(["--data-dir".to_string(), data.display().to_string()]);
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["support::save_loop_child", "--exact", "--ignored", "--nocapture", "--test-threads=1", "-q"])
        .env(SAVE_LOOP_ARGS, args.join("\u{1f}"));
    command
}

/// The arguments of [`save_loop_child`], separated by U+001F.
const SAVE_LOOP_ARGS: &str = "DCP_TEST_SAVE_LOOP_ARGS";

/// What the child of [`save_loop`] prints on stdout once it has started, just before its
/// first save: a test that kills it can wait for it, so that no kill lands in the start-up.
pub const SAVE_LOOP_READY: &str = "save-loop: ready";

/// The child process of [`save_loop`]: runs `dcp-testkit save-loop` with the arguments it was
/// given, and fails if the loop fails.
#[test]
#[ignore = "a child process of the crash and concurrency tests (support::save_loop)"]
fn save_loop_child() {
    let Ok(args) = std::env::var(SAVE_LOOP_ARGS) else { return };
    let args: Vec<&str> = args.split('\u{1f}').collect();
    println!("{SAVE_LOOP_READY}");
    if let Err(e) = dcp_testkit::cli::run(&args, &mut std::io::sink()) {
        panic!("save-loop {args:?}: {e:#}");
    }
}

// The one CLI runner: `dcp` with an environment of the test's choosing.

/// Runs `dcp ARGS` in `cwd` with none of the test's environment but `PATH` and `env` (which may
/// set `PATH` too), failing the test if it takes longer than `limit`.
pub fn run_dcp<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
    cwd: &Path,
    env: &[(&str, PathBuf)],
    limit: Duration,
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dcp"));
    command.args(args).current_dir(cwd).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.envs(env.iter().map(|(k, v)| (k, v)));
    run_with_limit(command, limit)
}

/// Runs `dcp ARGS --data-dir DATA` in the sandbox with a private home and config, and fails
/// the test if it takes longer than `limit`.
pub fn dcp_in(sandbox: &Sandbox, data: &Path, args: &[&str], limit: Duration) -> Output {
    let root = sandbox.dir.path();
    let args = args.iter().map(std::ffi::OsStr::new).chain([std::ffi::OsStr::new("--data-dir"), data.as_os_str()]);
    let env = [("HOME", root.join("home")), ("XDG_CONFIG_HOME", root.join("home/.config"))];
    run_dcp(args, &root.join("project"), &env, limit)
}

/// `dcp ARGS` on the sandbox's data dir, within 20 s.
pub fn dcp(sandbox: &Sandbox, args: &[&str]) -> Output {
    dcp_in(sandbox, &sandbox.data(), args, Duration::from_secs(20))
}

/// Runs `command` to completion, killing it and failing the test if it outlives `limit`. Its
/// stdout and stderr are read while it runs, so an output larger than a pipe's buffer does
/// not block it.
pub fn run_with_limit(mut command: Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap();
            panic!("{command:?} still ran after {limit:?}; stderr: {}", String::from_utf8_lossy(&stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a run failed with exit 1, a `dcp:` error mentioning every one of `needles`, and
/// no panic.
pub fn assert_error(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("dcp: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}: {err}");
    }
}

/// Every file under `dir` with its bytes, by path relative to `dir`.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
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
pub fn clone_session(sandbox: &Sandbox, id: &str) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute_batch(&format!(
        "INSERT INTO session SELECT '{id}', project_id, workspace_id, parent_id, slug, directory, path, title, version, share_url, summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created, time_updated, time_compacting, time_archived FROM session WHERE id = '{DB_SESSION}';
         INSERT INTO message SELECT '{id}' || id, '{id}', time_created, time_updated, data FROM message WHERE session_id = '{DB_SESSION}';
         INSERT INTO part SELECT '{id}' || id, '{id}' || message_id, '{id}', time_created, time_updated, data FROM part WHERE session_id = '{DB_SESSION}';"
    ))
    .unwrap();
}

/// The one sidecar driver: `dcp serve` on a sandbox, driven line by line.
pub struct Sidecar {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Sidecar {
    /// A sidecar with `config` as its global `dcp.jsonc`.
    pub fn spawn(sandbox: &Sandbox, config: &str) -> Sidecar {
        Sidecar::spawn_with(sandbox, Some(config), &[], Stdio::null())
    }

    /// A sidecar with no `dcp.jsonc` and extra environment variables.
    pub fn bare(sandbox: &Sandbox, envs: &[(&str, &str)]) -> Sidecar {
        Sidecar::spawn_with(sandbox, None, envs, Stdio::null())
    }

    /// A sidecar with `config` as its global `dcp.jsonc` (none if `None`), extra environment
    /// variables, and its stderr going to `stderr`. The environment is cleared first: only
    /// the sandbox's home and config dirs and `PATH` are set.
    pub fn spawn_with(sandbox: &Sandbox, config: Option<&str>, envs: &[(&str, &str)], stderr: Stdio) -> Sidecar {
        let root = sandbox.dir.path();
        if let Some(config) = config {
            let cfg = root.join("home/.config/opencode");
            std::fs::create_dir_all(&cfg).unwrap();
            std::fs::write(cfg.join("dcp.jsonc"), config).unwrap();
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_dcp"))
            .args(["serve", "--data-dir"])
            .arg(sandbox.data())
            .current_dir(root.join("project"))
            .env_clear()
            .env("HOME", root.join("home"))
            .env("XDG_CONFIG_HOME", root.join("home/.config"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        Sidecar { child, stdin, stdout, next: 1 }
    }

    /// Sends one line of raw bytes, and reads no answer (for a notification).
    pub fn write(&mut self, line: &[u8]) {
        use std::io::Write;
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends one line of raw bytes and reads the answer.
    pub fn send(&mut self, line: &[u8]) -> Value {
        use std::io::BufRead;
        self.write(line);
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }

    /// Sends one line of text and reads the answer.
    pub fn raw(&mut self, line: &str) -> Value {
        self.send(line.as_bytes())
    }

    /// Sends a request with the next id and returns the whole answer.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let answer = self.raw(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        assert_eq!(answer["id"], id);
        answer
    }

    /// Sends a request and returns its result, failing if it is an error.
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let answer = self.call(method, params);
        assert!(answer.get("error").is_none(), "{answer}");
        answer["result"].clone()
    }

    /// Calls agent tool `name` with `args` in the recorded session and returns what the agent
    /// is told.
    pub fn agent_tool(&mut self, name: &str, args: Value) -> String {
        let answer = self.result("tool", json!({"sessionID": DB_SESSION, "name": name, "args": args}));
        answer["output"].as_str().unwrap_or_else(|| panic!("no output: {answer}")).to_string()
    }

    /// Sends a line and returns its error, failing if it succeeded.
    pub fn error(&mut self, line: &[u8]) -> (i64, String) {
        let answer = self.send(line);
        let e =
            answer.get("error").unwrap_or_else(|| panic!("no error for {}: {answer}", String::from_utf8_lossy(line)));
        (e["code"].as_i64().unwrap(), e["message"].as_str().unwrap().to_string())
    }

    /// Sends a line that must be refused: checks its error's code, that the message holds
    /// `needle`, and that the sidecar still serves afterwards. Returns the message.
    pub fn refuses(&mut self, line: &[u8], code: i64, needle: &str) -> String {
        let shown: String = String::from_utf8_lossy(line).chars().take(100).collect();
        let (got, message) = self.error(line);
        assert_eq!(got, code, "{shown}: {message}");
        assert!(message.contains(needle), "{shown}: no {needle:?} in {message}");
        self.still_serves();
        message
    }

    /// Checks the sidecar still serves: a valid request afterwards works.
    pub fn still_serves(&mut self) {
        let answer = self.send(br#"{"jsonrpc":"2.0","id":"alive","method":"system","params":{}}"#);
        assert_eq!(answer["id"], "alive", "{answer}");
        assert!(answer["result"]["system"].is_array(), "{answer}");
    }

    /// Asks the sidecar to shut down, and checks it exits cleanly.
    pub fn shutdown(mut self) {
        assert_eq!(self.result("shutdown", json!({})), json!({}));
        assert!(self.child.wait().unwrap().success());
    }
}

/// Session ids no file name may be made of.
pub fn bad_ids() -> Vec<String> {
    vec!["../x".into(), "a/b".into(), "a\0b".into(), "x".repeat(10 * 1024), "..".into(), String::new()]
}
