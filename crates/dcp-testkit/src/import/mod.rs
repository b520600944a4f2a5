//! Imports other people's recorded agent sessions as OpenCode 1.18 databases.
//!
//! dcp is measured on real sessions it was not tuned to; those come as logs of other
//! harnesses. Each [`Format`] has a parser into the [`model`] form (tools mapped onto
//! OpenCode's, outputs verbatim, subagents as child sessions, the source's clock kept where it
//! has one) and [`writer`] writes that as `opencode.db`, which `dcp replay --data-dir` and
//! `dcp context` read like any OpenCode data dir. [`manifest`] builds a whole corpus
//! (`bench/real/sources.json`) into one database.

pub mod claude_stream;
pub mod claude_tools;
pub mod claude_transcript;
pub mod codex;
pub mod codex_rollout;
pub mod ids;
pub mod manifest;
pub mod mini_swe_agent;
pub mod model;
pub mod shell;
pub mod source;
pub mod swe_agent;
pub mod writer;

use std::path::Path;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

pub use source::ImportError;

/// A source log format the importer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Claude Code `--output-format stream-json` (`claude -p`, Agent SDK); estimated clock.
    ClaudeStreamJson,
    /// Claude Code's transcript, `~/.claude/projects/*/<session>.jsonl`; recorded clock.
    ClaudeTranscript,
    /// Codex CLI `codex exec --json` events; estimated clock.
    CodexExecJson,
    /// Codex CLI's session file, `~/.codex/sessions/**/rollout-*.jsonl`; recorded clock.
    CodexRollout,
    /// SWE-agent 1.x `.traj` (function calling); estimated clock.
    SweAgent,
    /// mini-swe-agent `.traj.json` (formats 1 and 1.1); recorded clock.
    MiniSweAgent,
}

/// What the importer is told about a source beside its log.
#[derive(Debug, Clone, Default)]
pub struct SourceMeta {
    pub name: String,
    pub title: String,
    /// The task prompt, where the log does not carry it (stream-json, Codex).
    pub prompt: Option<String>,
    /// The working directory, where the log does not say it.
    pub directory: Option<String>,
    pub model: Option<String>,
    /// When the run ended (the commit that holds the log), for estimated clocks.
    pub end_ms: i64,
    /// The folder of a transcript's subagent files (`agent-<agentId>.jsonl[.gz]`).
    pub subagents: Option<std::path::PathBuf>,
}

/// Parses the log at `file` as `format`.
pub fn parse(format: Format, file: &Path, meta: &SourceMeta) -> Result<model::Session, ImportError> {
    let text = source::read_text(file)?;
    match format {
        Format::SweAgent => swe_agent::parse(&text, meta, file),
        Format::MiniSweAgent => mini_swe_agent::parse(&text, meta, file),
        Format::ClaudeStreamJson => claude_stream::parse(&source::json_lines(&text, file)?, meta, file),
        Format::ClaudeTranscript => claude_transcript::parse(&source::json_lines(&text, file)?, meta, file),
        Format::CodexExecJson => codex::parse(&source::json_lines(&text, file)?, meta, file),
        Format::CodexRollout => codex_rollout::parse(&source::json_lines(&text, file)?, meta, file),
    }
}
