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
use serde::Serialize;

use super::engine::ReplayEngineError;
use super::steps::{edits_by_message, replaced, AgentTools, Timeline};
use super::{drive, priced, Mode, Processes, RecordedSession, ReplayOptions};
use crate::session::Message;

/// One request as dcp's transform answered it: `messages` is OpenCode's `{info, parts}` form
/// after dcp's edits, compressed ranges and appended messages, before OpenCode converts it to
/// the provider's format. The `dcp replay --requests` lines (README).
#[derive(Debug, Clone, Serialize)]
pub struct SentRequest {
    pub index: usize,
    /// The assistant message the request produced (as in [`super::Run::per_request`]).
    pub message_id: String,
    pub time: i64,
    pub messages: Vec<Message>,
}

/// The requests of `session` in `mode` as the model would have received them: each
/// request's history with the engine's edits applied, then what it appended.
pub fn requests(
    session: &RecordedSession<'_>,
    mode: Mode,
    options: &ReplayOptions,
) -> Result<Vec<SentRequest>, ReplayEngineError> {
    requests_in(session, (mode, Processes::One), options)
}

/// [`requests`], through as many sidecar `processes`.
pub fn requests_in(
    session: &RecordedSession<'_>,
    (mode, processes): (Mode, Processes),
    options: &ReplayOptions,
) -> Result<Vec<SentRequest>, ReplayEngineError> {
    let mut out = Vec::new();
    let (_, sheet) = priced(session, &Timeline::new(session.messages, AgentTools::Offered), options);
    drive(session, (mode, &sheet, processes), options, |step| {
        let mut by_message = edits_by_message(step.edits);
        let mut messages: Vec<Message> = Vec::new();
        for (m, i) in step.timeline.range(step.request).enumerate() {
            if let Some(summary) = replaced(step, m) {
                messages.extend(summary.cloned());
                continue;
            }
            let mut message = step.timeline.message_at(i, step.request.time).into_owned();
            for e in by_message.remove(&m).unwrap_or_default() {
                if let Some(part) = message.parts.get_mut(e.p) {
                    e.apply(part);
                }
            }
            messages.push(message);
        }
        messages.extend(step.append.iter().cloned());
        let message_id = step.timeline.messages()[step.request.message].id().to_string();
        out.push(SentRequest { index: out.len(), message_id, time: step.request.time, messages });
    })?;
    Ok(out)
}

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
