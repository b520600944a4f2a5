//! State files: `storage/plugin/dcp/<sessionId>.json`, in every layout DCP ever wrote.
//!
//! dcp writes the 1.x layout (`sessionName`, `prune.toolIds`, `stats.pruneTokenCounter`,
//! `stats.totalPruneTokens`, `lastUpdated`) plus a `dcp` section of its own, and reads the
//! 0.3 (`prunedIds`), 1.x and 2.x/3.x (`prune.tools`, `prune.messages`, `nudges`,
//! `manualMode`) layouts. Fields it does not understand are kept on rewrite. Writes are atomic
//! (temp file, fsync, rename, fsync of the directory), so a crash leaves the old file or the
//! new one, never a torn one. A file that cannot be parsed is never overwritten: it is set
//! aside as `<id>.json.corrupt-<time>` first, and so is a state path that is a symbolic link:
//! dcp follows no link it did not make, in reads, temp files or locks.
//!
//! This module holds the paths and the read-merge-write of a save ([`sync`]); `parse.rs`
//! reads every layout ([`parse`], with a [`FormatError`] naming the key), `render.rs` writes
//! dcp's ([`render`]), `paths.rs` says where a session's file is and which ids name one, `fs.rs` writes
//! atomically, locks, stamps and sets aside, and `merge.rs`
//! brings two processes' states together.

mod cause;
mod fs;
mod layout;
mod ledger;
mod merge;
mod parse;
mod paths;
mod render;

use std::path::{Path, PathBuf};

use super::{PruneRecord, SessionState};

pub use self::cause::{in_words, not_a_dir, Cause};
pub use self::fs::{lock, set_aside, stamp, write_atomic, Stamp};
pub use self::merge::merge;
pub use self::parse::{parse, FormatError};
pub use self::paths::{file_dir, folder_of, is_session_id, validate_session_id, StateError, PROXY_CLIENTS};
pub use self::render::{digest_but_time, now_iso, render};

/// State files larger than this are not read: no real session comes near it.
pub const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

/// The largest token or tool count a state file may hold: 10^15, a million times the
/// largest session's lifetime. A count past it is read as corruption (the file is set aside
/// and the user told), so sums of counts cannot wrap; sums are saturating besides.
pub const MAX_COUNT: u64 = 1_000_000_000_000_000;

/// Version of the `dcp` section dcp writes.
pub const FORMAT_VERSION: u64 = 1;

/// The fields of `dcp.ledger` that [`render`] writes from the state.
const LEDGER_KEYS: [&str; 11] = [
    "banked",
    "warm",
    "lastRequest",
    "offered",
    "baseline",
    "unpruned",
    "added",
    "listShown",
    "listAnswered",
    "listUnanswered",
    "nudgedAtCalls",
];

/// The keys of the `dcp` section that [`render`] writes from the state; others, a newer
/// dcp's, are kept as read.
const OWN_KEYS: [&str; 14] = [
    "version",
    "pruned",
    "byStrategy",
    "ids",
    "nextId",
    "lastCompaction",
    "ledger",
    "lastContext",
    "lastSent",
    "lastAppended",
    "trail",
    "holdout",
    "reported",
    "models",
];

/// Whether `name` (relative to the state dir) is a state file's name: a session id and
/// `.json`, in the state dir or (a proxied conversation's) in its client's folder.
pub fn is_state_name(name: &str) -> bool {
    let (folder, file) = name.rsplit_once('/').map_or((None, name), |(folder, file)| (Some(folder), file));
    let Some(id) = file.strip_suffix(".json").filter(|id| is_session_id(id)) else { return false };
    folder.is_none() || folder.map(str::to_string) == folder_of(id)
}

/// The state files in the proxied conversations' folders of state dir `dir`, as
/// `(name, entry)` with the name relative to `dir`.
pub fn proxied_entries(dir: &Path) -> Vec<(String, std::fs::DirEntry)> {
    let mut out = Vec::new();
    for client in PROXY_CLIENTS {
        let Ok(entries) = std::fs::read_dir(dir.join("proxy").join(client)) else { continue };
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else { continue };
            let name = format!("proxy/{client}/{name}");
            if is_state_name(&name) {
                out.push((name, entry));
            }
        }
    }
    out
}

/// The state file of session `id` in `dir`.
pub fn state_path(dir: &Path, id: &str) -> Result<PathBuf, StateError> {
    validate_session_id(id)?;
    Ok(file_dir(dir, id).join(format!("{id}.json")))
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

/// Reads one state file. It is opened without following a link and checked on the open
/// handle, so what is checked is what is read.
pub fn load_path(path: &Path) -> LoadOutcome {
    let corrupt = |reason: String| LoadOutcome::Corrupt { path: path.to_path_buf(), reason };
    // dcp follows no link it did not make, and it makes none: a link is set aside like a
    // corrupt file, and the state starts afresh.
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return corrupt("a symbolic link, which dcp does not follow".to_string());
    }
    let mut file = match self::fs::open_read(path) {
        // No dir, or a file where the dir should be: there is no state file either way.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            return LoadOutcome::Missing
        }
        Err(e) => return corrupt(format!("cannot read it: {}", in_words(path, &e))),
        Ok(file) => file,
    };
    match file.metadata() {
        Err(e) => return corrupt(format!("cannot read it: {}", in_words(path, &e))),
        // A FIFO or a device would block the read, or never end: only plain files are read.
        Ok(m) if !m.is_file() => return corrupt("not a regular file".to_string()),
        Ok(m) if m.len() > MAX_STATE_BYTES => {
            return corrupt(format!("{} bytes is larger than the {MAX_STATE_BYTES}-byte limit", m.len()))
        }
        Ok(_) => {}
    }
    let mut bytes = Vec::new();
    let read = std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, MAX_STATE_BYTES + 1), &mut bytes);
    match read {
        Err(e) => corrupt(format!("cannot read it: {}", in_words(path, &e))),
        Ok(n) if n as u64 > MAX_STATE_BYTES => corrupt(format!("it grew past the {MAX_STATE_BYTES}-byte limit")),
        Ok(_) => match parse(&bytes) {
            Ok(state) => LoadOutcome::Loaded(Box::new(state)),
            Err(e) => corrupt(e.to_string()),
        },
    }
}

/// What a save of this process wrote: the file's version and a digest of its contents but
/// their time ([`digest_but_time`]). A later save that would write the same is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub stamp: Stamp,
    digest: u64,
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
    /// What is on disk, when this process wrote it: just now, or, when the save was skipped,
    /// before.
    pub written: Option<Written>,
    /// Whether nothing was written: the file was still `last`, which had the same contents
    /// but their time.
    pub skipped: bool,
}

/// Saves session `id` with a read-merge-write under its lock: reads the file as it is now,
/// merges `mine` and `journal` into it (see [`merge`]), and writes the result atomically.
/// `known` are stamps of versions `mine` has everything of (the one it was last synced with,
/// the one this process wrote last); a file at one of them is not read. A missing file is written
/// from `mine` alone; a corrupt one is set aside first, never overwritten. When the file is
/// still `last`, this process's last write, and `mine` renders the same but for the time,
/// and there is no journal to merge, nothing is written: a save of an unchanged state would
/// only stamp a new `lastUpdated`.
pub fn sync(
    dir: &Path,
    id: &str,
    mine: &SessionState,
    journal: &[(String, PruneRecord)],
    known: &[Stamp],
    last: Option<Written>,
) -> Result<Synced, StateError> {
    let path = state_path(dir, id)?;
    let _lock = lock(dir, id)?;
    let current = stamp(&path);
    let mut aside = None;
    // A file still at a version `mine` was synced with has nothing `mine` lacks.
    let foreign = current.is_some_and(|c| !known.contains(&c));
    let disk = if current.is_some() && !foreign { LoadOutcome::Missing } else { load_path(&path) };
    let time = now_iso();
    let (bytes, merged) = match disk {
        LoadOutcome::Loaded(disk) => {
            let merged = merge(*disk, mine, journal);
            (render(&merged, &time), Some(merged))
        }
        outcome => {
            if matches!(outcome, LoadOutcome::Corrupt { .. }) && std::fs::symlink_metadata(&path).is_ok() {
                aside = Some(set_aside(&path)?);
            }
            (render_own(mine, &time), None)
        }
    };
    let digest = digest_but_time(&bytes, &time);
    let same = |w: &Written| merged.is_none() && journal.is_empty() && current == Some(w.stamp) && w.digest == digest;
    if let Some(last) = last.filter(same) {
        return Ok(Synced { merged, stamp: current, foreign, aside, written: Some(last), skipped: true });
    }
    write_atomic(&path, &bytes).map_err(|e| {
        // A new file is made in the file's dir: a refusal is the dir's, unless the file's own
        // name is taken by a directory.
        let at = if e.kind() == std::io::ErrorKind::IsADirectory { &path } else { &file_dir(dir, id) };
        StateError::Write { path: path.clone(), source: Cause::new(at, e) }
    })?;
    let now = stamp(&path);
    let written = now.map(|stamp| Written { stamp, digest });
    Ok(Synced { merged, stamp: now, foreign, aside, written, skipped: false })
}

/// The file contents for this process's own state. A save job's state has its counter folded
/// already, and is rendered as it is, without a copy.
fn render_own(mine: &SessionState, time: &str) -> Vec<u8> {
    if mine.stats.prune_token_counter == 0 {
        return render(mine, time);
    }
    let mut state = mine.clone();
    state.fold_counter();
    render(&state, time)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
