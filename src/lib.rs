//! dcp: dynamic context pruning for OpenCode.
//!
//! Data flows through the modules in this order, and no module imports one later in it:
//!
//! * [`host`] reads OpenCode's sessions (SQLite or the old JSON tree) into the [`session`]
//!   model;
//! * [`strategies`] decide what to prune, by the [`strategies::Rules`] of the [`config`]:
//!   one module per strategy, the `<prunable-tools>` list ([`strategies::prunable`]) and the
//!   sidecar's incremental engine ([`strategies::incremental`]); [`policy`] decides when a
//!   recorded prune's rewrite reaches the model;
//! * [`state`] remembers the decisions and the compressed ranges ([`state::blocks`]) per
//!   session ([`state::store`]), saves them ([`state::saver`]; a save that would change only
//!   the time writes nothing) and reads and writes state files ([`state::persist`]: parse,
//!   render, atomic writes and locks, merging two processes' states);
//! * [`stats`], [`context`] and [`replay`] report what that saves, [`report`] draws it;
//! * the surfaces: [`cli`] (the terminal), [`sidecar`] (`dcp serve`, for the plugin in
//!   `plugin/`), [`proxy`] (`dcp proxy`, for any other client), [`doctor`] (checks an install). [`texts`] holds every word the model or the
//!   user reads in a session.
//!
//! [`config`], [`tokens`], [`format`] and [`logging`] serve them all. Test tooling (the
//! session generator, the save loop) is in `crates/dcp-testkit`, not here.

pub mod cli;
pub mod config;
pub mod context;
pub mod doctor;
pub mod format;
pub mod host;
pub mod logging;
pub mod policy;
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
