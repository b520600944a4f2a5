//! Per-session prune state: what was pruned, how, and what it saved.
//!
//! A [`SessionState`] is the in-memory record of one session: the prune decisions keyed by
//! tool call id, the stats by strategy, the small integer ids the agent uses to name tool
//! calls, and the fields of the state file dcp does not understand (kept so a rewrite loses
//! nothing). [`persist`] reads and writes it; [`store`] keeps one per live session. What a
//! newer dcp records that this version does not know is read, not refused ([`foreign`]).

pub mod blocks;
pub mod foreign;
pub mod misses;
pub mod persist;
pub mod saver;
pub mod savings;
pub mod store;
pub mod trial;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which strategy decided a prune. A state file names it by its key ([`Strategy::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Strategy {
    Deduplication,
    SupersedeWrites,
    PurgeErrors,
    /// Observation masking: an old output beyond the most recent ones.
    Masking,
    Discard,
    Extract,
    Sweep,
    /// Recorded by an older DCP state file, which does not say why.
    Imported,
    /// A range of messages replaced by the agent's summary (see [`blocks`]).
    Compress,
    /// A finished turn's tool calls replaced by one line naming them: a range dcp makes on its
    /// own, not the agent (see [`blocks::Origin`]).
    FinishedTurns,
    /// A strategy a newer dcp recorded that this version does not know: "other" in reports,
    /// written back under its own key (see [`foreign`]).
    Other(foreign::Unknown),
}

impl Strategy {
    pub const ALL: [Strategy; 10] = [
        Strategy::Deduplication,
        Strategy::SupersedeWrites,
        Strategy::PurgeErrors,
        Strategy::Masking,
        Strategy::Discard,
        Strategy::Extract,
        Strategy::Sweep,
        Strategy::Imported,
        Strategy::Compress,
        Strategy::FinishedTurns,
    ];

    /// The names reports list strategies under: the known ones', then "other" for every
    /// strategy a newer dcp recorded.
    pub fn reported_names() -> impl Iterator<Item = &'static str> {
        Strategy::ALL.into_iter().map(Strategy::name).chain([foreign::OTHER])
    }

    /// The strategy's name in reports and commands: every unknown one is "other".
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Deduplication => "deduplication",
            Strategy::SupersedeWrites => "supersede-writes",
            Strategy::PurgeErrors => "purge-errors",
            Strategy::Masking => "masking",
            Strategy::Discard => "discard",
            Strategy::Extract => "extract",
            Strategy::Sweep => "sweep",
            Strategy::Imported => "imported",
            Strategy::Compress => "compress",
            Strategy::FinishedTurns => "finished-turns",
            Strategy::Other(_) => foreign::OTHER,
        }
    }

    /// The known strategy called `name`.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The strategy's key in a state file: its name, or the unknown key as it was read.
    pub fn key(self) -> &'static str {
        match self {
            Strategy::Other(unknown) => unknown.key(),
            known => known.name(),
        }
    }

    /// The strategy a state file's `key` names, known or not.
    pub fn read(key: &str) -> Strategy {
        Strategy::from_name(key).unwrap_or_else(|| Strategy::Other(foreign::Unknown::new(key)))
    }
}

impl Serialize for Strategy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.key())
    }
}

/// Any string reads, as [`Strategy::read`]: a key from a newer dcp is no error.
impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strategy, D::Error> {
        let key = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Strategy::read(&key))
    }
}

/// What a prune does to the tool part in the outgoing request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// The output becomes the pruned-output placeholder.
    Output,
    /// The `content` input of a `write` becomes the placeholder.
    WriteContent,
    /// Every string input of an errored call becomes the failed-call placeholder.
    ErrorInputs,
    /// The output becomes the agent's distillation of it.
    Distill { distillation: String },
    /// The output becomes a placeholder that names the call and says it can be run again.
    Mask,
    /// The long text arguments of an `edit` or `write` (its effect is on disk) become a line
    /// saying so; the output stays.
    MaskInputs,
    /// An action a newer dcp recorded that this version does not know: it changes nothing
    /// here, and the record is written back as it was read (see [`foreign`]).
    #[serde(other)]
    Unknown,
}

/// One prune decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneRecord {
    pub strategy: Strategy,
    #[serde(flatten)]
    pub action: Action,
    /// Tokens the prune removes from each request: what leaves minus what replaces it.
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// Whether requests already carry the rewrite. A decision may wait for a better moment
    /// (see `crate::policy`), but once applied it stays applied so the prompt prefix that
    /// providers cache stays byte-stable.
    #[serde(default = "yes")]
    pub applied: bool,
}

fn yes() -> bool {
    true
}

/// Tokens and tools pruned by one strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub tokens: u64,
    pub tools: u64,
}

impl Tally {
    /// Both tallies together.
    pub fn plus(self, other: Tally) -> Tally {
        Tally { tokens: self.tokens.saturating_add(other.tokens), tools: self.tools.saturating_add(other.tools) }
    }
}

/// A session's savings. They survive compactions, unlike the prune list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tokens pruned since the last save (DCP's pending counter); folded into the total on
    /// save, so it is 0 in files dcp writes.
    pub prune_token_counter: u64,
    pub total_prune_tokens: u64,
    pub by_strategy: BTreeMap<Strategy, Tally>,
}

impl Stats {
    /// Tools pruned over the session's life, across compactions.
    pub fn tools(&self) -> u64 {
        self.by_strategy.values().fold(0, |sum, t| sum.saturating_add(t.tools))
    }

    /// The tallies as reports show them, each with its name: the known strategies' in
    /// [`Strategy::ALL`] order, then every unknown one's summed as "other". Only strategies the
    /// stats hold are listed.
    pub fn reported(&self) -> Vec<(&'static str, Tally)> {
        let mut out: Vec<(&'static str, Tally)> = Vec::new();
        for name in Strategy::reported_names() {
            let of = self.by_strategy.iter().filter(|(s, _)| s.name() == name).map(|(_, t)| *t);
            let tallies: Vec<Tally> = of.collect();
            if !tallies.is_empty() {
                out.push((name, tallies.into_iter().fold(Tally::default(), Tally::plus)));
            }
        }
        out
    }

    /// Tokens pruned over the session's life.
    pub fn tokens(&self) -> u64 {
        self.total_prune_tokens.saturating_add(self.prune_token_counter)
    }

    /// Takes `tokens` back out of the session's total (a prune undone), from the counter
    /// first, then from what earlier saves folded in.
    pub fn unrecord(&mut self, tokens: u64) {
        let from_counter = tokens.min(self.prune_token_counter);
        self.prune_token_counter -= from_counter;
        self.total_prune_tokens = self.total_prune_tokens.saturating_sub(tokens - from_counter);
    }
}

/// The journal key prefix of a compressed block the user undid (`/dcp decompress`): a merge
/// takes its tokens back out of the stats instead of adding them.
pub const UNBLOCK: &str = "unblock:";

/// The journal key prefix of a prune dropped because its reason left a rewound history
/// (`crate::strategies::rewind`): a merge takes it out of the file's prunes and its tokens
/// back out of the stats.
pub const UNPRUNE: &str = "unprune:";

/// The rewrite policy's running figures for a session, kept in the state file so that a
/// restarted sidecar (or `dcp replay`) goes on where the last one stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ledger {
    /// What dcp has gained on no pruning so far, in tokens at the base input price.
    pub banked: f64,
    /// Requests since the provider's cache was last cold.
    pub warm: u32,
    /// When the session's last request was made (ms), if dcp saw one.
    pub last_request: Option<i64>,
    /// Whether the session's requests carry the agent tools (`crate::policy::offer`).
    pub offered: bool,
    /// What the session has cost without pruning so far (the loss bound is a share of it),
    /// the size of its last request without pruning, and what dcp's own additions have cost
    /// so far (`crate::policy::unpruned_cost`, `crate::policy::additions`): a new process
    /// goes on from them, as one that had answered every request would.
    pub baseline: f64,
    pub unpruned: Option<u64>,
    pub added: f64,
    /// The `<prunable-tools>` lists sent so far.
    pub lists: ListsSent,
}

/// The `<prunable-tools>` lists sent to a session, as the state file keeps them: the last call
/// the last list named (its position among the history's calls), the agent's own prunes when
/// last counted, the lists sent since it last pruned (`crate::policy::list_pays`), and the
/// calls in the history when it was last nudged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListsSent {
    pub shown: Option<u64>,
    pub answered: u64,
    pub unanswered: u32,
    pub calls_at_nudge: u64,
}

impl Ledger {
    /// The seconds from the session's last request to `now` (ms), if dcp saw one.
    pub fn idle_seconds(&self, now: i64) -> Option<u64> {
        self.last_request.map(|t| (now.saturating_sub(t) / 1000).max(0) as u64)
    }

    /// Notes a request made at `now` (ms): a warm run starts afresh when the provider's cache
    /// went `cold` since the last one. Returns the requests of the warm run, this one included.
    pub fn request(&mut self, now: i64, cold: bool) -> u32 {
        self.last_request = Some(now);
        if cold {
            self.warm = 0;
        }
        self.warm += 1;
        self.warm
    }
}

/// Everything dcp remembers about one session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionState {
    pub session_name: Option<String>,
    pub pruned: BTreeMap<String, PruneRecord>,
    pub stats: Stats,
    /// The small ids the agent uses in discard/extract, by call id.
    pub ids: BTreeMap<String, u32>,
    pub next_id: u32,
    /// `time.created` of the newest compaction summary already handled.
    pub last_compaction: i64,
    /// What the rewrite policy remembers across requests and restarts (see `crate::policy`):
    /// kept here alone, read and moved through the session's slot (`store::Slot::ledger`).
    pub(in crate::state) ledger: Ledger,
    /// The compressed ranges (`prune.messages`).
    pub blocks: blocks::Blocks,
    /// What reached the model, request by request (see [`savings`]).
    pub savings: savings::Savings,
    /// Its arm of the control group, when it was assigned one (see [`trial`]).
    pub trial: Option<trial::Trial>,
    /// The misses seen live: re-fetches and restores (see [`misses`]).
    pub misses: misses::MissCounts,
    /// The whole file as read, so that fields dcp does not know survive a rewrite.
    pub raw: Map<String, Value>,
    /// The records of `pruned` that hold what this version does not know (a field, an
    /// action), by call id, as read: they are written back with it (see [`foreign`]).
    pub foreign_records: BTreeMap<String, Map<String, Value>>,
}

impl SessionState {
    /// Records `record` for `call_id` and counts it in the stats. A call already pruned is
    /// left as it is; returns whether the record was new.
    pub fn record(&mut self, call_id: &str, record: PruneRecord) -> bool {
        if self.pruned.contains_key(call_id) {
            return false;
        }
        let tally = self.stats.by_strategy.entry(record.strategy).or_default();
        tally.tokens = tally.tokens.saturating_add(record.tokens);
        tally.tools = tally.tools.saturating_add(1);
        self.stats.prune_token_counter = self.stats.prune_token_counter.saturating_add(record.tokens);
        self.pruned.insert(call_id.to_string(), record);
        true
    }

    /// Forgets the prune list after a compaction: the pruned calls are gone from the history
    /// the model sees. Stats are kept.
    pub fn clear_after_compaction(&mut self, compaction_time: i64) {
        self.pruned.clear();
        self.foreign_records.clear();
        self.blocks.clear();
        self.last_compaction = compaction_time;
    }

    /// Moves the pending counter into the total, as DCP does before it saves.
    pub fn fold_counter(&mut self) {
        self.stats.total_prune_tokens = self.stats.tokens();
        self.stats.prune_token_counter = 0;
    }

    /// The agent-facing id of `call_id`, assigned on first use and stable for the session.
    pub fn id_for(&mut self, call_id: &str) -> u32 {
        if let Some(id) = self.ids.get(call_id) {
            return *id;
        }
        self.next_id = self.next_id.max(1);
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        self.ids.insert(call_id.to_string(), id);
        id
    }

    /// The call id the agent means by `id`.
    pub fn call_for(&self, id: u32) -> Option<&str> {
        self.ids.iter().find(|(_, n)| **n == id).map(|(c, _)| c.as_str())
    }
}
