//! State files: `storage/plugin/dcp/<sessionId>.json`, in every layout DCP ever wrote.
//!
//! dcp writes the 1.x layout (`sessionName`, `prune.toolIds`, `stats.pruneTokenCounter`,
//! `stats.totalPruneTokens`, `lastUpdated`) plus a `dcp` section of its own, and reads the
//! 0.3 (`prunedIds`), 1.x and 2.x/3.x (`prune.tools`, `prune.messages`, `nudges`,
//! `manualMode`) layouts. Fields it does not understand are kept on rewrite. Writes are atomic
//! (temp file, fsync, rename, fsync of the directory), so a crash leaves the old file or the
//! new one, never a torn one. A file that cannot be parsed is never overwritten: it is set
//! aside as `<id>.json.corrupt-<time>` first.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{Action, PruneRecord, SessionState, Strategy, Tally};

/// State files larger than this are not read: no real session comes near it.
pub const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

/// Version of the `dcp` section dcp writes.
pub const FORMAT_VERSION: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("invalid session id {shown}: a session id is 1 to 128 characters of A-Z, a-z, 0-9, _ and -")]
    BadSessionId { shown: String },
    #[error("cannot write state file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create state dir {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set aside corrupt state file {path}")]
    SetAside {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether `id` is a session id dcp can use in a file name: `[A-Za-z0-9_-]{1,128}`.
pub fn is_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks that `id` is a session id dcp can use in a file name (see [`is_session_id`]),
/// naming what is wrong with it if not.
pub fn validate_session_id(id: &str) -> Result<(), StateError> {
    if is_session_id(id) {
        return Ok(());
    }
    let mut shown: String = id.chars().take(48).collect();
    if shown.len() < id.len() {
        shown.push('…');
    }
    Err(StateError::BadSessionId { shown: format!("{shown:?} ({} bytes)", id.len()) })
}

/// The state file of session `id` in `dir`.
pub fn state_path(dir: &Path, id: &str) -> Result<PathBuf, StateError> {
    validate_session_id(id)?;
    Ok(dir.join(format!("{id}.json")))
}

/// What reading a state file found.
#[derive(Debug)]
pub enum LoadOutcome {
    Missing,
    Loaded(Box<SessionState>),
    /// The file exists but cannot be used; `reason` says why.
    Corrupt {
        path: PathBuf,
        reason: String,
    },
}

/// Reads the state of session `id` from `dir`.
pub fn load(dir: &Path, id: &str) -> Result<LoadOutcome, StateError> {
    let path = state_path(dir, id)?;
    Ok(load_path(&path))
}

/// Reads one state file.
pub fn load_path(path: &Path) -> LoadOutcome {
    let corrupt = |reason: String| LoadOutcome::Corrupt { path: path.to_path_buf(), reason };
    match fs::metadata(path) {
        // No dir, or a file where the dir should be: there is no state file either way.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            return LoadOutcome::Missing
        }
        Err(e) => return corrupt(format!("cannot read it: {e}")),
        // A FIFO or a device would block the read, or never end: only plain files are read.
        Ok(m) if !m.is_file() => return corrupt("not a regular file".to_string()),
        Ok(m) if m.len() > MAX_STATE_BYTES => {
            return corrupt(format!("{} bytes is larger than the {MAX_STATE_BYTES}-byte limit", m.len()))
        }
        Ok(_) => {}
    }
    match fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LoadOutcome::Missing,
        Err(e) => corrupt(format!("cannot read it: {e}")),
        Ok(bytes) => match parse(&bytes) {
            Ok(state) => LoadOutcome::Loaded(Box::new(state)),
            Err(reason) => corrupt(reason),
        },
    }
}

/// Parses a state file of any DCP layout. The error says what is wrong, by key.
pub fn parse(bytes: &[u8]) -> Result<SessionState, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 ({e})"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
    let Value::Object(raw) = value else {
        return Err("the top level is not a JSON object".to_string());
    };
    let mut state = SessionState { raw: raw.clone(), ..SessionState::default() };
    state.session_name = opt_string(&raw, "sessionName")?;
    state.last_updated = opt_string(&raw, "lastUpdated")?;

    let mut legacy: BTreeMap<String, u64> = BTreeMap::new();
    // 0.3: a flat list of pruned ids.
    for id in string_list(raw.get("prunedIds"), "prunedIds")? {
        legacy.entry(id).or_insert(0);
    }
    if let Some(prune) = raw.get("prune") {
        let prune = prune.as_object().ok_or_else(|| type_error("prune", "an object", prune))?;
        // 1.x: a list of ids.
        for id in string_list(prune.get("toolIds"), "prune.toolIds")? {
            legacy.entry(id).or_insert(0);
        }
        // 2.x/3.x: ids with their token counts.
        if let Some(tools) = prune.get("tools") {
            let tools = tools.as_object().ok_or_else(|| type_error("prune.tools", "an object", tools))?;
            for (id, tokens) in tools {
                let n = count(tokens, &format!("prune.tools.{id}"))?;
                legacy.insert(id.clone(), n);
            }
        }
    }
    if let Some(stats) = raw.get("stats") {
        let stats = stats.as_object().ok_or_else(|| type_error("stats", "an object", stats))?;
        if let Some(v) = stats.get("pruneTokenCounter") {
            state.stats.prune_token_counter = count(v, "stats.pruneTokenCounter")?;
        }
        if let Some(v) = stats.get("totalPruneTokens") {
            state.stats.total_prune_tokens = count(v, "stats.totalPruneTokens")?;
        }
    }
    if let Some(own) = raw.get("dcp") {
        parse_own(own, &mut state)?;
    }
    // Ids only an older layout knows about were pruned by another DCP: keep them in force.
    let mut imported = Tally::default();
    for (id, tokens) in legacy {
        if state.pruned.contains_key(&id) {
            continue;
        }
        imported.tools += 1;
        imported.tokens += tokens;
        state.pruned.insert(
            id,
            PruneRecord {
                strategy: Strategy::Imported,
                action: Action::Output,
                tokens,
                tool: String::new(),
                applied: true,
            },
        );
    }
    if imported.tools > 0 && !state.stats.by_strategy.contains_key(&Strategy::Imported) {
        state.stats.by_strategy.insert(Strategy::Imported, imported);
    }
    // What `render` rewrites from the parsed fields need not be kept twice: the keys stay, to
    // hold their place in the file, but the prune lists, often most of the file, go. A state
    // is copied for every save, so this keeps the copies small.
    if let Some(own) = state.raw.get_mut("dcp") {
        *own = Value::Null;
    }
    if let Some(Value::Object(prune)) = state.raw.get_mut("prune") {
        for key in ["toolIds", "tools"] {
            if let Some(v) = prune.get_mut(key) {
                *v = Value::Null;
            }
        }
    }
    if let Some(ids) = state.raw.get_mut("prunedIds") {
        *ids = Value::Null;
    }
    Ok(state)
}

fn parse_own(own: &Value, state: &mut SessionState) -> Result<(), String> {
    let own = own.as_object().ok_or_else(|| type_error("dcp", "an object", own))?;
    if let Some(pruned) = own.get("pruned") {
        let pruned = pruned.as_object().ok_or_else(|| type_error("dcp.pruned", "an object", pruned))?;
        for (id, record) in pruned {
            let record: PruneRecord = serde_json::from_value(record.clone())
                .map_err(|e| format!("`dcp.pruned.{id}` is not a prune record ({e})"))?;
            state.pruned.insert(id.clone(), record);
        }
    }
    if let Some(by) = own.get("byStrategy") {
        let by = by.as_object().ok_or_else(|| type_error("dcp.byStrategy", "an object", by))?;
        for (name, tally) in by {
            let strategy =
                Strategy::from_name(name).ok_or_else(|| format!("`dcp.byStrategy` has unknown strategy {name:?}"))?;
            let tally: Tally = serde_json::from_value(tally.clone())
                .map_err(|e| format!("`dcp.byStrategy.{name}` is not a tally ({e})"))?;
            state.stats.by_strategy.insert(strategy, tally);
        }
    }
    if let Some(ids) = own.get("ids") {
        let ids = ids.as_object().ok_or_else(|| type_error("dcp.ids", "an object", ids))?;
        for (call, n) in ids {
            let n = count(n, &format!("dcp.ids.{call}"))?;
            let n = u32::try_from(n).map_err(|_| format!("`dcp.ids.{call}` is too large"))?;
            state.ids.insert(call.clone(), n);
        }
    }
    let max_id = state.ids.values().copied().max().unwrap_or(0);
    let next = own.get("nextId").map(|v| count(v, "dcp.nextId")).transpose()?.unwrap_or(0);
    state.next_id = u32::try_from(next).unwrap_or(u32::MAX).max(max_id.saturating_add(1));
    if let Some(v) = own.get("lastCompaction") {
        state.last_compaction = v.as_i64().ok_or_else(|| type_error("dcp.lastCompaction", "a number", v))?;
    }
    Ok(())
}

fn type_error(key: &str, expected: &str, found: &Value) -> String {
    let shown = crate::format::excerpt(found);
    format!("`{key}` must be {expected}, not {shown}")
}

fn opt_string(raw: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(type_error(key, "a string", other)),
    }
}

fn string_list(value: Option<&Value>, key: &str) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| type_error(key, "a list of strings", v)))
            .collect(),
        Some(other) => Err(type_error(key, "a list of strings", other)),
    }
}

fn count(value: &Value, key: &str) -> Result<u64, String> {
    if let Some(n) = value.as_u64() {
        return Ok(n);
    }
    match value.as_f64() {
        Some(f) if f >= 0.0 && f.is_finite() => Ok(f as u64),
        _ => Err(type_error(key, "a number >= 0", value)),
    }
}

/// The file contents for `state`: its original fields, with dcp's own brought up to date.
///
/// Fields keep their order, so rendering a rendered file gives the same bytes: a known key is
/// updated where it stands, a missing one goes at the end. `stats` goes first, with the tools
/// count, so that the all-time report can read a file's savings from its first bytes (see
/// `crate::stats`). The prune list is serialised straight from the state, not copied into a
/// `serde_json::Value` tree first: at 17,000 pruned calls that was 40 ms a save.
pub fn render(state: &SessionState, last_updated: &str) -> Vec<u8> {
    let mut out: Vec<(&str, Out<'_>)> = vec![("stats", Out::Owned(Value::Null))];
    out.extend(
        state.raw.iter().filter(|(k, _)| *k != "stats" && *k != "prunedIds").map(|(k, v)| (k.as_str(), Out::Value(v))),
    );
    if let Some(name) = &state.session_name {
        set(&mut out, "sessionName", Out::Owned(Value::String(name.clone())));
    }
    let mut prune = match state.raw.get("prune") {
        Some(Value::Object(p)) => borrowed(p),
        _ => Vec::new(),
    };
    set(&mut prune, "toolIds", Out::PrunedIds(&state.pruned));
    if prune.iter().any(|(k, _)| *k == "tools") {
        set(&mut prune, "tools", Out::PrunedTokens(&state.pruned));
    }
    set(&mut out, "prune", Out::Object(prune));
    let mut stats = match state.raw.get("stats") {
        Some(Value::Object(s)) => borrowed(s),
        _ => Vec::new(),
    };
    set(&mut stats, "pruneTokenCounter", Out::Owned(json!(state.stats.prune_token_counter)));
    set(&mut stats, "totalPruneTokens", Out::Owned(json!(state.stats.total_prune_tokens)));
    let tally: u64 = state.stats.by_strategy.values().map(|t| t.tools).sum();
    set(&mut stats, "totalPrunedTools", Out::Owned(json!(tally.max(state.pruned.len() as u64))));
    set(&mut out, "stats", Out::Object(stats));
    set(&mut out, "lastUpdated", Out::Owned(Value::String(last_updated.to_string())));
    let dcp = vec![
        ("version", Out::Owned(json!(FORMAT_VERSION))),
        ("pruned", Out::Records(&state.pruned)),
        ("byStrategy", Out::ByStrategy(&state.stats.by_strategy)),
        ("ids", Out::Ids(&state.ids)),
        // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
        ("nextId", Out::Owned(json!(state.next_id.max(1)))),
        ("lastCompaction", Out::Owned(json!(state.last_compaction))),
    ];
    set(&mut out, "dcp", Out::Object(dcp));
    let mut bytes = Vec::with_capacity(256 + 256 * state.pruned.len());
    serde_json::to_writer_pretty(&mut bytes, &Out::Object(out)).expect("writing JSON to memory cannot fail");
    bytes.push(b'\n');
    bytes
}

/// The fields of `object`, to render.
fn borrowed(object: &Map<String, Value>) -> Vec<(&str, Out<'_>)> {
    object.iter().map(|(k, v)| (k.as_str(), Out::Value(v))).collect()
}

/// One value of a state file being rendered, borrowed from the state where it is large.
enum Out<'a> {
    Value(&'a Value),
    Owned(Value),
    Object(Vec<(&'a str, Out<'a>)>),
    /// `prune.toolIds`: the pruned call ids.
    PrunedIds(&'a BTreeMap<String, PruneRecord>),
    /// `prune.tools`: tokens by pruned call id.
    PrunedTokens(&'a BTreeMap<String, PruneRecord>),
    /// `dcp.pruned`: the records.
    Records(&'a BTreeMap<String, PruneRecord>),
    ByStrategy(&'a BTreeMap<Strategy, Tally>),
    Ids(&'a BTreeMap<String, u32>),
}

/// Sets `key` of an object being rendered: in place if it is there, else at the end.
fn set<'a>(fields: &mut Vec<(&'a str, Out<'a>)>, key: &'a str, value: Out<'a>) {
    match fields.iter_mut().find(|(k, _)| *k == key) {
        Some(field) => field.1 = value,
        None => fields.push((key, value)),
    }
}

impl serde::Serialize for Out<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Out::Value(v) => v.serialize(s),
            Out::Owned(v) => v.serialize(s),
            Out::Object(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Out::PrunedIds(pruned) => s.collect_seq(pruned.keys()),
            Out::PrunedTokens(pruned) => s.collect_map(pruned.iter().map(|(k, r)| (k, r.tokens))),
            Out::Records(pruned) => pruned.serialize(s),
            Out::ByStrategy(by) => s.collect_map(by.iter().map(|(strategy, tally)| (strategy.name(), tally))),
            Out::Ids(ids) => ids.serialize(s),
        }
    }
}

/// The current time as DCP writes it: ISO 8601, UTC, milliseconds.
pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory, fsync, rename,
/// then fsync of the directory so the rename itself is durable.
///
/// The temp file is `.<name>.tmp`, one per state file: callers hold the session's lock (see
/// [`lock`]), so no two writers share it, and a temp file a killed writer left behind is
/// simply overwritten by the next save instead of piling up.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Which version of a state file is on disk. Every dcp save renames a new file into place,
/// so a save by any process changes the inode, and an in-place rewrite (the published DCP
/// plugin's) changes the size or the modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

/// The [`Stamp`] of the file at `path`, or `None` if there is none.
pub fn stamp(path: &Path) -> Option<Stamp> {
    let meta = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp { len: meta.len(), modified: meta.modified().ok(), inode })
}

/// Takes the advisory lock of session `id`'s state file, waiting for it: `.<id>.lock` in
/// `dir`. Every dcp process holds it while it reads, merges and writes the file, so two
/// processes never interleave a read-merge-write. The lock goes with the returned file, and
/// with the process if it dies.
pub fn lock(dir: &Path, id: &str) -> Result<fs::File, StateError> {
    validate_session_id(id)?;
    fs::create_dir_all(dir).map_err(|source| StateError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(format!(".{id}.lock"));
    let open = || {
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        file.lock()?;
        Ok(file)
    };
    open().map_err(|source| StateError::Lock { path: path.clone(), source })
}

/// Brings `disk`, the state another process may have written since this one last read it,
/// together with `mine`, this process's state, and returns the union. `journal` holds the
/// prunes `mine` recorded since it last synced: their stats are added to the file's, except
/// for calls the file already has (another process pruned them too, and counted them).
///
/// The newer compaction wins the prune list: prunes from before it name calls the model no
/// longer sees. Stats only ever add up. Agent-facing ids keep the file's numbering; an id of
/// `mine` that another call took on disk is renumbered.
pub fn merge(disk: SessionState, mine: &SessionState, journal: &[(String, PruneRecord)]) -> SessionState {
    let mut out = disk;
    out.fold_counter();
    for (id, record) in journal {
        if out.pruned.contains_key(id) {
            continue;
        }
        let tally = out.stats.by_strategy.entry(record.strategy).or_default();
        tally.tokens += record.tokens;
        tally.tools += 1;
        out.stats.total_prune_tokens += record.tokens;
    }
    if mine.last_compaction > out.last_compaction {
        out.pruned.clear();
        out.last_compaction = mine.last_compaction;
    }
    if mine.last_compaction == out.last_compaction {
        for (id, record) in &mine.pruned {
            match out.pruned.get_mut(id) {
                // Once either side applied a prune it stays applied.
                Some(theirs) => theirs.applied |= record.applied,
                None => {
                    out.pruned.insert(id.clone(), record.clone());
                }
            }
        }
    }
    let taken: std::collections::HashSet<u32> = out.ids.values().copied().collect();
    let mut next = out.next_id.max(mine.next_id).max(1);
    for (call, n) in &mine.ids {
        if out.ids.contains_key(call) {
            continue;
        }
        let n = if taken.contains(n) {
            let fresh = next;
            next = next.saturating_add(1);
            fresh
        } else {
            *n
        };
        out.ids.insert(call.clone(), n);
    }
    let max_id = out.ids.values().copied().max().unwrap_or(0);
    out.next_id = next.max(max_id.saturating_add(1));
    if mine.session_name.is_some() {
        out.session_name.clone_from(&mine.session_name);
    }
    out
}

/// What [`sync`] did.
#[derive(Debug)]
pub struct Synced {
    /// The state now on disk, when it is not simply the state that was saved: the file was
    /// read and merged with it.
    pub merged: Option<SessionState>,
    /// The written file's stamp.
    pub stamp: Option<Stamp>,
    /// Whether the file was at none of the `known` versions: another process wrote it, and
    /// `state` holds its changes as well.
    pub foreign: bool,
    /// Where a corrupt file was set aside.
    pub aside: Option<PathBuf>,
}

/// Saves session `id` with a read-merge-write under its lock: reads the file as it is now,
/// merges `mine` and `journal` into it (see [`merge`]), and writes the result atomically.
/// `known` are stamps of versions `mine` has everything of (the one it was last synced with,
/// the one this process wrote last); a file at one of them is not read. A missing file is written
/// from `mine` alone; a corrupt one is set aside first, never overwritten.
pub fn sync(
    dir: &Path,
    id: &str,
    mine: &SessionState,
    journal: &[(String, PruneRecord)],
    known: &[Stamp],
) -> Result<Synced, StateError> {
    let path = state_path(dir, id)?;
    let _lock = lock(dir, id)?;
    let current = stamp(&path);
    let mut aside = None;
    // A file still at a version `mine` was synced with has nothing `mine` lacks.
    let foreign = current.is_some_and(|c| !known.contains(&c));
    let disk = if current.is_some() && !foreign { LoadOutcome::Missing } else { load_path(&path) };
    let (bytes, merged) = match disk {
        LoadOutcome::Loaded(disk) => {
            let merged = merge(*disk, mine, journal);
            (render(&merged, &now_iso()), Some(merged))
        }
        outcome => {
            if matches!(outcome, LoadOutcome::Corrupt { .. }) && path.exists() {
                aside = Some(set_aside(&path)?);
            }
            // `mine` is written as it is (a save job's state has its counter folded already),
            // without a copy.
            let bytes = if mine.stats.prune_token_counter == 0 {
                render(mine, &now_iso())
            } else {
                let mut state = mine.clone();
                state.fold_counter();
                render(&state, &now_iso())
            };
            (bytes, None)
        }
    };
    write_atomic(&path, &bytes).map_err(|source| StateError::Write { path: path.clone(), source })?;
    Ok(Synced { merged, stamp: stamp(&path), foreign, aside })
}

/// Renames a corrupt state file out of the way: `<name>.corrupt-<UTC time>`.
pub fn set_aside(path: &Path) -> Result<PathBuf, StateError> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let mut target = path.as_os_str().to_owned();
    target.push(format!(".corrupt-{stamp}"));
    let target = PathBuf::from(target);
    fs::rename(path, &target).map_err(|source| StateError::SetAside { path: path.to_path_buf(), source })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    /// The renderer as it was, through a `serde_json::Value` tree: the oracle for [`render`].
    fn render_via_value(state: &SessionState, last_updated: &str) -> Vec<u8> {
        // Keys are updated in place (and removed with `shift_remove`) so that the fields keep their
        // order: rendering a rendered file gives the same bytes.
        // `stats` goes first, with the tools count, so that the all-time report can read a file's
        // savings from its first bytes (see `crate::stats`).
        let mut out = Map::new();
        out.insert("stats".into(), Value::Null);
        for (k, v) in &state.raw {
            if k != "stats" {
                out.insert(k.clone(), v.clone());
            }
        }
        out.shift_remove("prunedIds");
        if let Some(name) = &state.session_name {
            out.insert("sessionName".into(), Value::String(name.clone()));
        }
        let mut prune = match out.get_mut("prune") {
            Some(Value::Object(p)) => std::mem::take(p),
            _ => Map::new(),
        };
        let ids: Vec<Value> = state.pruned.keys().map(|k| Value::String(k.clone())).collect();
        prune.insert("toolIds".into(), Value::Array(ids));
        if prune.contains_key("tools") {
            let tools: Map<String, Value> = state.pruned.iter().map(|(k, r)| (k.clone(), json!(r.tokens))).collect();
            prune.insert("tools".into(), Value::Object(tools));
        }
        out.insert("prune".into(), Value::Object(prune));
        let mut stats = match state.raw.get("stats") {
            Some(Value::Object(s)) => s.clone(),
            _ => Map::new(),
        };
        stats.insert("pruneTokenCounter".into(), json!(state.stats.prune_token_counter));
        stats.insert("totalPruneTokens".into(), json!(state.stats.total_prune_tokens));
        let tally: u64 = state.stats.by_strategy.values().map(|t| t.tools).sum();
        stats.insert("totalPrunedTools".into(), json!(tally.max(state.pruned.len() as u64)));
        out.insert("stats".into(), Value::Object(stats));
        out.insert("lastUpdated".into(), Value::String(last_updated.to_string()));
        let by: Map<String, Value> = state
            .stats
            .by_strategy
            .iter()
            .map(|(s, t)| (s.name().to_string(), json!({"tokens": t.tokens, "tools": t.tools})))
            .collect();
        let ids: Map<String, Value> = state.ids.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        out.insert(
            "dcp".into(),
            json!({
                "version": FORMAT_VERSION,
                "pruned": state.pruned,
                "byStrategy": by,
                "ids": ids,
                // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
                "nextId": state.next_id.max(1),
                "lastCompaction": state.last_compaction,
            }),
        );
        let mut bytes = serde_json::to_vec_pretty(&Value::Object(out)).expect("a JSON value always serialises");
        bytes.push(b'\n');
        bytes
    }

    use super::*;

    #[test]
    fn render_writes_what_the_value_tree_renderer_wrote() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/data/storage/plugin/dcp");
        let mut states = vec![SessionState::default()];
        for entry in fs::read_dir(&dir).unwrap() {
            if let Ok(state) = parse(&fs::read(entry.unwrap().path()).unwrap()) {
                states.push(state);
            }
        }
        assert!(states.len() >= 4, "every readable layout in the fixtures");
        // Each state as read, then with a name, new prunes of every action and agent ids.
        for mut state in states {
            assert_eq!(render(&state, "t"), render_via_value(&state, "t"));
            state.session_name = Some("a \"name\"".into());
            state.record("call_x", rec(Strategy::Deduplication, 12, true));
            let write = PruneRecord { action: Action::WriteContent, ..rec(Strategy::SupersedeWrites, 3, false) };
            state.record("call_y", write);
            let distill = PruneRecord {
                action: Action::Distill { distillation: "in\nshort".into() },
                ..rec(Strategy::Extract, 9, true)
            };
            state.record("call_z", distill);
            state.record("call_w", PruneRecord { action: Action::ErrorInputs, ..rec(Strategy::PurgeErrors, 1, true) });
            state.ids.insert("call_x".into(), 7);
            state.next_id = 8;
            state.last_compaction = 1_790_000_000_000;
            assert_eq!(
                render(&state, "2026-11-22T00:00:00.000Z"),
                render_via_value(&state, "2026-11-22T00:00:00.000Z")
            );
        }
    }

    #[test]
    fn session_ids_are_checked() {
        for ok in ["ses_dff0e6f21ffe6GyGsE27xOBOyV", "a", "A-b_9", &"x".repeat(128)] {
            assert!(validate_session_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../x", "a/b", "a\0b", "ses x", "é", &"x".repeat(129), &"y".repeat(10_000)] {
            let err = validate_session_id(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid session id"), "{err}");
            assert!(err.len() < 300, "{err}");
        }
    }

    #[test]
    fn wrongly_typed_fields_name_the_key() {
        let err = parse(br#"{"prune": {"toolIds": 7}}"#).unwrap_err();
        assert_eq!(err, "`prune.toolIds` must be a list of strings, not 7");
        let err = parse(br#"{"stats": {"totalPruneTokens": "lots"}}"#).unwrap_err();
        assert_eq!(err, "`stats.totalPruneTokens` must be a number >= 0, not \"lots\"");
        assert!(parse(b"[]").unwrap_err().contains("not a JSON object"));
        assert!(parse(b"{\"prune\": ").unwrap_err().starts_with("not valid JSON"));
        assert!(parse(&[0xff, 0xfe]).unwrap_err().starts_with("not UTF-8"));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).is_err());
    }

    fn rec(strategy: Strategy, tokens: u64, applied: bool) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens, tool: String::new(), applied }
    }

    #[test]
    fn merge_unions_prunes_and_counts_each_call_once() {
        let mut disk = SessionState::default();
        disk.record("theirs", rec(Strategy::Sweep, 7, true));
        disk.record("both", rec(Strategy::Deduplication, 5, false));
        disk.fold_counter();
        let mut mine = SessionState::default();
        mine.record("both", rec(Strategy::Deduplication, 5, true));
        mine.record("mine", rec(Strategy::Discard, 3, true));
        let journal = vec![
            ("both".to_string(), rec(Strategy::Deduplication, 5, true)),
            ("mine".to_string(), rec(Strategy::Discard, 3, true)),
        ];
        let out = merge(disk, &mine, &journal);
        assert_eq!(out.pruned.keys().collect::<Vec<_>>(), ["both", "mine", "theirs"]);
        assert!(out.pruned["both"].applied, "applied on either side stays applied");
        // `both` was counted by the other process already.
        assert_eq!(out.stats.tokens(), 15);
        assert_eq!(out.stats.by_strategy[&Strategy::Deduplication].tools, 1);
        assert_eq!(out.stats.by_strategy[&Strategy::Discard].tools, 1);
    }

    #[test]
    fn merge_lets_the_newer_compaction_win_the_prune_list_and_keeps_stats() {
        let mut disk = SessionState::default();
        disk.record("old", rec(Strategy::Sweep, 4, true));
        disk.fold_counter();
        let mut mine = SessionState::default();
        mine.clear_after_compaction(100);
        mine.record("new", rec(Strategy::Sweep, 6, true));
        let journal = vec![("new".to_string(), rec(Strategy::Sweep, 6, true))];
        let out = merge(disk.clone(), &mine, &journal);
        assert_eq!(out.pruned.keys().collect::<Vec<_>>(), ["new"]);
        assert_eq!((out.last_compaction, out.stats.tokens()), (100, 10));
        // The other way round: the file saw a compaction this process has not.
        disk.clear_after_compaction(200);
        let out = merge(disk, &mine, &journal);
        assert!(out.pruned.is_empty());
        assert_eq!((out.last_compaction, out.stats.tokens()), (200, 10));
    }

    #[test]
    fn merge_keeps_the_files_agent_ids_and_renumbers_a_clash() {
        let mut disk = SessionState::default();
        assert_eq!(disk.id_for("a"), 1);
        let mut mine = SessionState::default();
        assert_eq!(mine.id_for("b"), 1);
        assert_eq!(mine.id_for("a"), 2);
        let out = merge(disk, &mine, &[]);
        assert_eq!(out.ids["a"], 1);
        // `b` cannot keep 1, and 2 is the id this process gave `a`: it gets a fresh one.
        assert_eq!(out.ids["b"], 3);
        assert_eq!(out.next_id, 4);
    }
}
