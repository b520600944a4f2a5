//! The corpus manifest (`bench/real/sources.json`) and building every session it lists.
//!
//! Each entry names the stored log (gzip, beside the manifest), its format, and where it came
//! from: repository, path, commit, licence, harness, kind (a continuous run of one prompt or
//! an interactive session) and whether its clock is recorded or estimated. Building writes
//! every session into one `opencode.db`, so one `dcp replay --all --data-dir` covers them all.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::writer::{Database, Written};
use super::{parse, source, Format, SourceMeta};

/// The manifest file.
#[derive(Debug, Deserialize, Serialize)]
pub struct Manifest {
    pub sessions: Vec<Entry>,
}

/// One session of the corpus.
#[derive(Debug, Deserialize, Serialize)]
pub struct Entry {
    pub name: String,
    pub format: Format,
    /// The stored log, relative to the manifest.
    pub file: PathBuf,
    /// The stored task prompt, relative to the manifest (formats whose log lacks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_file: Option<PathBuf>,
    pub repo: String,
    pub path: String,
    pub commit: String,
    pub license: String,
    pub harness: String,
    pub kind: String,
    pub clock: String,
    /// When the commit that holds the log was made (RFC 3339): the end of an estimated run.
    pub committed_at: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// The folder of the session's subagent transcripts, relative to the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<PathBuf>,
}

/// Reads the manifest at `path`.
pub fn read(path: &Path) -> Result<Manifest> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a corpus manifest", path.display()))
}

/// Builds the sessions of the manifest at `path` (all, or those named in `only`) into
/// `out/opencode.db`.
pub fn build(path: &Path, out: &Path, only: &[String]) -> Result<Vec<Written>> {
    let manifest = read(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let db_path = out.join("opencode.db");
    let mut db = Database::create(&db_path).with_context(|| format!("cannot create {}", db_path.display()))?;
    let mut written = Vec::new();
    for entry in manifest.sessions.iter().filter(|e| only.is_empty() || only.contains(&e.name)) {
        let session = parse(entry.format, &base.join(&entry.file), &meta_of(entry, base)?)?;
        let w = db.add(&session).with_context(|| format!("cannot write {} to {}", entry.name, db_path.display()))?;
        written.push(w);
    }
    db.finish().with_context(|| format!("cannot finish {}", db_path.display()))?;
    Ok(written)
}

fn meta_of(entry: &Entry, base: &Path) -> Result<SourceMeta> {
    let prompt = match &entry.prompt_file {
        Some(p) => Some(source::read_text(&base.join(p))?),
        None => None,
    };
    let end_ms = source::parse_time(&entry.committed_at)
        .with_context(|| format!("{}: `committed_at` of {} is not an RFC 3339 time", base.display(), entry.name))?;
    Ok(SourceMeta {
        name: entry.name.clone(),
        title: entry.title.clone(),
        prompt,
        directory: entry.directory.clone(),
        model: entry.model.clone(),
        end_ms,
        subagents: entry.subagents.as_ref().map(|d| base.join(d)),
    })
}
