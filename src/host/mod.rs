//! Host adapters: read OpenCode's sessions, never write them.
//!
//! OpenCode 1.18 keeps sessions in `opencode.db` ([`sqlite`]); versions before 1.2 kept them as
//! a JSON file tree under `storage/` ([`json_tree`]). Both are read into the one session model
//! of [`crate::session`], ordered by creation time, then id. A data dir may hold both; a
//! session found in both is taken from the database.

pub mod json_tree;
pub mod paths;
pub mod sqlite;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::session::Message;

/// Which store a session was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Sqlite,
    JsonTree,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Sqlite => "opencode.db",
            Source::JsonTree => "storage/",
        }
    }
}

/// What `dcp sessions` lists about one session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub id: String,
    pub title: String,
    pub parent_id: Option<String>,
    pub directory: String,
    pub time_created: i64,
    pub time_updated: i64,
    pub messages: usize,
    pub source: Source,
}

/// The usage a session's own row holds (`tokens_*`, `cost`): the sums of its messages' in
/// OpenCode, the run's totals in a database `dcp-testkit import` wrote from a log that records
/// only those.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SessionUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: f64,
}

/// A session read from a store, with the rows that could not be read.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    pub info: SessionInfo,
    pub messages: Vec<Message>,
    /// Each skipped row, named by its store and id, with what was wrong with it.
    pub warnings: Vec<String>,
}

/// An OpenCode data dir and the stores found in it.
#[derive(Debug, Clone)]
pub struct DataDir {
    pub root: PathBuf,
    pub db: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "no OpenCode data in {0}: neither opencode.db nor storage/ exists (OpenCode has not run \
         with this data dir yet; else pass OpenCode's data dir with --data-dir)"
    )]
    NoData(PathBuf),
    #[error("{path} is {what}, not OpenCode's database file")]
    NotADatabase { path: PathBuf, what: &'static str },
    #[error("session {id} not found in {root} (`dcp sessions` lists the sessions there)")]
    SessionNotFound { id: String, root: PathBuf },
    #[error(transparent)]
    Sqlite(#[from] sqlite::SqliteError),
    #[error(transparent)]
    JsonTree(#[from] json_tree::JsonTreeError),
}

impl DataDir {
    pub fn new(root: &Path, env: &paths::Env) -> DataDir {
        DataDir { root: root.to_path_buf(), db: env.db_path(root) }
    }

    fn storage(&self) -> PathBuf {
        self.root.join("storage")
    }

    fn has_db(&self) -> bool {
        self.db.is_file()
    }

    /// Fails when something is at the database's name that is not a file: a directory, a
    /// FIFO (which would block a read) or a link to nothing. Saying so beats "no data".
    fn check_db(&self) -> Result<(), HostError> {
        match not_a_file(&self.db) {
            Some(what) => Err(HostError::NotADatabase { path: self.db.clone(), what }),
            None => Ok(()),
        }
    }

    fn has_tree(&self) -> bool {
        self.storage().join("session").is_dir()
    }

    /// Every session of both stores, most recently updated first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, HostError> {
        self.check_db()?;
        if !self.has_db() && !self.has_tree() {
            return Err(HostError::NoData(self.root.clone()));
        }
        let mut out = Vec::new();
        if self.has_db() {
            out = sqlite::Db::open(&self.db)?.sessions()?;
        }
        if self.has_tree() {
            let known: std::collections::HashSet<String> = out.iter().map(|s| s.id.clone()).collect();
            let tree = json_tree::sessions(&self.storage())?;
            out.extend(tree.into_iter().filter(|s| !known.contains(&s.id)));
        }
        out.sort_by(|a, b| b.time_updated.cmp(&a.time_updated).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }

    /// The session `id`, with all its messages in history order.
    pub fn load(&self, id: &str) -> Result<LoadedSession, HostError> {
        self.check_db()?;
        if !self.has_db() && !self.has_tree() {
            return Err(HostError::NoData(self.root.clone()));
        }
        if self.has_db() {
            if let Some(found) = sqlite::Db::open(&self.db)?.load(id)? {
                return Ok(found);
            }
        }
        if self.has_tree() {
            if let Some(found) = json_tree::load(&self.storage(), id)? {
                return Ok(found);
            }
        }
        Err(HostError::SessionNotFound { id: id.to_string(), root: self.root.clone() })
    }

    /// The usage session `id`'s row holds (in `opencode.db` only); `None` when it holds none
    /// or the database has no such columns.
    pub fn usage(&self, id: &str) -> Result<Option<SessionUsage>, HostError> {
        if !self.has_db() {
            return Ok(None);
        }
        Ok(sqlite::Db::open(&self.db)?.usage(id))
    }

    /// The most recently updated top-level session, if any.
    pub fn latest(&self) -> Result<Option<SessionInfo>, HostError> {
        Ok(self.sessions()?.into_iter().find(|s| s.parent_id.is_none()))
    }
}

/// What is at `path` when it is there but is not a file (following links): a directory, a
/// FIFO or device, or a link that leads nowhere. `None` for a file or nothing at all.
pub fn not_a_file(path: &Path) -> Option<&'static str> {
    std::fs::symlink_metadata(path).ok()?;
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => None,
        Ok(meta) if meta.is_dir() => Some("a directory"),
        Ok(_) => Some("a FIFO, socket or device"),
        Err(_) => Some("a symbolic link that leads nowhere"),
    }
}

/// Builds the `{id, sessionID, ...data}` object OpenCode hands to plugins from a stored row.
pub(crate) fn with_ids(data: serde_json::Value, ids: &[(&str, &str)]) -> Result<serde_json::Value, String> {
    let serde_json::Value::Object(fields) = data else {
        return Err("data is not a JSON object".to_string());
    };
    let mut out = serde_json::Map::with_capacity(fields.len() + ids.len());
    for (k, v) in ids {
        out.insert((*k).to_string(), serde_json::Value::String((*v).to_string()));
    }
    for (k, v) in fields {
        if !out.contains_key(&k) {
            out.insert(k, v);
        }
    }
    Ok(serde_json::Value::Object(out))
}
