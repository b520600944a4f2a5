//! dcp: dynamic context pruning for OpenCode.
//!
//! Data flows through the modules in this order:
//! [`host`] reads OpenCode's sessions (SQLite or the old JSON tree) into the [`session`]
//! model; [`strategies`] decide what to prune and rewrite the messages; [`state`] remembers
//! the decisions per session and persists them; [`stats`] and [`context`] report what that
//! saves; [`cli`] is the terminal surface, and [`doctor`] checks an install. [`config`] and [`tokens`] serve them all.

pub mod cli;
pub mod config;
pub mod context;
pub mod doctor;
pub mod format;
pub mod host;
pub mod logging;
pub mod policy;
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
