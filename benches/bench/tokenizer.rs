//! The tokenizer group: dcp's own o200k counter (`dcp::tokens`) against `bpe-openai` 0.3, the
//! tokenizer it replaced (kept as a dev-dependency, the oracle of `tests/it/tokens.rs`), in one
//! run: throughput over a few MB of generated tool outputs, passes of the two interleaved so
//! the machine's drift hits both alike; the time of pathological inputs (1 MB of one
//! character, 1 MB of base64); and the memory of a process that loads one tokenizer and counts
//! one string (this binary again, with `DCP_BENCH_TOKENIZER_PROBE` set).

use super::*;

const PROBE_ENV: &str = "DCP_BENCH_TOKENIZER_PROBE";

#[derive(Clone, Copy, PartialEq)]
enum Which {
    Dcp,
    BpeOpenai,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Dcp => "dcp",
            Which::BpeOpenai => "bpe-openai 0.3",
        }
    }

    fn count(self, text: &str) -> u64 {
        match self {
            Which::Dcp => dcp::tokens::TokenCounter::new(dcp::tokens::EstimatorChoice::Auto).count(text),
            Which::BpeOpenai => bpe_openai::o200k_base().count(text) as u64,
        }
    }
}

/// This thread's CPU time. The machine is shared: under load, wall time measures the
/// scheduler more than the tokenizer, so the rows below time CPU.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A line of `/proc/self/status` in kB (`VmHWM`, `VmRSS`).
fn status_kb(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// In the child the probe starts: loads the tokenizer named by `DCP_BENCH_TOKENIZER_PROBE`,
/// counts one string, prints `load_ms hwm_before_kb hwm_after_kb` and exits.
pub(crate) fn probe_if_asked() {
    let Ok(which) = std::env::var(PROBE_ENV) else { return };
    let which = if which == "dcp" { Which::Dcp } else { Which::BpeOpenai };
    let before = status_kb("VmHWM").unwrap_or(0);
    let t = Instant::now();
    let n = which.count("Hello, world!");
    let load = ms(t.elapsed());
    assert_eq!(n, 4);
    println!("{load} {before} {}", status_kb("VmHWM").unwrap_or(0));
    std::process::exit(0);
}

/// Runs the probe for `which`: (load ms, peak RSS before, peak RSS after, in kB).
fn probe(which: Which) -> Result<(f64, u64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let name = if which == Which::Dcp { "dcp" } else { "bpe-openai" };
    let out = Command::new(exe).env(PROBE_ENV, name).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    match fields[..] {
        [load, before, after] => Ok((
            load.parse().map_err(|_| format!("bad probe output {text:?}"))?,
            before.parse().map_err(|_| format!("bad probe output {text:?}"))?,
            after.parse().map_err(|_| format!("bad probe output {text:?}"))?,
        )),
        _ => Err(format!("the probe printed {text:?} ({})", out.status)),
    }
}

/// o200k counting over a few MB of generated tool outputs, for both tokenizers.
pub(crate) fn tokenizer_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    eprintln!("bench: tokenizer");
    for which in [Which::Dcp, Which::BpeOpenai] {
        match probe(which) {
            Ok((load, before, after)) => rows.push(
                Row::new(
                    format!("tokenizer tables, {}: peak RSS of a process that counts one string", which.name()),
                    Some(after as f64 / 1024.0),
                    "MB",
                    None,
                )
                .note(format!(
                    "{} before loading; the first count (loading included) took {}",
                    fmt_value(before as f64 / 1024.0, "MB"),
                    fmt_value(load, "ms")
                )),
            ),
            Err(e) => notes.push(format!("Tokenizer probe for {}: {e}.", which.name())),
        }
    }
    if dcp::tokens::TokenCounter::new(dcp::tokens::EstimatorChoice::Auto).estimator() != dcp::tokens::Estimator::O200k {
        notes.push("dcp's o200k tokenizer is unavailable: its rows measure chars/4.".into());
    }
    throughput_rows(rows);
    pathological_rows(rows);
}

fn throughput_rows(rows: &mut Vec<Row>) {
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
    let both = [Which::Dcp, Which::BpeOpenai];
    for which in both {
        let _ = which.count("warm up: load the tables");
    }
    let counter = dcp::tokens::TokenCounter::new(dcp::tokens::EstimatorChoice::Auto);
    let bpe = bpe_openai::o200k_base();
    let mut passes = [Vec::new(), Vec::new()];
    let mut tokens = [0, 0];
    for _ in 0..5 {
        for (i, which) in both.into_iter().enumerate() {
            let t = cpu_now();
            tokens[i] = match which {
                Which::Dcp => corpus.iter().map(|s| counter.count(s)).sum::<u64>(),
                Which::BpeOpenai => corpus.iter().map(|s| bpe.count(*s) as u64).sum::<u64>(),
            };
            passes[i].push((cpu_now() - t).as_secs_f64());
        }
    }
    for (i, which) in both.into_iter().enumerate() {
        let secs = p(&sorted(passes[i].clone()), 0.5).unwrap_or(0.0);
        let mbps = if secs > 0.0 { bytes as f64 / 1e6 / secs } else { 0.0 };
        rows.push(Row::new(format!("tokenizer (o200k) throughput, {}", which.name()), Some(mbps), "MB/s", None).note(
            format!(
                "{} outputs, {:.1} MB, {} tokens; CPU time, median of 5 passes interleaved with the other tokenizer's",
                corpus.len(),
                bytes as f64 / 1e6,
                tokens[i]
            ),
        ));
    }
}

/// Inputs that are one long piece, or very many: the merge must not go quadratic.
fn pathological_rows(rows: &mut Vec<Row>) {
    let mut rng = dcp_testkit::gen::Rng::new(SEED);
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let base64: String = (0..1 << 20).map(|_| *rng.pick(alphabet).unwrap_or(&b'A') as char).collect();
    let inputs = [("1 MB of one character", "a".repeat(1 << 20)), ("1 MB of base64 on one line", base64)];
    for (what, text) in &inputs {
        for which in [Which::Dcp, Which::BpeOpenai] {
            let t = cpu_now();
            let n = which.count(text);
            let took = ms(cpu_now() - t);
            rows.push(
                Row::new(format!("tokenizer, {what}, {}", which.name()), Some(took), "ms", None)
                    .note(format!("{n} tokens; CPU time")),
            );
        }
    }
}
