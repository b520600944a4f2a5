//! `tool`: the agent's `discard` and `extract`.
//!
//! The agent names calls by the small ids of the `<prunable-tools>` list. What it may prune
//! is what the list would show now; anything else is refused with the valid ids, and
//! nothing is pruned. A prune the agent asked for is recorded and saved at once; its rewrite
//! waits for the cache-aware policy like any other.

use serde_json::Value;

use super::protocol::{RpcError, ToolOutput, ToolParams};
use super::{internal, validate_session_id, Server};
use crate::session::{History, Message};
use crate::strategies::{manual, prunable};
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
        let sid = p.session_id;
        let enabled = match p.name.as_str() {
            "discard" => self.rules.config().tools.discard.enabled,
            "extract" => self.rules.config().tools.extract.enabled,
            other => return Err(RpcError::params(format!("tool: unknown tool {other:?}"))),
        };
        let answer = |text: String| Ok(ToolOutput { output: text, title: p.name.clone() });
        if !enabled || !self.rules.config().enabled {
            return answer(texts::tool_disabled(&p.name));
        }
        if messages.is_empty() {
            return answer(texts::TOOL_BEFORE_HISTORY.to_string());
        }
        let (slot, _) = self.store.slot(&sid).map_err(internal)?;
        let project = self.options.project.as_ref().and_then(|p| p.to_str());
        let listing = prunable::Listing { project, min_tokens: self.rules.config().tools.settings.min_tokens.into() };
        let valid = prunable::prunable(&History::new(messages), &mut slot.state, &self.rules, &listing);
        let decisions = if p.name == "discard" {
            let reason = match p.args.get("reason").and_then(Value::as_str) {
                None => None,
                Some("completion") => Some(manual::DiscardReason::Completion),
                Some("noise") => Some(manual::DiscardReason::Noise),
                Some(other) => return answer(texts::unknown_reason(other)),
            };
            let (ids, _reason) = manual::split_reason(&strings(&p.args, "ids"), reason);
            manual::discard(messages, &ids, &valid, &mut slot.tokens)
        } else {
            let (ids, distillation) = (strings(&p.args, "ids"), strings(&p.args, "distillation"));
            manual::extract(messages, &ids, &distillation, &valid, &mut slot.tokens)
        };
        let decisions = match decisions {
            Ok(d) => d,
            Err(refusal) => return answer(refusal.0),
        };
        let tokens: u64 = decisions.iter().map(|d| d.record.tokens).sum();
        let done: Vec<(u32, String, Option<String>)> = decisions
            .iter()
            .filter_map(|d| {
                valid.iter().find(|v| v.call_id == d.call_id).map(|v| (v.id, v.tool.clone(), v.key.clone()))
            })
            .collect();
        for d in decisions {
            slot.record(&d.call_id, d.record);
        }
        slot.dirty = true;
        self.save_now(&sid);
        let verb = if p.name == "discard" { "Discarded" } else { "Extracted" };
        let done: Vec<(u32, &str, Option<&str>)> =
            done.iter().map(|(i, t, k)| (*i, t.as_str(), k.as_deref())).collect();
        answer(texts::tool_done(verb, &done, tokens))
    }
}
