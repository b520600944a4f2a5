//! OpenCode 1.18's long session with a message the person sends while the agent works (a
//! second prompt while the first runs: OpenCode stores it and its loop's next step reads it
//! after the step that called the tools), driven through `opencode serve`'s HTTP API: with
//! the dcp plugin, and without it through `dcp proxy`. From the fake model's log: no tool
//! output reaches the model hidden before it has answered it once.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::clients::{seen, QUEUED};
use super::fake_llm::Turn;
use super::{tail, Lab};
use crate::proxy::ProxyProcess;

/// `opencode serve` for a lab, on a port of 127.0.0.1.
pub(super) struct Serve {
    child: Child,
    port: u16,
}

impl Serve {
    pub(super) fn start(lab: &Lab) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = lab
            .command(&["serve", "--print-logs", "--port", &port.to_string(), "--hostname", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(lab.root().join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("opencode serve did not start");
        Serve { child, port }
    }

    /// POSTs `body` to `path` (with curl, as OpenCode's docs do); returns the answer's body.
    pub(super) fn post(&self, path: &str, body: &Value) -> String {
        let out = Command::new("curl")
            .args(["-s", "-m", "60", "-XPOST", "-H", "content-type: application/json", "-d", &body.to_string()])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl is needed for the serve tests");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// GETs `path`; returns the answer's body as JSON.
    pub(super) fn get(&self, path: &str) -> Value {
        let out = Command::new("curl")
            .args(["-s", "-m", "60"])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl is needed for the serve tests");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// Sends `text` as a prompt of `session`, without waiting for the answer.
    pub(super) fn prompt(&self, session: &str, text: &str) {
        let body = json!({"parts": [{"type": "text", "text": text}], "model": {"providerID": "fake", "modelID": "fake-model"}});
        self.post(&format!("/session/{session}/prompt_async"), &body);
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The session's script in OpenCode's tools: as the proxy's long sessions
/// (`super::proxy_sessions`), a first turn of ten steps whose second waits four seconds, and
/// a second of five.
fn script() -> Vec<Turn> {
    let bash = |c: &str| ("bash".to_string(), json!({"command": c, "description": "Run it"}));
    let read = |f: &str| ("read".to_string(), json!({"filePath": format!("{{{{cwd}}}}/{f}")}));
    let cat = |i: usize| bash(&format!("cat big{i}.txt"));
    let step = |label: &str, calls: Vec<(String, Value)>| Turn { tool_calls: calls, ..Turn::text(label, "") };
    let mut turns = vec![
        step("s0", vec![cat(1), cat(2), read("big3.txt")]),
        step("s1", vec![bash("sleep 4; cat big4.txt")]),
        step("s2", vec![cat(5), read("notes.txt"), bash("ls -la")]),
    ];
    turns.extend((6..=11).map(|i| step(&format!("s{i}"), vec![cat(i)])));
    turns.push(Turn::text("surveyed", "Surveyed."));
    turns.push(step("t0", vec![cat(12), cat(13)]));
    turns.extend((14..=16).map(|i| step(&format!("t{i}"), vec![cat(i)])));
    turns.push(Turn::text("done", "Done."));
    turns.iter().map(|t| Turn { text: t.text.clone().filter(|t| !t.is_empty()), ..t.clone() }).collect()
}

/// Runs the session in `lab` (its OpenCode talking to the fake model or to a proxy) and
/// checks the model's requests.
fn session(lab: &Lab) {
    for i in 1..=20 {
        let text = format!("file {i}: a line the model reads once\n").repeat(560);
        std::fs::write(lab.project().join(format!("big{i}.txt")), text).unwrap();
    }
    std::fs::write(lab.project().join("notes.txt"), "see the docs\n".repeat(20)).unwrap();
    lab.llm.push(script());
    let serve = Serve::start(lab);
    let created: Value = serde_json::from_str(&serve.post("/session", &json!({}))).unwrap();
    let session = created["id"].as_str().expect("a session id").to_string();
    let asked = |label: &str| lab.llm.main_requests().iter().any(|l| l.label.as_deref() == Some(label));
    let wait = |label: &str| assert!(crate::support::poll(|| asked(label), Duration::from_secs(120)), "{label}");
    serve.prompt(&session, "Survey the project.");
    wait("s1");
    std::thread::sleep(Duration::from_secs(1));
    serve.prompt(&session, QUEUED);
    wait("surveyed");
    std::thread::sleep(Duration::from_secs(2));
    serve.prompt(&session, "Now the tests.");
    wait("done");
    let log = std::fs::read(lab.root().join("serve.log")).unwrap_or_default();
    assert_eq!(lab.llm.remaining(), 0, "{}", tail(&log));
    let requests = lab.llm.main_requests();
    let bodies: Vec<&Value> = requests.iter().map(|l| &l.body).collect();
    let seen = seen(&bodies);
    eprintln!("{seen:?}");
    let first = bodies.iter().position(|b| b.to_string().contains(QUEUED));
    assert_eq!(first, Some(2), "the person's message reached the model with step 1's results");
    let kept = bodies[2..].iter().all(|b| b.to_string().contains(QUEUED));
    assert!(kept, "the person's message reached the model on every request after");
    assert!(seen.hidden_first.is_empty(), "outputs hidden before the model answered them: {seen:?}");
}

#[test]
fn opencode_s_long_session_with_a_queued_message_hides_no_output_before_its_first_answer_with_the_plugin() {
    let lab = Lab::new("{}");
    session(&lab);
}

#[test]
fn opencode_s_long_session_with_a_queued_message_hides_no_output_before_its_first_answer_through_the_proxy() {
    let lab = Lab::new("{}");
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", lab.llm.port), lab.env());
    super::proxy::through_proxy(&lab, proxy.port);
    session(&lab);
    assert!(proxy.stop());
}
