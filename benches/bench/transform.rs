//! The transform groups: the plugin's transform hook, dcp's and the published DCP's, on
//! generated sessions, driven from node by `bench/transform/run.mjs`.

use super::*;

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
pub(crate) fn transform_rows(
    sizes: &[usize],
    ours_on: bool,
    published_on: bool,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
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
                published_rows(&label, &r, ours, rows);
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
    memory_rows(size, label, r, rows);
    if pruned_nothing(r) {
        notes.push(format!("dcp pruned nothing at {size} messages: the transform may have passed through."));
    }
}

/// The sidecar's memory at 2,000 messages and more: its peak over the first request and the
/// steps (issue 17's targets), and what the steps added to it once the first request was
/// counted ahead.
fn memory_rows(size: usize, label: &str, r: &Value, rows: &mut Vec<Row>) {
    let target = match size {
        2_000 => Some(60.0),
        20_000 => Some(100.0),
        _ => None,
    };
    if size < 2_000 {
        return;
    }
    let mb = |key: &str| num(r, key).map(|kb| kb / 1024.0);
    let first = mb("sidecar_peak_rss_first_kb").map(|v| format!("; {} after the first request", fmt_value(v, "MB")));
    rows.push(
        Row::new(format!("sidecar peak RSS (VmHWM), {label}"), mb("sidecar_peak_rss_kb"), "MB", target)
            .note(format!("over the first request and every step{}", first.unwrap_or_default())),
    );
    let grown = mb("sidecar_rss_after_steps_kb").zip(mb("sidecar_rss_before_steps_kb")).map(|(a, b)| a - b);
    let note = match (mb("sidecar_rss_before_steps_kb"), mb("sidecar_rss_after_steps_kb")) {
        (Some(b), Some(a)) => format!("VmRSS {} before the steps, {} after", fmt_value(b, "MB"), fmt_value(a, "MB")),
        _ => String::new(),
    };
    rows.push(Row::new(format!("sidecar RSS growth over {} steps, {label}", r["steps"]), grown, "MB", None).note(note));
}

fn pruned_nothing(r: &Value) -> bool {
    r["pruned_first"].as_u64() == Some(0) && r["pruned_last"].as_u64() == Some(0)
}

/// The rows of one run of the published plugin, compared with dcp's run `ours` at its size.
fn published_rows(label: &str, r: &Value, ours: Option<&Value>, rows: &mut Vec<Row>) {
    let ratio = |key: &str| -> String {
        match (num(r, key), ours.and_then(|o| num(o, key))) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x dcp's", a / b),
            _ => "no dcp figure to compare".into(),
        }
    };
    let name = format!("transform, published DCP 3.1.14, {label}");
    rows.push(Row::new(format!("{name}: first request"), num(r, "first_ms"), "ms", None).note(format!(
        "{}; {}; {} calls pruned",
        ratio("first_ms"),
        steps_note(r),
        r["pruned_last"]
    )));
    rows.push(
        Row::new(format!("{name}: steady p50"), num(r, "steady_p50_ms"), "ms", None).note(ratio("steady_p50_ms")),
    );
    rows.push(
        Row::new(format!("{name}: steady p99"), num(r, "steady_p99_ms"), "ms", None).note(ratio("steady_p99_ms")),
    );
}
