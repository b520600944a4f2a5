//! Reads the JSON file tree of OpenCode before 1.2 (`storage/`), read-only.
//!
//! Layout: `session/<projectID>/<sessionID>.json`, `message/<sessionID>/<messageID>.json` and
//! `part/<messageID>/<partID>.json`. Messages are ordered by `time.created`, then id; parts by
//! id (they were written before the id clock wrapped, so their ids still sort by time). A file
//! that cannot be read or parsed is skipped with a warning that names it.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{with_ids, LoadedSession, SessionInfo, Source};
use crate::session::{str_field, Message, Node};

#[derive(Debug, thiserror::Error)]
pub enum JsonTreeError {
    #[error("cannot list {path}")]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The `.json` files directly inside `dir`, sorted by name. A missing dir has none.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, JsonTreeError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(JsonTreeError::List { path: dir.to_path_buf(), source }),
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    out.sort();
    Ok(out)
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, JsonTreeError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(JsonTreeError::List { path: dir.to_path_buf(), source }),
    };
    let mut out: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    Ok(out)
}

fn read_object(path: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("{}: malformed JSON ({e})", path.display()))?;
    if !value.is_object() {
        return Err(format!("{}: not a JSON object", path.display()));
    }
    Ok(value)
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn session_info(value: &Value, id: &str, messages: usize) -> SessionInfo {
    let time = |k: &str| value.get("time").and_then(|t| t.get(k)).and_then(Value::as_i64).unwrap_or(0);
    SessionInfo {
        id: id.to_string(),
        title: str_field(value, "title").unwrap_or("").to_string(),
        parent_id: str_field(value, "parentID").map(str::to_string),
        directory: str_field(value, "directory").unwrap_or("").to_string(),
        time_created: time("created"),
        time_updated: time("updated"),
        messages,
        source: Source::JsonTree,
    }
}

/// Every session of the tree. Unreadable session files are skipped.
pub fn sessions(storage: &Path) -> Result<Vec<SessionInfo>, JsonTreeError> {
    let mut out = Vec::new();
    for project in subdirs(&storage.join("session"))? {
        for file in json_files(&project)? {
            let Ok(value) = read_object(&file) else {
                tracing::warn!("{}: unreadable session file; skipped", file.display());
                continue;
            };
            let id = str_field(&value, "id").map(str::to_string).unwrap_or_else(|| stem(&file));
            let messages = json_files(&storage.join("message").join(&id))?.len();
            out.push(session_info(&value, &id, messages));
        }
    }
    Ok(out)
}

/// The session `id` with its messages and parts, or `None` if the tree has no such session.
/// `id` must already be a valid session id: it becomes part of a path.
pub fn load(storage: &Path, id: &str) -> Result<Option<LoadedSession>, JsonTreeError> {
    let file_name = format!("{id}.json");
    let mut found = None;
    for project in subdirs(&storage.join("session"))? {
        let candidate = project.join(&file_name);
        if candidate.is_file() {
            found = Some(candidate);
            break;
        }
    }
    let Some(session_file) = found else {
        return Ok(None);
    };
    let mut warnings = Vec::new();
    let session_value = read_object(&session_file).unwrap_or_else(|e| {
        warnings.push(format!("{e}; session info unavailable"));
        Value::Object(Default::default())
    });

    let mut messages = Vec::new();
    for file in json_files(&storage.join("message").join(id))? {
        let mid = stem(&file);
        let info = match read_object(&file).and_then(|v| with_ids(v, &[("id", &mid), ("sessionID", id)])) {
            Ok(v) => v,
            Err(e) => {
                warnings.push(format!("{e}; skipped"));
                continue;
            }
        };
        let mut parts = Vec::new();
        for pfile in json_files(&storage.join("part").join(&mid))? {
            let pid = stem(&pfile);
            match read_object(&pfile).and_then(|v| with_ids(v, &[("id", &pid), ("sessionID", id), ("messageID", &mid)]))
            {
                Ok(v) => parts.push(Node::from(v)),
                Err(e) => warnings.push(format!("{e}; skipped")),
            }
        }
        messages.push(Message { info: Node::from(info), parts });
    }
    messages.sort_by(|a, b| (a.time_created(), a.id()).cmp(&(b.time_created(), b.id())));
    let info = session_info(&session_value, id, messages.len());
    Ok(Some(LoadedSession { info, messages, warnings }))
}
