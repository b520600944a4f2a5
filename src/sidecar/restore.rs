//! `restore`: the agent brings back the exact text dcp hid behind a placeholder, in one call,
//! without running anything again (a second run may differ, be slow, or change something).
//!
//! A placeholder names a handle (`crate::texts::restore`): a call's agent-facing number, or a
//! range's `bN`. [`target`] reads what it names in the session's state: which call or range,
//! which of its fields dcp hid, and whether they are hidden now. [`text`] reads the original
//! from a history that holds it whole: the mirror keeps only a digest of a big string
//! (`crate::session::slim`), so the sidecar reads OpenCode's own copy, its store
//! (`opencode.db` or `storage/`), and checks it against the digest of what was sent; the proxy
//! reads the last request of the conversation, which it keeps in memory.
//!
//! The text goes back as the tool's answer, at the tail of the next request: the prefix the
//! provider caches stays as it is, and the text is written once at the cache-write price.
//! Un-hiding it in place would rewrite the prompt from the hidden part on, re-billing all that
//! follows it, to save the agent one read of a text it asked for now.

use super::protocol::RpcError;
use super::{internal, LiveSession, Server};
use crate::host::DataDir;
use crate::session::{str_field, tool_calls, Message, Node, Role};
use crate::state::blocks::Block;
use crate::state::Ledger;
use crate::state::{Action, SessionState};
use crate::strategies::masking;
use crate::texts::restore as texts;
use crate::texts::restore::Via;

/// What a handle names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A call, the fields of it dcp hid, and whether the model is sent them hidden now.
    Call { call_id: String, fields: RestoredFields, hidden: bool },
    /// An agent's compressed range: its messages, by id.
    Range { block: u32, messages: Vec<String>, hidden: bool },
}

impl Target {
    /// Whether the model is sent what the target names hidden: bringing it back is a miss.
    pub fn hidden(&self) -> bool {
        match self {
            Target::Call { hidden, .. } | Target::Range { hidden, .. } => *hidden,
        }
    }
}

/// Which fields of a call a restore brings back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredFields {
    Output,
    /// The text arguments masking or supersede-writes replaced.
    Inputs,
    /// Every string argument (a failed call's, which purge-errors replaced).
    AllInputs,
}

/// What `raw` names in `state`: `12`, `#12`, `restore 12`, a tool call id, or `b3`.
pub fn target(state: &SessionState, raw: &str) -> Result<Target, String> {
    let handle = handle(raw);
    let unknown = || texts::unknown(raw.trim());
    if let Some(block) = handle.strip_prefix(['b', 'B']).and_then(|n| n.parse::<u32>().ok()) {
        let b = state.blocks.by_id.get(&block).filter(|b| b.active).ok_or_else(unknown)?;
        return Ok(range(block, b));
    }
    let call_id = match handle.parse::<u32>() {
        Ok(n) => state.call_for(n).ok_or_else(unknown)?.to_string(),
        Err(_) if !handle.is_empty() => handle.to_string(),
        Err(_) => return Err(unknown()),
    };
    Ok(call(state, call_id))
}

/// `raw` without what an agent may wrap a handle in.
fn handle(raw: &str) -> &str {
    let raw = raw.trim().trim_matches(['`', '"', '\'', '<', '>', '[', ']']);
    let raw = raw.strip_prefix("dcp ").unwrap_or(raw).trim_start();
    let raw = raw.strip_prefix("restore").unwrap_or(raw).trim_start();
    raw.strip_prefix('#').unwrap_or(raw).trim()
}

fn range(block: u32, b: &Block) -> Target {
    Target::Range { block, messages: b.effective_messages.clone(), hidden: b.applied }
}

/// What a restore of `call_id` brings back, by the prune that hides it or the range it is in.
fn call(state: &SessionState, call_id: String) -> Target {
    if let Some(record) = state.pruned.get(&call_id) {
        let fields = match record.action {
            Action::MaskInputs | Action::WriteContent => RestoredFields::Inputs,
            Action::ErrorInputs => RestoredFields::AllInputs,
            _ => RestoredFields::Output,
        };
        return Target::Call { hidden: record.applied, fields, call_id };
    }
    let ranged = state.blocks.active().any(|b| b.applied && b.effective_tools.iter().any(|t| *t == call_id));
    Target::Call { call_id, fields: RestoredFields::Output, hidden: ranged }
}

/// The part of the call `call_id` in `messages`.
fn part_of<'m>(messages: &'m [Message], call_id: &str) -> Option<&'m Node> {
    let calls = tool_calls(messages);
    let call = calls.into_iter().rev().find(|c| c.call_id == call_id)?;
    messages.get(call.message)?.parts.get(call.part)
}

/// The strings of a call `fields` names, by key (`output` for the output).
fn strings<'m>(part: &'m Node, fields: RestoredFields) -> Vec<(&'m str, &'m str)> {
    let state = part.get("state");
    let input = state.and_then(|s| s.get("input")).and_then(Node::as_object);
    match fields {
        RestoredFields::Output => {
            state.and_then(|s| str_field(s, "output")).map(|o| vec![("output", o)]).unwrap_or_default()
        }
        RestoredFields::Inputs => {
            let tool = str_field(part, "tool").unwrap_or("");
            let keys: Vec<&str> = match tool {
                "edit" | "write" => masking::masked_inputs(tool, input).map(|(k, _)| k).collect(),
                _ => vec!["content"],
            };
            let value = |k: &str| input.and_then(|i| i.get(k)).and_then(Node::as_str);
            keys.into_iter().filter_map(|k| Some((k, value(k)?))).collect()
        }
        RestoredFields::AllInputs => input.into_iter().flatten().filter_map(|(k, v)| Some((k, v.as_str()?))).collect(),
    }
}

/// The original text `target` names in `messages`, if they hold it whole: a call's one hidden
/// field exactly as it was, several under their names, a range's messages one after the
/// other. `kept` is the history as dcp's engine holds it (a big string by its digest): a
/// text that does not match what it was sent is not given.
pub fn text(target: &Target, messages: &[Message], kept: &[Message]) -> Option<String> {
    match target {
        Target::Call { call_id, fields, .. } => {
            let found = strings(part_of(messages, call_id)?, *fields);
            let sent = part_of(kept, call_id).map(|p| strings(p, *fields));
            let matches = |(k, v): &(&str, &str)| {
                sent.as_ref().is_none_or(|s| s.iter().any(|(sk, sv)| sk == k && crate::session::slim::same(sv, v)))
            };
            if found.is_empty() || !found.iter().all(matches) {
                return None;
            }
            if let [(_, only)] = found.as_slice() {
                return Some(only.to_string());
            }
            Some(found.iter().map(|(k, v)| format!("{k}:\n{v}")).collect::<Vec<_>>().join("\n\n"))
        }
        Target::Range { block, messages: ids, .. } => {
            let found: Vec<&Message> = ids.iter().filter_map(|id| messages.iter().find(|m| m.id() == id)).collect();
            (!found.is_empty()).then(|| transcript(*block, &found))
        }
    }
}

/// A range's messages as text: each message's role, its text and its calls with their output.
fn transcript(block: u32, messages: &[&Message]) -> String {
    let mut out = vec![texts::range_header(block, messages.len())];
    for m in messages {
        let role = if m.role() == Role::User { "user" } else { "assistant" };
        for part in &m.parts {
            match str_field(part, "type") {
                Some("text") => out.push(format!("{role}: {}", str_field(part, "text").unwrap_or(""))),
                Some("tool") => {
                    let state = part.get("state");
                    let input = state.and_then(|s| s.get("input")).map(Node::to_string).unwrap_or_default();
                    let result = state.and_then(|s| str_field(s, "output").or_else(|| str_field(s, "error")));
                    let tool = str_field(part, "tool").unwrap_or("tool");
                    out.push(format!("{tool} {input}\n{}", result.unwrap_or("")));
                }
                _ => {}
            }
        }
    }
    out.join("\n\n")
}

/// A refusal as the agent is told it: it quotes what the agent sent, so no control character
/// goes raw (the restored text itself goes as it was).
fn escaped(text: &str) -> String {
    crate::format::terminal(text, crate::format::Lines::Keep).into_owned()
}

impl Server {
    /// Has the placeholders say to restore what they hide `via` this: [`Via::Shell`] for
    /// `dcp proxy`, whose clients have no dcp tool but a shell.
    pub fn set_restore(&mut self, via: Via) {
        self.restore = via;
    }

    /// How the agent of `session` restores what dcp hid, if it can: through the `restore`
    /// tool once the session's requests carry dcp's tools (`ledger`: the session's, once its
    /// state is loaded), or its shell.
    pub(super) fn restore_via(&self, session: &LiveSession, ledger: Option<&Ledger>) -> Option<Via> {
        match self.restore {
            Via::Shell => Some(Via::Shell),
            Via::Tool => {
                (self.rules.config().tools.restore.enabled && session.offered(&self.rules, ledger)).then_some(Via::Tool)
            }
        }
    }

    /// The agent's `restore` of `raw` in session `sid`: the original text, read from `kept`
    /// (the mirror) where it holds it whole, else from OpenCode's store and checked against
    /// `kept`; or why it cannot be given. A restore of what the model is sent hidden is
    /// counted (see `crate::state::misses`).
    pub(super) fn restore(&mut self, sid: &str, raw: &str, kept: &[Message]) -> Result<String, RpcError> {
        let target = match target(self.store.slot(sid).map_err(internal)?.state(), raw) {
            Ok(target) => target,
            Err(refusal) => return Ok(escaped(&refusal)),
        };
        let stored = || {
            let data = DataDir::new(&self.options.data_dir, &self.options.env);
            let loaded = data.load(sid).map_err(|e| e.to_string())?;
            text(&target, &loaded.messages, kept).ok_or_else(|| texts::NOT_STORED.to_string())
        };
        let found = match text(&target, kept, kept) {
            Some(text) => text,
            None => match stored() {
                Ok(text) => text,
                Err(why) => return Ok(escaped(&texts::unreadable(raw.trim(), &why))),
            },
        };
        if target.hidden() {
            self.count_restore(sid)?;
        }
        Ok(found)
    }

    /// The misses session `sid` saw live so far: its re-fetches and restores.
    pub fn misses(&mut self, sid: &str) -> crate::state::misses::MissCounts {
        self.store.slot(sid).map(|slot| slot.state().misses).unwrap_or_default()
    }

    /// Counts a restore of what session `sid`'s model is sent hidden, and saves it.
    pub fn count_restore(&mut self, sid: &str) -> Result<(), RpcError> {
        let slot = self.store.slot(sid).map_err(internal)?;
        slot.count_restore();
        self.save_now(sid);
        Ok(())
    }

    /// What `raw` names in the most recently active of the sessions `sids` that hides it, for
    /// `dcp proxy`, whose `dcp restore` names no conversation: a restore of what a
    /// conversation hides is counted in it. Else what it names in one that shows it, or the
    /// refusal when it names nothing.
    pub fn restore_target(&mut self, sids: &[String], raw: &str) -> Result<(String, Target), String> {
        let mut refusal = texts::unknown(raw.trim());
        let mut shown = None;
        let mut sids: Vec<&String> = sids.iter().collect();
        let last = |sid: &String| self.store.loaded(sid).and_then(|slot| slot.ledger().last_request);
        sids.sort_by_key(|sid| std::cmp::Reverse(last(sid)));
        for sid in sids {
            let Ok(slot) = self.store.slot(sid) else { continue };
            match target(slot.state(), raw) {
                Ok(t) if t.hidden() => {
                    let _ = self.count_restore(sid);
                    return Ok((sid.clone(), t));
                }
                Ok(t) => {
                    shown.get_or_insert((sid.clone(), t));
                }
                Err(why) => refusal = why,
            }
        }
        shown.ok_or(refusal)
    }
}
