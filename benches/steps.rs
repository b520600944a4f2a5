//! What `dcp serve` does per request, in CPU time and, under callgrind, in instructions.
//!
//! `cargo bench --bench steps -- 2000 [STEPS]` generates the bench's session of that many
//! messages (`dcp-testkit`, seed 1, 200 steps up to 5,000 messages and 50 above, as the
//! transform bench runs them), and drives a `dcp::sidecar::Server` in this process as the
//! plugin drives `dcp serve`: the whole history on the first `transform` (read as a stream,
//! as `dcp serve` reads a long line), then one step at a time, each line with only what is
//! new since the last (`base`) and the edits the plugin holds (`have`), a request every two
//! seconds of the request's clock (`now`). Between requests it counts ahead as an idle
//! sidecar does, and hands out the saves that fall due to a saver thread, as `dcp serve`
//! does. It prints the CPU time of the first request and of each stage of a step (the
//! request, counting ahead), and a digest of every answer as the plugin applies it (the edits
//! it holds then, in one order, whether they came whole or added to): two builds that answer
//! alike print the same digest.
//!
//! With `--unfinished` (`cargo bench --bench steps -- 2000 --unfinished`) each step's last
//! message first arrives as OpenCode sends it while it is being written (its calls running,
//! without output, no finish) and arrives finished with the next step, so that every step
//! changes a message the sidecar has read, as in OpenCode.
//!
//! For instruction counts, which do not drift with the machine's load, run the built bench
//! under callgrind and read the inclusive cost of the three stages:
//!
//! ```sh
//! cargo bench --bench steps --no-run
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/steps.out target/release/deps/steps-* 2000
//! callgrind_annotate --inclusive=yes /tmp/steps.out | grep -E 'steps::(first_request|step|count_ahead)'
//! ```

use std::hash::{Hash, Hasher};
use std::io::BufReader;

use dcp::sidecar::stream::{read_rest, Streamed};
use dcp::sidecar::Server;
use dcp::state::saver::Saver;
use serde_json::{json, Value};

/// The request clock's start, and the gap between two requests (a warm cache).
const CLOCK: i64 = 1_800_000_000_000;
const GAP_MS: i64 = 2_000;

/// This thread's CPU time in milliseconds.
fn cpu_ms() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is handed.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// What the plugin holds: how many messages the sidecar has, and the last answer's seq.
#[derive(Default)]
struct Plugin {
    held: usize,
    seq: Option<u64>,
    next_id: u64,
    /// The edits the plugin holds.
    edits: Vec<Value>,
}

impl Plugin {
    /// The `transform` line for `messages`: those the sidecar has are left out (`base`: the
    /// generated steps only append), the rest sent whole.
    fn line(&mut self, sid: &str, messages: &[Value], now: i64) -> String {
        let base = self.held.min(messages.len());
        let mut params = json!({
            "sessionID": sid, "compaction": false, "parentID": null, "now": now,
            "base": base, "messages": &messages[base..],
        });
        if let Some(seq) = self.seq {
            params["have"] = json!(seq);
        }
        self.held = messages.len();
        self.next_id += 1;
        json!({"jsonrpc": "2.0", "id": self.next_id, "method": "transform", "params": params}).to_string()
    }

    /// The last message the sidecar has changed: it is sent again.
    fn changed_last(&mut self) {
        self.held = self.held.saturating_sub(1);
    }

    /// Keeps the answer's number and edits as the plugin does; returns the answer as the
    /// plugin applies it: every edit it then holds, in one order, in place of how they came.
    fn answered(&mut self, answer: &str) -> String {
        let mut answer: Value = serde_json::from_str(answer).unwrap_or(Value::Null);
        if let Some(seq) = answer["result"]["seq"].as_u64() {
            self.seq = Some(seq);
        }
        let Some(result) = answer["result"].as_object_mut() else { return answer.to_string() };
        let before = result.remove("keepEditsBefore").and_then(|k| k.as_u64());
        result.remove("sameEdits");
        result.remove("seq");
        match (result.remove("addEdits"), result.remove("edits")) {
            (Some(Value::Array(added)), _) => {
                if let Some(before) = before {
                    self.edits.retain(|e| e["m"].as_u64().is_some_and(|m| m < before));
                }
                self.edits.extend(added);
            }
            (None, Some(Value::Array(all))) => self.edits = all,
            _ => {}
        }
        let mut held: Vec<String> = self.edits.iter().map(Value::to_string).collect();
        held.sort_unstable();
        result.insert("held".into(), json!(held));
        // In one order of keys, whichever came.
        let result: std::collections::BTreeMap<&String, &Value> = result.iter().collect();
        json!(result).to_string()
    }
}

/// The first request: a line of the whole history, read as a stream.
#[inline(never)]
fn first_request(server: &mut Server, line: Vec<u8>) -> String {
    let streamed = read_rest(Vec::new(), &mut BufReader::new(&line[..]), usize::MAX).expect("the line reads");
    let Streamed::Request(request) = streamed else { panic!("the line is no request") };
    drop(line);
    server.handle_decoded(*request).unwrap_or_default()
}

/// One steady-state request: a short line, read whole.
#[inline(never)]
fn step(server: &mut Server, line: &str) -> String {
    server.handle_line(line).unwrap_or_default()
}

/// What an idle sidecar does between requests: counts ahead, hands out the saves due.
#[inline(never)]
fn count_ahead(server: &mut Server) {
    server.precount(|| true);
    if server.save_is_due() {
        server.save_waiting();
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// A `dcp serve` in this process, in a private HOME under `dir`, with its saver thread on
/// `runtime`, initialised.
fn serve(
    dir: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
) -> Result<(Server, Saver), Box<dyn std::error::Error>> {
    let home = dir.join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        xdg_cache_home: Some(home.join(".cache")),
        ..Default::default()
    };
    let project = dir.join("project");
    std::fs::create_dir_all(&project)?;
    let options = dcp::sidecar::ServeOptions { data_dir: dir.join("data"), env, project: None };
    let saver = {
        let _context = runtime.enter();
        Saver::spawn()
    };
    let mut server = Server::new(options, Some(saver.clone()))?;
    let init = json!({"protocol": 2, "directory": project});
    server.handle_line(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).to_string());
    Ok((server, saver))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let size = numbers.first().copied().unwrap_or(2_000);
    let steps = numbers.get(1).copied().unwrap_or(if size <= 5_000 { 200 } else { 50 });
    let unfinished_last = std::env::args().any(|a| a == "--unfinished");
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let (mut server, saver) = serve(dir.path(), &runtime)?;
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: size, steps, seed: 1 });
    let sid = session.session_id.clone();
    let mut history: Vec<Value> = session.messages.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
    let mut plugin = Plugin::default();
    let mut digest = std::hash::DefaultHasher::new();
    let line = plugin.line(&sid, &history, CLOCK);
    let t = cpu_ms();
    let answer = first_request(&mut server, line.into_bytes());
    let first = cpu_ms() - t;
    plugin.answered(&answer).hash(&mut digest);
    let t = cpu_ms();
    count_ahead(&mut server);
    let first_ahead = cpu_ms() - t;

    let (mut requests, mut ahead) = (Vec::new(), Vec::new());
    let mut finishing: Option<Value> = None;
    for (i, new) in session.steps.iter().enumerate() {
        if let (Some(finished), Some(last)) = (finishing.take(), history.last_mut()) {
            *last = finished;
            plugin.changed_last();
        }
        for m in new {
            history.push(serde_json::to_value(m)?);
        }
        finishing = history
            .last_mut()
            .filter(|_| unfinished_last)
            .map(|last| std::mem::replace(last, dcp_testkit::gen::unfinished(last)));
        let line = plugin.line(&sid, &history, CLOCK + GAP_MS * (i as i64 + 1));
        let t = cpu_ms();
        let answer = step(&mut server, &line);
        requests.push(cpu_ms() - t);
        plugin.answered(&answer).hash(&mut digest);
        let t = cpu_ms();
        count_ahead(&mut server);
        ahead.push(cpu_ms() - t);
    }
    runtime.block_on(saver.flush());
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (request_mean, ahead_mean) = (mean(&requests), mean(&ahead));
    requests.sort_by(f64::total_cmp);
    let arriving = if unfinished_last { ", the last message finished a step later" } else { "" };
    println!("{size} messages, {steps} steps{arriving} (CPU ms of the server's thread)");
    println!("first request {first:.1}, counting ahead after it {first_ahead:.1}");
    println!(
        "steady request p50 {:.3}, mean {request_mean:.3}, max {:.3}; counting ahead mean {ahead_mean:.3}",
        percentile(&requests, 0.5),
        percentile(&requests, 1.0)
    );
    println!("answers digest {:016x}", digest.finish());
    Ok(())
}
