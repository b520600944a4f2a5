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

mod others;
mod tokenizer;
mod transform;

use others::{startup_rows, stats_rows, tools_rows};
use tokenizer::tokenizer_rows;
use transform::transform_rows;

const GROUPS: [&str; 6] = ["transform", "published", "stats", "startup", "tokenizer", "tools"];
const SIZES: [usize; 3] = [200, 2_000, 20_000];
const SEED: u64 = 1;
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
    // The tokenizer group re-runs this binary to measure one tokenizer alone.
    tokenizer::probe_if_asked();
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
