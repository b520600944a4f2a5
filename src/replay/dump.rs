//! `dcp replay --requests DIR`: every request dcp's transform would have answered, one JSON
//! line each, so anyone can audit what the model would have been sent.
//!
//! `DIR/<session id>.jsonl` holds one line per request in the order sent, `{"index",
//! "message_id", "time", "messages"}` ([`SentRequest`]), for the `dcp` mode (dcp as
//! configured): the other modes are variants for comparison, not what a user runs. The file
//! is written beside its final name and renamed over it, so a reader never sees half a file
//! and a link at that name is replaced, not followed.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::SentRequest;

/// Writes `requests` of session `session_id` to `dir/<session_id>.jsonl`; returns its path.
pub fn write(dir: &Path, session_id: &str, requests: &[SentRequest]) -> Result<PathBuf> {
    crate::state::persist::validate_session_id(session_id)?;
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "--requests {} is not a directory: name a directory (dcp creates it if it is not there)",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the --requests directory {}", dir.display()))?;
    let path = dir.join(format!("{session_id}.jsonl"));
    let partial = dir.join(format!(".{session_id}.jsonl.{}.partial", std::process::id()));
    let written = (|| -> Result<()> {
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&partial)?;
        let mut out = std::io::BufWriter::new(file);
        for r in requests {
            serde_json::to_writer(&mut out, r)?;
            out.write_all(b"\n")?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&partial, &path)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
