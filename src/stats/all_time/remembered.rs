//! What the all-time report remembers of one state file ([`Remembered`]): its [`Summary`],
//! with the size and modification time it was read at, for this process's cache and the
//! cache file across processes ([`super::disk_cache`]).

use std::fs::Metadata;
use std::time::SystemTime;

use crate::stats::Figures;

/// What one state file adds to the all-time report.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Summary {
    Counts { tokens: u64, tools: u64, figures: Figures },
    Corrupt(String),
    Missing,
}

/// A file's summary, with the size and modification time it was read at.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Remembered {
    pub(super) len: u64,
    pub(super) modified: Option<SystemTime>,
    pub(super) summary: Summary,
}

impl Remembered {
    pub(super) fn matches(&self, meta: &Metadata) -> bool {
        self.len == meta.len() && self.modified.is_some() && self.modified == meta.modified().ok()
    }
}
