//! `dcp-testkit`: the generator and the save loop from the command line.
//!
//! ```sh
//! cargo run -p dcp-testkit -- gen session --messages 2000 --steps 200 --seed 1 --out /tmp/s2000.json
//! cargo run -p dcp-testkit -- gen states --count 10000 --dir /tmp/d/storage/plugin/dcp
//! cargo run -p dcp-testkit -- save-loop --session ses_x --data-dir /tmp/d
//! cargo run -p dcp-testkit -- import --manifest bench/real/sources.json --out target/real
//! cargo run -p dcp-testkit -- import claude-transcript session.jsonl --out /tmp/one
//! ```

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;

use dcp::format;

#[derive(Debug, Parser)]
#[command(name = "dcp-testkit", about = "Test tooling for dcp: synthetic sessions and state files, and a save loop.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Print what was written as JSON instead of a sentence.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a synthetic session or state files (`dcp_testkit::gen`).
    Gen {
        #[command(subcommand)]
        what: Gen,
    },
    /// Save a session's state over and over, one more prune each time (`dcp_testkit::save_loop`).
    SaveLoop {
        #[arg(long, value_name = "ID")]
        session: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// The call ids are `<prefix><i>`, so that processes can tell their prunes apart.
        #[arg(long, default_value = "c")]
        prefix: String,
        /// OpenCode's data dir; the state files are in its `storage/plugin/dcp/`.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// Import recorded sessions of other harnesses as an OpenCode 1.18 database
    /// (`OUT/opencode.db`): one log (`import FORMAT SOURCE`) or a corpus manifest.
    Import {
        /// The log's format (not with --manifest).
        #[arg(value_enum, required_unless_present = "manifest")]
        format: Option<crate::import::Format>,
        /// The log (plain or .gz).
        #[arg(required_unless_present = "manifest")]
        source: Option<PathBuf>,
        /// A corpus manifest (`bench/real/sources.json`): build every session it lists.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "source"])]
        manifest: Option<PathBuf>,
        /// With --manifest: only these sessions.
        #[arg(long, value_name = "NAME")]
        only: Vec<String>,
        /// The task prompt, for formats whose log lacks it.
        #[arg(long, value_name = "FILE")]
        prompt: Option<PathBuf>,
        /// A transcript's subagent folder (`agent-<agentId>.jsonl`), for child sessions.
        #[arg(long, value_name = "DIR")]
        subagents: Option<PathBuf>,
        /// The data dir to write `opencode.db` in.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// What `dcp-testkit gen` generates. The same seed always gives byte-identical files.
#[derive(Debug, Subcommand)]
pub enum Gen {
    /// An OpenCode history of N messages, as the plugin's transform hook receives it, and the
    /// steps to append after it: `{"sessionID", "messages", "steps"}`.
    Session {
        #[arg(long, value_name = "N")]
        messages: usize,
        #[arg(long, value_name = "S", default_value_t = 1)]
        seed: u64,
        /// Assistant messages to append one at a time after the history.
        #[arg(long, value_name = "K", default_value_t = 50)]
        steps: usize,
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// N state files in the layout dcp writes, in DIR. `dcp stats --data-dir D` reads
    /// D/storage/plugin/dcp, so pass that as DIR.
    States {
        #[arg(long, value_name = "N")]
        count: usize,
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[arg(long, value_name = "S", default_value_t = 1)]
        seed: u64,
    },
}

/// Runs the command `args` names (without the program name), printing to `out`.
pub fn run<I, T>(args: I, out: &mut dyn Write) -> Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(std::iter::once("dcp-testkit".into()).chain(args.into_iter().map(Into::into)))?;
    match &cli.command {
        Command::Gen { what } => gen(what, if cli.json { Format::Json } else { Format::Sentence }, out),
        Command::SaveLoop { session, count, prefix, data_dir } => crate::save_loop(data_dir, session, *count, prefix),
        Command::Import { format, source, manifest, only, prompt, subagents, out: dir } => {
            let written = match (manifest, format, source) {
                (Some(m), _, _) => crate::import::manifest::build(m, dir, only)?,
                (None, Some(f), Some(src)) => {
                    vec![import_one(*f, src, (prompt.as_deref(), subagents.as_deref()), dir)?]
                }
                _ => anyhow::bail!("give FORMAT and SOURCE, or --manifest"),
            };
            report_import(&written, dir, if cli.json { Format::Json } else { Format::Sentence }, out)
        }
    }
}

/// Imports one log into `dir/opencode.db`, with its prompt file and subagent folder.
fn import_one(
    format: crate::import::Format,
    src: &std::path::Path,
    (prompt, subagents): (Option<&std::path::Path>, Option<&std::path::Path>),
    dir: &std::path::Path,
) -> Result<crate::import::writer::Written> {
    let prompt = prompt.map(crate::import::source::read_text).transpose()?;
    let subagents = subagents.map(std::path::Path::to_path_buf);
    let name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let end_ms = std::fs::metadata(src)
        .and_then(|m| m.modified())
        .ok()
        .map_or(0, |t| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64));
    let meta = crate::import::SourceMeta { title: name.clone(), name, prompt, end_ms, subagents, ..Default::default() };
    let session = crate::import::parse(format, src, &meta)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let db_path = dir.join("opencode.db");
    let mut db = crate::import::writer::Database::create(&db_path)
        .with_context(|| format!("cannot create {}", db_path.display()))?;
    let written = db.add(&session).with_context(|| format!("cannot write {}", db_path.display()))?;
    db.finish()?;
    Ok(written)
}

/// Says what `import` wrote.
fn report_import(
    written: &[crate::import::writer::Written],
    dir: &std::path::Path,
    format: Format,
    out: &mut dyn Write,
) -> Result<()> {
    if format == Format::Json {
        return print_json(out, &written);
    }
    for w in written {
        writeln!(
            out,
            "{}: session {}, {} sessions, {} messages, {} tool calls ({} errors).",
            w.name, w.session_id, w.sessions, w.messages, w.tool_calls, w.errors
        )?;
    }
    writeln!(out, "Wrote {} sessions to {}.", written.len(), dir.join("opencode.db").display())?;
    Ok(())
}

fn print_json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// How `gen` says what it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Sentence,
    Json,
}

/// `gen`: writes what was asked for and says what it wrote.
fn gen(what: &Gen, format: Format, out: &mut dyn Write) -> Result<()> {
    match what {
        Gen::Session { messages, seed, steps, out: file } => {
            let spec = crate::gen::SessionSpec { messages: *messages, steps: *steps, seed: *seed };
            let session = crate::gen::session(&spec);
            crate::gen::write_session(&session, file).with_context(|| format!("cannot write {}", file.display()))?;
            let bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            let summary = serde_json::json!({
                "file": file, "session_id": session.session_id, "messages": session.messages.len(),
                "steps": session.steps.len(), "bytes": bytes,
            });
            if format == Format::Json {
                return print_json(out, &summary);
            }
            writeln!(
                out,
                "Wrote {}: session {}, {} messages, {} steps, {} bytes.",
                file.display(),
                session.session_id,
                session.messages.len(),
                session.steps.len(),
                format::thousands(bytes)
            )?;
        }
        Gen::States { count, dir, seed } => {
            let summary = crate::gen::write_states(*count, *seed, dir)
                .with_context(|| format!("cannot write state files in {}", dir.display()))?;
            if format == Format::Json {
                return print_json(out, &summary);
            }
            writeln!(
                out,
                "Wrote {} state files in {}: {} tokens and {} tools pruned, {} sessions with savings.",
                summary.files,
                dir.display(),
                format::thousands(summary.tokens_saved),
                format::thousands(summary.tools_pruned),
                summary.sessions
            )?;
        }
    }
    Ok(())
}
