//! `dcp report`: the savings as one self-contained HTML page, with pictures.
//!
//! [`gather`] reads every state file of the data dir: the all-time figures (`crate::stats`),
//! each session's per-request trail (`crate::state::savings`), the tallies by strategy. The
//! sessions whose state files hold no trail (written by DCP, or by dcp before it kept one) are
//! replayed from OpenCode's history (`crate::replay`) for their chart, when the history is
//! there. [`page`] renders it: inline SVG and CSS, no script and nothing fetched, so it opens
//! from `file://` anywhere; every text that comes from the history is escaped. [`open`]
//! hands the file to the desktop's opener where there is a desktop.

mod charts;
mod money;
mod page;

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::host::paths::Env;
use crate::host::DataDir;
use crate::replay::{self, Mode, ReplayOptions};
use crate::state::persist::{self, LoadOutcome};
use crate::state::savings::{Mark, Point};
use crate::state::Strategy;
use crate::stats::{self, AllTime, SessionStats};
use crate::tokens::EstimatorChoice;

pub use page::page;

/// Sessions shown with a chart of their own, and in the table of those that saved most.
const CHARTED: usize = 8;
const LISTED: usize = 12;

/// Where the report's data is.
pub struct ReportSources<'a> {
    /// OpenCode's data dir, for the replays.
    pub data_dir: &'a Path,
    /// dcp's state dir in it.
    pub state_dir: &'a Path,
    pub env: &'a Env,
    pub config: &'a Config,
}

/// Everything the page shows.
#[derive(Debug)]
pub struct Report {
    pub all: AllTime,
    pub state_dir: PathBuf,
    /// When it was made, ISO 8601.
    pub generated: String,
    /// Every request of every session in time order: its time, and the tokens kept out and
    /// the cost saved so far, over all sessions.
    pub over_time: Vec<(i64, i64, f64)>,
    pub strategies: Vec<StrategyRow>,
    /// The sessions that saved most, most first.
    pub sessions: Vec<SessionView>,
    /// The control group's comparison (see `crate::stats::trial`).
    pub trial: stats::trial::Comparison,
}

/// One strategy's figures: DCP's one-time pruned size, and what of it is in force now.
#[derive(Debug)]
pub struct StrategyRow {
    pub name: &'static str,
    pub pruned: u64,
    pub in_force: u64,
    pub tools: u64,
}

/// One session, with its requests' context sizes.
#[derive(Debug)]
pub struct SessionView {
    pub stats: SessionStats,
    pub points: Vec<Point>,
    pub source: ChartSource,
}

/// Where a session's chart comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartSource {
    /// The requests dcp answered, as its state file recorded them.
    State,
    /// A replay of the session's history, for a state file that holds no requests.
    Replay,
    /// Neither: no chart.
    Missing,
}

/// Reads the data dir for the report.
pub fn gather(inputs: &ReportSources<'_>) -> std::io::Result<Report> {
    let cache = inputs.env.cache_dir();
    let all = stats::AllTimeCache::default().all_time(inputs.state_dir, Some(&cache))?;
    let all = all.priced(&stats::money::all_time_sheet(inputs.config));
    let mut measured = Vec::new();
    let mut sessions: Vec<SessionView> = Vec::new();
    // Every strategy a newer dcp recorded is one row, "other".
    let mut strategies: Vec<StrategyRow> =
        Strategy::reported_names().map(|name| StrategyRow { name, pruned: 0, in_force: 0, tools: 0 }).collect();
    for (id, path) in state_files(inputs.state_dir)? {
        let LoadOutcome::Loaded(state) = persist::load_path(&path) else { continue };
        for (name, tally) in state.stats.reported() {
            if let Some(row) = strategies.iter_mut().find(|r| r.name == name) {
                row.pruned += tally.tokens;
                row.tools += tally.tools;
            }
        }
        // Counted as `/dcp stats` counts what is in force: prunes and ranges alike.
        for cut in state.cuts().filter(|c| c.applied) {
            if let Some(row) = strategies.iter_mut().find(|r| r.name == cut.strategy.name()) {
                row.in_force += cut.tokens;
            }
        }
        let source = if state.savings.trail.is_empty() { ChartSource::Missing } else { ChartSource::State };
        let points = state.savings.trail.clone();
        let sheet = stats::money::sheet_of(&state, inputs.config);
        measured.extend(stats::trial::measured(&state, &sheet));
        let stats = stats::session(&id, &state).priced(&state, inputs.config);
        sessions.push(SessionView { stats, points, source });
    }
    strategies.retain(|s| s.pruned > 0 || s.tools > 0 || s.in_force > 0);
    let over_time = over_time(&sessions);
    // Most kept out first; sessions that recorded no requests by what they pruned.
    sessions.sort_by(|a, b| {
        let key = |s: &SessionView| (s.stats.figures.kept_out_tokens, s.stats.pruned_tokens);
        key(b).cmp(&key(a)).then_with(|| a.stats.session_id.cmp(&b.stats.session_id))
    });
    sessions.retain(|s| s.stats.figures.requests > 0 || s.stats.pruned_tokens > 0);
    sessions.truncate(LISTED);
    let data = DataDir::new(inputs.data_dir, inputs.env);
    for view in sessions.iter_mut().take(CHARTED).filter(|v| v.source == ChartSource::Missing) {
        if let Some(points) = replayed(&data, inputs.config, &view.stats.session_id) {
            (view.points, view.source) = (points, ChartSource::Replay);
        }
    }
    let generated = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let trial = stats::trial::compare(&measured);
    Ok(Report { all, state_dir: inputs.state_dir.to_path_buf(), generated, over_time, strategies, sessions, trial })
}

/// The control group's comparison over the state files of `state_dir` (`dcp stats --json`).
pub fn trial(state_dir: &Path, config: &Config) -> std::io::Result<stats::trial::Comparison> {
    let mut measured = Vec::new();
    for (_, path) in state_files(state_dir)? {
        let LoadOutcome::Loaded(state) = persist::load_path(&path) else { continue };
        measured.extend(stats::trial::measured(&state, &stats::money::sheet_of(&state, config)));
    }
    Ok(stats::trial::compare(&measured))
}

/// The state files of `dir` and its proxied conversations' folders, by session id, in name
/// order.
fn state_files(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    let proxied = persist::proxied_entries(dir).into_iter().map(|(_, entry)| Ok(entry));
    for entry in proxied.chain(entries) {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        if let Some(id) = name.strip_suffix(".json").filter(|id| persist::is_session_id(id)) {
            out.push((id.to_string(), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The running totals over every session's requests, in time order.
fn over_time(sessions: &[SessionView]) -> Vec<(i64, i64, f64)> {
    let mut points: Vec<&Point> = sessions.iter().flat_map(|s| &s.points).collect();
    points.sort_by_key(|p| p.time);
    let (mut kept, mut saved) = (0i64, 0f64);
    points
        .into_iter()
        .map(|p| {
            kept += p.without as i64 - p.with as i64;
            saved += p.saved as f64;
            (p.time, kept, saved)
        })
        .collect()
}

/// Session `id`'s requests with and without dcp, from a replay of its history; `None` when
/// the history is not there or cannot be replayed.
fn replayed(data: &DataDir, config: &Config, id: &str) -> Option<Vec<Point>> {
    let loaded = data.load(id).ok()?;
    let info = &loaded.info;
    let directory = (!info.directory.is_empty()).then(|| Path::new(&info.directory));
    let session = replay::RecordedSession {
        id,
        parent_id: info.parent_id.as_deref(),
        directory,
        messages: &loaded.messages,
        totals: None,
    };
    let options = ReplayOptions {
        modes: Vec::new(),
        prices: replay::Prices::anthropic(replay::cost::Ttl::Seconds(300)),
        context_limit: None,
        overhead: replay::OPENCODE_OVERHEAD,
        config: config.clone(),
        estimator: EstimatorChoice::Auto,
    };
    let result = replay::replay(&session, &options).ok()?;
    let run = |mode: Mode| result.runs.iter().find(|(m, _)| *m == mode).map(|(_, r)| r);
    let (none, dcp) = (run(Mode::None)?, run(Mode::Dcp)?);
    let points = none.per_request.iter().zip(&dcp.per_request).map(|(n, d)| Point {
        time: d.time,
        without: n.bill.tokens,
        with: d.bill.tokens,
        saved: (n.bill.cost - d.bill.cost).round() as i64,
        mark: match d.rewrite.as_deref() {
            Some("host") => Mark::Compaction,
            Some(_) => Mark::Rewrite,
            None => Mark::None,
        },
    });
    Some(points.collect())
}

/// Writes the report of `inputs` to `out`.
pub fn write(inputs: &ReportSources<'_>, out: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let report =
        gather(inputs).with_context(|| format!("cannot read the state files in {}", inputs.state_dir.display()))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(out, page(&report)).with_context(|| format!("cannot write {}", out.display()))
}

/// Where the report goes unless told: dcp's cache dir.
pub fn default_path(env: &Env) -> PathBuf {
    env.cache_dir().join("report.html")
}

/// What `--open` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// The desktop's opener took it.
    Opened,
    /// No desktop here (no display), or no opener: the user opens it.
    NoDesktop,
}

/// Opens `file` in the desktop's browser where there is a desktop (a display and
/// `xdg-open`; `open` on macOS).
pub fn open(file: &Path) -> Opened {
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    let desktop = cfg!(target_os = "macos")
        || std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
        || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty());
    if !desktop {
        return Opened::NoDesktop;
    }
    let spawned = std::process::Command::new(opener)
        .arg(file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(_) => Opened::Opened,
        Err(_) => Opened::NoDesktop,
    }
}

/// `text` with what HTML would read as markup escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}
