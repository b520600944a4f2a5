//! Work proportional to what is new (issue 39, part 7): each figure the sidecar now keeps
//! between requests, or reads once per message, equals what the computation over the whole
//! history it replaced gives, request by request, over generated sessions whose requests
//! append, resend an edited tail, revert and resend everything.

use serde_json::{json, Value};

use crate::support::Sandbox;
use dcp::host::paths::Env;
use dcp::session::{Message, Node};
use dcp::sidecar::mirror::Mirror;
use dcp::sidecar::Server;
use dcp::state::saver::Saver;

/// One request of a scenario: how many leading messages the mirror keeps, and the history.
struct Request {
    base: usize,
    history: Vec<Value>,
}

/// The requests of a generated session of `messages` messages and `steps` steps: each step
/// appends its message; every fifth request resends its last three messages, every seventh
/// reverts the last two steps (and the next brings them back), every eleventh resends all.
fn scenario(messages: usize, steps: usize, seed: u64) -> Vec<Request> {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed });
    let values = |m: &[Message]| -> Vec<Value> { m.iter().map(|m| serde_json::to_value(m).unwrap()).collect() };
    let mut history = values(&session.messages);
    let mut requests = vec![Request { base: 0, history: history.clone() }];
    for (i, step) in session.steps.iter().enumerate() {
        let sent = history.len();
        history.extend(values(step));
        let (base, shown) = match i + 1 {
            s if s % 11 == 0 => (0, history.len()),
            s if s % 7 == 0 => (sent - 2, sent - 2),
            s if s % 5 == 0 => (sent - 3, history.len()),
            _ => (requests.last().map_or(0, |r| r.history.len()).min(sent), history.len()),
        };
        requests.push(Request { base, history: history[..shown].to_vec() });
    }
    requests
}

/// Drives a mirror through `requests`, handing `check` the messages of each.
fn through_mirror(requests: &[Request], mut check: impl FnMut(usize, &Mirror)) {
    let mut mirror = Mirror::default();
    for (i, r) in requests.iter().enumerate() {
        let base = r.base.min(mirror.messages().len());
        let wire: Vec<Node> = r.history[base..].iter().cloned().map(Node::from).collect();
        mirror.resolve(base, wire).unwrap();
        check(i, &mirror);
    }
}

fn sessions() -> [(usize, usize, u64); 3] {
    [(300, 60, 11), (600, 45, 5), (120, 80, 2026)]
}

#[test]
fn the_sizes_of_the_tails_the_mirror_sums_once_per_message_are_those_summed_again() {
    let mut checked = 0;
    for (messages, steps, seed) in sessions() {
        through_mirror(&scenario(messages, steps, seed), |i, mirror| {
            let sizes = mirror.sizes();
            assert_eq!(mirror.total(), sizes.iter().sum::<u64>(), "seed {seed}, request {i}");
            for from in 0..=sizes.len() + 1 {
                let again: u64 = sizes.get(from..).map_or(0, |s| s.iter().sum());
                assert_eq!(mirror.tail(from), again, "seed {seed}, request {i}, from message {from}");
            }
            checked += sizes.len();
        });
    }
    assert!(checked > 10_000, "{checked}");
}

/// Drives a server in `sandbox` through `requests` (a request every two seconds of the
/// request clock), shuts it down, and returns its session's state file without its time.
fn state_file_after(sandbox: &Sandbox, requests: &[Request], saver: bool) -> String {
    let home = sandbox.dir.path().join("home");
    let env = Env { home: Some(home.clone()), xdg_config_home: Some(home.join(".config")), ..Env::default() };
    let options = dcp::sidecar::ServeOptions { data_dir: sandbox.data(), env, project: None };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let saver = saver.then(|| {
        let _context = runtime.enter();
        Saver::spawn()
    });
    let mut server = Server::new(options, saver.clone()).unwrap();
    let line = |id: usize, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    server.handle_line(&line(0, "initialize", json!({"protocol": 2})));
    let mut sid = String::new();
    for (i, r) in requests.iter().enumerate() {
        sid = r.history[0]["info"]["sessionID"].as_str().unwrap().to_string();
        let now = 1_790_000_000_000i64 + 2_000 * i as i64;
        let params = json!({"sessionID": sid, "now": now, "base": r.base, "messages": r.history[r.base..]});
        server.handle_line(&line(i + 1, "transform", params)).unwrap();
        server.precount(|| true);
        if server.save_is_due() {
            server.save_waiting();
        }
    }
    server.handle_line(&line(9_999, "shutdown", json!({})));
    if let Some(saver) = saver {
        runtime.block_on(saver.flush());
    }
    let file = std::fs::read_to_string(sandbox.state_dir().join(format!("{sid}.json"))).unwrap();
    // The clock's: when the file was written, and when a finished turn's range was made.
    let timed = |l: &&str| l.starts_with("  \"lastUpdated\"") || l.trim_start().starts_with("\"createdAt\"");
    file.lines().filter(|l| !timed(l)).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_large_session_saved_every_few_requests_ends_with_the_file_saved_after_every_request() {
    // A base that is never past the mirror: the scenario's requests as the plugin sends them.
    let requests = scenario(1_000, 30, 7);
    let (every, amortised) = (Sandbox::new(), Sandbox::new());
    let saved_every_time = state_file_after(&every, &requests, false);
    let saved_in_turn = state_file_after(&amortised, &requests, true);
    let records = saved_every_time.matches("\"strategy\"").count();
    assert!(records > 2 * dcp::state::saver::RECORDS_PER_REQUEST, "{records} records: saves wait for requests");
    let first_difference = saved_in_turn.lines().zip(saved_every_time.lines()).position(|(a, b)| a != b);
    assert_eq!(
        first_difference,
        None,
        "{:?}",
        first_difference.map(|i| (saved_in_turn.lines().nth(i), saved_every_time.lines().nth(i)))
    );
    assert_eq!(saved_in_turn.len(), saved_every_time.len());
}

/// The wire messages `plugin/encode.js` sends for each of `requests` (histories), one request
/// after the other through one sent cache, as `[base, messages]` pairs.
fn encoded_by_the_plugin(requests: &[Vec<Value>]) -> Vec<(usize, Vec<Value>)> {
    let encode = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin/encode.js");
    let script = format!(
        "import {{ SentCache, encode }} from {:?};
        let input = '';
        process.stdin.on('data', (d) => (input += d)).on('end', () => {{
          const cache = new SentCache().session('ses', 0);
          const out = JSON.parse(input).map((h) => {{ const e = encode(h, cache); return [e.base, e.messages]; }});
          process.stdout.write(JSON.stringify(out));
        }});",
        encode.to_str().unwrap()
    );
    let mut child = std::process::Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node runs");
    let input = serde_json::to_vec(requests).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_messages_the_plugin_strips_give_the_mirror_the_whole_messages_give() {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 300, steps: 20, seed: 9 });
    let values = |m: &[Message]| -> Vec<Value> { m.iter().map(|m| serde_json::to_value(m).unwrap()).collect() };
    let mut history = values(&session.messages);
    // A compaction summary keeps its parent and finish.
    let summary = &mut history[150]["info"];
    summary["summary"] = json!(true);
    summary["finish"] = json!("stop");
    let mut requests = vec![history.clone()];
    for step in &session.steps {
        history.extend(values(step));
        requests.push(history.clone());
    }
    let (mut whole, mut stripped) = (Mirror::default(), Mirror::default());
    for (i, (request, (base, wire))) in requests.iter().zip(encoded_by_the_plugin(&requests)).enumerate() {
        let held = whole.messages().len();
        whole.resolve(held, request[held..].iter().cloned().map(Node::from).collect()).unwrap();
        stripped.resolve(base, wire.into_iter().map(Node::from).collect()).unwrap();
        let differs = stripped.messages().iter().zip(whole.messages()).position(|(a, b)| a != b);
        assert_eq!(differs.map(|m| whole.messages()[m].id()), None, "request {i}: the first message that differs");
        assert_eq!(stripped.messages().len(), whole.messages().len(), "request {i}");
        assert_eq!(stripped.sizes(), whole.sizes(), "request {i}");
    }
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap().len();
    let (sent, full) = (encoded_by_the_plugin(&requests[..1]), bytes(&json!(requests[0])));
    let ratio = bytes(&json!(sent[0].1)) as f64 / full as f64;
    assert!(ratio < 0.6, "the plugin sends {ratio:.2} of the history");
}
