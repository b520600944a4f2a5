//! Where a session's state file is: which session ids may name one ([`validate_session_id`]),
//! the folder a proxied conversation's file is kept in ([`file_dir`]), and what goes wrong
//! with the files ([`StateError`]).

use std::path::{Path, PathBuf};

use super::cause::Cause;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("invalid session id {shown}: a session id is 1 to 128 characters of A-Z, a-z, 0-9, _ and -")]
    BadSessionId { shown: String },
    #[error("cannot write state file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: Cause,
    },
    #[error("cannot create state dir {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: Cause,
    },
    #[error("cannot lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: Cause,
    },
    #[error("cannot set aside corrupt state file {path}")]
    SetAside {
        path: PathBuf,
        #[source]
        source: Cause,
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

/// The clients whose conversations through `dcp proxy` (session ids `proxy-<client>-…`)
/// keep their state files in a folder of their own, `proxy/<client>/` under the state dir.
pub const PROXY_CLIENTS: [&str; 5] = ["claude-code", "codex", "opencode", "anthropic", "openai"];

/// The folder under the state dir that holds session `id`'s file: `proxy/<client>` for a
/// proxied conversation, else `None` (the state dir itself).
pub fn folder_of(id: &str) -> Option<String> {
    let rest = id.strip_prefix("proxy-")?;
    let client = PROXY_CLIENTS.iter().find(|c| rest.strip_prefix(**c).is_some_and(|r| r.starts_with('-')))?;
    Some(format!("proxy/{client}"))
}

/// The dir that holds session `id`'s file (and its lock) in state dir `dir`.
pub fn file_dir(dir: &Path, id: &str) -> PathBuf {
    folder_of(id).map_or_else(|| dir.to_path_buf(), |folder| dir.join(folder))
}
