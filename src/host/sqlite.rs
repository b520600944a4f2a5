//! Reads OpenCode 1.18's `opencode.db`, read-only.
//!
//! OpenCode keeps the database in WAL mode and writes to it while it runs, so dcp opens it
//! read-only with a busy timeout: readers never block OpenCode's writer, and a checkpoint in
//! progress is waited for instead of failing. Rows whose `data` is not a JSON object are
//! skipped with a warning that names the table and the row id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::{with_ids, LoadedSession, SessionInfo, Source};
use crate::session::{Message, Node};

/// How long a read waits for OpenCode's writer before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    #[error("cannot open {path} read-only")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot read {path} ({what})")]
    Query {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

/// A read-only connection to `opencode.db`.
pub struct Db {
    path: PathBuf,
    conn: Connection,
}

impl Db {
    pub fn open(path: &Path) -> Result<Db, SqliteError> {
        let open_err = |source| SqliteError::Open { path: path.to_path_buf(), source };
        if !path.is_file() {
            return Err(open_err(rusqlite::Error::InvalidPath(path.to_path_buf())));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // Fail here, with the file named, if this is not an OpenCode database at all.
        conn.query_row("SELECT count(*) FROM session", [], |r| r.get::<_, i64>(0)).map_err(open_err)?;
        Ok(Db { path: path.to_path_buf(), conn })
    }

    fn query_err(&self, what: &'static str) -> impl Fn(rusqlite::Error) -> SqliteError + '_ {
        move |source| SqliteError::Query { path: self.path.clone(), what, source }
    }

    /// Every session, with its message count.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, SqliteError> {
        let err = self.query_err("sessions");
        let mut counts = HashMap::new();
        let mut stmt =
            self.conn.prepare("SELECT session_id, count(*) FROM message GROUP BY session_id").map_err(&err)?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(&err)?;
        for row in rows {
            let (id, n) = row.map_err(&err)?;
            counts.insert(id, n as usize);
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, parent_id, title, directory, time_created, time_updated FROM session \
                 ORDER BY time_updated DESC, id",
            )
            .map_err(&err)?;
        let rows = stmt.query_map([], session_row).map_err(&err)?;
        let mut out = Vec::new();
        for row in rows {
            let mut info = row.map_err(&err)?;
            info.messages = counts.get(&info.id).copied().unwrap_or(0);
            out.push(info);
        }
        Ok(out)
    }

    /// The session row of `id`, without its messages.
    pub fn session(&self, id: &str) -> Result<Option<SessionInfo>, SqliteError> {
        self.conn
            .query_row(
                "SELECT id, parent_id, title, directory, time_created, time_updated FROM session WHERE id = ?1",
                [id],
                session_row,
            )
            .optional()
            .map_err(self.query_err("session"))
    }

    /// The usage session `id`'s row holds, `None` when it holds none (or the row or its
    /// columns are not there: an older schema).
    pub fn usage(&self, id: &str) -> Option<super::SessionUsage> {
        let sql = "SELECT tokens_input, tokens_output, tokens_cache_read, tokens_cache_write, cost FROM session \
                   WHERE id = ?1";
        let row = |r: &rusqlite::Row<'_>| {
            let n = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0).max(0) as u64);
            let cost = r.get::<_, Option<f64>>(4)?.unwrap_or(0.0);
            Ok(super::SessionUsage { input: n(0)?, output: n(1)?, cache_read: n(2)?, cache_write: n(3)?, cost })
        };
        let usage = self.conn.query_row(sql, [id], row).ok()?;
        (usage.input + usage.cache_read + usage.cache_write > 0).then_some(usage)
    }

    /// The session `id` with its messages and parts in history order, or `None` if the
    /// database has no such session.
    pub fn load(&self, id: &str) -> Result<Option<LoadedSession>, SqliteError> {
        let err = self.query_err("session");
        let info = self
            .conn
            .query_row(
                "SELECT id, parent_id, title, directory, time_created, time_updated FROM session \
                 WHERE id = ?1",
                [id],
                session_row,
            )
            .optional()
            .map_err(&err)?;
        let Some(mut info) = info else {
            return Ok(None);
        };
        let mut warnings = Vec::new();
        let (mut messages, index) = self.messages(id, &mut warnings)?;
        self.add_parts(id, &mut messages, &index, &mut warnings)?;
        info.messages = messages.len();
        Ok(Some(LoadedSession { info, messages, warnings }))
    }

    /// Session `id`'s messages, without their parts, and where each message id is.
    fn messages(
        &self,
        id: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(Vec<Message>, HashMap<String, usize>), SqliteError> {
        let err = self.query_err("messages");
        let mut stmt = self
            .conn
            .prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
            .map_err(&err)?;
        let rows =
            stmt.query_map([id], |r| Ok((text_column(r, 0, "id")?, text_column(r, 1, "data")?))).map_err(&err)?;
        let mut messages = Vec::new();
        let mut index = HashMap::new();
        for row in rows {
            let (mid, data) = row.map_err(&err)?;
            let mid = match mid {
                Ok(mid) => mid,
                Err(e) => {
                    warnings.push(format!("{}: a message of session {id}: {e}; skipped", self.path.display()));
                    continue;
                }
            };
            match data.and_then(|data| parse_row(&data, &[("id", &mid), ("sessionID", id)])) {
                Ok(info) => {
                    index.insert(mid, messages.len());
                    messages.push(Message { info: Node::from(info), parts: Vec::new() });
                }
                Err(e) => warnings.push(format!("{}: message {mid}: {e}; skipped", self.path.display())),
            }
        }
        Ok((messages, index))
    }

    /// Adds session `id`'s parts to the messages they belong to; `index` says where each
    /// message id is.
    fn add_parts(
        &self,
        id: &str,
        messages: &mut [Message],
        index: &HashMap<String, usize>,
        warnings: &mut Vec<String>,
    ) -> Result<(), SqliteError> {
        let err = self.query_err("parts");
        let mut stmt = self
            .conn
            .prepare("SELECT id, message_id, data FROM part WHERE session_id = ?1 ORDER BY time_created, id")
            .map_err(&err)?;
        let rows = stmt
            .query_map([id], |r| {
                Ok((text_column(r, 0, "id")?, text_column(r, 1, "message_id")?, text_column(r, 2, "data")?))
            })
            .map_err(&err)?;
        for row in rows {
            let (pid, mid, data) = row.map_err(&err)?;
            let (pid, mid) = match (pid, mid) {
                (Ok(pid), Ok(mid)) => (pid, mid),
                (Err(e), _) | (_, Err(e)) => {
                    warnings.push(format!("{}: a part of session {id}: {e}; skipped", self.path.display()));
                    continue;
                }
            };
            let Some(&at) = index.get(&mid) else {
                continue;
            };
            match data.and_then(|data| parse_row(&data, &[("id", &pid), ("sessionID", id), ("messageID", &mid)])) {
                Ok(part) => messages[at].parts.push(Node::from(part)),
                Err(e) => warnings.push(format!("{}: part {pid}: {e}; skipped", self.path.display())),
            }
        }
        Ok(())
    }
}

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionInfo> {
    Ok(SessionInfo {
        id: r.get(0)?,
        parent_id: r.get(1)?,
        title: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
        directory: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        time_created: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
        time_updated: r.get::<_, Option<i64>>(5)?.unwrap_or(0),
        messages: 0,
        source: Source::Sqlite,
    })
}

/// The text in column `i` of a row, whatever SQLite stored there. SQLite does not enforce
/// column types, so a value that is not UTF-8 text is an error for this row alone, which is
/// then skipped, rather than for the whole query.
fn text_column(r: &rusqlite::Row<'_>, i: usize, column: &str) -> rusqlite::Result<Result<String, String>> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            String::from_utf8(bytes.to_vec()).map_err(|e| format!("{column} is not UTF-8 ({e})"))
        }
        ValueRef::Integer(n) => Ok(n.to_string()),
        ValueRef::Real(f) => Ok(f.to_string()),
        ValueRef::Null => Err(format!("{column} is NULL")),
    })
}

fn parse_row(data: &str, ids: &[(&str, &str)]) -> Result<serde_json::Value, String> {
    let value: serde_json::Value = serde_json::from_str(data).map_err(|e| format!("malformed JSON in data ({e})"))?;
    with_ids(value, ids)
}
