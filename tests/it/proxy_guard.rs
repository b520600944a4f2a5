//! `dcp proxy`'s guards (issue 40): it listens on loopback unless told otherwise, and then
//! serves only clients that send its token; an upstream URL holds no secret; a request
//! counts only once its upstream answered it; and a request the upstream did not answer is
//! told in words. Each runs the real binary between a raw client and a raw fake upstream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::proxy::{as_chat, reads};

/// A running `dcp proxy` with its own dirs, stopped (SIGTERM, so that it saves) when dropped.
pub struct Guarded {
    pub child: Child,
    pub port: u16,
    /// What it printed at start, line by line.
    pub said: Vec<String>,
    pub dir: tempfile::TempDir,
}

/// The environment of a proxy whose dirs are under `dir`.
pub fn env_of(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![("HOME", dir.join("home")), ("XDG_CONFIG_HOME", dir.join("config")), ("XDG_DATA_HOME", dir.join("data"))]
}

/// `dcp proxy ARGS` (on a free port of 127.0.0.1 unless they say where) in a fresh dir with
/// `config` as its dcp.jsonc, run through `sh -c` with
/// `shell` in front (a `ulimit`, say); `lines` lines of its stdout read (it says where it
/// listens on the first). Its stderr goes to `dir/stderr`.
pub fn start(args: &[&str], config: &str, shell: &str, lines: usize) -> Guarded {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
    std::fs::write(dir.path().join("config/opencode/dcp.jsonc"), config).unwrap();
    let listen: &[&str] = if args.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
    let quoted: Vec<String> = listen.iter().chain(args).map(|a| format!("'{a}'")).collect();
    let script = format!("{shell} exec '{}' proxy {}", env!("CARGO_BIN_EXE_dcp"), quoted.join(" "));
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .envs(env_of(dir.path()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(dir.path().join("stderr")).unwrap()))
        .spawn()
        .expect("start dcp proxy");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let said: Vec<String> = (0..lines)
        .map(|_| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line
        })
        .collect();
    let port = said[0]
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|addr| addr.rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("dcp proxy did not say where it listens: {said:?}"));
    Guarded { child, port, said, dir }
}

impl Guarded {
    /// Stops the proxy as Ctrl-C would and waits for it; returns its stderr.
    pub fn stop(mut self) -> String {
        self.halt();
        self.stderr()
    }

    /// Stops the proxy as Ctrl-C would and waits for it; its dir stays until it is dropped.
    pub fn halt(&mut self) {
        self.terminate();
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn terminate(&mut self) {
        // SAFETY: kill only sends a signal to the child this test started.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}

/// Sends `body` to `path` with the extra `headers` (each ending in CRLF); returns the whole
/// answer, head and body.
pub fn post(port: u16, path: &str, headers: &str, body: &[u8]) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
}

/// A fake upstream that reads each request whole (head and `Content-Length` body), keeps its
/// raw bytes, and then does what `then` says with the connection.
pub struct Upstream {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    pub fn start(then: fn(TcpStream)) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&requests);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let Ok(raw) = read_raw(&conn) else { continue };
                kept.lock().unwrap().push(raw);
                then(conn);
            }
        });
        Upstream { port, requests }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received, as text.
    pub fn seen(&self) -> Vec<String> {
        self.requests.lock().unwrap().iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect()
    }
}

fn read_raw(conn: &TcpStream) -> std::io::Result<Vec<u8>> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut raw = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.extend_from_slice(line.as_bytes());
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line.trim().is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    raw.extend_from_slice(&body);
    Ok(raw)
}

pub fn answer_ok(mut conn: TcpStream) {
    let _ = conn.write_all(crate::proxy::OK);
}

fn answer_500(mut conn: TcpStream) {
    let _ = conn.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
}

fn close(conn: TcpStream) {
    drop(conn);
}

fn reset(conn: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    let size = std::mem::size_of::<libc::linger>() as libc::socklen_t;
    // SAFETY: setsockopt reads `size` bytes of `linger` for the socket this thread owns.
    unsafe {
        libc::setsockopt(conn.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, (&raw const linger).cast(), size);
    }
    drop(conn);
}

fn chat_body() -> Vec<u8> {
    as_chat(&reads(8)).to_string().into_bytes()
}

#[test]
fn a_listen_address_other_machines_reach_is_refused_unless_allowed_and_then_only_clients_with_the_token_are_served() {
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dcp"));
        command.args(["proxy", "--listen", addr, "--upstream", "http://127.0.0.1:9"]);
        let out = refusing(command.envs(env_of(tempfile::tempdir().unwrap().path())));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{addr}: {err}");
        assert!(err.contains(&format!("refusing to listen on {addr}")) && err.contains("--allow-remote"), "{err}");
    }
    let upstream = Upstream::start(answer_ok);
    let proxy = start(&["--listen", "0.0.0.0:0", "--allow-remote", "--upstream", &upstream.url()], "{}", "", 2);
    let token = proxy.said[1].split("the token ").nth(1).and_then(|t| t.split(' ').next()).unwrap().to_string();
    assert_eq!(token.len(), 64, "{:?}", proxy.said);
    let body = chat_body();
    for (path, headers) in [("/v1/chat/completions", String::new()), ("/t/wrong/v1/chat/completions", String::new())] {
        let answer = post(proxy.port, path, &headers, &body);
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.contains("send its token") && !answer.contains(&token), "{answer}");
    }
    assert!(upstream.seen().is_empty(), "nothing went upstream without the token");
    let by_header = post(proxy.port, "/v1/chat/completions", &format!("X-Dcp-Token: {token}\r\n"), &body);
    let by_path = post(proxy.port, &format!("/t/{token}/v1/chat/completions"), "", &body);
    assert!(by_header.starts_with("HTTP/1.1 200") && by_path.starts_with("HTTP/1.1 200"), "{by_header}\n{by_path}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert!(request.starts_with("POST /v1/chat/completions HTTP/1.1"), "{request}");
        assert!(!request.contains(&token), "the token never goes upstream: {request}");
        assert!(request.to_ascii_lowercase().contains(&format!("host: 127.0.0.1:{}", upstream.port)), "{request}");
    }
    let log = proxy.stop();
    assert!(log.contains("refused 1 request(s) that did not carry the proxy's token"), "{log}");
    assert!(!log.contains(&token), "{log}");
}

#[test]
fn an_upstream_url_with_a_password_or_a_query_is_refused_and_the_secret_is_in_no_output_log_or_file() {
    const SECRET: &str = "hunter2-SECRET-value";
    let upstream = Upstream::start(answer_ok);
    let debug = r#"{"debug": true}"#;
    let cases = [
        (format!("http://user:{SECRET}@127.0.0.1:{}", upstream.port), debug.to_string(), "--upstream"),
        (format!("http://127.0.0.1:{}/v1?api_key={SECRET}", upstream.port), debug.to_string(), "--upstream"),
        (
            String::new(),
            format!(r#"{{"debug": true, "proxy": {{"upstreams": {{"chat": "https://{SECRET}@api.example/x"}}}}}}"#),
            "proxy.upstreams.chat",
        ),
    ];
    for (flag, config, named) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
        std::fs::write(dir.path().join("config/opencode/dcp.jsonc"), &config).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_dcp"));
        command.args(["proxy", "--listen", "127.0.0.1:0"]).envs(env_of(dir.path()));
        if !flag.is_empty() {
            command.args(["--upstream", &flag]);
        }
        let out = refusing(&mut command);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{named} {flag}: {stdout}{stderr}");
        assert!(stderr.contains(named) && stderr.contains("***"), "the error names where, masked: {stderr}");
        assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET), "{stdout}{stderr}");
        std::fs::remove_file(dir.path().join("config/opencode/dcp.jsonc")).unwrap();
        for file in files_under(dir.path()) {
            let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
            assert!(!text.contains(SECRET), "{} holds the secret", file.display());
        }
    }
    assert!(upstream.seen().is_empty(), "nothing went upstream");
}

/// The output of `command`, a `dcp proxy` expected to refuse to start: one still running
/// after 10 s (it started instead) is stopped, and its output is what it said by then.
fn refusing(command: &mut Command) -> std::process::Output {
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let by = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < by {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if child.try_wait().unwrap().is_none() {
        // SAFETY: kill only sends a signal to the child this test started.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
    }
    child.wait_with_output().unwrap()
}

/// Every file under `dir`, at any depth.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The state files of the proxied conversations under `dir`'s data dir, parsed.
fn states(dir: &Path) -> Vec<Value> {
    let root = dir.join("data/opencode/storage/plugin/dcp/proxy");
    let files = files_under(&root).into_iter().filter(|f| f.extension().is_some_and(|e| e == "json"));
    files.map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap()).collect()
}

/// Sends the same growing conversation five times through a proxy in front of `upstream`;
/// returns each answer's status line and the state files after the proxy stopped.
fn five_requests(upstream: &str) -> (Vec<String>, Vec<Value>) {
    let proxy = start(&["--upstream", upstream], r#"{"rewrite": {"mode": "immediate"}}"#, "", 1);
    let statuses = (4..9)
        .map(|steps| {
            let answer = post(proxy.port, "/v1/chat/completions", "", as_chat(&reads(steps)).to_string().as_bytes());
            answer.lines().next().unwrap_or_default().to_string()
        })
        .collect();
    let mut proxy = proxy;
    proxy.halt();
    (statuses, states(proxy.dir.path()))
}

/// A state file's request count and its ledger's warm run and last request.
fn counted(state: &Value) -> (u64, u64, Value) {
    let requests = state["stats"]["requests"].as_u64().unwrap_or(0);
    let ledger = &state["dcp"]["ledger"];
    (requests, ledger["warm"].as_u64().unwrap_or(0), ledger["lastRequest"].clone())
}

#[test]
fn requests_the_upstream_never_answered_or_refused_add_nothing_to_the_session_s_figures() {
    let dead = format!("http://127.0.0.1:{}", TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let (failing, closing) = (Upstream::start(answer_500), Upstream::start(close));
    for upstream in [dead, failing.url(), closing.url()] {
        let (statuses, found) = five_requests(&upstream);
        assert!(statuses.iter().all(|s| !s.contains(" 200 ")), "{statuses:?}");
        for state in &found {
            assert_eq!(counted(state), (0, 0, Value::Null), "{upstream}: nothing was answered: {state}");
        }
    }
    let answering = Upstream::start(answer_ok);
    let (statuses, found) = five_requests(&answering.url());
    assert!(statuses.iter().all(|s| s.contains(" 200 ")), "{statuses:?}");
    assert_eq!(found.len(), 1);
    let (requests, warm, last) = counted(&found[0]);
    assert_eq!((requests, warm), (5, 5), "five answered requests count: {}", found[0]);
    assert!(last.is_i64());
}

#[test]
fn a_request_the_upstream_did_not_answer_is_told_in_words_that_say_what_the_upstream_did() {
    let body = chat_body();
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (closing, resetting) = (Upstream::start(close), Upstream::start(reset));
    let cases = [
        (format!("http://127.0.0.1:{dead}"), "could not be reached: nothing listens at that address"),
        (closing.url(), "closed the connection after reading the request, without answering it"),
        (resetting.url(), "reset the connection after reading the request, without answering it"),
    ];
    for (url, words) in cases {
        let proxy = start(&["--upstream", &url], "{}", "", 1);
        for _ in 0..2 {
            let answer = post(proxy.port, "/v1/chat/completions", "", &body);
            assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
            assert!(answer.contains(&format!("dcp proxy: the upstream {url} {words}")), "{url}: {answer}");
        }
        let log = proxy.stop();
        assert!(log.contains(words), "the log says it too: {log}");
    }
    assert_eq!(closing.seen().len(), 2, "the upstream read each request");
}
