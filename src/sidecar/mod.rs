//! `dcp serve`: the long-lived sidecar the OpenCode plugin talks to.
//!
//! One sidecar serves every session of one OpenCode process; each session has its own
//! state (through the [`SessionStore`]) and a [`LiveSession`] ([`live`]): its mirror of the
//! history, its index of tool calls, the policy's running totals, its lists and caches, what
//! the plugin holds of its edits and when it was last saved. The line between the two: what
//! the state file keeps (the policy's ledger among it), and saving it, is the store's `Slot`
//! (the CLI uses it too); what only a live request needs is the `LiveSession`.
//! Requests are handled one at a time on one thread: they are short and CPU-bound. State
//! files are saved by the [`Saver`] task, off the request path. Nothing is ever written to
//! stdout but protocol lines; logs go to stderr and, with `debug`, to files.
//!
//! This module is the server and its dispatch; each method lives in its own module:
//! [`transform`] (what the model sees), [`head`] (`system` and `turn`: the instructions and the
//! agent tools dcp adds in front of the prompt), [`tools`] (the agent's `discard`, `extract`
//! and `compress`), [`commands`] (`/dcp`), [`usage`] (what the provider billed), and [`stdio`]
//! (the line loop, which [`stream`] reads the lines for). A `transform`'s functions share one
//! [`request`] context: the session, its slot, the mirror, the rules and the request's facts.
//! What a request reads of a session's prunes is kept between requests ([`in_force`]), so that it costs what is new.

mod commands;
mod describe;
mod edits;
mod facts;
mod head;
mod holdout;
mod in_force;
mod laps;
mod list;
mod live;
mod masking_candidates;
pub mod mirror;
pub mod model;
mod pending;
pub mod protocol;
mod ranges;
mod refetch;
mod request;
pub mod restore;
mod rewind;
mod saving_cache;
mod savings;
mod sheet;
mod stdio;
pub mod stream;
mod tools;
mod totals;
mod transform;
pub mod usage;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use self::edits::sent::ResentEdits;
use self::live::LiveSession;
use self::mirror::Mirror;
use self::protocol::{code, now_ms, Empty, MethodAnswer, Request, RpcError};
use self::request::{RequestContext, RequestFacts};
use crate::config::{self, Config};
use crate::host::paths::{self, Env};
use crate::host::sqlite::Db;
use crate::session::{str_field, Node};
use crate::state::persist::StateError;
use crate::state::saver::{self, Saver};
use crate::state::store::SessionStore;
use crate::stats::AllTimeCache;
use crate::strategies::Rules;
use crate::texts::restore::Via;
use crate::tokens::EstimatorChoice;

pub use self::in_force::Views;
pub use self::pending::{Count, UpstreamOutcome};
pub use self::stdio::{serve, serve_on};
pub use self::transform::Answered;

/// Where the sidecar finds things.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    pub env: Env,
    /// The project dir whose `.opencode/dcp.jsonc` applies, until `initialize` says otherwise.
    pub project: Option<PathBuf>,
}

/// The sidecar's state: config, sessions, and where saves go.
pub struct Server {
    options: ServeOptions,
    rules: Rules,
    store: SessionStore,
    sessions: HashMap<String, LiveSession>,
    saver: Option<Saver>,
    shutting_down: bool,
    /// Tokens dcp adds at the head of every request, once counted.
    head: Option<u64>,
    /// What `/dcp stats` knows of the state dir, so that a repeated report reads only what
    /// changed.
    all_time: AllTimeCache,
    /// How the sessions' views of their prunes are brought up to date.
    views: Views,
    /// What the config files held that dcp ignored (unknown keys), for `/dcp help` to show.
    config_warnings: Vec<String>,
    /// How the agent restores what dcp hid: its `restore` tool, or `dcp restore` in its shell
    /// (`dcp proxy`, see [`Server::set_restore`]).
    restore: Via,
    /// The rules of a session backed off 1, 2, 3 steps for the misses it saw (see
    /// `crate::policy::backed_off`); none with `strategies.masking.backoff` off.
    backed_off: Vec<Rules>,
    /// How the plugin takes an answer after OpenCode sent again messages its edits point at
    /// (its protocol, told at `initialize`).
    resent: ResentEdits,
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    // The plugin shows the message to the user: it may quote a path or a title.
    RpcError::new(code::INTERNAL, crate::format::terminal(&e.to_string(), crate::format::Lines::Keep).into_owned())
}

fn validate_session_id(sid: &str) -> Result<(), RpcError> {
    crate::state::persist::validate_session_id(sid).map_err(|e| RpcError::params(e.to_string()))
}

impl Server {
    pub fn new(options: ServeOptions, saver: Option<Saver>) -> Result<Server, anyhow::Error> {
        let loaded = config::load(&config::Locations::standard(&options.env, options.project.as_deref()))?;
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let mut server = Server::with_config(options, loaded.config, saver)?;
        server.config_warnings = loaded.warnings;
        Ok(server)
    }

    /// A server with the given config instead of the one in the config files (`dcp replay`
    /// runs one per mode). An `initialize` that names a project dir still reloads the files.
    pub fn with_config(options: ServeOptions, config: Config, saver: Option<Saver>) -> Result<Server, anyhow::Error> {
        let rules = Rules::new(config)?;
        let backed_off = refetch::backed_off_rules(&rules)?;
        let store = SessionStore::new(&paths::state_dir(&options.data_dir), EstimatorChoice::Auto);
        Ok(Server {
            options,
            rules,
            store,
            sessions: HashMap::new(),
            saver,
            shutting_down: false,
            head: None,
            all_time: AllTimeCache::default(),
            views: Views::Kept,
            resent: ResentEdits::default(),
            config_warnings: Vec::new(),
            restore: Via::Tool,
            backed_off,
        })
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// `shutdown`: saves every session that waits for its save; the server answers nothing
    /// after it but the line loop's end.
    pub fn shutdown(&mut self) {
        self.shutting_down = true;
        self.save_dirty();
    }

    /// Brings the sessions' views of their prunes up to date from every prune on each request
    /// ([`Views::Rebuilt`]) instead of from what changed: for the differential tests, which
    /// compare the answers of both.
    pub fn set_views(&mut self, views: Views) {
        self.views = views;
    }

    /// Handles one protocol line; returns the response line, if the line asks for one.
    pub fn handle_line(&mut self, line: &str) -> Option<String> {
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            return None;
        }
        self.handle_decoded(protocol::decode(line))
    }

    /// Handles one decoded line (see [`protocol::decode`]); returns the response line, if
    /// the line asks for one.
    pub fn handle_decoded(&mut self, decoded: Result<Request, (Option<Value>, RpcError)>) -> Option<String> {
        let request = match decoded {
            Ok(r) => r,
            Err((id, e)) => {
                tracing::warn!("protocol: {}", e.message);
                return Some(protocol::err(id.as_ref(), &e));
            }
        };
        let Request { id, method, params, messages } = request;
        let result = self.dispatch(&method, params, messages);
        match (id, result) {
            (Some(id), Ok(answer)) => Some(protocol::ok(&id, &answer)),
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

    fn dispatch(&mut self, method: &str, params: Value, messages: Option<Vec<Node>>) -> Result<MethodAnswer, RpcError> {
        match method {
            "initialize" => self.initialize(protocol::params(method, params)?).map(MethodAnswer::Initialized),
            "transform" => self.transform(transform::params(params, messages)?).map(MethodAnswer::Transformed),
            "system" => Ok(MethodAnswer::System(self.system(protocol::params(method, params)?))),
            "turn" => self.turn(protocol::params(method, params)?).map(MethodAnswer::Turn),
            "describe" => self.describe(protocol::params(method, params)?).map(MethodAnswer::Described),
            "tool" => self.tool(protocol::params(method, params)?).map(MethodAnswer::Tool),
            "command" => self.command(protocol::params(method, params)?).map(MethodAnswer::Command),
            "event" => {
                self.event(&params);
                Ok(MethodAnswer::Empty(Empty {}))
            }
            "usage" => self.usage(protocol::params(method, params)?).map(|()| MethodAnswer::Empty(Empty {})),
            "shutdown" => {
                self.shutdown();
                Ok(MethodAnswer::Empty(Empty {}))
            }
            other => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("unknown method {other:?}"))),
        }
    }

    /// Runs `f` on session `sid`'s [`LiveSession`], created on first sight, with the rest of the
    /// server at hand. The session is out of the map while `f` runs: `f` must not look it up
    /// again (as [`Server::save_now`] does); what it needs of it, it is handed.
    fn with_session<T>(&mut self, sid: &str, f: impl FnOnce(&mut Server, &mut LiveSession) -> T) -> T {
        let mut session = self.sessions.remove(sid).unwrap_or_default();
        let out = f(self, &mut session);
        self.sessions.insert(sid.to_string(), session);
        out
    }

    /// Takes session `sid`'s mirror out of its [`LiveSession`], so that its history can be
    /// borrowed while the rest of the server is used: a long history is not copied for a
    /// tool call or a command. [`Server::put_mirror`] puts it back.
    fn take_mirror(&mut self, sid: &str) -> Mirror {
        self.sessions.get_mut(sid).map(|s| std::mem::take(&mut s.history.mirror)).unwrap_or_default()
    }

    fn put_mirror(&mut self, sid: &str, mirror: Mirror) {
        if let Some(session) = self.sessions.get_mut(sid) {
            session.history.mirror = mirror;
        }
    }

    /// Looks up a session's title and parent in `opencode.db`, once.
    fn look_up_session(&self, session: &mut LiveSession, session_id: &str) {
        // Once when first seen; while OpenCode has not titled the session yet, again every 16
        // requests. Not on every request: this is the request path.
        let untitled = session.about.title.as_deref().is_none_or(|t| t.starts_with("New session"));
        let due = session.about.lookups == 0 || (untitled && session.totals.requests() >= session.about.lookups * 16);
        if !due {
            return;
        }
        session.about.lookups += 1;
        let db_path = self.options.env.db_path(&self.options.data_dir);
        let Ok(db) = Db::open(&db_path) else { return };
        if let Ok(Some(info)) = db.session(session_id) {
            session.about.parent.get_or_insert(info.parent_id.is_some());
            session.about.title = Some(info.title);
        }
    }

    /// Loads the session's state, with the policy's ledger where the state file left it, once
    /// it is known to be one dcp prunes: a restarted sidecar goes on with the same warm run and
    /// balance.
    fn load_state(&mut self, session: &LiveSession, sid: &str) {
        if !self.skips(Some(session)) {
            let _ = self.store.slot(sid);
        }
    }

    /// Whether dcp leaves the session alone: disabled, or a subagent's session.
    fn skips(&self, session: Option<&LiveSession>) -> bool {
        !self.rules.config().enabled
            || (!self.rules.config().prune_subagents && session.and_then(|s| s.about.parent) == Some(true))
    }

    fn event(&mut self, params: &Value) {
        let kind = str_field(params, "type").unwrap_or("");
        let props = params.get("properties").unwrap_or(&Value::Null);
        let sid = str_field(props, "sessionID").or_else(|| props.get("info").and_then(|i| str_field(i, "id")));
        if kind == "session.deleted" {
            if let Some(sid) = sid {
                // A save that waits is handed out now: it would have been at its due time.
                if self.sessions.get(sid).is_some_and(|s| s.saves.waiting()) {
                    let sid = sid.to_string();
                    self.save_now(&sid);
                }
                self.sessions.remove(sid);
            }
        }
    }

    /// Saves session `sid` after a request: at once, or when [`SaveTiming::defer`] says so,
    /// at [`Server::save_due`].
    fn save(&mut self, session: &mut LiveSession, sid: &str) {
        if self.saver.is_some() && session.saves.defer() {
            return;
        }
        saver::hand_out(self.saver.as_ref(), &mut self.store, sid, &mut session.saves);
    }

    /// Hands session `sid`'s state to the saver now.
    fn save_now(&mut self, sid: &str) {
        let session = self.sessions.entry(sid.to_string()).or_default();
        saver::hand_out(self.saver.as_ref(), &mut self.store, sid, &mut session.saves);
    }

    /// Whether [`Server::precount`] has outputs left to count.
    pub fn has_precount(&self) -> bool {
        self.sessions.values().any(LiveSession::uncounted)
    }

    /// Counts the tokens of the big strings (tool outputs, big inputs) of the parts that
    /// arrived since the last call and slims them in the mirror (see [`Mirror::slim_part`]),
    /// one part at a time, for as long as `idle` says no request waits and no save falls due.
    /// A prune decided later then finds its count in the part, instead of tokenizing the
    /// output on the request path (a few milliseconds for a 50 KB output), and the mirror
    /// holds the history's counts rather than its text. Sessions dcp leaves alone are not
    /// counted: nothing reads their counts, and they would cost idle CPU on a two-core
    /// machine. Returns the bytes of text slimming dropped.
    pub fn precount(&mut self, mut idle: impl FnMut() -> bool) -> usize {
        let due = self.save_due();
        let sids: Vec<String> = self.sessions.iter().filter(|(_, s)| s.uncounted()).map(|(k, _)| k.clone()).collect();
        let mut dropped = 0;
        for sid in sids {
            let skip = self.skips(self.sessions.get(&sid));
            let Some(session) = self.sessions.get_mut(&sid) else { continue };
            if skip {
                session.history.precounted = session.history.mirror.messages().len();
                continue;
            }
            let Ok(slot) = self.store.slot(&sid) else { continue };
            let mirror = &mut session.history.mirror;
            while session.history.precounted < mirror.messages().len() {
                let mi = session.history.precounted;
                for pi in 0..mirror.messages()[mi].parts.len() {
                    if !idle() || due.is_some_and(|d| d <= Instant::now()) {
                        return dropped;
                    }
                    dropped += mirror.slim_part(mi, pi, &mut slot.tokens);
                }
                session.history.precounted += 1;
            }
        }
        dropped
    }

    /// The bytes of the strings session `sid`'s mirror holds, keys included: what is left of
    /// its history's text once slimmed (see [`Mirror::slim_part`]). For tests and measurements.
    pub fn mirror_bytes(&self, sid: &str) -> Option<usize> {
        self.sessions.get(sid).map(|s| s.history.mirror.string_bytes())
    }

    /// When the next waiting save is due, if one waits.
    pub fn save_due(&self) -> Option<Instant> {
        self.sessions.values().filter_map(|s| s.saves.due()).min()
    }

    /// Whether a waiting save is due now.
    pub fn save_is_due(&self) -> bool {
        self.save_due().is_some_and(|due| due <= Instant::now())
    }

    /// Hands out every waiting save that is due, in session id order.
    pub fn save_waiting(&mut self) {
        let mut due: Vec<String> =
            self.sessions.iter().filter(|(_, s)| s.saves.due_now()).map(|(sid, _)| sid.clone()).collect();
        due.sort_unstable();
        for sid in due {
            self.save_now(&sid);
        }
    }

    /// Hands out every session with anything to save, as the sidecar stops: the changes a
    /// waiting save holds, and the policy's ledger, so that the next process goes on with it.
    /// A session whose file already says the same is not written again (see `persist::sync`).
    fn save_dirty(&mut self) {
        for sid in self.store.dirty() {
            self.save_now(&sid);
        }
    }
}

impl Server {
    /// The context of a request of session `sid`, its state loaded if it was not yet.
    fn request_context<'a>(
        &'a mut self,
        session: &'a mut LiveSession,
        sid: &'a str,
        mirror: &'a Mirror,
        facts: RequestFacts,
    ) -> Result<RequestContext<'a>, StateError> {
        let ledger = *self.store.slot(sid)?.ledger();
        let restore = self.restore_via(session, Some(&ledger));
        let slot = self.store.slot(sid)?;
        let rules = match session.about.backoff {
            0 => &self.rules,
            n => self.backed_off.get(n as usize - 1).unwrap_or(&self.rules),
        };
        Ok(RequestContext {
            rules,
            project: self.options.project.as_ref().and_then(|p| p.to_str()),
            sid,
            session,
            slot,
            mirror,
            facts,
            views: self.views,
            resent: self.resent,
            restore,
            head: &mut self.head,
        })
    }

    /// Sets how far `session` backs off for the misses its state counts; a new step
    /// judges its calls afresh by the wider windows.
    fn back_off(&mut self, session: &mut LiveSession, sid: &str) {
        let Ok(slot) = self.store.slot(sid) else { return };
        let level = if self.backed_off.is_empty() {
            0
        } else {
            crate::policy::backoff_level(slot.state().misses.refetches, slot.state().misses.restores)
        };
        if level != session.about.backoff {
            tracing::debug!(session = sid, level, misses = slot.state().misses.total(), "backing off");
            session.about.backoff = level;
            session.history.index = crate::strategies::incremental::Index::default();
            session.caches.in_force = in_force::InForce::default();
        }
    }
}
