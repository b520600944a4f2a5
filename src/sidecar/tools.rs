//! `tool`: the agent's `discard`, `extract` and `compress`. A `discard` given a
//! `distillation` is an `extract`, recorded and answered as one: `extract` need not be
//! registered for the agent to keep a summary of what it drops.
//!
//! The agent names calls by the small ids of the `<prunable-tools>` list, or by any other name
//! of a call it can see (see [`manual`]), and ranges of messages by their id tags (see
//! [`compress`]). Each tool applies what is valid and names what is not: one bad id never
//! voids the call. What the agent asked for is recorded and saved at once; its rewrite waits
//! for the cache-aware policy like any other.

use serde_json::Value;

use super::protocol::{RpcError, ToolOutput, ToolParams};
use super::{internal, validate_session_id, Server};
use crate::session::{History, Message};
use crate::strategies::{compress, manual};
use crate::texts;

/// The strings of argument `key`: a list (other values in it as JSON), a string or a number.
fn strings(args: &Value, key: &str) -> Vec<String> {
    match args.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Number(n)) => vec![n.to_string()],
        _ => Vec::new(),
    }
}

impl Server {
    pub(super) fn tool(&mut self, p: ToolParams) -> Result<ToolOutput, RpcError> {
        validate_session_id(&p.session_id)?;
        let sid = p.session_id.clone();
        let mirror = self.take_mirror(&sid);
        let result = self.run_agent_tool(p, mirror.messages());
        self.put_mirror(&sid, mirror);
        result
    }

    fn run_agent_tool(&mut self, p: ToolParams, messages: &[Message]) -> Result<ToolOutput, RpcError> {
        let enabled = match p.name.as_str() {
            "discard" => self.rules.config().tools.discard.enabled,
            "extract" => self.rules.config().tools.extract.enabled,
            "compress" => self.rules.config().tools.compress.enabled,
            "restore" => self.rules.config().tools.restore.enabled,
            other => return Err(RpcError::params(format!("tool: unknown tool {other:?}"))),
        };
        // The answer names what the agent sent (its ids, its ranges' ends, its calls' key
        // arguments), and OpenCode shows it in the session: no control character goes raw.
        let answer = |text: String| {
            let output = crate::format::terminal(&text, crate::format::Lines::Keep).into_owned();
            Ok(ToolOutput { output, title: p.name.clone() })
        };
        if !enabled || !self.rules.config().enabled {
            return answer(texts::tool_disabled(&p.name));
        }
        if messages.is_empty() {
            return answer(texts::TOOL_BEFORE_HISTORY.to_string());
        }
        if p.name == "compress" {
            return answer(self.compress(&p, messages)?);
        }
        if p.name == "restore" {
            // The text as it was, byte for byte: no escaping (OpenCode showed it so once).
            let raw = strings(&p.args, "id").into_iter().chain(strings(&p.args, "ids")).next().unwrap_or_default();
            let output = self.restore(&p.session_id, &raw, messages)?;
            return Ok(ToolOutput { output, title: p.name.clone() });
        }
        let sid = &p.session_id;
        let slot = self.store.slot(sid).map_err(internal)?;
        let history = History::new(messages);
        let (state, tokens) = slot.state_and_tokens();
        let ctx = manual::Ctx { history: &history, state, rules: &self.rules };
        let (ids, distillation) = (strings(&p.args, "ids"), strings(&p.args, "distillation"));
        // DCP 1.2's reason, first in `ids`, is no id; it changes nothing (nor does `reason`).
        let ids = if p.name == "discard" { manual::without_reason(&ids) } else { &ids };
        // A discard with a distillation is an extract, recorded and answered as one; a
        // distillation of empty strings alone is no distillation.
        let (applied, verb) = if p.name == "extract" || distillation.iter().any(|d| !d.trim().is_empty()) {
            (manual::extract(&ctx, ids, &distillation, tokens), "Extracted")
        } else {
            (manual::discard(&ctx, ids, tokens), "Discarded")
        };
        let tokens = applied.decisions.iter().map(|d| d.record.tokens).sum();
        let text =
            texts::tool_done(&texts::ToolDone { verb, tokens, done: &applied.done, problems: &applied.problems });
        if !applied.decisions.is_empty() {
            for d in applied.decisions {
                slot.record(&d.call_id, d.record);
            }
            self.save_now(sid);
        }
        answer(text)
    }

    /// `compress`: the agent's ranges become blocks, each on its own; the summaries reach the
    /// model when the cache-aware policy applies them.
    fn compress(&mut self, p: &ToolParams, messages: &[Message]) -> Result<String, RpcError> {
        let sid = &p.session_id;
        let (topic, ranges) = compress::ranges_from_args(&p.args);
        let ledger = self.store.loaded(&sid).map(|slot| slot.ledger());
        let restore = self.sessions.get(sid.as_str()).and_then(|s| self.restore_via(s, ledger));
        let slot = self.store.slot(sid).map_err(internal)?;
        let request = compress::CompressCall {
            session_id: sid,
            topic: &topic,
            message_id: p.message_id.as_deref(),
            call_id: p.call_id.as_deref(),
            now: super::now_ms(),
            restore,
        };
        let (state, tokens) = slot.state_for_strategies();
        let outcome = compress::compress(messages, state, &request, &ranges, tokens);
        for id in &outcome.made {
            let block = &slot.state().blocks.by_id[id];
            let (tools, tokens) = (block.direct_tools.clone(), block.net_tokens());
            slot.record_block(*id, &tools, tokens);
            // A range that took a block in force in its place is in force now: the calls it
            // hides leave the prunable list, and the edits sent before miss it.
            if slot.state().blocks.by_id[id].applied {
                slot.apply_block(*id);
            }
        }
        let text = texts::compress_answer(slot.state(), &outcome);
        if !outcome.made.is_empty() {
            self.save_now(sid);
        }
        Ok(text)
    }
}
