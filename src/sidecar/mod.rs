//! `dcp serve`: the long-lived sidecar the OpenCode plugin talks to.
//!
//! One sidecar serves every session of one OpenCode process; each session has its own
//! state (through the [`Manager`]) and its own mirror of the history. Requests are handled
//! one at a time on one thread: they are short and CPU-bound. State files are saved by the
//! [`Saver`] task, off the request path. Nothing is ever written to stdout but protocol
//! lines; logs go to stderr and, with `debug`, to files.

pub mod index;
pub mod mirror;
pub mod protocol;
pub mod texts;

use std::collections::HashMap;

use rustc_hash::FxHashSet as HashSet;
use std::path::PathBuf;
use std::time::Instant;

use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::sync::mpsc::RecvTimeoutError;

use self::index::Index;
use self::mirror::Mirror;
use self::protocol::{code, Request, RpcError};
use crate::config::{self, Config, Notification};
use crate::host::paths::{self, Env};
use crate::host::sqlite::Db;
use crate::policy;
use crate::session::{str_field, History, Message, Role};
use crate::state::manager::Manager;
use crate::state::saver::Saver;
use crate::state::{PruneRecord, SessionState};
use crate::strategies::{self, manual, Protection};
use crate::tokens::EstimatorChoice;

/// Where the sidecar finds things.
#[derive(Debug, Clone)]
pub struct Options {
    pub data_dir: PathBuf,
    pub env: Env,
    /// The project dir whose `.opencode/dcp.jsonc` applies, until `initialize` says otherwise.
    pub project: Option<PathBuf>,
}

/// What the sidecar keeps about a live session besides its state.
#[derive(Debug, Default)]
struct Live {
    mirror: Mirror,
    /// The session's tool calls, as the strategies and the prunable list need them.
    index: Index,
    requests: u32,
    last_request_ms: Option<i64>,
    /// Whether the session has a parent (a subagent), once known.
    parent: Option<bool>,
    title: Option<String>,
    /// How often the session was looked up in `opencode.db`.
    lookups: u32,
    /// Tool calls in the history when the agent was last nudged.
    calls_at_nudge: usize,
    /// The number of the last answer whose edits the plugin may keep, and what they were
    /// computed from: the slot's revision and resets, and the number of messages.
    edits_seq: u64,
    edits_basis: Option<EditsBasis>,
    /// The calls whose edits the plugin holds as of `edits_seq`.
    edits_sent: HashSet<String>,
    /// The messages whose tool outputs were counted ahead (see [`Server::precount`]).
    precounted: usize,
}

impl Live {
    /// Whether messages are left whose outputs were not counted ahead.
    fn uncounted(&self) -> bool {
        self.precounted < self.mirror.messages().len()
    }
}

/// The sidecar's state: config, sessions, and where saves go.
pub struct Server {
    options: Options,
    config: Config,
    protection: Protection,
    manager: Manager,
    live: HashMap<String, Live>,
    saver: Option<Saver>,
    /// When each session's last save job was handed to the saver, and the sessions whose
    /// save waits for the next [`Server::save_due`].
    handed: HashMap<String, Instant>,
    waiting: std::collections::BTreeSet<String>,
    shutting_down: bool,
}

#[derive(Deserialize)]
struct TransformParams {
    #[serde(rename = "sessionID")]
    session_id: String,
    #[serde(rename = "parentID", default)]
    parent_id: Option<Option<String>>,
    #[serde(rename = "contextLimit", default)]
    context_limit: Option<u64>,
    /// Milliseconds since the epoch; the sidecar's clock when absent.
    #[serde(default)]
    now: Option<i64>,
    /// The history is a copy about to be summarised by a compaction, not a model request.
    #[serde(default)]
    compaction: bool,
    /// How many leading messages are the previous request's, unchanged: not re-sent.
    #[serde(default)]
    base: usize,
    /// The `seq` of the last answer whose edits the plugin holds.
    #[serde(default)]
    have: Option<u64>,
    messages: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EditsBasis {
    revision: u64,
    resets: u64,
    messages: usize,
}

/// What the answer says about edits.
enum EditsAnswer {
    Same,
    Add(Vec<Value>),
    Full(Vec<Value>),
}

/// What a transform knows about the request besides the history.
struct RequestInfo {
    have: Option<u64>,
    requests: u32,
    idle_seconds: Option<u64>,
    context_limit: Option<u64>,
    title: Option<String>,
}

#[derive(Deserialize)]
struct SessionParams {
    #[serde(rename = "sessionID", default)]
    session_id: Option<String>,
}

#[derive(Deserialize)]
struct ToolParams {
    #[serde(rename = "sessionID")]
    session_id: String,
    name: String,
    #[serde(default)]
    args: Value,
}

#[derive(Deserialize)]
struct CommandParams {
    #[serde(rename = "sessionID")]
    session_id: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct InitializeParams {
    #[serde(default)]
    protocol: Option<u64>,
    #[serde(default)]
    directory: Option<PathBuf>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// How often a session's state is handed to the saver after requests, at most: a burst of
/// requests (an agent's tool steps) costs one copy and one write per interval, and what
/// waits reaches the disk within about this long.
pub const SAVE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::INTERNAL, e.to_string())
}

impl Server {
    pub fn new(options: Options, saver: Option<Saver>) -> Result<Server, anyhow::Error> {
        let loaded = config::load(&config::Locations::standard(&options.env, options.project.as_deref()))?;
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let protection = Protection::new(&loaded.config)?;
        let manager = Manager::new(&paths::state_dir(&options.data_dir), EstimatorChoice::Auto);
        Ok(Server {
            options,
            config: loaded.config,
            protection,
            manager,
            live: HashMap::new(),
            saver,
            handed: HashMap::new(),
            waiting: Default::default(),
            shutting_down: false,
        })
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Handles one protocol line; returns the response line, if the line asks for one.
    pub fn handle_line(&mut self, line: &str) -> Option<String> {
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            return None;
        }
        let request = match protocol::decode(line) {
            Ok(r) => r,
            Err((id, e)) => {
                tracing::warn!("protocol: {}", e.message);
                return Some(protocol::err(id.as_ref(), &e));
            }
        };
        let Request { id, method, params } = request;
        let result = self.dispatch(&method, params);
        match (id, result) {
            (Some(id), Ok(value)) => Some(protocol::ok(&id, value)),
            (Some(id), Err(e)) => {
                if e.code != code::RESYNC {
                    tracing::warn!("{method}: {}", e.message);
                }
                Some(protocol::err(Some(&id), &e))
            }
            (None, Err(e)) => {
                tracing::warn!("{method} (notification): {}", e.message);
                None
            }
            (None, Ok(_)) => None,
        }
    }

    fn dispatch(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => self.initialize(protocol::params(method, params)?),
            "transform" => self.transform(protocol::params(method, params)?),
            "system" => self.system(protocol::params(method, params)?),
            "tool" => self.tool(protocol::params(method, params)?),
            "command" => self.command(protocol::params(method, params)?),
            "event" => Ok(self.event(&params)),
            "shutdown" => {
                self.shutting_down = true;
                self.save_dirty();
                Ok(json!({}))
            }
            other => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("unknown method {other:?}"))),
        }
    }

    fn initialize(&mut self, p: InitializeParams) -> Result<Value, RpcError> {
        if let Some(v) = p.protocol {
            if v != protocol::PROTOCOL_VERSION {
                return Err(RpcError::new(
                    code::INVALID_REQUEST,
                    format!("protocol {v} is not supported; this sidecar speaks {}", protocol::PROTOCOL_VERSION),
                ));
            }
        }
        if let Some(dir) = p.directory {
            self.options.project = Some(dir);
            let loaded = config::load(&config::Locations::standard(&self.options.env, self.options.project.as_deref()))
                .map_err(|e| internal(crate::error_chain(&e)))?;
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            self.protection = Protection::new(&loaded.config).map_err(internal)?;
            self.config = loaded.config;
            // What the indexes read was judged by the old rules.
            for live in self.live.values_mut() {
                live.index = Index::default();
            }
        }
        // Not `TokenCounter::estimator`: that would wait for the tables, which load in the
        // background while the first requests are served.
        let estimator = crate::tokens::expected_estimator().name();
        Ok(json!({
            "protocol": protocol::PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "enabled": self.config.enabled,
            "estimator": estimator,
            "tools": {"discard": self.config.tools.discard.enabled, "extract": self.config.tools.extract.enabled},
            "commands": self.config.commands.enabled,
            "descriptions": {
                "discard": texts::DISCARD_DESCRIPTION,
                "extract": texts::EXTRACT_DESCRIPTION,
                "command": texts::COMMAND_DESCRIPTION,
            },
        }))
    }

    /// Looks up a session's title and parent in `opencode.db`, once.
    fn learn(&mut self, session_id: &str) {
        let live = self.live.entry(session_id.to_string()).or_default();
        // Once when first seen; while OpenCode has not titled the session yet, again every 16
        // requests. Not on every request: this is the request path.
        let untitled = live.title.as_deref().is_none_or(|t| t.starts_with("New session"));
        let due = live.lookups == 0 || (untitled && live.requests >= live.lookups * 16);
        if !due {
            return;
        }
        live.lookups += 1;
        let db_path = self.options.env.db_path(&self.options.data_dir);
        let Ok(db) = Db::open(&db_path) else { return };
        if let Ok(Some(info)) = db.session(session_id) {
            live.parent.get_or_insert(info.parent_id.is_some());
            live.title = Some(info.title);
        }
    }

    fn skip_session(&self, session_id: &str) -> bool {
        !self.config.enabled
            || (!self.config.prune_subagents && self.live.get(session_id).and_then(|l| l.parent) == Some(true))
    }

    fn transform(&mut self, p: TransformParams) -> Result<Value, RpcError> {
        let sid = p.session_id;
        crate::state::persist::validate_session_id(&sid).map_err(|e| RpcError::params(e.to_string()))?;
        let now = p.now.unwrap_or_else(now_ms);
        if let Some(parent) = p.parent_id {
            self.live.entry(sid.clone()).or_default().parent = Some(parent.is_some());
        }
        self.learn(&sid);
        let live = self.live.get_mut(&sid).expect("learn inserts");
        if p.compaction {
            // The summariser sees the history as the model does, but this is no request:
            // no counting, no policy, no list. It is not the next request's history
            // either, so the mirror is left as it is.
            let mut scratch = Mirror::default();
            let messages = scratch.resolve(0, p.messages)?;
            if self.skip_session(&sid) {
                return Ok(json!({"edits": [], "append": [], "notify": null}));
            }
            let (slot, _) = self.manager.slot(&sid).map_err(internal)?;
            let positions: HashMap<&str, (usize, usize)> =
                History::new(messages).calls.iter().map(|c| (c.call_id, (c.message, c.part))).collect();
            let position = |id: &str| positions.get(id).copied();
            let edits = edits_for(messages, position, &slot.state, &mut HashSet::default());
            return Ok(json!({"edits": edits, "append": [], "notify": null}));
        }
        let idle_seconds = live.last_request_ms.map(|t| (now.saturating_sub(t) / 1000).max(0) as u64);
        live.last_request_ms = Some(now);
        live.requests += 1;
        let request = RequestInfo {
            have: p.have,
            requests: live.requests,
            idle_seconds,
            context_limit: p.context_limit,
            title: live.title.clone(),
        };
        // Take the mirror out while the history is borrowed from it, instead of cloning the
        // history on every request. A failed resolve leaves it empty: the plugin resyncs.
        let mut mirror = std::mem::take(&mut live.mirror);
        let result = match mirror.resolve(p.base, p.messages) {
            Ok(_) => self.rewrite(&sid, &mirror, request),
            Err(e) => Err(e),
        };
        if let Some(live) = self.live.get_mut(&sid) {
            live.precounted = live.precounted.min(mirror.kept());
            live.mirror = mirror;
        }
        result
    }

    /// Decides what the model sees for one request of session `sid`: records the automatic
    /// strategies' decisions, applies what the policy allows, and lists what the agent may prune.
    fn rewrite(&mut self, sid: &str, mirror: &Mirror, request: RequestInfo) -> Result<Value, RpcError> {
        let RequestInfo { have, requests, idle_seconds, context_limit, title } = request;
        if self.skip_session(sid) {
            return Ok(json!({"edits": [], "append": [], "notify": null}));
        }
        let observed = self
            .manager
            .observe_newest(sid, mirror.newest_compaction())
            .map_err(|e| RpcError::params(e.to_string()))?;
        let (slot, _) = self.manager.slot(sid).map_err(internal)?;
        if slot.state.session_name.is_none() {
            slot.state.session_name = title;
        }
        let mut dirty = observed.compacted;
        // The index reads only what is new since the last request, and hands over the calls
        // that became prunable.
        let messages = mirror.messages();
        let index = &mut self.live.get_mut(sid).expect("transform inserts").index;
        if index.sync(messages, mirror.kept(), slot.resets, &self.config, &self.protection) {
            tracing::debug!(session = sid, rebuilds = index.rebuilds(), "index rebuilt: what it had read changed");
        }
        for d in index.decisions(messages, &slot.state, &self.config, &self.protection, &mut slot.tokens) {
            dirty |= slot.record(&d.call_id, d.record);
        }

        // The cache-aware policy: apply pending rewrites together, when it pays. Each
        // assistant message in the history was one request, so the session's request count
        // survives restarts.
        let sizes = mirror.sizes();
        let mut tails = vec![0u64; sizes.len() + 1];
        for i in (0..sizes.len()).rev() {
            tails[i] = tails[i + 1] + sizes[i];
        }
        // The waiting prunes of calls in the history, in history order.
        let mut pending: Vec<((usize, usize), String, policy::Pending)> = slot
            .state
            .pruned
            .iter()
            .filter(|(_, r)| !r.applied)
            .filter_map(|(id, r)| {
                let at = index.position(id)?;
                Some((at, id.clone(), policy::Pending { tokens: r.tokens, tail: tails[at.0] }))
            })
            .collect();
        pending.sort_unstable_by_key(|(at, _, _)| *at);
        let requests = requests.max(index.current() + 1);
        let base = policy::Inputs { context: tails[0], tail: 0, pending: 0, requests, idle_seconds, context_limit };
        let costs: Vec<policy::Pending> = pending.iter().map(|(_, _, p)| *p).collect();
        let mut applied_now: Vec<String> = Vec::new();
        if let Some((cut, reason)) = policy::choose(&self.config.rewrite, &base, &costs) {
            tracing::debug!(session = sid, ?reason, cut, pending = pending.len(), "applying pending rewrites");
            for (_, id, _) in &pending[cut..] {
                if let Some(r) = slot.state.pruned.get_mut(id) {
                    r.applied = true;
                }
                slot.revision += 1;
                applied_now.push(id.clone());
            }
            dirty = true;
        }

        // The plugin keeps the edits of the last answer it got. If it has those of the last
        // answer sent, no prune was dropped since and the messages they point at were kept,
        // only new edits are sent, or none.
        let basis = EditsBasis { revision: slot.revision, resets: slot.resets, messages: messages.len() };
        let live = self.live.get_mut(sid).expect("transform inserts");
        let follows = have == Some(live.edits_seq)
            && live.edits_basis.is_some_and(|b| b.resets == basis.resets && mirror.kept() >= b.messages);
        let edits = if follows && live.edits_basis.is_some_and(|b| b.revision == basis.revision) {
            EditsAnswer::Same
        } else {
            if !follows {
                live.edits_sent.clear();
            }
            let index = &live.index;
            let edits = edits_for(messages, |id| index.position(id), &slot.state, &mut live.edits_sent);
            live.edits_seq += 1;
            live.edits_basis = Some(basis);
            if follows {
                EditsAnswer::Add(edits)
            } else {
                EditsAnswer::Full(edits)
            }
        };
        let seq = live.edits_seq;
        let append = self.tail_message(sid, messages);
        let (slot, _) = self.manager.slot(sid).map_err(internal)?;
        let notify = match self.config.prune_notification {
            _ if applied_now.is_empty() => None,
            Notification::Off => None,
            level => {
                let records: Vec<(&str, &PruneRecord)> =
                    applied_now.iter().filter_map(|id| slot.state.pruned.get(id).map(|r| (id.as_str(), r))).collect();
                let still = slot.state.pruned.values().filter(|r| !r.applied).count();
                Some(texts::notification(level == Notification::Detailed, &records, still))
            }
        };
        if dirty {
            slot.dirty = true;
            self.save(sid);
        }
        let mut answer = json!({"seq": seq, "append": append, "notify": notify});
        match edits {
            EditsAnswer::Same => answer["sameEdits"] = Value::Bool(true),
            EditsAnswer::Add(edits) => answer["addEdits"] = Value::Array(edits),
            EditsAnswer::Full(edits) => answer["edits"] = Value::Array(edits),
        }
        Ok(answer)
    }

    /// The synthetic message appended after the history: the prunable list and any nudge.
    fn tail_message(&mut self, sid: &str, messages: &[Message]) -> Vec<Value> {
        let Ok((slot, _)) = self.manager.slot(sid) else {
            return Vec::new();
        };
        let recorded = slot.take_recorded();
        let tools = &self.config.tools;
        if !tools.discard.enabled && !tools.extract.enabled {
            return Vec::new();
        }
        let Some(live) = self.live.get_mut(sid) else {
            return Vec::new();
        };
        let project = self.options.project.as_ref().and_then(|p| p.to_str());
        let listing = manual::Listing { project, min_tokens: tools.settings.min_tokens.into() };
        let state = &mut slot.state;
        let index = &mut live.index;
        let Some(list) = index.prunable(messages, &recorded, state, &self.config, &self.protection, &listing) else {
            return Vec::new();
        };
        let mut text = list.to_string();
        let calls = index.calls();
        if live.calls_at_nudge > calls {
            live.calls_at_nudge = 0;
        }
        let settings = &tools.settings;
        if settings.nudge_enabled
            && settings.nudge_frequency > 0
            && calls - live.calls_at_nudge >= settings.nudge_frequency as usize
        {
            live.calls_at_nudge = calls;
            let (listed, tokens) = index.listed();
            text.push('\n');
            text.push_str(&texts::nudge(listed, tokens));
        }
        let last_user = messages.iter().rev().find(|m| m.role() == Role::User);
        let created = messages.last().map_or(0, Message::time_created);
        let mut info = json!({
            "id": "msg_dcp_prunable_tools",
            "sessionID": sid,
            "role": "user",
            "time": {"created": created},
        });
        for key in ["agent", "model"] {
            if let Some(v) = last_user.and_then(|m| m.info.get(key)) {
                info[key] = v.clone();
            }
        }
        let part = json!({
            "id": "prt_dcp_prunable_tools",
            "sessionID": sid,
            "messageID": "msg_dcp_prunable_tools",
            "type": "text",
            "text": text,
            "synthetic": true,
        });
        vec![json!({"info": info, "parts": [part]})]
    }

    fn system(&mut self, p: SessionParams) -> Result<Value, RpcError> {
        if let Some(s) = p.session_id.as_deref() {
            self.learn(s);
        }
        let skip = p.session_id.as_deref().is_some_and(|s| self.skip_session(s));
        let tools = &self.config.tools;
        if !self.config.enabled || skip || (!tools.discard.enabled && !tools.extract.enabled) {
            return Ok(json!({"system": []}));
        }
        Ok(json!({"system": [texts::system(tools.discard.enabled, tools.extract.enabled)]}))
    }

    /// Takes session `sid`'s mirror out of `self.live`, so that its history can be borrowed
    /// while the rest of the server is used: a long history is not copied for a tool call or
    /// a command. [`Server::put_mirror`] puts it back.
    fn take_mirror(&mut self, sid: &str) -> Mirror {
        self.live.get_mut(sid).map(|l| std::mem::take(&mut l.mirror)).unwrap_or_default()
    }

    fn put_mirror(&mut self, sid: &str, mirror: Mirror) {
        if let Some(live) = self.live.get_mut(sid) {
            live.mirror = mirror;
        }
    }

    fn tool(&mut self, p: ToolParams) -> Result<Value, RpcError> {
        crate::state::persist::validate_session_id(&p.session_id).map_err(|e| RpcError::params(e.to_string()))?;
        let sid = p.session_id.clone();
        let mirror = self.take_mirror(&sid);
        let result = self.tool_on(p, mirror.messages());
        self.put_mirror(&sid, mirror);
        result
    }

    fn tool_on(&mut self, p: ToolParams, messages: &[Message]) -> Result<Value, RpcError> {
        let sid = p.session_id;
        let enabled = match p.name.as_str() {
            "discard" => self.config.tools.discard.enabled,
            "extract" => self.config.tools.extract.enabled,
            other => return Err(RpcError::params(format!("tool: unknown tool {other:?}"))),
        };
        let answer = |text: String| Ok(json!({"output": text, "title": p.name}));
        if !enabled || !self.config.enabled {
            return answer(format!("{} is disabled in dcp.jsonc; nothing was pruned.", p.name));
        }
        if messages.is_empty() {
            return answer(
                "dcp has not seen this session's history yet; nothing was pruned. Try again on the next step.".into(),
            );
        }
        let strings = |key: &str| -> Vec<String> {
            match p.args.get(key) {
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
        };
        let (slot, _) = self.manager.slot(&sid).map_err(internal)?;
        let project = self.options.project.as_ref().and_then(|p| p.to_str());
        let listing = manual::Listing { project, min_tokens: self.config.tools.settings.min_tokens.into() };
        let valid =
            manual::prunable(&History::new(messages), &mut slot.state, &self.config, &self.protection, &listing);
        let decisions = if p.name == "discard" {
            let reason = match p.args.get("reason").and_then(Value::as_str) {
                None => None,
                Some("completion") => Some(manual::Reason::Completion),
                Some("noise") => Some(manual::Reason::Noise),
                Some(other) => {
                    return answer(format!(
                        "Unknown reason {other:?}: use \"completion\" or \"noise\". Nothing was pruned."
                    ))
                }
            };
            let (ids, _reason) = manual::split_reason(&strings("ids"), reason);
            manual::discard(messages, &ids, &valid, &mut slot.tokens)
        } else {
            manual::extract(messages, &strings("ids"), &strings("distillation"), &valid, &mut slot.tokens)
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

    fn command(&mut self, p: CommandParams) -> Result<Value, RpcError> {
        let sid = p.session_id;
        crate::state::persist::validate_session_id(&sid).map_err(|e| RpcError::params(e.to_string()))?;
        let words: Vec<&str> = p.arguments.split_whitespace().collect();
        let text = match words.as_slice() {
            [] | ["help"] => texts::HELP.to_string(),
            _ if !self.config.commands.enabled => {
                "DCP commands are disabled in dcp.jsonc (commands.enabled).".to_string()
            }
            ["stats"] => {
                self.manager.refresh(&sid).map_err(internal)?;
                let (slot, _) = self.manager.slot(&sid).map_err(internal)?;
                let session = crate::stats::session(&sid, &slot.state);
                let all = crate::stats::all_time(self.manager.dir(), Some(&self.options.env.cache_dir()))
                    .map_err(internal)?;
                crate::report::stats(Some(&session), &all)
            }
            ["context"] => {
                let mirror = self.take_mirror(&sid);
                let analysis = self.manager.slot(&sid).map_err(internal).map(|(slot, _)| {
                    let (config, protection) = (&self.config, &self.protection);
                    crate::context::analyse(mirror.messages(), &slot.state, config, protection, &mut slot.tokens)
                });
                self.put_mirror(&sid, mirror);
                crate::report::context(&format!("Session {sid}"), &analysis?)
            }
            ["sweep"] | ["sweep", _] => {
                let last = match words.get(1) {
                    None => None,
                    Some(n) => match n.parse::<usize>() {
                        Ok(n) => Some(n),
                        Err(_) => {
                            return Ok(
                                json!({"text": format!("/dcp sweep takes a number of tool calls, not {n:?}.\n\n{}", texts::HELP)}),
                            )
                        }
                    },
                };
                self.sweep(&sid, last)?
            }
            _ => format!("Unknown /dcp command {:?}.\n\n{}", p.arguments.trim(), texts::HELP),
        };
        Ok(json!({"text": text}))
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

    fn event(&mut self, params: &Value) -> Value {
        let kind = str_field(params, "type").unwrap_or("");
        let props = params.get("properties").unwrap_or(&Value::Null);
        let sid = str_field(props, "sessionID").or_else(|| props.get("info").and_then(|i| str_field(i, "id")));
        if kind == "session.deleted" {
            if let Some(sid) = sid {
                self.live.remove(sid);
            }
        }
        json!({})
    }

    /// Saves session `sid` after a request: hands its state to the saver at once, or, when
    /// it handed one less than [`SAVE_EVERY`] ago, at [`Server::save_due`]. Copying a long
    /// session's state for every request of a burst would cost more than the requests
    /// themselves. What waits is only what the automatic strategies decided, which a
    /// restarted sidecar decides again from the history; the agent's and the user's prunes
    /// are saved at once ([`Server::save_now`]).
    fn save(&mut self, sid: &str) {
        if self.saver.is_some() && self.handed.get(sid).is_some_and(|t| t.elapsed() < SAVE_EVERY) {
            self.waiting.insert(sid.to_string());
            return;
        }
        self.save_now(sid);
    }

    /// Hands session `sid`'s state to the saver now.
    fn save_now(&mut self, sid: &str) {
        self.waiting.remove(sid);
        match self.manager.save_job(sid) {
            Ok(job) => match &self.saver {
                Some(saver) => {
                    self.handed.insert(sid.to_string(), Instant::now());
                    saver.save(job)
                }
                None => {
                    if let Err(e) = job.run() {
                        tracing::warn!("{}", crate::error_chain(&e));
                    }
                }
            },
            Err(e) => tracing::warn!("{e}"),
        }
    }

    /// Whether [`Server::precount`] has outputs left to count.
    pub fn has_precount(&self) -> bool {
        self.live.values().any(Live::uncounted)
    }

    /// Counts the tokens of the completed tool outputs that arrived since the last call, one
    /// part at a time, for as long as `idle` says no request waits and no save falls due. A
    /// prune decided later then finds its count cached, instead of tokenizing the output on
    /// the request path (a few milliseconds for a 50 KB output). Sessions dcp leaves alone
    /// are skipped.
    pub fn precount(&mut self, mut idle: impl FnMut() -> bool) {
        let sids: Vec<String> = self.live.iter().filter(|(_, l)| l.uncounted()).map(|(k, _)| k.clone()).collect();
        for sid in sids {
            let skip = self.skip_session(&sid);
            let Some(live) = self.live.get_mut(&sid) else { continue };
            let messages = live.mirror.messages();
            if skip {
                live.precounted = messages.len();
                continue;
            }
            let due = save_due(&self.waiting, &self.handed);
            let Ok((slot, _)) = self.manager.slot(&sid) else { continue };
            while live.precounted < messages.len() {
                for (pi, part) in messages[live.precounted].parts.iter().enumerate() {
                    if !idle() || due.is_some_and(|d| d <= Instant::now()) {
                        return;
                    }
                    let Some(call) = crate::session::ToolCall::from_part(0, pi, part, 0) else { continue };
                    if call.status == crate::session::ToolStatus::Completed && !call.compacted {
                        strategies::output_tokens(&call, &mut slot.tokens);
                    }
                }
                live.precounted += 1;
            }
        }
    }

    /// When the next waiting save is due, if one waits.
    pub fn save_due(&self) -> Option<Instant> {
        save_due(&self.waiting, &self.handed)
    }

    /// Whether a waiting save is due now.
    pub fn save_is_due(&self) -> bool {
        self.save_due().is_some_and(|due| due <= Instant::now())
    }

    /// Hands out every waiting save that is due.
    pub fn save_waiting(&mut self) {
        let due: Vec<String> = self
            .waiting
            .iter()
            .filter(|sid| self.handed.get(*sid).is_none_or(|t| t.elapsed() >= SAVE_EVERY))
            .cloned()
            .collect();
        for sid in due {
            self.save_now(&sid);
        }
    }

    fn save_dirty(&mut self) {
        for sid in self.manager.dirty() {
            self.save_now(&sid);
        }
    }
}

/// When the next of the `waiting` saves is due, given when each session's last save was
/// `handed` out.
fn save_due(waiting: &std::collections::BTreeSet<String>, handed: &HashMap<String, Instant>) -> Option<Instant> {
    waiting.iter().filter_map(|sid| handed.get(sid)).min().map(|t| *t + SAVE_EVERY)
}

/// The edits that bring `messages` to what the model should see, for every applied prune
/// whose call is not in `sent` yet; `sent` gains them. With an empty `sent`, every prune in
/// force. `position` finds a call's message and part. Edits come in history order.
fn edits_for(
    messages: &[Message],
    position: impl Fn(&str) -> Option<(usize, usize)>,
    state: &SessionState,
    sent: &mut HashSet<String>,
) -> Vec<Value> {
    let mut new: Vec<((usize, usize), &str, &PruneRecord)> = Vec::new();
    for (id, record) in state.pruned.iter().filter(|(_, r)| r.applied) {
        if sent.contains(id.as_str()) {
            continue;
        }
        // A prune of a call not in the history has no edit; it is not looked for again.
        sent.insert(id.clone());
        if let Some(at) = position(id) {
            new.push((at, id, record));
        }
    }
    new.sort_unstable_by_key(|(at, _, _)| *at);
    let mut edits = Vec::new();
    for ((m, p), _, record) in new {
        let Some(part) = messages.get(m).and_then(|msg| msg.parts.get(p)) else { continue };
        for e in strategies::field_edits(part, &record.action) {
            edits.push(json!({"m": m, "p": p, "path": e.path, "value": e.value}));
        }
    }
    edits
}

enum Line {
    Text(String),
    TooLong(usize),
    /// Not UTF-8: the offset of the first invalid byte.
    NotUtf8(usize),
    Eof,
}

fn text_line(buf: Vec<u8>) -> Line {
    match String::from_utf8(buf) {
        Ok(text) => Line::Text(text),
        Err(e) => Line::NotUtf8(e.utf8_error().valid_up_to()),
    }
}

/// Reads one line of at most `max` bytes; a longer line is consumed and reported.
fn read_line<R: BufRead>(reader: &mut R, max: usize) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let mut skipped = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (buf.is_empty(), skipped) {
                (true, 0) => Line::Eof,
                (_, 0) => text_line(buf),
                (_, n) => Line::TooLong(n),
            });
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        if skipped > 0 || buf.len() + n > max {
            skipped += buf.len() + n;
            buf.clear();
        } else {
            buf.extend_from_slice(chunk);
        }
        reader.consume(n);
        if found {
            return Ok(if skipped > 0 { Line::TooLong(skipped) } else { text_line(buf) });
        }
    }
}

/// Runs the sidecar until stdin closes or `shutdown` arrives.
///
/// Requests are read and answered with plain blocking I/O on this thread (a reader thread
/// hands it the lines), since every hop through an async runtime's I/O threads adds a
/// thread wake-up to the round trip. The saver's writes run on a one-worker tokio runtime.
pub fn serve(options: Options) -> anyhow::Result<()> {
    crate::tokens::preload();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let saver = {
        let _context = runtime.enter();
        Saver::spawn()
    };
    let mut server = Server::new(options, Some(saver.clone()))?;
    // The line limit can be lowered (never raised past the default) for tests.
    let max_line = std::env::var("DCP_MAX_LINE_BYTES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(protocol::MAX_LINE_BYTES, |v| v.min(protocol::MAX_LINE_BYTES));
    // Lines are read on their own thread, so that waiting for one can give way to a save
    // that falls due.
    let (tx, lines) = std::sync::mpsc::sync_channel(16);
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, std::io::stdin().lock());
        loop {
            let line = read_line(&mut reader, max_line);
            let last = !matches!(line, Ok(Line::Text(_) | Line::TooLong(_) | Line::NotUtf8(_)));
            if tx.send(line).is_err() || last {
                return;
            }
        }
    });
    let mut stdout = std::io::stdout().lock();
    // A line that came in while the sidecar counted ahead.
    let mut early = None;
    loop {
        if early.is_none() && !server.save_is_due() && server.has_precount() {
            server.precount(|| {
                if early.is_none() {
                    early = lines.try_recv().ok();
                }
                early.is_none()
            });
        }
        let line = match early.take() {
            Some(line) => line,
            None => match server.save_due() {
                Some(due) => match lines.recv_timeout(due.saturating_duration_since(Instant::now())) {
                    Ok(line) => line,
                    Err(RecvTimeoutError::Timeout) => {
                        server.save_waiting();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => Ok(Line::Eof),
                },
                None => lines.recv().unwrap_or(Ok(Line::Eof)),
            },
        };
        let response = match line? {
            Line::Eof => break,
            Line::TooLong(n) => {
                let e = RpcError::new(
                    code::LINE_TOO_LONG,
                    format!("line of {n} bytes is over the {max_line}-byte limit; skipped"),
                );
                tracing::warn!("protocol: {}", e.message);
                Some(protocol::err(None, &e))
            }
            Line::NotUtf8(at) => {
                let e = RpcError::new(code::PARSE, format!("line is not UTF-8 (invalid byte at offset {at})"));
                tracing::warn!("protocol: {}", e.message);
                Some(protocol::err(None, &e))
            }
            Line::Text(line) => server.handle_line(&line),
        };
        if let Some(mut response) = response {
            response.push('\n');
            if stdout.write_all(response.as_bytes()).is_err() || stdout.flush().is_err() {
                break;
            }
        }
        if server.shutting_down() {
            break;
        }
    }
    server.save_dirty();
    runtime.block_on(saver.flush());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_long_lines_are_skipped_and_reading_goes_on() {
        let input = format!("{}\n{{\"ok\":1}}\n", "x".repeat(100));
        let mut reader = std::io::BufReader::with_capacity(16, input.as_bytes());
        assert!(matches!(read_line(&mut reader, 50).unwrap(), Line::TooLong(101)));
        match read_line(&mut reader, 50).unwrap() {
            Line::Text(t) => assert_eq!(t, "{\"ok\":1}\n"),
            _ => panic!("expected the next line"),
        }
        assert!(matches!(read_line(&mut reader, 50).unwrap(), Line::Eof));
    }
}
