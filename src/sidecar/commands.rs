//! `command`: the `/dcp` commands (`stats`, `context`, `report`, `sweep [N]`, `decompress [ID]`,
//! `help`).
//!
//! `stats` and `report` read the state files, so what this process holds unsaved (the figures
//! of the requests since the last save) is written first. `report` runs `dcp report` as a
//! child process: the page replays sessions whose files hold no requests, and the replay
//! drives a sidecar of its own, which this one must not import.
//!
//! Each answers with text the user reads in the session; none makes a model request. A
//! sweep is the user's own decision: recorded, applied on the next request and saved at once.
//!
//! A command may come before any request of its session in this process: a resumed session
//! before its first prompt, or `opencode run --command dcp context`. The sidecar has then
//! mirrored nothing, so `context` and `sweep` read the history from `opencode.db` (or
//! `storage/`) through the host adapters, as the CLI does, and answer as the CLI would.

use super::mirror::Mirror;
use super::protocol::{CommandOutput, CommandParams, RpcError};
use super::{internal, validate_session_id, Server};
use crate::host::DataDir;
use crate::session::{visible_history, Message};
use crate::strategies;
use crate::texts;

/// A session's history for a command: the mirror of the last request, or the stored one.
enum CommandHistory {
    Mirrored(Mirror),
    Stored(Vec<Message>),
}

impl CommandHistory {
    fn messages(&self) -> &[Message] {
        match self {
            CommandHistory::Mirrored(mirror) => mirror.messages(),
            CommandHistory::Stored(messages) => messages,
        }
    }
}

impl Server {
    pub(super) fn command(&mut self, p: CommandParams) -> Result<CommandOutput, RpcError> {
        let sid = p.session_id;
        validate_session_id(&sid)?;
        let words: Vec<&str> = p.arguments.split_whitespace().collect();
        let text = match words.as_slice() {
            [] | ["help"] => texts::help(&self.config_warnings),
            _ if !self.rules.config().commands.enabled => texts::COMMANDS_DISABLED.to_string(),
            ["stats"] => self.stats(&sid)?,
            ["context"] => self.context(&sid)?,
            ["report"] => self.report()?,
            ["decompress"] => self.list_blocks(&sid)?,
            ["decompress", id] => self.decompress(&sid, id)?,
            ["sweep"] | ["sweep", _] => {
                let last = match words.get(1) {
                    None => None,
                    Some(n) => match n.parse::<usize>() {
                        Ok(n) => Some(n),
                        Err(_) => return Ok(CommandOutput { text: texts::sweep_not_a_number(n) }),
                    },
                };
                self.sweep(&sid, last)?
            }
            _ => texts::unknown_command(p.arguments.trim()),
        };
        // The answer quotes titles, paths and arguments: nothing in it may act on a terminal.
        let text = crate::format::terminal(&text, crate::format::Lines::Keep).into_owned();
        Ok(CommandOutput { text })
    }

    /// `/dcp stats`: this session's savings and the all-time ones.
    fn stats(&mut self, sid: &str) -> Result<String, RpcError> {
        let title = self.title(sid);
        self.save_unsaved();
        self.store.refresh(sid).map_err(internal)?;
        let slot = self.store.slot(sid).map_err(internal)?;
        let mut session = crate::stats::session(sid, slot.state()).priced(slot.state(), self.rules.config());
        session.title = session.title.or(title);
        let cache_dir = self.options.env.cache_dir();
        let dir = self.store.dir();
        let all = self.all_time.all_time(dir, Some(&cache_dir));
        let all = all.map_err(|e| internal(format!("cannot read the state files in {}: {e}", dir.display())))?;
        let all = all.priced(&crate::stats::money::all_time_sheet(self.rules.config()));
        Ok(crate::report::stats(Some(&session), &all))
    }

    /// `/dcp context`: what the model is sent, by category, before and after pruning.
    fn context(&mut self, sid: &str) -> Result<String, RpcError> {
        let header = texts::context_title(sid, self.title(sid).as_deref());
        let history = self.history(sid)?;
        let analysis = self.store.slot(sid).map_err(internal).map(|slot| {
            let (state, tokens) = slot.state_and_tokens();
            crate::context::analyse(history.messages(), state, &self.rules, tokens)
        });
        self.put_history(sid, history);
        Ok(crate::report::context(&header, &analysis?))
    }

    /// Writes every session's unsaved figures now, on this thread, so that what reads the
    /// state files finds them. A save that fails is logged and retried later, as any save.
    fn save_unsaved(&mut self) {
        for sid in self.store.dirty() {
            if let Err(e) = self.store.save_now(&sid) {
                tracing::warn!(session = sid, "cannot save before a report: {}", crate::error_chain(&e));
            }
        }
    }

    /// `/dcp report`: writes the savings report with `dcp report` and says where it is.
    fn report(&mut self) -> Result<String, RpcError> {
        self.save_unsaved();
        let file = self.options.env.cache_dir().join("report.html");
        let exe = std::env::current_exe().map_err(|e| internal(format!("cannot find dcp's own binary: {e}")))?;
        let output = std::process::Command::new(exe)
            .arg("--data-dir")
            .arg(&self.options.data_dir)
            .arg("report")
            .arg("--out")
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| internal(format!("cannot run dcp report: {e}")))?;
        if !output.status.success() {
            return Ok(texts::report_failed(&String::from_utf8_lossy(&output.stderr)));
        }
        Ok(texts::report_written(&file))
    }

    /// `/dcp decompress`: the compressed ranges, the agent's and dcp's finished turns, newest
    /// last.
    fn list_blocks(&mut self, sid: &str) -> Result<String, RpcError> {
        let slot = self.store.slot(sid).map_err(internal)?;
        Ok(texts::blocks(&slot.state().blocks))
    }

    /// `/dcp decompress ID`: the range's messages are sent again from the next request on,
    /// and the older ranges it had taken in stand for theirs again.
    fn decompress(&mut self, sid: &str, id: &str) -> Result<String, RpcError> {
        let slot = self.store.slot(sid).map_err(internal)?;
        let n = id.trim().trim_start_matches(['b', 'B']).parse::<u32>().ok();
        let Some(restored) = n.and_then(|n| slot.decompress(n)) else {
            return Ok(texts::not_a_range(id, &slot.state().blocks));
        };
        self.save_now(sid);
        Ok(texts::decompressed(n.unwrap_or(0), &restored))
    }

    fn sweep(&mut self, sid: &str, last: Option<usize>) -> Result<String, RpcError> {
        let history = self.history(sid)?;
        let result = self.sweep_history(sid, last, history.messages());
        self.put_history(sid, history);
        result
    }

    /// Session `sid`'s history: its mirror, taken out of the session (see
    /// [`Server::take_mirror`]); or, when nothing is mirrored yet, the stored history, with
    /// the state told of its newest compaction. A session OpenCode has not stored yet has no
    /// history.
    fn history(&mut self, sid: &str) -> Result<CommandHistory, RpcError> {
        let mirror = self.take_mirror(sid);
        if !mirror.messages().is_empty() {
            return Ok(CommandHistory::Mirrored(mirror));
        }
        let data = DataDir::new(&self.options.data_dir, &self.options.env);
        let messages = match data.load(sid) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    tracing::warn!("{w}");
                }
                visible_history(loaded.messages)
            }
            Err(crate::host::HostError::SessionNotFound { .. } | crate::host::HostError::NoData(_)) => Vec::new(),
            Err(e) => return Err(internal(crate::error_chain(&e))),
        };
        self.store.observe(sid, &messages).map_err(internal)?;
        Ok(CommandHistory::Stored(messages))
    }

    fn put_history(&mut self, sid: &str, history: CommandHistory) {
        if let CommandHistory::Mirrored(mirror) = history {
            self.put_mirror(sid, mirror);
        }
    }

    /// The session's title, from `opencode.db` when this process has not seen it.
    fn title(&mut self, sid: &str) -> Option<String> {
        self.with_session(sid, |server, session| {
            server.look_up_session(session, sid);
            session.about.title.clone()
        })
    }

    fn sweep_history(&mut self, sid: &str, last: Option<usize>, messages: &[Message]) -> Result<String, RpcError> {
        let slot = self.store.slot(sid).map_err(internal)?;
        let (state, tokens) = slot.state_and_tokens();
        let decisions = strategies::sweep::decide(messages, state, &self.rules, last, tokens);
        if decisions.is_empty() {
            return Ok(texts::NOTHING_TO_SWEEP.to_string());
        }
        let tokens: u64 = decisions.iter().map(|d| d.record.tokens).sum();
        let n = decisions.len();
        for mut d in decisions {
            // The user asked: the rewrite applies on the next request.
            d.record.applied = true;
            slot.record(&d.call_id, d.record);
        }
        self.save_now(sid);
        Ok(texts::swept(n, tokens))
    }
}
