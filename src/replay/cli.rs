//! The `dcp replay` command: which sessions, which modes, and the report.
//!
//! With `--all`, sessions are replayed on as many threads as there are cores, each session
//! on one thread (its runs one after the other), and reported in the order `dcp sessions`
//! lists them.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{Context as _, Result};

use super::cost::Ttl;
use super::report::{self, Header, Row};
use super::{Mode, Prices, RecordedSession, ReplayOptions, SessionReplay, OPENCODE_OVERHEAD, OPENCODE_OVERHEAD_CHARS};
use crate::config::Config;
use crate::host::paths::Env;
use crate::host::{DataDir, SessionInfo};
use crate::prices::Override;
use crate::session::Message;
use crate::tokens::{EstimatorChoice, TokenCounter};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session [default: the most recently updated top-level session]
    #[arg(long, value_name = "ID", conflicts_with = "all")]
    session: Option<String>,
    /// Every session of the data dir (subagents included), with the total, median and worst.
    #[arg(long)]
    all: bool,
    /// Seconds a provider keeps a cached prefix after its last use, or `never`, over every
    /// session's price sheet [default: the sheet's TTL]
    #[arg(long, value_name = "SECONDS", value_parser = parse_ttl)]
    cache_ttl: Option<Ttl>,
    /// The price sheet every session is billed and decided with: a family (anthropic-5m,
    /// anthropic-1h, openai, openai-24h, gemini, deepseek, none, local), a known model's id, or
    /// a JSON file of `prices` keys (sheet, input, output, cacheRead, cacheWrite, currency,
    /// ttlSeconds) over each session's own; `auto`: each session's own, from its model and the
    /// usage it recorded.
    #[arg(long, value_name = "SHEET|FILE", default_value = "auto", value_parser = parse_prices)]
    prices: Given,
    /// More runs besides `none` and `dcp`, comma separated: immediate, deduplication,
    /// supersede-writes, purge-errors, masking, agent-tools, or all.
    #[arg(long, value_name = "MODES", value_delimiter = ',', value_parser = parse_mode)]
    mode: Vec<Vec<Mode>>,
    /// The model's context window in tokens, for dcp's pressure rule.
    #[arg(long, value_name = "TOKENS", default_value_t = 200_000)]
    context_limit: u64,
    /// Tokens of the system prompt and tool definitions in every request (not stored with a
    /// session, so estimated: OpenCode 1.18.33's, measured in the lab).
    /// [default: 6,700 o200k tokens, 7,355 characters / 4]
    #[arg(long, value_name = "TOKENS")]
    overhead: Option<u64>,
    /// Count o200k tokens, or characters / 4 as the lab's summarize.py does (`chars`).
    #[arg(long, value_name = "o200k|chars", default_value = "o200k", value_parser = parse_estimator)]
    estimator: EstimatorChoice,
    /// Also write, per session, DIR/<session id>.jsonl: one line per request of the `dcp`
    /// mode, {index, message_id, time, messages}, with the messages exactly as dcp's transform
    /// answered them.
    #[arg(long, value_name = "DIR")]
    requests: Option<std::path::PathBuf>,
}

/// What every session of one `dcp replay` is replayed with.
struct Job<'a> {
    data: &'a DataDir,
    options: &'a ReplayOptions,
    /// Where to write the requests (`--requests`).
    requests: Option<&'a Path>,
}

fn parse_estimator(s: &str) -> Result<EstimatorChoice, String> {
    match s {
        "o200k" => Ok(EstimatorChoice::Auto),
        "chars" => Ok(EstimatorChoice::CharsDiv4),
        _ => Err(format!("{s:?} is not o200k or chars")),
    }
}

fn parse_ttl(s: &str) -> Result<Ttl, String> {
    match s {
        "never" => Ok(Ttl::Never),
        _ => s.parse().map(Ttl::Seconds).map_err(|_| format!("{s:?} is not a number of seconds or `never`")),
    }
}

/// What `--prices` said, and the override it gives.
#[derive(Debug, Clone)]
struct Given {
    label: String,
    /// Boxed: the command's arguments stay small beside the others'.
    prices: Box<Override>,
}

fn parse_prices(s: &str) -> Result<Given, String> {
    let label = s.to_string();
    if s == "auto" {
        return Ok(Given { label, prices: Box::default() });
    }
    if crate::prices::named(s).is_some() {
        return Ok(Given { label, prices: Box::new(Override { sheet: Some(s.to_string()), ..Override::default() }) });
    }
    let path = Path::new(s);
    if !path.is_file() {
        let families = crate::prices::FAMILIES.join(", ");
        return Err(format!("{s:?} is no price sheet ({families}, a known model's id, auto) and no file"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {s}: {e}"))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{s} is not JSON: {e}"))?;
    let prices = Override::from_json(&value).map_err(|e| format!("{s}: {e}"))?;
    // Checked over a sheet without money: a cache price needs an input price to be a share of.
    let none = crate::prices::family("none").unwrap_or_default();
    prices.apply(none).map_err(|e| format!("{s}: {e}"))?;
    Ok(Given { label: path.display().to_string(), prices: Box::new(prices) })
}

fn parse_mode(s: &str) -> Result<Vec<Mode>, String> {
    match s {
        "all" => Ok(Mode::EXTRA.to_vec()),
        _ => Mode::from_name(s).map(|m| vec![m]).ok_or_else(|| {
            let names: Vec<&str> = Mode::EXTRA.iter().chain(&Mode::PARTS).map(|m| m.name()).collect();
            format!("unknown mode {s:?}; modes: {}, all", names.join(", "))
        }),
    }
}

/// Runs `dcp replay`.
pub fn run(args: &Args, data_dir: &Path, config: &Config, json: bool, out: &mut dyn Write) -> Result<()> {
    let data = DataDir::new(data_dir, &Env::from_process());
    let infos: Vec<SessionInfo> = if args.all {
        data.sessions()?
    } else {
        let id = match &args.session {
            Some(id) => id.clone(),
            None => data.latest()?.map(|s| s.id).with_context(|| format!("no sessions in {}", data_dir.display()))?,
        };
        crate::state::persist::validate_session_id(&id)?;
        vec![data.load(&id)?.info]
    };
    let overhead = args.overhead.unwrap_or(match args.estimator {
        EstimatorChoice::Auto => OPENCODE_OVERHEAD,
        EstimatorChoice::CharsDiv4 => OPENCODE_OVERHEAD_CHARS,
    });
    let options = ReplayOptions {
        modes: args.mode.iter().flatten().copied().collect(),
        prices: Prices { given: (*args.prices.prices).clone(), ttl: args.cache_ttl },
        context_limit: Some(args.context_limit),
        overhead,
        config: config.clone(),
        estimator: args.estimator,
    };
    let mut replayed: Vec<(&SessionInfo, SessionReplay)> = Vec::new();
    let job = Job { data: &data, options: &options, requests: args.requests.as_deref() };
    for (info, result) in infos.iter().zip(replay_all(&job, &infos)) {
        match result.with_context(|| format!("cannot replay session {}", info.id)) {
            Ok(r) => replayed.push((info, r)),
            // Over every session, one that cannot be replayed is named and left out.
            Err(e) if args.all => tracing::warn!("{e:#}; left out"),
            Err(e) => return Err(e),
        }
    }
    let rows: Vec<Row<'_>> = replayed
        .iter()
        .map(|(info, replay)| Row { title: &info.title, parent_id: info.parent_id.as_deref(), replay })
        .collect();
    let estimator = TokenCounter::new(args.estimator).estimator().name();
    let header = Header { estimator, ttl: args.cache_ttl, overhead, prices: args.prices.label.clone() };
    if json {
        serde_json::to_writer_pretty(&mut *out, &report::json(&header, &rows))?;
        writeln!(out)?;
    } else if args.all {
        out.write_all(report::sessions(&header, &rows).as_bytes())?;
    } else {
        out.write_all(report::session(&header, &rows[0]).as_bytes())?;
    }
    Ok(())
}

/// Replays every session of `infos`, on as many threads as there are cores; the results
/// come in the order of `infos`.
fn replay_all(job: &Job<'_>, infos: &[SessionInfo]) -> Vec<Result<SessionReplay>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(infos.len()).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<SessionReplay>>>> = Mutex::new((0..infos.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(info) = infos.get(i) else { return };
                let result = replay_one(job, info);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(result);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    results.into_iter().map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("not replayed")))).collect()
}

fn replay_one(job: &Job<'_>, info: &SessionInfo) -> Result<SessionReplay> {
    let loaded = job.data.load(&info.id)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let messages: Vec<Message> = loaded.messages;
    let directory = (!info.directory.is_empty()).then(|| Path::new(&info.directory));
    let totals = job.data.usage(&info.id).ok().flatten().map(|u| super::steps::Recorded {
        input: u.input,
        cache_read: u.cache_read,
        cache_write: u.cache_write,
        output: u.output,
        cost: u.cost,
        ..Default::default()
    });
    let (id, parent_id) = (info.id.as_str(), info.parent_id.as_deref());
    let session = RecordedSession { id, parent_id, directory, messages: &messages, totals };
    let replayed = super::replay(&session, job.options)?;
    if let Some(dir) = job.requests {
        let sent = super::requests(&session, Mode::Dcp, job.options)?;
        super::dump::write(dir, &info.id, &sent)?;
    }
    Ok(replayed)
}
