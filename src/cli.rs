//! The terminal CLI: `dcp sessions`, `dcp context`, `dcp sweep`, `dcp stats`, `dcp report` and `dcp doctor`.
//!
//! It works on OpenCode's data without OpenCode running: it reads sessions read-only and
//! writes only dcp's own state files. Every command takes `--data-dir DIR` and `--json`;
//! the JSON fields are listed in the README and stay stable. Exit codes: 0 success, 1 an
//! error (printed as `dcp: <error chain>`), 2 bad usage.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;

use crate::config::{self, Config};
use crate::context;
use crate::format;
use crate::host::paths::{self, Env};
use crate::host::{DataDir, LoadedSession, SessionInfo};
use crate::report;
use crate::session::visible_history;
use crate::state::persist;
use crate::state::store::SessionStore;
use crate::stats;
use crate::strategies::{self, Rules};
use crate::tokens::EstimatorChoice;

#[derive(Debug, Parser)]
#[command(
    name = "dcp",
    version,
    about = "Dynamic context pruning for OpenCode: see what tool outputs cost a session, prune them, and report the savings."
)]
pub struct Cli {
    /// OpenCode's data dir, holding opencode.db and/or storage/ [default: $XDG_DATA_HOME/opencode, else ~/.local/share/opencode]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List OpenCode's sessions, most recently updated first.
    Sessions,
    /// Show what the model is sent for a session, by category, before and after pruning.
    Context {
        /// The session [default: the most recently updated top-level session]
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Prune every tool call since the last user message, or the last N calls.
    Sweep {
        /// The session to prune (`dcp sessions` lists them).
        #[arg(long, value_name = "ID")]
        session: String,
        /// Prune the last N tool calls instead.
        #[arg(value_name = "N")]
        last: Option<usize>,
        /// Show what would be pruned, and save nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the tokens kept out and the cost saved, for a session and all-time.
    Stats {
        /// A session to show besides all-time (`dcp sessions` lists them).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Write the savings report: one HTML page (all-time savings over time, by strategy, the
    /// sessions that saved most, each one's context per request with and without dcp).
    Report {
        /// Where to write it [default: report.html in dcp's cache dir]
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Open it in the desktop's browser (where there is a desktop).
        #[arg(long)]
        open: bool,
    },
    /// Check the install: the binary and the plugin, OpenCode's config, every dcp.jsonc, the
    /// state dir, opencode.db and the logs. Exits 1 when something is wrong.
    Doctor,
    /// Replay recorded sessions: what each request would have cost and sent with dcp, and without.
    Replay(crate::replay::cli::Args),
    /// Run the sidecar the OpenCode plugin talks to: JSON-RPC on stdin/stdout (PROTOCOL.md).
    Serve,
    /// Print the exact text dcp hid behind a placeholder that says `dcp restore N`, from the
    /// running `dcp proxy` (for agents it serves, in their own shell).
    Restore {
        /// The number the placeholder names (or a tool call id, or a range's bN).
        #[arg(value_name = "N")]
        handle: String,
    },
    /// Run a local HTTP gateway that prunes what any client sends (Anthropic Messages, OpenAI
    /// Chat Completions and Responses) and forwards it to the upstream.
    Proxy {
        /// The address to listen on, `HOST:PORT`: a loopback address unless --allow-remote.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8788", value_parser = parse_listen)]
        listen: std::net::SocketAddr,
        /// Let --listen be an address other machines reach. Every client must then send the
        /// proxy's token (DCP_PROXY_TOKEN, else one made and printed at start).
        #[arg(long)]
        allow_remote: bool,
        /// The most connections served at once [default: 256, fewer if `ulimit -n` is low]
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: Option<u32>,
        /// How long a request's head, or a pause in its body, may take before its connection
        /// is closed.
        #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        read_timeout: u64,
        /// The API's upstream, `http(s)://host[:port][/path]` (the request's path is kept after
        /// it); else dcp.jsonc's `proxy.upstream`, and `proxy.upstreams.<api>` per API.
        #[arg(long, value_name = "URL")]
        upstream: Option<String>,
    },
}

/// What every command needs: where the data is, the config, and how to print.
struct Ctx {
    data_dir: PathBuf,
    config: Config,
    json: bool,
}

impl Ctx {
    fn state_dir(&self) -> PathBuf {
        paths::state_dir(&self.data_dir)
    }

    fn store(&self) -> SessionStore {
        SessionStore::new(&self.state_dir(), EstimatorChoice::Auto)
    }

    fn load_session(&self, id: &str) -> Result<LoadedSession> {
        persist::validate_session_id(id)?;
        let data = DataDir::new(&self.data_dir, &Env::from_process());
        let loaded = data.load(id)?;
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        Ok(loaded)
    }
}

/// Runs the CLI on already parsed arguments, printing to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    // Text output goes to a terminal: whatever it quotes from the history or from files has
    // its control characters escaped. JSON stays exact (serde_json encodes controls).
    let mut escaped = format::TerminalWriter::new(&mut *out);
    let out: &mut dyn Write = if cli.json { out } else { &mut escaped };
    let env = Env::from_process();
    if let Command::Doctor = cli.command {
        // Before the config is loaded: a bad config is one of its findings.
        let data_dir = cli.data_dir.unwrap_or_else(|| env.data_dir());
        return doctor(&crate::doctor::CheckedSetup::from_process(env, data_dir), cli.json, out);
    }
    if let Command::Restore { handle } = &cli.command {
        return restore(&env, handle, out);
    }
    let cwd = std::env::current_dir().ok();
    let loaded = config::load(&config::Locations::standard(&env, cwd.as_deref()))?;
    let _guard = crate::logging::init(loaded.config.debug.then(|| paths::log_dir(&env.config_dir())).as_deref());
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    tracing::debug!(command = logged(&cli.command), config = ?loaded.sources, "dcp {}", env!("CARGO_PKG_VERSION"));
    let ctx = Ctx { data_dir: cli.data_dir.unwrap_or_else(|| env.data_dir()), config: loaded.config, json: cli.json };
    match cli.command {
        Command::Sessions => sessions(&ctx, out),
        Command::Context { session } => context_cmd(&ctx, session.as_deref(), out),
        Command::Sweep { session, last, dry_run } => {
            let mode = if dry_run { SweepMode::DryRun } else { SweepMode::Record };
            sweep(&ctx, &session, last, mode, out)
        }
        Command::Stats { session } => stats_cmd(&ctx, session.as_deref(), out),
        Command::Report { out: file, open } => report_cmd(&ctx, &env, file, open, out),
        Command::Replay(args) => crate::replay::cli::run(&args, &ctx.data_dir, &ctx.config, ctx.json, out),
        Command::Doctor => doctor(&crate::doctor::CheckedSetup::from_process(env, ctx.data_dir), ctx.json, out),
        Command::Serve => {
            crate::sidecar::serve(crate::sidecar::ServeOptions { data_dir: ctx.data_dir, env, project: cwd })
        }
        Command::Restore { .. } => Ok(()),
        Command::Proxy { listen, allow_remote, max_connections, read_timeout, upstream } => {
            let sidecar = crate::sidecar::ServeOptions { data_dir: ctx.data_dir, env, project: cwd };
            let reach =
                if allow_remote { crate::proxy::access::Reach::Remote } else { crate::proxy::access::Reach::Local };
            let connections = max_connections.map(|n| n as usize);
            let read_timeout = std::time::Duration::from_secs(read_timeout);
            crate::proxy::run(crate::proxy::ProxyOptions {
                listen,
                reach,
                connections,
                read_timeout,
                upstream,
                sidecar,
            })
        }
    }
}

/// `dcp restore N`: the text as it was, byte for byte, to a pipe (the agent's shell reads it
/// so); to a terminal with its control characters escaped, through `out`.
fn restore(env: &Env, handle: &str, out: &mut dyn Write) -> Result<()> {
    let text = crate::proxy::restore::fetch(&env.cache_dir(), handle).map_err(|e| anyhow::anyhow!(e))?;
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        out.write_all(&text)?;
    } else {
        std::io::Write::write_all(&mut std::io::stdout().lock(), &text)?;
    }
    Ok(())
}

/// The command as the debug log shows it: `dcp proxy`'s upstream masked, as an error shows it
/// (a URL may hold a secret).
fn logged(command: &Command) -> String {
    match command {
        Command::Proxy { listen, upstream, .. } => {
            let upstream = upstream.as_deref().map(crate::proxy::forward::masked);
            format!("Proxy {{ listen: {listen}, upstream: {upstream:?} }}")
        }
        other => format!("{other:?}"),
    }
}

/// `--listen`'s value: an IP address and a port.
fn parse_listen(value: &str) -> Result<std::net::SocketAddr, String> {
    value.parse().map_err(|_| format!("{value:?} is not HOST:PORT with HOST an IP address, e.g. 127.0.0.1:8788"))
}

/// Prints the doctor's report; any problem found is an error, so the exit code is 1.
fn doctor(inputs: &crate::doctor::CheckedSetup, json: bool, out: &mut dyn Write) -> Result<()> {
    let report = crate::doctor::run(inputs);
    if json {
        print_json(out, &report)?;
    } else {
        report.render(out)?;
    }
    match report.problems {
        0 => Ok(()),
        1 => anyhow::bail!("doctor found 1 problem"),
        n => anyhow::bail!("doctor found {n} problems"),
    }
}

fn print_json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

fn date(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
}

#[derive(Serialize)]
struct SessionRow<'a> {
    #[serde(flatten)]
    info: &'a SessionInfo,
    pruned_tokens: u64,
}

fn sessions(ctx: &Ctx, out: &mut dyn Write) -> Result<()> {
    let data = DataDir::new(&ctx.data_dir, &Env::from_process());
    let list = data.sessions()?;
    let dir = ctx.state_dir();
    if std::fs::symlink_metadata(&dir).is_ok() && !dir.is_dir() {
        tracing::warn!("state dir {} is not a directory: no savings can be read or saved", dir.display());
    }
    let rows: Vec<SessionRow> = list
        .iter()
        .map(|info| {
            let pruned_tokens = match persist::load(&dir, &info.id) {
                Ok(persist::LoadOutcome::Loaded(s)) => s.stats.tokens(),
                _ => 0,
            };
            SessionRow { info, pruned_tokens }
        })
        .collect();
    if ctx.json {
        return print_json(out, &serde_json::json!({ "sessions": rows }));
    }
    if rows.is_empty() {
        writeln!(out, "No sessions in {}.", ctx.data_dir.display())?;
        return Ok(());
    }
    writeln!(out, "{:<32} {:<11} {:>8} {:<16} {:>7}  TITLE", "ID", "SOURCE", "MESSAGES", "UPDATED (UTC)", "PRUNED")?;
    for r in &rows {
        let mut title = format::title(&r.info.title);
        if r.info.parent_id.is_some() {
            title = format!("(subagent) {title}");
        }
        writeln!(
            out,
            "{:<32} {:<11} {:>8} {:<16} {:>7}  {}",
            r.info.id,
            r.info.source.name(),
            r.info.messages,
            date(r.info.time_updated),
            format::tokens(r.pruned_tokens),
            title
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct ContextJson<'a> {
    session: &'a SessionInfo,
    #[serde(flatten)]
    analysis: &'a context::Analysis,
}

fn context_cmd(ctx: &Ctx, session: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let id = match session {
        Some(id) => id.to_string(),
        None => {
            let data = DataDir::new(&ctx.data_dir, &Env::from_process());
            data.latest()?.map(|s| s.id).with_context(|| format!("no sessions in {}", ctx.data_dir.display()))?
        }
    };
    let loaded = ctx.load_session(&id)?;
    let messages = visible_history(loaded.messages);
    let rules = Rules::new(ctx.config.clone())?;
    let mut store = ctx.store();
    store.observe(&id, &messages)?;
    let slot = store.slot(&id)?;
    let (state, tokens) = slot.state_and_tokens();
    let analysis = context::analyse(&messages, state, &rules, tokens);
    if ctx.json {
        return print_json(out, &ContextJson { session: &loaded.info, analysis: &analysis });
    }
    let info = &loaded.info;
    let header = format!("Session {}  \"{}\"  ({})", info.id, format::title(&info.title), info.source.name());
    out.write_all(report::context(&header, &analysis).as_bytes())?;
    Ok(())
}

#[derive(Serialize)]
struct SweepJson<'a> {
    session_id: &'a str,
    dry_run: bool,
    tokens: u64,
    pruned: Vec<SweepItem>,
    state_file: Option<PathBuf>,
}

#[derive(Serialize)]
struct SweepItem {
    call_id: String,
    tool: String,
    action: &'static str,
    tokens: u64,
}

/// Whether `dcp sweep` records what it prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SweepMode {
    Record,
    DryRun,
}

fn sweep(ctx: &Ctx, id: &str, last: Option<usize>, mode: SweepMode, out: &mut dyn Write) -> Result<()> {
    let dry_run = mode == SweepMode::DryRun;
    let loaded = ctx.load_session(id)?;
    let messages = visible_history(loaded.messages);
    let rules = Rules::new(ctx.config.clone())?;
    let mut store = ctx.store();
    store.observe(id, &messages)?;
    let slot = store.slot(id)?;
    let (state, tokens) = slot.state_and_tokens();
    let decisions = strategies::sweep::decide(&messages, state, &rules, last, tokens);
    let tokens: u64 = decisions.iter().map(|d| d.record.tokens).sum();
    let items: Vec<SweepItem> = decisions
        .iter()
        .map(|d| SweepItem {
            call_id: d.call_id.clone(),
            tool: d.record.tool.clone(),
            action: match d.record.action {
                crate::state::Action::ErrorInputs => "error-inputs",
                _ => "output",
            },
            tokens: d.record.tokens,
        })
        .collect();
    let mut state_file = None;
    if !dry_run && !decisions.is_empty() {
        if !loaded.info.title.is_empty() {
            slot.name_if_unnamed(Some(&loaded.info.title));
        }
        for d in decisions {
            slot.record(&d.call_id, d.record);
        }
        if let Some(aside) = store.save_now(id)? {
            tracing::warn!("set the corrupt state file aside as {}", aside.display());
        }
        state_file = Some(persist::state_path(&ctx.state_dir(), id)?);
    }
    if ctx.json {
        return print_json(out, &SweepJson { session_id: id, dry_run, tokens, pruned: items, state_file });
    }
    if items.is_empty() {
        writeln!(out, "Nothing to sweep in {id}.")?;
        return Ok(());
    }
    let verb = if dry_run { "Would prune" } else { "Pruned" };
    writeln!(out, "{verb} {} tool calls, {} tokens:", items.len(), format::tokens(tokens))?;
    for i in &items {
        let (call, tool) = (format::field(&i.call_id, 64), format::field(&i.tool, 64));
        writeln!(out, "  {call:<22} {tool:<6} {:<13} {:>7}", i.action, format::thousands(i.tokens))?;
    }
    if let Some(file) = state_file {
        writeln!(out, "Saved to {}", file.display())?;
    }
    Ok(())
}

#[derive(Serialize)]
struct StatsJson<'a> {
    session: Option<stats::SessionStats>,
    all_time: &'a stats::AllTime,
    state_dir: &'a Path,
    /// The control group's comparison, while `holdout` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    holdout: Option<stats::trial::Comparison>,
}

fn stats_cmd(ctx: &Ctx, session: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let dir = ctx.state_dir();
    let session_stats = match session {
        Some(id) => {
            known_session(ctx, id)?;
            let mut store = ctx.store();
            let slot = store.slot(id)?;
            Some(stats::session(id, slot.state()).priced(slot.state(), &ctx.config))
        }
        None => None,
    };
    let cache = Env::from_process().cache_dir();
    let all = stats::AllTimeCache::default()
        .all_time(&dir, Some(&cache))
        .with_context(|| format!("cannot list state files in {}", dir.display()))?
        .priced(&stats::money::all_time_sheet(&ctx.config));
    for c in &all.corrupt {
        tracing::warn!("{}: {}; counted as nothing", c.file.display(), c.reason);
    }
    if ctx.json {
        let holdout = match ctx.config.holdout > 0.0 {
            true => Some(crate::html_report::trial(&dir, &ctx.config).context("cannot compare the control group")?),
            false => None,
        };
        return print_json(out, &StatsJson { session: session_stats, all_time: &all, state_dir: &dir, holdout });
    }
    out.write_all(report::stats(session_stats.as_ref(), &all).as_bytes())?;
    Ok(())
}

/// Fails unless session `id` has a state file or is one of OpenCode's sessions: a mistyped id
/// would otherwise show a session that saved nothing.
fn known_session(ctx: &Ctx, id: &str) -> Result<()> {
    if persist::state_path(&ctx.state_dir(), id)?.exists() {
        return Ok(());
    }
    let data = DataDir::new(&ctx.data_dir, &Env::from_process());
    if data.sessions().is_ok_and(|sessions| sessions.iter().any(|s| s.id == id)) {
        return Ok(());
    }
    anyhow::bail!(
        "session {id} has no state file in {} and is not one of OpenCode's sessions in {} \
         (`dcp sessions` lists them; `dcp stats` without --session gives all-time)",
        ctx.state_dir().display(),
        ctx.data_dir.display()
    )
}

/// `dcp report`: writes the page and says where it is; with `--open`, opens it where a
/// desktop is.
fn report_cmd(ctx: &Ctx, env: &Env, file: Option<PathBuf>, open: bool, out: &mut dyn Write) -> Result<()> {
    use crate::html_report::{self, Opened, ReportSources};
    let file = file.unwrap_or_else(|| html_report::default_path(env));
    let state_dir = ctx.state_dir();
    let inputs = ReportSources { data_dir: &ctx.data_dir, state_dir: &state_dir, env, config: &ctx.config };
    html_report::write(&inputs, &file)?;
    let file = std::fs::canonicalize(&file).unwrap_or(file);
    if ctx.json {
        return print_json(out, &serde_json::json!({ "report": file }));
    }
    writeln!(out, "Report written to {}", file.display())?;
    if open {
        match html_report::open(&file) {
            Opened::Opened => writeln!(out, "Opened in the browser.")?,
            Opened::NoDesktop => {
                writeln!(out, "No desktop here to open it: open file://{} in a browser.", file.display())?
            }
        }
    }
    Ok(())
}
