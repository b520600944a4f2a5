//! The misses a session saw live: the agent fetched again what dcp had hidden from it.
//!
//! A *re-fetch* is a call the agent ran again (the same tool with the same arguments, keys
//! normalised) or a file it read again whose earlier output dcp had hidden from the request
//! that made the call (`crate::sidecar`'s refetch tracker says which); a *restore* is a
//! hidden text the agent brought back with `restore` (`dcp restore` through the proxy). Both
//! say that pruning took something the agent still needed: they are counted per session in
//! the state file's `stats` (`refetches`, `restores`, written once above 0, so the all-time
//! report reads them from the file's head), summed all-time, and they make the session's
//! policy keep more from then on (`crate::policy::backoff`).

use serde::Serialize;

/// A session's misses seen live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MissCounts {
    pub refetches: u64,
    pub restores: u64,
}

/// The keys of `stats` that hold them.
pub const KEYS: [&str; 2] = ["refetches", "restores"];

impl MissCounts {
    /// Both kinds together: how often the agent needed what dcp had hidden.
    pub fn total(self) -> u64 {
        self.refetches.saturating_add(self.restores)
    }

    /// Adds another session's.
    pub fn add(&mut self, other: MissCounts) {
        self.refetches = self.refetches.saturating_add(other.refetches);
        self.restores = self.restores.saturating_add(other.restores);
    }

    /// Two processes' counts of one session: each counted what it saw of the same history,
    /// so the larger of each is the session's (as the savings of the process that answered
    /// more requests are, `crate::state::persist::merge`).
    pub fn merged(self, other: MissCounts) -> MissCounts {
        MissCounts { refetches: self.refetches.max(other.refetches), restores: self.restores.max(other.restores) }
    }

    /// The `stats` keys to write: those above 0.
    pub fn keys(self) -> Vec<(&'static str, u64)> {
        [("refetches", self.refetches), ("restores", self.restores)].into_iter().filter(|(_, n)| *n > 0).collect()
    }
}
