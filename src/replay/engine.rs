//! Drives one replayed run through the sidecar's own [`Server`], in process.
//!
//! The server is the one `dcp serve` runs, spoken to over the same protocol lines the
//! plugin sends (PROTOCOL.md): `initialize`, then per request a `transform` with the
//! recorded time as `now`, only the messages that changed since the previous request
//! (`base`) and the edits the plugin holds (`have`), and a `tool` call for every
//! `discard`/`extract`/`compress` the model made in that step. Nothing of the engine, the
//! policy or the state is written again here: replay only applies the answers' edits and
//! compressed ranges (`replace`), as the plugin does, to count what the model would have been
//! sent.
//!
//! Each run has its own server, built with the run's config, and its own scratch dir for the
//! state files, removed afterwards: replay never reads or writes the user's state files.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::pieces::Edit;
use super::steps::{AgentCall, RecordedRequest, Timeline};
use crate::config::Config;
use crate::host::paths::Env;
use crate::sidecar::{ServeOptions, Server};

/// A scratch dir, removed when dropped. In `/dev/shm` when there is one: state saves
/// there cost no disk flush.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new() -> std::io::Result<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("dcp-replay-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why the engine could not replay a session.
#[derive(Debug, thiserror::Error)]
pub enum ReplayEngineError {
    #[error("cannot set up the replay's scratch dir")]
    Scratch(#[source] std::io::Error),
    #[error("the sidecar engine did not start")]
    Start(#[source] anyhow::Error),
    #[error("the sidecar engine refused {method}: {message}")]
    Refused { method: &'static str, message: String },
}

/// What the engine answered for one request: the history's edits, the messages it
/// appended, and why it applied pending rewrites, if it did.
#[derive(Debug, Default)]
pub struct Answer<'a> {
    pub edits: &'a [Edit],
    /// Compressed ranges: `(from, to, message)`, positions in the request's history.
    pub replace: Vec<(usize, usize, Value)>,
    pub append: Vec<Value>,
    pub applied: Option<String>,
}

/// One replayed run of a session through a [`Server`].
pub struct ReplayRun {
    server: Server,
    session_id: String,
    parent_id: Option<String>,
    context_limit: Option<u64>,
    /// The (id, version) of each message the server holds, in order.
    held: Vec<(String, usize)>,
    seq: Option<u64>,
    edits: Vec<Edit>,
    next_id: u64,
    /// The answer to `initialize`: which tools the engine offers, and their descriptions.
    initialized: Value,
    /// The run's server options and config, to start a new server on the same state files.
    options: ServeOptions,
    config: Config,
    _scratch: Scratch,
}

/// What a session and a run are, to the engine.
pub struct Setup<'a> {
    pub session_id: &'a str,
    pub parent_id: Option<&'a str>,
    pub context_limit: Option<u64>,
    pub config: &'a Config,
    /// The session's project dir: paths under it are listed relative to it, as `dcp serve`
    /// lists them once the plugin's `initialize` named it.
    pub project: Option<&'a Path>,
}

impl ReplayRun {
    pub fn start(setup: &Setup<'_>) -> Result<ReplayRun, ReplayEngineError> {
        let scratch = Scratch::new().map_err(ReplayEngineError::Scratch)?;
        let home = scratch.path().join("home");
        let env = Env {
            home: Some(home.clone()),
            xdg_config_home: Some(home.join(".config")),
            xdg_cache_home: Some(home.join(".cache")),
            ..Env::default()
        };
        let project = setup.project.map(Path::to_path_buf);
        let options = ServeOptions { data_dir: scratch.path().join("data"), env, project };
        let server =
            Server::with_config(options.clone(), setup.config.clone(), None).map_err(ReplayEngineError::Start)?;
        let mut engine = ReplayRun {
            server,
            session_id: setup.session_id.to_string(),
            parent_id: setup.parent_id.map(str::to_string),
            context_limit: setup.context_limit,
            held: Vec::new(),
            seq: None,
            edits: Vec::new(),
            next_id: 0,
            initialized: Value::Null,
            options,
            config: setup.config.clone(),
            _scratch: scratch,
        };
        engine.initialized =
            engine.call("initialize", json!({"protocol": crate::sidecar::protocol::PROTOCOL_VERSION}))?;
        Ok(engine)
    }

    /// Ends this server as `dcp serve` ends (its sessions saved) and starts a new one on the
    /// same state files, as a new OpenCode process starts a new sidecar: it holds no messages
    /// and no edits, and reads each session from its file on its first request.
    pub fn restart(&mut self) -> Result<(), ReplayEngineError> {
        self.server.shutdown();
        self.server =
            Server::with_config(self.options.clone(), self.config.clone(), None).map_err(ReplayEngineError::Start)?;
        (self.held, self.seq, self.edits) = (Vec::new(), None, Vec::new());
        self.initialized = self.call("initialize", json!({"protocol": crate::sidecar::protocol::PROTOCOL_VERSION}))?;
        Ok(())
    }

    fn call(&mut self, method: &'static str, params: Value) -> Result<Value, ReplayEngineError> {
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).to_string();
        let refused = |message: String| ReplayEngineError::Refused { method, message };
        let answer = self.server.handle_line(&line).ok_or_else(|| refused("no answer".into()))?;
        let mut answer: Value = serde_json::from_str(&answer).map_err(|e| refused(e.to_string()))?;
        if let Some(error) = answer.get("error") {
            return Err(refused(error.get("message").and_then(Value::as_str).unwrap_or("error").to_string()));
        }
        Ok(answer.get_mut("result").map(Value::take).unwrap_or(Value::Null))
    }

    /// What the engine adds to the system prompt, and the definitions of the tools it offers
    /// (descriptions and arguments), on the requests that carry them ([`ReplayRun::turn`]).
    pub fn additions(&mut self) -> Result<Vec<String>, ReplayEngineError> {
        // Asked for no session: the head a session gets once it is offered the tools.
        let system = self.call("system", json!({}))?;
        let init = &self.initialized;
        let mut out: Vec<String> = system["system"]
            .as_array()
            .map(|lines| lines.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        for tool in crate::texts::AGENT_TOOLS {
            if init["tools"][tool] == Value::Bool(true) {
                let description = init["descriptions"][tool].as_str().unwrap_or("");
                let (args, required) = (&init["args"][tool], &init["required"][tool]);
                out.push(crate::texts::tool_definition(tool, description, args, required));
            }
        }
        Ok(out)
    }

    /// A user turn starts before request `r`: whether its requests carry dcp's head.
    pub fn turn(&mut self, r: &RecordedRequest) -> Result<bool, ReplayEngineError> {
        let params = json!({"sessionID": self.session_id, "parentID": self.parent_id, "now": r.time});
        Ok(self.call("turn", params)?["offer"] == Value::Bool(true))
    }

    /// Sends request `r`'s history and returns the engine's answer.
    pub fn transform(&mut self, timeline: &Timeline, r: &RecordedRequest) -> Result<Answer<'_>, ReplayEngineError> {
        let range = timeline.range(r);
        let now: Vec<(String, usize)> =
            range.clone().map(|i| (timeline.messages()[i].id().to_string(), timeline.version(i, r.time))).collect();
        let base = now.iter().zip(&self.held).take_while(|(a, b)| a == b).count();
        let wire: Vec<Value> = (range.start + base..range.end)
            .map(|i| serde_json::to_value(&*timeline.message_at(i, r.time)).unwrap_or(Value::Null))
            .collect();
        let mut params = json!({
            "sessionID": self.session_id, "parentID": self.parent_id, "now": r.time,
            "base": base, "messages": wire,
        });
        if let Some(limit) = self.context_limit {
            params["contextLimit"] = json!(limit);
        }
        if let Some(seq) = self.seq {
            params["have"] = json!(seq);
        }
        self.held = now;
        let mut answer = self.call("transform", params)?;
        self.take_edits(&mut answer);
        let append = match answer.get_mut("append").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let applied = answer["applied"]["reason"].as_str().map(str::to_string);
        let replace = match answer.get_mut("replace").map(Value::take) {
            Some(Value::Array(items)) => items
                .into_iter()
                .filter_map(|mut r| {
                    let (from, to) = (r["from"].as_u64()? as usize, r["to"].as_u64()? as usize);
                    Some((from, to, r["message"].take()))
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(Answer { edits: &self.edits, replace, append, applied })
    }

    /// Keeps the answer's edits as the plugin does: the same as last time, those (or those of
    /// the messages before `keepEditsBefore`) plus new ones, or a new list.
    fn take_edits(&mut self, answer: &mut Value) {
        let parse = |v: Value| -> Vec<Edit> { serde_json::from_value(v).unwrap_or_default() };
        if answer.get("sameEdits") == Some(&Value::Bool(true)) {
            return;
        }
        if let Some(added) = answer.get_mut("addEdits").map(Value::take) {
            if let Some(before) = answer.get("keepEditsBefore").and_then(Value::as_u64) {
                self.edits.retain(|e| (e.m as u64) < before);
            }
            self.edits.extend(parse(added));
        } else {
            self.edits = answer.get_mut("edits").map(Value::take).map(parse).unwrap_or_default();
        }
        self.seq = answer.get("seq").and_then(Value::as_u64);
    }

    /// The misses the engine saw live in the session so far (`crate::state::misses`).
    pub fn misses(&mut self) -> crate::state::misses::MissCounts {
        self.server.misses(&self.session_id)
    }

    /// Runs an agent's `discard`/`extract` call; returns what the agent is told.
    pub fn agent_call(&mut self, call: &AgentCall) -> Result<String, ReplayEngineError> {
        let params = json!({"sessionID": self.session_id, "name": call.tool, "args": call.args});
        let answer = self.call("tool", params)?;
        Ok(answer.get("output").and_then(Value::as_str).unwrap_or("").to_string())
    }
}
