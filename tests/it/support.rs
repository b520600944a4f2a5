//! Builders for synthetic sessions, and sandboxes holding a copy of the fixtures.

use std::path::{Path, PathBuf};

use dcp::session::Message;
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
#[derive(Default)]
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
        self.messages.push(Message {
            info: json!({"id": id, "sessionID": "ses_test", "role": "user", "time": {"created": t}}),
            parts: vec![json!({"id": format!("prt_{id}_0"), "type": "text", "text": text})],
        });
        self
    }

    pub fn text(mut self, text: &str) -> Self {
        let (id, t) = self.next();
        self.messages.push(Message {
            info: json!({"id": id, "sessionID": "ses_test", "role": "assistant", "time": {"created": t}, "finish": "stop"}),
            parts: vec![json!({"id": format!("prt_{id}_0"), "type": "text", "text": text})],
        });
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
        self.messages.push(Message {
            info: json!({"id": id, "sessionID": "ses_test", "role": "assistant", "time": {"created": t}, "finish": "tool-calls"}),
            parts: vec![
                json!({"id": format!("prt_{id}_0"), "type": "step-start"}),
                json!({"id": format!("prt_{id}_1"), "type": "tool", "callID": call, "tool": tool, "state": state}),
            ],
        });
        self
    }

    /// A compaction: the user's request and the summary that answers it.
    pub fn compaction(mut self, summary: &str) -> Self {
        let (uid, t) = self.next();
        self.messages.push(Message {
            info: json!({"id": uid, "sessionID": "ses_test", "role": "user", "time": {"created": t}}),
            parts: vec![json!({"id": format!("prt_{uid}_0"), "type": "compaction", "auto": false})],
        });
        let (aid, t) = self.next();
        self.messages.push(Message {
            info: json!({"id": aid, "sessionID": "ses_test", "role": "assistant", "parentID": uid, "summary": true, "mode": "compaction", "agent": "compaction", "time": {"created": t}, "finish": "stop"}),
            parts: vec![json!({"id": format!("prt_{aid}_0"), "type": "text", "text": summary})],
        });
        self
    }

    pub fn build(self) -> Vec<Message> {
        self.messages
    }
}

/// The output of call `call_id` in `messages`, as the model would see it.
pub fn output_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Value {
    part_of(messages, call_id).pointer("/state/output").unwrap_or(&Value::Null)
}

/// The input of call `call_id` in `messages`.
pub fn input_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Value {
    part_of(messages, call_id).pointer("/state/input").unwrap_or(&Value::Null)
}

fn part_of<'a>(messages: &'a [Message], call_id: &str) -> &'a Value {
    messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .find(|p| p.get("callID").and_then(Value::as_str) == Some(call_id))
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
