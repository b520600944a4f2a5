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
//! before was counted by whoever saw it happen. When the index only went back to the last
//! message (OpenCode finished it between two requests, [`Index::rewinds`]), the tracker goes
//! back with it: before it reads the calls of a history's last message it takes a [`Mark`]
//! and journals what reading them overwrites, and undoes that, so it reads again only that
//! message's calls and answers as reading the history again does.

use std::sync::Arc;

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
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    /// Its index among the session's calls, and the model step it was made in.
    at: usize,
    step: u32,
    /// Shared with the index, which holds the id (see [`call_at`]).
    call_id: Arc<str>,
}

/// What a session's tracker has read of its calls.
#[derive(Debug, Default)]
pub(super) struct Refetches {
    /// The calls read, and whether reading counts (not on the first read of a history).
    read: usize,
    counting: bool,
    /// The index's rebuilds and rewinds when the tracker last read it.
    rebuilds: u64,
    rewinds: u64,
    /// Every call read, by id: a history read again counts none of them twice.
    seen: HashSet<Arc<str>>,
    /// Model steps before message `messages`.
    steps: u32,
    messages: usize,
    by_signature: HashMap<u64, Seen>,
    by_file: HashMap<String, Seen>,
    /// The last edit or write of each file, and of any, by call index.
    edited: HashMap<String, usize>,
    last_edit: Option<usize>,
    /// Where the tracker stood before it read the calls of the history's last message, and
    /// what reading them overwrote since.
    mark: Option<Mark>,
    journal: Vec<Undo>,
}

/// Where a tracker stood before it read the calls of message `message`, the last of the
/// history: `read` calls read, the steps counted and the last edit.
#[derive(Debug, Clone, Copy)]
struct Mark {
    message: usize,
    read: usize,
    steps: u32,
    messages: usize,
    last_edit: Option<usize>,
}

/// What remembering a call overwrote in one of the tracker's maps, to put back.
#[derive(Debug)]
enum Undo {
    Signature(u64, Option<Seen>),
    File(String, Option<Seen>),
    Edited(String, Option<usize>),
}

impl Refetches {
    /// Reads the calls `index` holds that are new since the last request and returns how many
    /// of them fetch again what `state` hides.
    pub fn observe(&mut self, index: &Index, messages: &[Message], state: &SessionState) -> u64 {
        if self.went_back_with(index) {
            self.go_back();
        }
        if index.rebuilds() != self.rebuilds || index.calls() < self.read || self.messages > messages.len() {
            let (seen, counting) = (std::mem::take(&mut self.seen), self.counting);
            *self = Refetches { seen, counting, ..Refetches::default() };
        }
        (self.rebuilds, self.rewinds) = (index.rebuilds(), index.rewinds());
        let last = messages.len().saturating_sub(1);
        let before_last = index.calls_before(last);
        let mut found = 0;
        let mut ranged: Option<HashSet<&str>> = None;
        for at in self.read..index.calls() {
            self.mark_at(at, (last, before_last));
            let Some((shared, call)) = call_at(index, messages, at) else { continue };
            let step = self.step_of(messages, call.message);
            let new = self.seen.insert(Arc::clone(shared));
            if new && self.counting && !OWN_TOOLS.contains(&call.tool) {
                let earlier = self.earlier(&call, dedup::signature_hash(call.tool, call.input()));
                let hidden = earlier.filter(|e| step.saturating_sub(e.step) <= WINDOW).is_some_and(|e| {
                    let ranged = ranged.get_or_insert_with(|| applied_ranges(state));
                    hides(state, ranged, &e.call_id)
                });
                found += u64::from(hidden);
            }
            self.remember(&call, shared, (at, step));
        }
        self.mark_at(index.calls(), (last, before_last));
        self.read = index.calls();
        self.counting = true;
        found
    }

    /// Whether the only reading again the index did since the tracker last read it went back
    /// to where the tracker's mark stands: the message it read last, with the calls before it.
    fn went_back_with(&self, index: &Index) -> bool {
        let once = index.rebuilds() == self.rebuilds + 1 && index.rewinds() == self.rewinds + 1;
        once && self.mark.is_some_and(|m| index.rewound_to() == (m.message, m.read))
    }

    /// Goes back to the mark: undoes what reading the calls since overwrote.
    fn go_back(&mut self) {
        let Some(mark) = self.mark.take() else { return };
        for undo in std::mem::take(&mut self.journal).into_iter().rev() {
            match undo {
                Undo::Signature(key, old) => restore(&mut self.by_signature, key, old),
                Undo::File(key, old) => restore(&mut self.by_file, key, old),
                Undo::Edited(key, old) => restore(&mut self.edited, key, old),
            }
        }
        (self.read, self.steps, self.messages, self.last_edit) = (mark.read, mark.steps, mark.messages, mark.last_edit);
        self.rebuilds += 1;
        self.rewinds += 1;
    }

    /// Takes the mark before call `at` is read, if it is the first call of message `last`,
    /// the last of the history (`before_last` calls come before it), and no mark stands there.
    fn mark_at(&mut self, at: usize, (last, before_last): (usize, usize)) {
        if at != before_last || self.mark.is_some_and(|m| m.message == last && m.read == at) {
            return;
        }
        self.journal.clear();
        let (steps, messages, last_edit) = (self.steps, self.messages, self.last_edit);
        self.mark = Some(Mark { message: last, read: at, steps, messages, last_edit });
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

    /// Remembers `call`, whose id is `shared`, made at `when` (its index among the calls,
    /// and its model step).
    fn remember(&mut self, call: &ToolCall<'_>, shared: &Arc<str>, when: (usize, u32)) {
        let (at, step) = when;
        let seen = Seen { at, step, call_id: Arc::clone(shared) };
        let journal = self.mark.is_some_and(|m| at >= m.read);
        if masking::EDIT_TOOLS.contains(&call.tool) {
            self.last_edit = Some(at);
            if let Some(f) = call.file_path() {
                let old = self.edited.insert(f.to_string(), at);
                self.note(journal, || Undo::Edited(f.to_string(), old));
            }
        }
        if let Some(f) = call.file_path().filter(|_| call.tool == "read") {
            let old = self.by_file.insert(f.to_string(), seen.clone());
            self.note(journal, || Undo::File(f.to_string(), old));
        }
        let signature = dedup::signature_hash(call.tool, call.input());
        let old = self.by_signature.insert(signature, seen);
        self.note(journal, || Undo::Signature(signature, old));
    }

    /// Journals `undo` when `journal` says a mark stands before the call read.
    fn note(&mut self, journal: bool, undo: impl FnOnce() -> Undo) {
        if journal {
            self.journal.push(undo());
        }
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

/// Call `at` of `index`, as the history holds it, and its id as the index holds it.
fn call_at<'i, 'm>(index: &'i Index, messages: &'m [Message], at: usize) -> Option<(&'i Arc<str>, ToolCall<'m>)> {
    let (shared, (m, p)) = index.shared_position(index.call_id(at)?)?;
    Some((shared, ToolCall::from_part(m, p, messages.get(m)?.parts.get(p)?, 0)?))
}

/// Puts `old` back as `key`'s value in `map`, or takes `key` out when it had none.
fn restore<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>, key: K, old: Option<V>) {
    match old {
        Some(v) => map.insert(key, v),
        None => map.remove(&key),
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::state::{PruneRecord, Strategy};
    use dcp_testkit::gen::{self, SessionSpec};

    /// The test kit's messages are its own build of the crate's type: they cross as JSON.
    fn ours(messages: &impl serde::Serialize) -> Vec<Message> {
        serde_json::from_value(serde_json::to_value(messages).unwrap()).unwrap()
    }

    /// `message` as it is sent while it is written, in one of three forms by `step`: its calls
    /// running with no output (OpenCode's), in the other order, or with other calls (each
    /// read an edit, of another file; each command another).
    fn unfinished(message: &Message, step: usize) -> Message {
        let mut v = serde_json::to_value(message).unwrap();
        let parts = v["parts"].as_array_mut().unwrap();
        for p in parts.iter_mut().filter(|p| p["type"] == "tool") {
            if step % 3 == 2 && p["tool"] == "read" {
                p["tool"] = "edit".into();
            }
            let state = p["state"].as_object_mut().unwrap();
            match step % 3 {
                0 => {
                    state.insert("status".into(), "running".into());
                    state.remove("output");
                }
                1 => {}
                _ => {
                    let input = state.get_mut("input").and_then(|i| i.as_object_mut()).unwrap();
                    for key in ["filePath", "command"] {
                        if let Some(serde_json::Value::String(s)) = input.get_mut(key) {
                            s.push_str(".partial");
                        }
                    }
                }
            }
        }
        if step % 3 == 1 {
            parts.reverse();
        }
        serde_json::from_value(v).unwrap()
    }

    /// Puts in force a prune of the output of every other call of `messages`.
    fn hide_every_other(messages: &[Message], state: &mut SessionState) {
        for (m, message) in messages.iter().enumerate() {
            for (p, part) in message.parts.iter().enumerate().filter(|(p, _)| (m + p) % 2 == 0) {
                let Some(call) = ToolCall::from_part(m, p, part, 0) else { continue };
                let tool = call.tool.to_string();
                let record = PruneRecord {
                    strategy: Strategy::Masking,
                    action: Action::Output,
                    tokens: 10,
                    tool,
                    applied: true,
                };
                state.pruned.entry(call.call_id.to_string()).or_insert(record);
            }
        }
    }

    fn assert_same(kept: &Refetches, rebuilt: &Refetches, step: usize) {
        let counts = |r: &Refetches| (r.read, r.steps, r.messages, r.last_edit, r.counting);
        assert_eq!(counts(kept), counts(rebuilt), "step {step}: counts");
        assert_eq!(kept.by_signature, rebuilt.by_signature, "step {step}: calls by signature");
        assert_eq!(kept.by_file, rebuilt.by_file, "step {step}: reads by file");
        assert_eq!(kept.edited, rebuilt.edited, "step {step}: edits");
        assert_eq!(kept.seen, rebuilt.seen, "step {step}: calls seen");
    }

    #[test]
    fn a_tracker_that_goes_back_with_the_index_counts_as_one_that_reads_the_history_again() {
        let session = gen::session(&SessionSpec { messages: 200, steps: 120, seed: 7 });
        let rules = Rules::new(Config::default()).unwrap();
        let mut messages = ours(&session.messages);
        let (mut index, mut state) = (Index::default(), SessionState::default());
        let (mut kept, mut rebuilt) = (Refetches::default(), Refetches::default());
        let (mut finishing, mut indexed, mut found, mut went_back) = (None, 0, 0, 0);
        for (step, new) in session.steps.iter().enumerate() {
            let mut unchanged = indexed;
            if let Some(finished) = finishing.take() {
                *messages.last_mut().unwrap() = finished;
                unchanged -= 1;
            }
            messages.extend(ours(new));
            let last = messages.last_mut().unwrap();
            finishing = Some(std::mem::replace(last, unfinished(last, step)));
            let rewinds = index.rewinds();
            index.sync(&messages, unchanged, 0, &rules);
            went_back += usize::from(index.rewinds() > rewinds);
            indexed = messages.len();
            hide_every_other(&messages, &mut state);
            // One rebuild the tracker did not see: it reads the history again.
            rebuilt.rebuilds = index.rebuilds() + 1;
            let expected = rebuilt.observe(&index, &messages, &state);
            assert_eq!(kept.observe(&index, &messages, &state), expected, "step {step}: re-fetches");
            assert_same(&kept, &rebuilt, step);
            found += expected;
        }
        assert!(went_back * 2 > session.steps.len(), "went back at only {went_back} steps");
        assert!(found > 5, "only {found} re-fetches");
    }
}
