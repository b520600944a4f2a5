//! `dcp doctor`: checks an install and says what is wrong in plain words.
//!
//! It looks where an install goes wrong without a sound: which binary this is and which one
//! the plugin will run, whether OpenCode's config names the plugin and OpenCode installed it
//! (`install.rs`), every `dcp.jsonc` layer, the state dir, `opencode.db` and the log dir. Each
//! check ends `ok`, `warn` (dcp works, but not as the user may think) or `fail` (dcp cannot
//! work as installed); any `fail` makes the command exit 1. It writes nothing but a probe file
//! in the state dir, removed at once. Config errors are its findings, not its own errors: it
//! runs before the config is loaded.

mod install;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config;
use crate::host::paths::{self, Env};
use crate::state::persist;

pub use install::{platform, PACKAGE};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

/// One finding: what was checked, how it ended, and what to know or do, in plain words.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: CheckStatus,
    pub message: String,
}

impl Check {
    fn new(check: &'static str, status: CheckStatus, message: impl Into<String>) -> Check {
        Check { check, status, message: message.into() }
    }
}

/// Every finding, in the order they were made.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub version: &'static str,
    pub ok: bool,
    pub problems: usize,
    pub warnings: usize,
    pub checks: Vec<Check>,
}

/// What the checks look at: the environment OpenCode and the plugin would see. Tests pass
/// their own.
#[derive(Debug, Clone, Default)]
pub struct CheckedSetup {
    pub env: Env,
    pub data_dir: PathBuf,
    /// The project: its `opencode.json` and `.opencode/` apply.
    pub project: Option<PathBuf>,
    /// `DCP_BIN`, which the plugin tries first.
    pub dcp_bin: Option<PathBuf>,
    /// `PATH`, which the plugin searches last.
    pub path: Option<OsString>,
    /// `OPENCODE_CONFIG`: one more config file OpenCode reads.
    pub opencode_config: Option<PathBuf>,
    /// This binary.
    pub current_exe: Option<PathBuf>,
}

impl CheckedSetup {
    /// The process's own environment, with `data_dir` as OpenCode's data dir.
    pub fn from_process(env: Env, data_dir: PathBuf) -> CheckedSetup {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        CheckedSetup {
            env,
            data_dir,
            project: std::env::current_dir().ok(),
            dcp_bin: var("DCP_BIN").map(PathBuf::from),
            path: var("PATH"),
            opencode_config: var("OPENCODE_CONFIG").map(PathBuf::from),
            current_exe: std::env::current_exe().ok(),
        }
    }
}

/// Runs every check.
pub fn run(inputs: &CheckedSetup) -> DoctorReport {
    let mut checks = Vec::new();
    install::check(inputs, &mut checks);
    let config = config_layers(inputs, &mut checks);
    checks.push(state_dir(&paths::state_dir(&inputs.data_dir)));
    checks.push(database(inputs));
    checks.push(logs(inputs, config.as_ref()));
    let problems = checks.iter().filter(|c| c.status == CheckStatus::Fail).count();
    let warnings = checks.iter().filter(|c| c.status == CheckStatus::Warn).count();
    DoctorReport { version: env!("CARGO_PKG_VERSION"), ok: problems == 0, problems, warnings, checks }
}

impl DoctorReport {
    /// The report as the terminal shows it: one line per check, then the verdict.
    pub fn render(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(out, "dcp doctor (dcp {})", self.version)?;
        for c in &self.checks {
            let status = match c.status {
                CheckStatus::Ok => "ok",
                CheckStatus::Warn => "warn",
                CheckStatus::Fail => "FAIL",
            };
            writeln!(out, "  {status:<5} {:<13} {}", c.check, c.message)?;
        }
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        match (self.problems, self.warnings) {
            (0, 0) => writeln!(out, "Everything looks right."),
            (0, w) => writeln!(out, "No problems; {}.", plural(w, "warning")),
            (p, w) => writeln!(out, "{}, {}.", plural(p, "problem"), plural(w, "warning")),
        }
    }
}

/// Every `dcp.jsonc` layer: parsed, unknown keys and bad values named. Returns the merged
/// config when every layer is good.
fn config_layers(inputs: &CheckedSetup, checks: &mut Vec<Check>) -> Option<config::Config> {
    let locations = config::Locations::standard(&inputs.env, inputs.project.as_deref());
    let dirs = [&locations.global, &locations.config_dir, &locations.project];
    let mut good = true;
    let mut seen = Vec::new();
    for dir in dirs.into_iter().flatten() {
        let mut files: Vec<PathBuf> = Vec::new();
        for path in ["dcp.jsonc", "dcp.json"].iter().map(|n| dir.join(n)) {
            match config::entry(&path) {
                config::Entry::Missing => {}
                config::Entry::File => files.push(path),
                config::Entry::Bad(what) => {
                    let message = format!("{} is {what}; pruning is off until it is fixed or removed", path.display());
                    checks.push(Check::new("dcp.jsonc", CheckStatus::Fail, message));
                    good = false;
                }
            }
        }
        if let [used, ignored] = files.as_slice() {
            let message = format!("{} is ignored: {} is read instead", ignored.display(), used.display());
            checks.push(Check::new("dcp.jsonc", CheckStatus::Warn, message));
        }
        let Some(file) = files.into_iter().next() else { continue };
        if seen.contains(&file) {
            continue;
        }
        good &= config_layer(&file, checks);
        seen.push(file);
    }
    if seen.is_empty() && good {
        let message =
            format!("no dcp.jsonc: the defaults apply (create {} to change them)", locations_hint(&locations));
        checks.push(Check::new("dcp.jsonc", CheckStatus::Ok, message));
    }
    if !good {
        return None;
    }
    let loaded = config::load(&locations).map_err(|e| crate::error_chain(&e));
    let checked = loaded.and_then(|l| {
        crate::strategies::Rules::new(l.config).map(|r| r.config().clone()).map_err(|e| format!("{e:#}"))
    });
    match checked {
        Ok(config) => Some(config),
        Err(e) => {
            checks.push(Check::new("dcp.jsonc", CheckStatus::Fail, format!("{e}; pruning is off until it is fixed")));
            None
        }
    }
}

fn locations_hint(locations: &config::Locations) -> String {
    locations.global.as_ref().map(|d| d.join("dcp.jsonc").display().to_string()).unwrap_or_else(|| "dcp.jsonc".into())
}

/// One layer: a failure for a file that cannot be read and for each bad value, a warning per
/// unknown key. Returns whether the layer is usable.
fn config_layer(file: &Path, checks: &mut Vec<Check>) -> bool {
    let text = match std::fs::read_to_string(file) {
        // A byte order mark is not part of the JSONC: the parser skips it too.
        Ok(text) => text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text),
        Err(e) => {
            checks.push(Check::new("dcp.jsonc", CheckStatus::Fail, format!("cannot read {}: {e}", file.display())));
            return false;
        }
    };
    let (bad, warnings) = layer_findings(&text, file);
    let clean = bad.is_empty();
    if clean && warnings.is_empty() {
        checks.push(Check::new("dcp.jsonc", CheckStatus::Ok, format!("{}: read", file.display())));
    }
    checks.extend(warnings.into_iter().map(|w| Check::new("dcp.jsonc", CheckStatus::Warn, w)));
    for e in bad {
        let message = format!("{}; pruning is off until it is fixed", crate::error_chain(&e));
        checks.push(Check::new("dcp.jsonc", CheckStatus::Fail, message));
    }
    clean
}

/// Every bad value of a layer and every unknown key. The config parser stops at the first
/// bad value, so each is dropped from the layer in turn and the rest parsed again.
fn layer_findings(text: &str, file: &Path) -> (Vec<config::ConfigError>, Vec<String>) {
    let mut bad = Vec::new();
    let mut text = text.to_string();
    for _ in 0..64 {
        let mut warnings = Vec::new();
        match config::parse_layer(&text, file, &mut warnings) {
            Ok(_) => return (bad, warnings),
            Err(config::ConfigError::Value { path, key, message }) => {
                let rest = without_key(&text, &key);
                bad.push(config::ConfigError::Value { path, key, message });
                match rest {
                    Some(rest) => text = rest,
                    None => return (bad, warnings),
                }
            }
            Err(e) => {
                bad.push(e);
                return (bad, warnings);
            }
        }
    }
    (bad, Vec::new())
}
/// The layer's text without the value at the dotted `key`, or `None` if it has none there.
fn without_key(text: &str, key: &str) -> Option<String> {
    let mut value =
        jsonc_parser::parse_to_serde_value::<Option<serde_json::Value>>(text, &Default::default()).ok()??;
    let (parents, last) = key.rsplit_once('.').map_or((None, key), |(p, l)| (Some(p), l));
    let mut object = value.as_object_mut()?;
    for part in parents.into_iter().flat_map(|p| p.split('.')) {
        object = object.get_mut(part)?.as_object_mut()?;
    }
    object.remove(last)?;
    Some(value.to_string())
}

/// What the user loses while the state dir cannot be written.
const UNSAVED: &str = "until then pruning is not saved, and a restart loses it";

/// The state dir exists and takes a new file, or can be created.
fn state_dir(dir: &Path) -> Check {
    const NAME: &str = "state dir";
    if let Some(what) = not_a_dir(dir) {
        let message = format!("{}: {what}; move it away, and dcp creates the dir ({UNSAVED})", dir.display());
        return Check::new(NAME, CheckStatus::Fail, message);
    }
    if dir.is_dir() {
        let files = std::fs::read_dir(dir)
            .map(|entries| {
                entries.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "json")).count()
            })
            .unwrap_or(0);
        return match probe_write(dir) {
            Ok(()) => Check::new(
                NAME,
                CheckStatus::Ok,
                format!("{}: writable, {files} state file{}", dir.display(), if files == 1 { "" } else { "s" }),
            ),
            Err(e) => Check::new(
                NAME,
                CheckStatus::Fail,
                format!("{}: cannot write there, {} ({UNSAVED})", dir.display(), persist::in_words(dir, &e)),
            ),
        };
    }
    let Some(existing) = dir.ancestors().skip(1).find(|a| a.exists()) else {
        return Check::new(NAME, CheckStatus::Fail, format!("{}: no parent dir exists", dir.display()));
    };
    if !existing.is_dir() {
        let (dir, existing) = (dir.display(), existing.display());
        let message = format!("{dir}: cannot be created, {existing} is not a directory; move it away ({UNSAVED})");
        return Check::new(NAME, CheckStatus::Fail, message);
    }
    match probe_write(existing) {
        Ok(()) => {
            Check::new(NAME, CheckStatus::Ok, format!("{}: not there yet, created on the first prune", dir.display()))
        }
        Err(e) => Check::new(
            NAME,
            CheckStatus::Fail,
            format!("{}: cannot be created, {} ({UNSAVED})", dir.display(), persist::in_words(existing, &e)),
        ),
    }
}

/// What is at `dir` when it is there but not a directory: a file, a FIFO, a link to nothing
/// or a loop of links. `None` for a directory or nothing.
fn not_a_dir(dir: &Path) -> Option<String> {
    std::fs::symlink_metadata(dir).ok()?;
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => None,
        Ok(meta) if meta.is_file() => Some("a regular file is there, not a directory".to_string()),
        Ok(_) => Some("a FIFO, socket or device is there, not a directory".to_string()),
        Err(e) => Some(format!("a symbolic link that leads nowhere ({e})")),
    }
}

/// Creates and removes a probe file in `dir`.
fn probe_write(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".dcp-doctor-{}.tmp", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
    std::fs::remove_file(&probe)
}

/// `opencode.db` is there and can be read; else the older `storage/` tree.
fn database(inputs: &CheckedSetup) -> Check {
    const NAME: &str = "opencode.db";
    let db = inputs.env.db_path(&inputs.data_dir);
    if let Some(what) = crate::host::not_a_file(&db) {
        return Check::new(
            NAME,
            CheckStatus::Fail,
            format!("{} is {what}, not OpenCode's database file", db.display()),
        );
    }
    if !db.exists() {
        if inputs.data_dir.join("storage/session").is_dir() {
            let message = format!("{} not found; sessions are read from the older storage/ tree", db.display());
            return Check::new(NAME, CheckStatus::Ok, message);
        }
        let message = format!(
            "{} not found: OpenCode has not run with this data dir yet (else pass --data-dir, or set XDG_DATA_HOME as OpenCode sees it)",
            db.display()
        );
        return Check::new(NAME, CheckStatus::Warn, message);
    }
    let count = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|conn| conn.query_row("SELECT count(*) FROM session", [], |r| r.get::<_, i64>(0)));
    match count {
        Ok(n) => Check::new(
            NAME,
            CheckStatus::Ok,
            format!("{}: readable, {n} session{}", db.display(), if n == 1 { "" } else { "s" }),
        ),
        Err(e) => Check::new(NAME, CheckStatus::Fail, format!("{}: cannot be read: {e}", db.display())),
    }
}

/// Where the logs go: OpenCode's log (the plugin's warnings), and dcp's debug logs when on.
fn logs(inputs: &CheckedSetup, config: Option<&config::Config>) -> Check {
    const NAME: &str = "logs";
    let opencode_log = inputs.env.data_dir().join("log");
    let dir = paths::log_dir(&inputs.env.config_dir());
    let debug = config.is_some_and(|c| c.debug);
    if !debug {
        let message = format!(
            "the plugin's warnings go to OpenCode's log ({}); debug logs are off (\"debug\": true writes them to {})",
            opencode_log.display(),
            dir.display()
        );
        return Check::new(NAME, CheckStatus::Ok, message);
    }
    let writable = if dir.is_dir() {
        probe_write(&dir)
    } else {
        match dir.ancestors().skip(1).find(|a| a.exists()) {
            Some(a) if a.is_dir() => probe_write(a),
            _ => Err(std::io::Error::other("no parent dir")),
        }
    };
    match writable {
        Ok(()) => Check::new(NAME, CheckStatus::Ok, format!("debug logs on, written to {}", dir.display())),
        Err(e) => {
            Check::new(NAME, CheckStatus::Warn, format!("debug logs on, but {} is not writable ({e})", dir.display()))
        }
    }
}
