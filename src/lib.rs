//! dcp: dynamic context pruning for OpenCode.
//!
//! The modules form layers, and data flows up through them:
//!
//! * [`format`], [`tokens`] and [`logging`] serve every other module, and [`prices`] holds
//!   the price sheets every cost is priced by;
//! * [`session`] is the message model, which [`host`] reads OpenCode's sessions (SQLite or the
//!   old JSON tree) into; [`config`] reads the `dcp.jsonc` layers;
//! * [`policy`] decides, in pure functions, when a recorded prune's rewrite reaches the model;
//! * [`state`] remembers the decisions and the compressed ranges ([`state::blocks`]) per
//!   session ([`state::store`]), saves them ([`state::saver`]) and reads and writes state
//!   files ([`state::persist`]);
//! * [`measure`] counts a message list's tokens by category; [`texts`] holds every word the
//!   model or the user reads in a session, made from plain data;
//! * [`strategies`] decide what to prune, by the [`strategies::Rules`] of the config: one
//!   module per strategy, the `<prunable-tools>` list ([`strategies::prunable`]) and the
//!   sidecar's incremental engine ([`strategies::incremental`]);
//! * [`context`] and [`stats`] say what that saves, and [`report`] renders it as text;
//! * the surfaces: [`sidecar`] (`dcp serve`, for the plugin in `plugin/`), then [`replay`]
//!   (`dcp replay`) and [`proxy`] (`dcp proxy`, for any other client), which drive the
//!   sidecar's server, [`html_report`] (`dcp report`) and [`doctor`] (checks an install), and
//!   [`cli`] (the terminal) over them all.
//!
//! Layers, lowest first: `format` `tokens` `logging` `prices` → `session` → `host` → `config` →
//! `policy` → `state` → `measure` → `texts` → `strategies` → `context` `stats` → `report` →
//! `sidecar` → `replay` `proxy` → `html_report` `doctor` → `cli`.
//! A module imports only from its own layer (never in a cycle) and from the layers before it;
//! `node .ci/layers.mjs` checks it. Test tooling (the session generator, the save loop) is in
//! `crates/dcp-testkit`, not here.

pub mod cli;
pub mod config;
pub mod context;
pub mod doctor;
pub mod format;
pub mod host;
pub mod html_report;
pub mod logging;
pub mod measure;
pub mod policy;
pub mod prices;
pub mod proxy;
pub mod replay;
pub mod report;
pub mod session;
pub mod sidecar;
pub mod state;
pub mod stats;
pub mod strategies;
pub mod texts;
pub mod tokens;

/// An error and its causes, joined by `: ` as `main` prints them.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
