//! `command`: the `/dcp` commands (`stats`, `context`, `sweep [N]`, `help`).
//!
//! Each answers with text the user reads in the session; none makes a model request. A
//! sweep is the user's own decision: recorded, applied on the next request and saved at once.

use super::protocol::{CommandOutput, CommandParams, RpcError};
use super::{internal, texts, validate_session_id, Server};
use crate::session::Message;
use crate::strategies;

impl Server {
    pub(super) fn command(&mut self, p: CommandParams) -> Result<CommandOutput, RpcError> {
        let sid = p.session_id;
        validate_session_id(&sid)?;
        let words: Vec<&str> = p.arguments.split_whitespace().collect();
        let text = match words.as_slice() {
            [] | ["help"] => texts::HELP.to_string(),
            _ if !self.config.commands.enabled => {
                "DCP commands are disabled in dcp.jsonc (commands.enabled).".to_string()
            }
            ["stats"] => self.stats(&sid)?,
            ["context"] => self.context(&sid)?,
            ["sweep"] | ["sweep", _] => {
                let last = match words.get(1) {
                    None => None,
                    Some(n) => match n.parse::<usize>() {
                        Ok(n) => Some(n),
                        Err(_) => {
                            let text =
                                format!("/dcp sweep takes a number of tool calls, not {n:?}.\n\n{}", texts::HELP);
                            return Ok(CommandOutput { text });
                        }
                    },
                };
                self.sweep(&sid, last)?
            }
            _ => format!("Unknown /dcp command {:?}.\n\n{}", p.arguments.trim(), texts::HELP),
        };
        Ok(CommandOutput { text })
    }

    /// `/dcp stats`: this session's savings and the all-time ones.
    fn stats(&mut self, sid: &str) -> Result<String, RpcError> {
        self.manager.refresh(sid).map_err(internal)?;
        let (slot, _) = self.manager.slot(sid).map_err(internal)?;
        let session = crate::stats::session(sid, &slot.state);
        let all = crate::stats::all_time(self.manager.dir(), Some(&self.options.env.cache_dir())).map_err(internal)?;
        Ok(crate::report::stats(Some(&session), &all))
    }

    /// `/dcp context`: what the model is sent, by category, before and after pruning.
    fn context(&mut self, sid: &str) -> Result<String, RpcError> {
        let mirror = self.take_mirror(sid);
        let analysis = self.manager.slot(sid).map_err(internal).map(|(slot, _)| {
            let (config, protection) = (&self.config, &self.protection);
            crate::context::analyse(mirror.messages(), &slot.state, config, protection, &mut slot.tokens)
        });
        self.put_mirror(sid, mirror);
        Ok(crate::report::context(&format!("Session {sid}"), &analysis?))
    }

    fn sweep(&mut self, sid: &str, last: Option<usize>) -> Result<String, RpcError> {
        let mirror = self.take_mirror(sid);
        let result = self.sweep_on(sid, last, mirror.messages());
        self.put_mirror(sid, mirror);
        result
    }

    fn sweep_on(&mut self, sid: &str, last: Option<usize>, messages: &[Message]) -> Result<String, RpcError> {
        let (slot, _) = self.manager.slot(sid).map_err(internal)?;
        let decisions =
            strategies::sweep::decide(messages, &slot.state, &self.config, &self.protection, last, &mut slot.tokens);
        if decisions.is_empty() {
            return Ok("Nothing to sweep.".to_string());
        }
        let tokens: u64 = decisions.iter().map(|d| d.record.tokens).sum();
        let n = decisions.len();
        for mut d in decisions {
            // The user asked: the rewrite applies on the next request.
            d.record.applied = true;
            slot.record(&d.call_id, d.record);
        }
        slot.dirty = true;
        self.save_now(sid);
        Ok(format!(
            "Swept {n} tool output{} ({} tokens).",
            if n == 1 { "" } else { "s" },
            crate::format::tokens(tokens)
        ))
    }
}
