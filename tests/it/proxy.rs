//! `dcp proxy`: the gateway run as a process between a client and a fake upstream, and the
//! proof that a proxied conversation is pruned as `dcp serve` prunes the same history.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use crate::support::{Sandbox, SessionBuilder, Sidecar};

/// A running `dcp proxy`, stopped (SIGTERM, so that it saves) when dropped.
pub struct ProxyProcess {
    child: Child,
    pub port: u16,
}

impl ProxyProcess {
    /// Starts `dcp proxy` on a free port of 127.0.0.1 in front of `upstream`, with `env`.
    pub fn start<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        upstream: &str,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> ProxyProcess {
        ProxyProcess::spawn(&["--upstream", upstream], env, Stdio::inherit())
    }

    /// Starts `dcp proxy` on a free port of 127.0.0.1 with `args` (its upstreams), `env`, and
    /// its stderr written to `stderr`.
    pub fn spawn<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        args: &[&str],
        env: impl IntoIterator<Item = (K, V)>,
        stderr: Stdio,
    ) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dcp"))
            .args(["proxy", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start dcp proxy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("dcp proxy did not say where it listens: {line:?}"));
        ProxyProcess { child, port }
    }

    /// As [`ProxyProcess::start`], with the proxy's stderr written to `stderr`.
    pub fn start_logging<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        upstream: &str,
        env: impl IntoIterator<Item = (K, V)>,
        stderr: &std::path::Path,
    ) -> ProxyProcess {
        ProxyProcess::spawn(&["--upstream", upstream], env, Stdio::from(std::fs::File::create(stderr).unwrap()))
    }

    /// Stops the proxy as Ctrl-C would, and waits for it to save and exit; returns whether it
    /// exited normally.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    fn terminate(&mut self) -> bool {
        // SAFETY: kill only sends a signal to the child this test started.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.child.wait().is_ok_and(|s| s.success())
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}

pub const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";

/// A fake upstream that answers every request with `answer` (`{}` by default) and keeps the
/// bodies it received, as they came.
pub struct Recorder {
    pub port: u16,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        Recorder::answering(OK)
    }

    pub fn answering(answer: &'static [u8]) -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = record(conn, &kept, answer);
            }
        });
        Recorder { port, bodies }
    }

    pub fn last(&self) -> Value {
        serde_json::from_slice(&self.last_bytes()).unwrap_or(Value::Null)
    }

    /// Every complete body received, in turn.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }

    pub fn last_bytes(&self) -> Vec<u8> {
        self.bodies.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

fn record(conn: std::net::TcpStream, bodies: &std::sync::Mutex<Vec<Vec<u8>>>, answer: &[u8]) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let body = read_request(&mut reader)?;
    bodies.lock().unwrap().push(body);
    let mut out = conn;
    out.write_all(answer)
}

/// Reads one request's head and its `Content-Length` body; returns the body. A connection
/// that ends before its head does (one opened and closed with nothing sent, as an aborted
/// speculative request's can be) is an error, not a request with an empty body.
pub fn read_request(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            let ended = std::io::ErrorKind::UnexpectedEof;
            return Err(std::io::Error::new(ended, "the connection ended before the request's head"));
        }
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    std::io::Read::read_exact(reader, &mut body)?;
    Ok(body)
}

/// A session of `steps` reads of four files in turn, as OpenCode keeps it.
pub fn reads(steps: usize) -> Vec<Value> {
    let mut b = SessionBuilder::new().user("Read the files, again and again.");
    for i in 0..steps {
        let output = format!("fn f{}() {{ /* line */ }}\n", i % 4).repeat(150);
        b = b.tool(&format!("call_{i}"), "read", json!({"filePath": format!("/p/f{}.rs", i % 4)}), &output);
    }
    b.build().into_iter().map(|m| serde_json::to_value(m).unwrap()).collect()
}

/// The same history as a Chat Completions request.
pub fn as_chat(messages: &[Value]) -> Value {
    let mut out = vec![json!({"role": "system", "content": "You are a coding agent."})];
    for m in messages {
        for part in m["parts"].as_array().unwrap() {
            match (m["info"]["role"].as_str(), part["type"].as_str()) {
                (Some(role), Some("text")) => out.push(json!({"role": role, "content": part["text"]})),
                (_, Some("tool")) => {
                    let call = json!({"id": part["callID"], "type": "function",
                        "function": {"name": part["tool"], "arguments": part["state"]["input"].to_string()}});
                    out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
                    out.push(
                        json!({"role": "tool", "tool_call_id": part["callID"], "content": part["state"]["output"]}),
                    );
                }
                _ => {}
            }
        }
    }
    json!({"model": "m", "stream": true, "messages": out, "tools": [{"type": "function", "function": {"name": "read"}}]})
}

/// Every tool output as the model reads it, by call id, after `dcp serve`'s edits.
fn served_outputs(messages: &[Value], result: &Value) -> Vec<(String, String)> {
    let mut messages = messages.to_vec();
    crate::sidecar::apply(&mut messages, result);
    let parts = messages.iter().flat_map(|m| m["parts"].as_array().unwrap().iter());
    let tools = parts.filter(|p| p["type"] == "tool");
    tools.map(|p| (p["callID"].as_str().unwrap().into(), p["state"]["output"].as_str().unwrap().into())).collect()
}

/// Every tool output of a Chat Completions request, by call id.
pub fn proxied_outputs(body: &Value) -> Vec<(String, String)> {
    let tools = body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool");
    tools.map(|m| (m["tool_call_id"].as_str().unwrap().into(), m["content"].as_str().unwrap().into())).collect()
}

fn post(port: u16, path: &str, body: &Value) {
    let answer = post_bytes(port, path, body.to_string().as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Sends `body` to `path`; returns the whole answer, head and body.
pub fn post_bytes(port: u16, path: &str, body: &[u8]) -> String {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-secret\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    answer
}

/// Runs a session of 40 steps through `dcp serve` and through the proxy, with `config`, and
/// checks after every step that the model would read the same outputs; returns how many
/// outputs were pruned at the end.
fn both_ways(config: &str) -> usize {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, config);
    let upstream = Recorder::start();
    let data = tempfile::tempdir().unwrap();
    let root = s.dir.path();
    let env = [
        ("HOME", root.join("home")),
        ("XDG_CONFIG_HOME", root.join("home/.config")),
        ("XDG_DATA_HOME", data.path().to_path_buf()),
    ];
    let proxy = ProxyProcess::start(&format!("http://127.0.0.1:{}", upstream.port), env);
    let mut pruned = 0;
    for steps in 1..=40 {
        let messages = reads(steps);
        let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": messages.clone()}));
        let served = served_outputs(&messages, &result);
        post(proxy.port, "/v1/chat/completions", &as_chat(&messages));
        let proxied = proxied_outputs(&upstream.last());
        assert_eq!(proxied, served, "step {steps}: the proxy and dcp serve disagree ({config})");
        pruned = served.iter().filter(|(_, o)| crate::restore::is_pruned(Some(o))).count();
    }
    assert!(proxy.stop());
    pruned
}

#[test]
fn a_proxied_conversation_is_rewritten_as_dcp_serve_rewrites_the_same_history() {
    // The proxy offers no agent tools (a proxied client cannot run them): neither does serve here.
    // Nor restore: the proxy's placeholders would say to run `dcp restore`, serve's to call it.
    const NO_TOOLS: &str = r#""tools": {"discard": {"enabled": false}, "extract": {"enabled": false},
        "compress": {"enabled": false}, "restore": {"enabled": false}}"#;
    // The cache-aware policy's own pace (a short, warm run: it waits) ...
    both_ways(&format!("{{{NO_TOOLS}}}"));
    // ... and every decision applied at once.
    let pruned = both_ways(&format!(r#"{{"rewrite": {{"mode": "immediate"}}, {NO_TOOLS}}}"#));
    assert_eq!(pruned, 36, "every read but the newest of each of the four files is pruned");
}

/// `body` pretty-printed, with escapes a serialiser would not write (`\/`).
fn hand_written(body: &Value) -> Vec<u8> {
    serde_json::to_string_pretty(body).unwrap().replace("/p/", "\\/p\\/").into_bytes()
}

#[test]
fn an_unchanged_request_is_forwarded_byte_for_byte_and_a_pruned_one_keeps_every_byte_it_does_not_prune() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
    std::fs::write(dir.path().join("config/opencode/dcp.jsonc"), r#"{"rewrite": {"mode": "immediate"}}"#).unwrap();
    let proxy = proxy_for(upstream.port, dir.path());
    let first = hand_written(&as_chat(&reads(2)));
    assert!(post_bytes(proxy.port, "/v1/chat/completions", &first).starts_with("HTTP/1.1 200"));
    assert_eq!(upstream.last_bytes(), first, "nothing to prune: the client's bytes as they came");
    let sent = hand_written(&as_chat(&reads(8)));
    assert!(post_bytes(proxy.port, "/v1/chat/completions", &sent).starts_with("HTTP/1.1 200"));
    let pruned = upstream.last_bytes();
    let outputs = proxied_outputs(&serde_json::from_slice(&pruned).unwrap());
    let placeholders: Vec<&str> =
        outputs.iter().filter(|(_, o)| crate::restore::is_pruned(Some(o))).map(|(id, _)| id.as_str()).collect();
    assert_eq!(placeholders, ["call_0", "call_1", "call_2", "call_3"]);
    let text = String::from_utf8(sent.clone()).unwrap();
    let first_pruned = text[..text.find(r#""tool_call_id": "call_0""#).unwrap()].rfind('{').unwrap();
    let after_pruned = text.find(r#""id": "call_4""#).unwrap();
    assert_eq!(pruned[..first_pruned], sent[..first_pruned]);
    assert!(pruned.ends_with(&sent[after_pruned..]), "the messages after the last pruned one are the client's bytes");
    assert!(post_bytes(proxy.port, "/v1/chat/completions", &sent).starts_with("HTTP/1.1 200"));
    assert_eq!(upstream.last_bytes(), pruned, "the same request again: the same pruned bytes");
    assert!(proxy.stop());
}

/// A proxy in front of `upstream`, in its own dirs, with its stderr kept in `dir/stderr`.
fn proxy_for(upstream: u16, dir: &std::path::Path) -> ProxyProcess {
    let env =
        [("HOME", dir.join("home")), ("XDG_CONFIG_HOME", dir.join("config")), ("XDG_DATA_HOME", dir.join("data"))];
    ProxyProcess::start_logging(&format!("http://127.0.0.1:{upstream}"), env, &dir.join("stderr"))
}

#[test]
fn a_body_that_is_not_json_reaches_the_upstream_as_it_came_and_is_logged_without_its_text() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_for(upstream.port, dir.path());
    let body = b"{\"messages\": [{\"role\": \"user\", \"content\": \"secret plans\"} oops";
    let answer = post_bytes(proxy.port, "/v1/messages", body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.last_bytes(), body);
    let stopped = proxy.stop();
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(stopped, "the proxy did not exit normally; its log:\n{log}");
    assert!(log.contains("sent on unpruned: the body is not JSON"), "{log}");
    assert!(!log.contains("secret plans") && !log.contains("sk-secret"), "{log}");
}

#[test]
fn the_upstream_s_status_headers_and_streamed_bytes_reach_the_client_as_they_came() {
    const LIMITED: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/event-stream\r\nRetry-After: 7\r\nConnection: close\r\n\r\ndata: {\"a\": 1}\n\nevent: x\ndata: \xc3\xa9 \n\n";
    let upstream = Recorder::answering(LIMITED);
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_for(upstream.port, dir.path());
    let answer = post_bytes(proxy.port, "/v1/chat/completions", as_chat(&reads(3)).to_string().as_bytes());
    assert!(answer.starts_with("HTTP/1.1 429 Too Many Requests"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 7"), "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(dechunk(body), "data: {\"a\": 1}\n\nevent: x\ndata: é \n\n");
}

#[test]
fn an_upstream_that_cannot_be_reached_is_a_502_that_names_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_for(port, dir.path());
    let answer = post_bytes(proxy.port, "/v1/messages", b"{}");
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains(&format!("the upstream http://127.0.0.1:{port} could not be reached")), "{answer}");
}

/// The payload of an HTTP/1.1 body, chunked or not.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { return body.to_string() };
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

#[test]
fn a_sigterm_right_after_the_proxy_says_it_listens_stops_it_normally() {
    // The proxy used to listen for SIGTERM only from its main task's first poll, after it
    // said where it listens: a signal in between (CI saw one while the first request was
    // served) killed it unsaved, and the exit was not a success.
    let upstream = Recorder::start();
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let proxy = proxy_for(upstream.port, dir.path());
        let stopped = proxy.stop();
        let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
        assert!(stopped, "the proxy did not exit normally; its log:\n{log}");
    }
}

/// The env of a proxy in `dir`, and of any `dcp` command that reads its state: the same dirs, a
/// config that applies every decision at once.
pub fn immediate_env(dir: &std::path::Path) -> Vec<(&'static str, std::path::PathBuf)> {
    std::fs::create_dir_all(dir.join("config/opencode")).unwrap();
    std::fs::write(dir.join("config/opencode/dcp.jsonc"), r#"{"rewrite": {"mode": "immediate"}}"#).unwrap();
    vec![
        ("HOME", dir.join("home")),
        ("XDG_CONFIG_HOME", dir.join("config")),
        ("XDG_DATA_HOME", dir.join("data")),
        ("XDG_CACHE_HOME", dir.join("cache")),
    ]
}

/// An Anthropic request of Claude Code's session `sid` with `system`: a prompt, then one step
/// per call of `steps` (a call id, its input and its result), each with its result; a call
/// with a `file_path` is a `Read`, any other a `Grep`.
pub fn claude_request<S: AsRef<str>>(
    sid: &str,
    steps: &[(S, serde_json::Value, String)],
    system: serde_json::Value,
) -> serde_json::Value {
    use serde_json::json;
    let mut messages =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "Look at main.rs and around it."}]})];
    for (id, input, output) in steps {
        let id = id.as_ref();
        let tool = if input.get("file_path").is_some() { "Read" } else { "Grep" };
        messages.push(
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}]}),
        );
        messages
            .push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}));
    }
    let user_id = json!({"device_id": "d", "account_uuid": "", "session_id": sid}).to_string();
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true, "system": system,
        "metadata": {"user_id": user_id}, "tools": [{"name": "Read"}, {"name": "Grep"}], "messages": messages})
}
