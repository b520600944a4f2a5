//! Re-fetches seen live: the agent runs a call again, or reads a file again, whose earlier
//! output dcp had hidden from it (`crate::state::misses`).
//!
//! Each request, the calls that are new since the last one are looked at against the latest
//! earlier call of the same signature (tool and arguments, keys sorted and nulls dropped, as
//! deduplication compares them) and, for a `read`, the latest earlier read of the same file.
//! The new call is a re-fetch when that earlier call's output is hidden from the model (a
//! prune in force that replaces the output, or a range in force that holds the call), it was
//! made at most [`WINDOW`] model steps before, and nothing the agent did since made it stale:
//! no edit or write of the file it read, and for any other call no edit or write at all (a
//! test run again after an edit is the agent's work, not a miss). A restore is counted
//! where it is made; the agent's own tools are not looked at.
//!
//! The tracker reads each call once. When the index of calls was rebuilt (a history changed
//! before its end, a compaction, a merge) it reads the history again, counting only the calls
//! it had not read; on a session's first request in this process it counts nothing: what came
//! before was counted by whoever saw it happen.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::policy;
use crate::session::{Message, Role, ToolCall};
use crate::state::store::Slot;
use crate::state::{Action, SessionState};
use crate::strategies::incremental::Index;
use crate::strategies::{dedup, masking, Rules};

/// The most model steps between a call and the one that runs it again for the second to
/// count as a re-fetch of it.
pub const WINDOW: u32 = 40;

/// Tools whose calls are no re-fetch: the agent's own (a restore is counted where it is made).
const OWN_TOOLS: &[&str] = &["discard", "extract", "compress", "restore"];

/// A call as the tracker remembers it.
#[derive(Debug, Clone)]
struct Seen {
    /// Its index among the session's calls, and the model step it was made in.
    at: usize,
    step: u32,
    call_id: String,
}

/// What a session's tracker has read of its calls.
#[derive(Debug, Default)]
pub(super) struct Refetches {
    /// The calls read, and whether reading counts (not on the first read of a history).
    read: usize,
    counting: bool,
    /// The index's rebuilds when the tracker last read it.
    rebuilds: u64,
    /// Every call read, by id: a history read again counts none of them twice.
    seen: HashSet<String>,
    /// Model steps before message `messages`.
    steps: u32,
    messages: usize,
    by_signature: HashMap<u64, Seen>,
    by_file: HashMap<String, Seen>,
    /// The last edit or write of each file, and of any, by call index.
    edited: HashMap<String, usize>,
    last_edit: Option<usize>,
}

impl Refetches {
    /// Reads the calls `index` holds that are new since the last request and returns how many
    /// of them fetch again what `state` hides.
    pub fn observe(&mut self, index: &Index, messages: &[Message], state: &SessionState) -> u64 {
        if index.rebuilds() != self.rebuilds || index.calls() < self.read || self.messages > messages.len() {
            let (seen, counting) = (std::mem::take(&mut self.seen), self.counting);
            *self = Refetches { rebuilds: index.rebuilds(), seen, counting, ..Refetches::default() };
        }
        let mut found = 0;
        let mut ranged: Option<HashSet<&str>> = None;
        for at in self.read..index.calls() {
            let Some(call) = call_at(index, messages, at) else { continue };
            let step = self.step_of(messages, call.message);
            let new = self.seen.insert(call.call_id.to_string());
            if new && self.counting && !OWN_TOOLS.contains(&call.tool) {
                let earlier = self.earlier(&call, dedup::signature_hash(call.tool, call.input()));
                let hidden = earlier.filter(|e| step.saturating_sub(e.step) <= WINDOW).is_some_and(|e| {
                    let ranged = ranged.get_or_insert_with(|| applied_ranges(state));
                    hides(state, ranged, &e.call_id)
                });
                found += u64::from(hidden);
            }
            self.remember(&call, at, step);
        }
        self.read = index.calls();
        self.counting = true;
        found
    }

    /// The model step of message `m`, counting the assistant messages before it.
    fn step_of(&mut self, messages: &[Message], m: usize) -> u32 {
        for message in messages.get(self.messages..m).unwrap_or_default() {
            self.steps += u32::from(message.role() == Role::Assistant);
        }
        self.messages = self.messages.max(m);
        self.steps
    }

    /// The latest earlier call that `call` fetches again, if nothing made it stale since: one
    /// of the same signature, or for a read, a read of the same file.
    fn earlier(&self, call: &ToolCall<'_>, signature: u64) -> Option<&Seen> {
        let file = call.file_path().filter(|_| call.tool == "read");
        let same = self.by_signature.get(&signature);
        let read = file.and_then(|f| self.by_file.get(f));
        let earlier = match (same, read) {
            (Some(a), Some(b)) => Some(if a.at > b.at { a } else { b }),
            (a, b) => a.or(b),
        }?;
        let stale = match file {
            Some(f) => self.edited.get(f).is_some_and(|e| *e > earlier.at),
            None => self.last_edit.is_some_and(|e| e > earlier.at),
        };
        (!stale).then_some(earlier)
    }

    fn remember(&mut self, call: &ToolCall<'_>, at: usize, step: u32) {
        let seen = Seen { at, step, call_id: call.call_id.to_string() };
        if masking::EDIT_TOOLS.contains(&call.tool) {
            self.last_edit = Some(at);
            if let Some(f) = call.file_path() {
                self.edited.insert(f.to_string(), at);
            }
        }
        if let Some(f) = call.file_path().filter(|_| call.tool == "read") {
            self.by_file.insert(f.to_string(), seen.clone());
        }
        self.by_signature.insert(dedup::signature_hash(call.tool, call.input()), seen);
    }
}

/// The rules of a session backed off 1 to [`policy::MAX_BACKOFF`] steps, or none with the
/// backoff off.
pub(super) fn backed_off_rules(rules: &Rules) -> Result<Vec<Rules>, crate::strategies::PatternError> {
    let config = rules.config();
    if !config.strategies.masking.backoff {
        return Ok(Vec::new());
    }
    let level = |n: u32| {
        let mut c = config.clone();
        c.strategies.masking = policy::backed_off(&config.strategies.masking, n);
        Rules::new(c)
    };
    (1..=policy::MAX_BACKOFF).map(level).collect()
}

/// Reads the new calls of a session's history (`messages`, its `index`) for re-fetches and
/// counts them in its state (`slot`); returns how many.
pub(super) fn observe(refetches: &mut Refetches, index: &Index, slot: &mut Slot, messages: &[Message]) -> u64 {
    let found = refetches.observe(index, messages, slot.state());
    slot.count_refetches(found);
    found
}

/// Call `at` of `index`, as the history holds it.
fn call_at<'m>(index: &Index, messages: &'m [Message], at: usize) -> Option<ToolCall<'m>> {
    let (m, p) = index.position(index.call_id(at)?)?;
    ToolCall::from_part(m, p, messages.get(m)?.parts.get(p)?, 0)
}

/// The calls of the ranges in force.
fn applied_ranges(state: &SessionState) -> HashSet<&str> {
    state.blocks.active().filter(|b| b.applied).flat_map(|b| b.effective_tools.iter().map(String::as_str)).collect()
}

/// Whether the model is sent `call_id`'s output hidden: a prune in force replaces it, or a
/// range in force holds the call.
fn hides(state: &SessionState, ranged: &HashSet<&str>, call_id: &str) -> bool {
    let pruned = state
        .pruned
        .get(call_id)
        .is_some_and(|r| r.applied && matches!(r.action, Action::Output | Action::Mask | Action::Distill { .. }));
    pruned || ranged.contains(call_id)
}
