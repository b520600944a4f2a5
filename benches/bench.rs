//! `cargo bench --bench bench`: dcp's performance figures, measured against the targets of the
//! "Performance" issue, printed as a markdown table and written to `target/bench-results.md`.
//!
//! Each group of rows owns one question: how long the plugin's transform hook takes on
//! generated sessions of 200, 2,000 and 20,000 messages (through node and
//! `bench/transform/run.mjs`, for dcp and for the published DCP plugin), how long all-time
//! stats take over 10,000 state files, how fast `dcp serve` answers its first request, how
//! fast the tokenizer counts, and how much memory the sidecar needs. Inputs come from
//! `dcp_testkit::gen`, so every run measures the same data. Measurements are plain repetitions summed
//! up as p50 and p99 (nearest rank); a target that is not met is reported, never fatal, and a
//! group that cannot run (no node, no npm) says why and lets the others run.
//!
//! `DCP_BENCH=transform,published,stats,startup,tokenizer,tools` (or the same words after `--`)
//! picks groups; `DCP_BENCH_SIZES=200,2000` picks session sizes for the transform groups, and
//! `DCP_BENCH_PUBLISHED_SIZES` the sizes the published plugin runs at (default 200 only).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const GROUPS: [&str; 6] = ["transform", "published", "stats", "startup", "tokenizer", "tools"];
const SIZES: [usize; 3] = [200, 2_000, 20_000];
const SEED: u64 = 1;

/// How one plugin is measured at one size: at most `steps` steady-state steps, stopping after
/// `budget_s` seconds once `min_steps` are done, and `first` fresh instances for the first
/// request. The budgets keep the whole bench near five minutes while dcp is slow; once it is
/// fast, every step runs.
#[derive(Clone, Copy)]
struct Plan {
    steps: usize,
    min_steps: usize,
    budget_s: u64,
    first: usize,
}

fn plan(plugin: &str, size: usize) -> Plan {
    match (plugin, size) {
        ("ours", s) if s <= 500 => Plan { steps: 200, min_steps: 20, budget_s: 30, first: 5 },
        ("ours", s) if s <= 5_000 => Plan { steps: 200, min_steps: 20, budget_s: 45, first: 5 },
        ("ours", _) => Plan { steps: 50, min_steps: 10, budget_s: 60, first: 2 },
        // The published plugin takes about 0.2 s a step at 200 messages, but minutes a step at
        // 2,000 (see BENCHMARKS.md): only a few steps there, and only when asked for.
        (_, s) if s <= 500 => Plan { steps: 50, min_steps: 20, budget_s: 20, first: 1 },
        (_, s) if s <= 5_000 => Plan { steps: 5, min_steps: 1, budget_s: 60, first: 1 },
        _ => Plan { steps: 2, min_steps: 1, budget_s: 60, first: 1 },
    }
}

/// Sizes the published plugin runs at unless `DCP_BENCH_PUBLISHED_SIZES` says otherwise.
const PUBLISHED_SIZES: [usize; 1] = [200];

/// A target: the measured value must be at most this.
#[derive(Clone, Copy)]
struct Target {
    max: f64,
}

struct Row {
    what: String,
    value: Option<f64>,
    unit: &'static str,
    target: Option<Target>,
    note: String,
}

impl Row {
    fn new(what: impl Into<String>, value: Option<f64>, unit: &'static str, target: Option<f64>) -> Row {
        Row { what: what.into(), value, unit, target: target.map(|max| Target { max }), note: String::new() }
    }

    fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    fn met(&self) -> &'static str {
        match (self.value, self.target) {
            (Some(v), Some(t)) if v <= t.max => "met",
            (Some(_), Some(_)) => "**not met**",
            (None, Some(_)) => "not measured",
            _ => "",
        }
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else if v >= 1.0 {
        2
    } else {
        3
    };
    format!("{v:.digits$} {unit}")
}

fn p(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map(Path::to_path_buf).unwrap_or(tmp)
}

fn work_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn dcp_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dcp"))
}

/// The first line of `cmd --version`, or why there is none.
fn version_of(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd} exited with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string())
}

fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_else(|_| "?".into());
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let os = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    vec![
        ("CPU".into(), cpu),
        ("cores".into(), cores),
        ("memory".into(), mem),
        ("OS".into(), format!("{os}, Linux {}", kernel.trim())),
        ("rustc".into(), version_of(&rustc, &["--version"]).unwrap_or_else(|e| e)),
        ("node".into(), version_of("node", &["--version"]).unwrap_or_else(|e| e)),
    ]
}

/// The generated session of `size` messages with `steps` steps. It is written anew on every
/// run (a few seconds at 20,000 messages), so a change to the generator is never measured
/// against a stale file.
fn session_file(size: usize, steps: usize) -> std::io::Result<PathBuf> {
    let path = work_dir().join(format!("session-{size}.json"));
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: size, steps, seed: SEED });
    dcp_testkit::gen::write_session(&session, &path)?;
    Ok(path)
}

/// Runs `bench/transform/run.mjs` and returns its JSON line. Killed after `limit`.
fn run_transform(plugin: &str, session: &Path, plan: Plan, limit: Duration) -> Result<Value, String> {
    let script = repo().join("bench/transform/run.mjs");
    // A 20,000-message history and its copies need more than node's default heap.
    let mut child = Command::new("node")
        .arg("--max-old-space-size=8192")
        // run.mjs collects its own copies' garbage outside the timed calls (see there).
        .arg("--expose-gc")
        .arg(&script)
        .args(["--plugin", plugin, "--steps", &plan.steps.to_string(), "--first-runs", &plan.first.to_string()])
        .args(["--min-steps", &plan.min_steps.to_string(), "--budget-s", &plan.budget_s.to_string()])
        .arg("--session")
        .arg(session)
        .arg("--bin")
        .arg(dcp_bin())
        .current_dir(repo().join("bench/transform"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run node: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("killed after {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        let last = err.lines().filter(|l| !l.trim().is_empty()).take(3).collect::<Vec<_>>().join(" / ");
        return Err(format!("run.mjs exited with {status}: {last}"));
    }
    let line = out.lines().rev().find(|l| l.trim_start().starts_with('{')).ok_or("run.mjs printed no result")?;
    serde_json::from_str(line).map_err(|e| format!("bad result line ({e}): {line}"))
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Installs the published plugin with npm if it is not there yet.
fn ensure_published() -> Result<(), String> {
    let dir = repo().join("bench/transform");
    if dir.join("node_modules/@tarquinen/opencode-dcp/package.json").exists() {
        return Ok(());
    }
    eprintln!("bench: installing the published DCP plugin with npm in {}", dir.display());
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("npm is unavailable: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("npm install failed: {}", err.lines().last().unwrap_or("")));
    }
    Ok(())
}

fn steps_note(r: &Value) -> String {
    let budget = if r["steps_stopped_by_budget"].as_bool() == Some(true) { ", stopped by the time budget" } else { "" };
    format!("{} first run(s), {} steps{budget}", r["first_runs_ms"].as_array().map_or(0, Vec::len), r["steps"])
}

/// Transform round trips: dcp's plugin, then the published one, size by size.
fn transform_rows(sizes: &[usize], ours_on: bool, published_on: bool, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    if let Err(e) = version_of("node", &["--version"]) {
        notes.push(format!("Transform rows skipped: node is unavailable ({e})."));
        return;
    }
    let published_ready = if published_on {
        ensure_published().map_err(|e| notes.push(format!("Published-plugin rows skipped: {e}."))).is_ok()
    } else {
        false
    };
    let published_sizes = list_env("DCP_BENCH_PUBLISHED_SIZES").unwrap_or_else(|| PUBLISHED_SIZES.to_vec());
    let limit = Duration::from_secs(1_800);
    let mut ours_results: Vec<(usize, Value)> = Vec::new();
    for &size in sizes {
        let steps = plan("ours", size).steps.max(plan("published", size).steps);
        let session = match session_file(size, steps) {
            Ok(s) => s,
            Err(e) => {
                notes.push(format!("Cannot write the {size}-message session: {e}."));
                continue;
            }
        };
        let label = format!("{} msgs", dcp::format::thousands(size as u64));
        if ours_on {
            eprintln!("bench: transform, dcp, {size} messages");
            match run_transform("ours", &session, plan("ours", size), limit) {
                Ok(r) => {
                    ours_rows(size, &label, &r, rows, notes);
                    ours_results.push((size, r));
                }
                Err(e) => notes.push(format!("transform, dcp, {size} messages: {e}")),
            }
        }
        if !published_ready {
            continue;
        }
        if !published_sizes.contains(&size) {
            notes.push(format!(
                "Published DCP not run at {size} messages by default: it takes minutes per request there \
                 (see BENCHMARKS.md; DCP_BENCH_PUBLISHED_SIZES=200,{size} runs it)."
            ));
            continue;
        }
        eprintln!("bench: transform, published DCP, {size} messages");
        match run_transform("published", &session, plan("published", size), limit) {
            Ok(r) => {
                let ours = ours_results.iter().find(|(s, _)| *s == size).map(|(_, r)| r);
                let ratio = |key: &str| -> String {
                    match (num(&r, key), ours.and_then(|o| num(o, key))) {
                        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x dcp's", a / b),
                        _ => "no dcp figure to compare".into(),
                    }
                };
                let name = format!("transform, published DCP 3.1.14, {label}");
                rows.push(Row::new(format!("{name}: first request"), num(&r, "first_ms"), "ms", None).note(format!(
                    "{}; {}; {} calls pruned",
                    ratio("first_ms"),
                    steps_note(&r),
                    r["pruned_last"]
                )));
                rows.push(
                    Row::new(format!("{name}: steady p50"), num(&r, "steady_p50_ms"), "ms", None)
                        .note(ratio("steady_p50_ms")),
                );
                rows.push(
                    Row::new(format!("{name}: steady p99"), num(&r, "steady_p99_ms"), "ms", None)
                        .note(ratio("steady_p99_ms")),
                );
            }
            Err(e) => notes.push(format!("transform, published DCP, {size} messages: {e}")),
        }
    }
}

/// The rows of one run of dcp's plugin.
fn ours_rows(size: usize, label: &str, r: &Value, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let two_k = size == 2_000;
    let mut note = format!(
        "{}; {} calls pruned on the first request, {} after the last step",
        steps_note(r),
        r["pruned_first"],
        r["pruned_last"]
    );
    if let Some(w) = r["warnings"].as_array().filter(|w| !w.is_empty()) {
        note.push_str(&format!("; warnings: {w:?}"));
    }
    rows.push(Row::new(format!("transform, dcp, {label}: first request"), num(r, "first_ms"), "ms", None).note(note));
    let ms_of = |key: &str| num(r, key).map(|v| fmt_value(v, "ms")).unwrap_or_else(|| "?".into());
    let mut p50_note = num(r, "sidecar_cpu_ms_per_step")
        .map(|c| format!("sidecar CPU {} per step", fmt_value(c, "ms")))
        .unwrap_or_default();
    p50_note.push_str(&format!("; copying the history once takes node {}", ms_of("copy_p50_ms")));
    rows.push(
        Row::new(format!("transform, dcp, {label}: steady p50"), num(r, "steady_p50_ms"), "ms", two_k.then_some(1.0))
            .note(p50_note),
    );
    let mut p99_note = format!(
        "{} of {} steps had a node GC inside; of the {} over 5 ms, {} did; the others' p99 {}",
        r["steady_steps_with_gc"],
        r["steps"],
        r["steady_slow_steps"],
        r["steady_slow_steps_with_gc"],
        ms_of("steady_p99_without_gc_ms")
    );
    if r["steps"].as_u64().unwrap_or(0) < 100 {
        p99_note.push_str("; fewer than 100 steps: the slowest one");
    }
    rows.push(
        Row::new(format!("transform, dcp, {label}: steady p99"), num(r, "steady_p99_ms"), "ms", two_k.then_some(5.0))
            .note(p99_note),
    );
    if size == 20_000 {
        let rss = num(r, "sidecar_peak_rss_kb").map(|kb| kb / 1024.0);
        rows.push(
            Row::new("sidecar peak RSS (VmHWM), 20,000 msgs", rss, "MB", Some(50.0))
                .note("over the first request and every step"),
        );
    }
    if pruned_nothing(r) {
        notes.push(format!("dcp pruned nothing at {size} messages: the transform may have passed through."));
    }
}

fn pruned_nothing(r: &Value) -> bool {
    r["pruned_first"].as_u64() == Some(0) && r["pruned_last"].as_u64() == Some(0)
}

/// All-time stats over 10,000 generated state files: the first call of a process without a
/// cache, a new `dcp stats` process with the cache on disk, repeated calls in one process
/// (the sidecar's case), and a call after ten files changed.
fn stats_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let root = work_dir().join("stats");
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    let cache = root.join("cache");
    let dir = data.join("storage/plugin/dcp");
    let summary = match dcp_testkit::gen::write_states(10_000, SEED, &dir) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!("Stats rows skipped: cannot write state files: {e}."));
            return;
        }
    };
    eprintln!("bench: all-time stats over {} state files", summary.files);
    let t = Instant::now();
    let first = dcp::stats::all_time(&dir, Some(&cache.join("dcp")));
    let cold = ms(t.elapsed());
    match first {
        Ok(all) if all.tokens_saved == summary.tokens_saved && all.tools_pruned == summary.tools_pruned => {}
        Ok(all) => notes.push(format!(
            "all_time disagrees with the generator: {} tokens / {} tools vs {} / {}.",
            all.tokens_saved, all.tools_pruned, summary.tokens_saved, summary.tools_pruned
        )),
        Err(e) => {
            notes.push(format!("all_time failed: {e}."));
            return;
        }
    }
    // A new process each time, as a user's `dcp stats` is, with the cache the first call left.
    let mut process = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let out = Command::new(dcp_bin())
            .args(["stats", "--json", "--data-dir"])
            .arg(&data)
            .env("HOME", &root)
            .env("XDG_CACHE_HOME", &cache)
            .env("XDG_CONFIG_HOME", root.join("config"))
            .output();
        process.push(ms(t.elapsed()));
        match out {
            Ok(out) if out.status.success() => {
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                if v["all_time"]["tokens_saved"].as_u64() != Some(summary.tokens_saved) {
                    notes.push("`dcp stats` disagrees with the generator.".to_string());
                    break;
                }
            }
            other => {
                notes.push(format!("`dcp stats` failed: {other:?}."));
                break;
            }
        }
    }
    let process = sorted(process);
    // 20 more calls, or fewer (at least 5) when they take more than 15 s in all.
    let budget = Instant::now();
    let mut repeated = Vec::new();
    while repeated.len() < 20 && (repeated.len() < 5 || budget.elapsed() < Duration::from_secs(15)) {
        let t = Instant::now();
        let _ = dcp::stats::all_time(&dir, Some(&cache.join("dcp")));
        repeated.push(ms(t.elapsed()));
    }
    let calls = repeated.len();
    let repeated = sorted(repeated);
    // Ten sessions saved again (rewritten in place, as the published plugin does).
    let mut names: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
    names.sort();
    for path in names.iter().take(10) {
        if let Ok(text) = std::fs::read(path) {
            let _ = std::fs::write(path, text);
        }
    }
    let t = Instant::now();
    let _ = dcp::stats::all_time(&dir, Some(&cache.join("dcp")));
    let after_change = ms(t.elapsed());
    let mb = summary.bytes as f64 / 1e6;
    rows.push(
        Row::new("all-time stats, 10,000 state files: first call, no cache", Some(cold), "ms", Some(50.0))
            .note(format!("{mb:.1} MB of state files, just written (page cache warm); writes the cache")),
    );
    rows.push(
        Row::new(
            "all-time stats, 10,000 state files: `dcp stats` process, cache on disk",
            p(&process, 0.5),
            "ms",
            Some(50.0),
        )
        .note(format!(
            "p50 of {} runs, process start included; p99 {}",
            process.len(),
            p(&process, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default()
        )),
    );
    rows.push(Row::new("all-time stats, 10,000 state files: repeated p50", p(&repeated, 0.5), "ms", Some(5.0)).note(
        format!(
            "{calls} calls in one process; p99 {}; after 10 files were rewritten: {}",
            p(&repeated, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default(),
            fmt_value(after_change, "ms")
        ),
    ));
    let _ = std::fs::remove_dir_all(&root);
}

/// The agent's `discard` tool on a 2,000-message session, in process: the sidecar's
/// `Server` after a first request, p50 of 5 calls (each refused, so the session stays as it is).
fn tools_rows(rows: &mut Vec<Row>) {
    eprintln!("bench: discard on 2000 messages");
    let root = work_dir().join("tools");
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::Options { data_dir: root.join("data"), env, project: None };
    let Ok(mut server) = dcp::sidecar::Server::new(options, None) else { return };
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 2_000, steps: 0, seed: SEED });
    let mut ask = |id: usize, method: &str, params: Value| {
        let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        server.handle_line(&line)
    };
    ask(0, "initialize", serde_json::json!({"protocol": 1}));
    ask(1, "transform", serde_json::json!({"sessionID": session.session_id, "messages": session.messages}));
    let mut times = Vec::new();
    for i in 0..5 {
        let args = serde_json::json!({"ids": ["999999"], "reason": "noise"});
        let t = Instant::now();
        ask(2 + i, "tool", serde_json::json!({"sessionID": session.session_id, "name": "discard", "args": args}));
        times.push(ms(t.elapsed()));
    }
    rows.push(
        Row::new("discard tool call, 2,000 msgs, in process, p50", p(&sorted(times), 0.5), "ms", None)
            .note("5 calls; the prunable list is worked out from the whole history"),
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `dcp serve` from spawn to the answer of `initialize`, over 20 spawns.
fn startup_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let home = work_dir().join("startup-home");
    let _ = std::fs::create_dir_all(&home);
    eprintln!("bench: sidecar start to first answer");
    let mut times = Vec::new();
    for _ in 0..20 {
        match spawn_and_initialize(&home) {
            Ok(t) => times.push(t),
            Err(e) => {
                notes.push(format!("Sidecar start: {e}."));
                return;
            }
        }
    }
    let times = sorted(times);
    rows.push(
        Row::new("sidecar start to first answer (initialize), p50", p(&times, 0.5), "ms", Some(20.0))
            .note(format!("20 spawns; p99 {}", p(&times, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default())),
    );
}

fn spawn_and_initialize(home: &Path) -> Result<f64, String> {
    let started = Instant::now();
    let mut child = Command::new(dcp_bin())
        .arg("serve")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("OPENCODE_CONFIG_DIR")
        .env_remove("OPENCODE_DB")
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot spawn dcp serve: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":1}}"#;
    writeln!(stdin, "{request}").map_err(|e| e.to_string())?;
    stdin.flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|e| e.to_string())?;
    let elapsed = ms(started.elapsed());
    // Closing stdin makes the sidecar save and exit.
    drop(stdin);
    let _ = child.wait();
    let answer: Value = serde_json::from_str(&line).map_err(|e| format!("bad answer {line:?}: {e}"))?;
    if answer.get("result").is_none() {
        return Err(format!("initialize failed: {line}"));
    }
    Ok(elapsed)
}

/// o200k counting over a few MB of generated tool outputs, after the tables are loaded.
fn tokenizer_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    use dcp::tokens::{EstimatorChoice, TokenCounter};
    eprintln!("bench: tokenizer");
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 2_000, steps: 0, seed: SEED });
    let mut corpus: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for out in session.tool_outputs() {
        if bytes >= 4_000_000 {
            break;
        }
        bytes += out.len();
        corpus.push(out);
    }
    let counter = TokenCounter::new(EstimatorChoice::Auto);
    let t = Instant::now();
    let _ = counter.count("warm up: load the tables");
    let load = ms(t.elapsed());
    if counter.estimator() != dcp::tokens::Estimator::O200k {
        notes.push("The o200k tokenizer is unavailable: the tokenizer row measures chars/4.".into());
    }
    let mut tokens = 0;
    let passes: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            tokens = corpus.iter().map(|s| counter.count(s)).sum::<u64>();
            t.elapsed().as_secs_f64()
        })
        .collect();
    let secs = p(&sorted(passes), 0.5).unwrap_or(0.0);
    let mbps = if secs > 0.0 { bytes as f64 / 1e6 / secs } else { 0.0 };
    rows.push(Row::new("tokenizer (o200k) throughput", Some(mbps), "MB/s", None).note(format!(
        "{} outputs, {:.1} MB, {} tokens, median of 3 passes; loading the tables took {}",
        corpus.len(),
        bytes as f64 / 1e6,
        tokens,
        fmt_value(load, "ms")
    )));
}

fn selected() -> Vec<String> {
    let mut words: Vec<String> = std::env::var("DCP_BENCH")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    // `cargo bench` passes `--bench`; anything else not starting with `-` names a group.
    words.extend(std::env::args().skip(1).filter(|a| !a.starts_with('-')).map(|a| a.to_lowercase()));
    if words.is_empty() || words.iter().any(|w| w == "all") {
        return GROUPS.iter().map(|g| g.to_string()).collect();
    }
    for w in &words {
        if !GROUPS.contains(&w.as_str()) {
            eprintln!("bench: unknown group {w:?}; groups: {}", GROUPS.join(", "));
        }
    }
    words
}

/// A comma-separated list of sizes from the environment (`2000` or `2_000`), if set.
fn list_env(name: &str) -> Option<Vec<usize>> {
    let sizes: Vec<usize> = std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect();
    (!sizes.is_empty()).then_some(sizes)
}

fn sizes() -> Vec<usize> {
    list_env("DCP_BENCH_SIZES").unwrap_or_else(|| SIZES.to_vec())
}

fn main() {
    let groups = selected();
    let on = |g: &str| groups.iter().any(|x| x == g);
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    if on("transform") || on("published") {
        transform_rows(&sizes(), on("transform"), on("published"), &mut rows, &mut notes);
    }
    if on("stats") {
        stats_rows(&mut rows, &mut notes);
    }
    if on("startup") {
        startup_rows(&mut rows, &mut notes);
    }
    if on("tokenizer") {
        tokenizer_rows(&mut rows, &mut notes);
    }
    if on("tools") {
        tools_rows(&mut rows);
    }

    let mut md = String::new();
    md.push_str("## dcp benchmark results\n\n");
    md.push_str(&format!(
        "`cargo bench --bench bench` (groups: {}), {}, in {:.0} s.\n\n",
        groups.join(", "),
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        started.elapsed().as_secs_f64()
    ));
    md.push_str("| machine | |\n|---|---|\n");
    for (k, v) in machine() {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    md.push_str("\n| measurement | value | target | met | notes |\n|---|---:|---:|---|---|\n");
    for r in &rows {
        let value = r.value.map(|v| fmt_value(v, r.unit)).unwrap_or_else(|| "—".into());
        let target = r.target.map(|t| format!("≤ {}", fmt_value(t.max, r.unit))).unwrap_or_else(|| "—".into());
        md.push_str(&format!("| {} | {} | {} | {} | {} |\n", r.what, value, target, r.met(), r.note));
    }
    if !notes.is_empty() {
        md.push('\n');
        for n in &notes {
            md.push_str(&format!("- {n}\n"));
        }
    }
    println!("{md}");
    let out = target_dir().join("bench-results.md");
    match std::fs::write(&out, &md) {
        Ok(()) => eprintln!("bench: written to {}", out.display()),
        Err(e) => eprintln!("bench: cannot write {}: {e}", out.display()),
    }
}
