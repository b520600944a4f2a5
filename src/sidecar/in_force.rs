//! A session's prunes as each request reads them, kept between requests: those in force
//! (applied, of calls in the history), with what each one's rewrite removes, and the ids of
//! those waiting for the policy. The policy weighs every request against the prunes in force,
//! and looks at every waiting one; finding
//! each prune's call by its id and sizing its rewrite anew would cost every prune of the
//! session on every request. The view reads only what changed since it last looked: the calls
//! new to the index, and the prunes recorded or put in force since ([`Slot::changes`]). It
//! reads every prune again when what it read may have changed: the prunes were reset (a
//! compaction, another process's file merged in), the index was rebuilt, or the mirror's
//! messages changed before the end of what it had read (an edit, a resync, a resolve it did
//! not see). What a prune's rewrite removes comes from the session's [`SavingCache`], which
//! sized it while it waited. The agent's own prunes are counted as they come, from the
//! slot's changes ([`AgentPrunes`]). A waiting prune is kept with where its call is and what
//! its rewrite removes ([`Waiting`]), found when it is taken in, so that the policy weighs
//! every waiting prune on every request without looking each one up again.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::mirror::Mirror;
use super::saving_cache::SavingCache;
use crate::state::blocks::Origin;
use crate::state::store::{ChangesMark, Slot};
use crate::state::{PruneRecord, Strategy};
use crate::strategies::incremental::Index;

/// How a view of the prunes is brought up to date: from what changed since it last looked,
/// or from every prune again (what each request did before the view was kept; the
/// differential tests compare the two).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Views {
    #[default]
    Kept,
    Rebuilt,
}

/// What the view was last brought up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Basis {
    resets: u64,
    rebuilds: u64,
    generation: u64,
    messages: usize,
    calls: usize,
    changes: usize,
}

/// A prune in force: what its rewrite removes in the unit of the mirror's sizes
/// ([`SavingCache::approx_saving`]).
#[derive(Debug, Clone, Copy)]
struct Member {
    approx: u64,
}

/// A prune waiting for the policy, whose call is in the history: where the call is (where
/// the index finds its id: the latest call of that id) and what its rewrite would remove, in
/// the unit of the mirror's sizes ([`SavingCache::approx_saving`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waiting {
    pub at: (usize, usize),
    pub approx: u64,
}

/// The prunes of one session, as of [`InForce::update`].
#[derive(Debug, Default)]
pub(super) struct InForce {
    basis: Option<Basis>,
    /// By call id, shared with the index's (as the waiting prunes' and the saving cache's).
    members: HashMap<Arc<str>, Member>,
    approx: u64,
    /// The waiting prunes, by id; `None` for one whose call is not in the history (yet).
    waiting: BTreeMap<Arc<str>, Option<Waiting>>,
}

/// What a view reads: a session's prunes, its calls and its history, and the sizes of its
/// prunes' rewrites.
pub(super) struct Sources<'a> {
    pub slot: &'a Slot,
    pub index: &'a Index,
    pub mirror: &'a Mirror,
    pub sizes: &'a mut SavingCache,
}

impl InForce {
    /// Brings the view up to `from`'s prunes over its index's calls in its mirror's history.
    pub fn update(&mut self, mut from: Sources<'_>, views: Views) {
        let (slot, index, mirror) = (from.slot, from.index, from.mirror);
        let now = Basis {
            resets: slot.resets(),
            rebuilds: index.rebuilds(),
            generation: mirror.generation(),
            messages: mirror.messages().len(),
            calls: index.calls(),
            changes: slot.changes().len(),
        };
        match self.basis.filter(|_| views == Views::Kept) {
            Some(before) if before == now => return,
            Some(before) if follows(before, now, mirror) => self.advance(before, &mut from),
            _ => self.rebuild(&mut from),
        }
        self.basis = Some(now);
    }

    /// What the prunes in force remove, in the unit of the mirror's sizes.
    pub fn approx(&self) -> u64 {
        self.approx
    }

    /// The prunes waiting for the policy whose calls are in the history, in id order: each
    /// one's id, where its call is and what its rewrite would remove.
    pub fn waiting(&self) -> impl Iterator<Item = (&str, Waiting)> {
        self.waiting.iter().filter_map(|(id, w)| Some((&**id, (*w)?)))
    }

    /// Takes in the calls new to the index and the prunes changed since `before`. A new call
    /// may be the call of a prune taken in before it (recorded by id), or a later call of a
    /// pruned id, where the index now finds that id: either way its prune is taken in again.
    fn advance(&mut self, before: Basis, from: &mut Sources<'_>) {
        let (slot, index) = (from.slot, from.index);
        let pruned = &slot.state().pruned;
        for at in before.calls..index.calls() {
            let Some(id) = index.call_id(at) else { continue };
            if let Some(record) = pruned.get(id) {
                self.take(id, record, from);
            }
        }
        for id in &slot.changes()[before.changes..] {
            if let Some(record) = pruned.get(id) {
                self.take(id, record, from);
            }
        }
    }

    /// Reads every prune of `from`'s slot again.
    fn rebuild(&mut self, from: &mut Sources<'_>) {
        *self = InForce::default();
        let slot = from.slot;
        for (id, record) in &slot.state().pruned {
            self.take(id, record, from);
        }
    }

    /// Takes in the prune of call `id` as it is now: in force, or waiting. Where the call is
    /// in the history, its id is kept as the index holds it, not copied.
    fn take(&mut self, id: &str, record: &PruneRecord, from: &mut Sources<'_>) {
        let found = from.index.shared_position(id).map(|(shared, at)| (Arc::clone(shared), at));
        if record.applied {
            self.waiting.remove(id);
            self.put(found, record, from);
        } else {
            let size = |(shared, at): &(Arc<str>, (usize, usize))| Waiting {
                at: *at,
                approx: from.sizes.approx_saving_shared(from.mirror, shared, *at, &record.action),
            };
            let sized = found.as_ref().map(size);
            self.waiting.insert(found.map_or_else(|| Arc::from(id), |(shared, _)| shared), sized);
        }
    }

    /// Counts the prune in force of the call `found` (its id and where the index finds it now:
    /// the latest call of that id), if its call is in the history.
    fn put(&mut self, found: Option<(Arc<str>, (usize, usize))>, record: &PruneRecord, from: &mut Sources<'_>) {
        let Some((id, at)) = found else { return };
        let approx = from.sizes.approx_saving_shared(from.mirror, &id, at, &record.action);
        let member = Member { approx };
        if let Some(old) = self.members.insert(id, member) {
            self.approx -= old.approx;
        }
        self.approx += member.approx;
    }
}

/// The agent's own prunes: its discards and extracts, read from the slot's changes since the
/// last count (and every prune again after a reset), and its compressed ranges.
#[derive(Debug, Default)]
pub(super) struct AgentPrunes {
    mark: Option<ChangesMark>,
    calls: HashSet<String>,
}

impl AgentPrunes {
    /// How many prunes and ranges of `slot` the agent made.
    pub fn count(&mut self, slot: &Slot, views: Views) -> usize {
        let pruned = &slot.state().pruned;
        let agent = |r: &PruneRecord| matches!(r.strategy, Strategy::Discard | Strategy::Extract);
        match self.mark.filter(|_| views == Views::Kept).and_then(|mark| slot.changes_since(mark)) {
            Some(changes) => {
                let new = changes.iter().filter(|id| pruned.get(*id).is_some_and(agent));
                self.calls.extend(new.cloned());
                // A prune taken back without a reset leaves the count too.
                self.calls.retain(|id| pruned.get(id).is_some_and(agent));
            }
            None => self.calls = pruned.iter().filter(|(_, r)| agent(r)).map(|(id, _)| id.clone()).collect(),
        }
        self.mark = Some(slot.changes_mark());
        self.calls.len() + slot.state().blocks.by_id.values().filter(|b| b.origin == Origin::Agent).count()
    }
}

/// Whether a view brought up to `before` still holds for what it read, at `now`: no reset, no
/// rebuild, and every message it read unchanged.
fn follows(before: Basis, now: Basis, mirror: &Mirror) -> bool {
    let same_messages = before.generation == now.generation
        || (before.generation + 1 == now.generation && mirror.kept() >= before.messages);
    before.resets == now.resets
        && before.rebuilds == now.rebuilds
        && before.changes <= now.changes
        && before.calls <= now.calls
        && same_messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::store::SessionStore;
    use crate::state::Action;
    use crate::tokens::EstimatorChoice;

    /// The agent's prunes counted from every prune, as each request once did.
    fn counted_again(slot: &Slot) -> usize {
        let state = slot.state();
        let manual = state.pruned.values().filter(|r| matches!(r.strategy, Strategy::Discard | Strategy::Extract));
        manual.count() + state.blocks.by_id.values().filter(|b| b.origin == Origin::Agent).count()
    }

    fn record(strategy: Strategy, applied: bool) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens: 10, tool: "read".into(), applied }
    }

    /// The test kit's messages are its own build of the crate's type: they cross as JSON.
    fn ours(messages: &impl serde::Serialize) -> Vec<crate::session::Message> {
        serde_json::from_value(serde_json::to_value(messages).unwrap()).unwrap()
    }

    fn wire(messages: &[crate::session::Message]) -> Vec<crate::session::Node> {
        messages.iter().map(|m| crate::session::Node::from(serde_json::to_value(m).unwrap())).collect()
    }

    /// Gives the last tool part of `message` the call id `id`, as a later call of a pruned id.
    fn reuse_id(message: &mut crate::session::Message, id: &str) {
        let Some(part) = message.parts.iter_mut().rev().find(|p| p.get("callID").is_some()) else { return };
        let mut value = serde_json::to_value(&*part).unwrap();
        value["callID"] = serde_json::Value::String(id.to_string());
        *part = crate::session::Node::from(value);
    }

    /// Makes the output of the last tool part of `message` longer, as an edit would.
    fn edit(message: &mut crate::session::Message) {
        let Some(part) = message.parts.iter_mut().rev().find(|p| p.get("callID").is_some()) else { return };
        let mut value = serde_json::to_value(&*part).unwrap();
        if let Some(output) = value.pointer_mut("/state/output") {
            *output = serde_json::Value::String(format!("{}{}", output.as_str().unwrap_or(""), "edited ".repeat(300)));
        }
        *part = crate::session::Node::from(value);
    }

    /// The waiting prunes and what those in force remove, as a view sees them.
    fn seen(view: &InForce) -> (Vec<(String, Waiting)>, u64) {
        (view.waiting().map(|(id, w)| (id.to_string(), w)).collect(), view.approx())
    }

    #[test]
    fn waiting_prunes_kept_between_requests_are_where_every_prune_read_again_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        let rules = crate::strategies::Rules::new(crate::config::Config::default()).unwrap();
        let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 150, steps: 60, seed: 3 });
        let mut messages = ours(&session.messages);
        let (mut mirror, mut index) = (Mirror::default(), Index::default());
        let (mut kept, mut kept_sizes) = (InForce::default(), SavingCache::default());
        let (mut pruned, mut waiting_seen) = (0usize, 0usize);
        let actions = [Action::Mask, Action::Output, Action::MaskInputs];
        for step in 0..=session.steps.len() {
            let sent = messages.len();
            if step > 0 {
                messages.extend(ours(&session.steps[step - 1]));
            }
            let slot = store.slot("ses_waiting").unwrap();
            // Every eleventh step's new call reuses the id of a waiting prune; every fifth edits
            // an old message; every ninth resends the whole history.
            if step % 11 == 10 {
                if let Some(id) = slot.state().pruned.iter().find(|(_, r)| !r.applied).map(|(id, _)| id.clone()) {
                    reuse_id(messages.last_mut().unwrap(), &id);
                }
            }
            let base = match step {
                0 => 0,
                s if s % 5 == 0 => {
                    edit(&mut messages[sent - 3]);
                    sent - 3
                }
                s if s % 9 == 0 => 0,
                _ => sent,
            };
            mirror.resolve(base.min(mirror.messages().len()), wire(&messages[base..])).unwrap();
            index.sync(mirror.messages(), mirror.kept(), slot.resets(), &rules);
            // Prunes of some of the calls, and one of a call not yet in the history; some put
            // in force later.
            for at in 0..index.calls() {
                let id = index.call_id(at).unwrap().to_string();
                if (at + step) % 4 == 0 && !slot.state().pruned.contains_key(&id) {
                    let action = actions[at % actions.len()].clone();
                    slot.record(&id, PruneRecord { action, ..record(Strategy::Masking, false) });
                    pruned += 1;
                } else if (at + step) % 13 == 0 {
                    slot.apply(&id);
                }
            }
            let next = session.steps.get(step).map(ours).unwrap_or_default();
            let next_call =
                next.iter().flat_map(|m| &m.parts).find_map(|p| p.get("callID")?.as_str().map(String::from));
            slot.record(&next_call.unwrap_or(format!("call_never_{step}")), record(Strategy::Discard, false));
            let slot = store.slot("ses_waiting").unwrap();
            kept.update(Sources { slot, index: &index, mirror: &mirror, sizes: &mut kept_sizes }, Views::Kept);
            let mut again = InForce::default();
            let sizes = &mut SavingCache::default();
            again.update(Sources { slot, index: &index, mirror: &mirror, sizes }, Views::Rebuilt);
            assert_eq!(seen(&kept), seen(&again), "step {step}");
            waiting_seen += kept.waiting().filter(|(_, w)| w.approx > 0).count();
        }
        assert!(pruned > 100 && waiting_seen > 1000, "{pruned} prunes, {waiting_seen} waiting sized");
    }

    #[test]
    fn the_view_and_the_saving_cache_hold_the_index_s_call_ids_not_copies() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        let rules = crate::strategies::Rules::new(crate::config::Config::default()).unwrap();
        let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 80, steps: 0, seed: 5 });
        let messages = ours(&session.messages);
        let (mut mirror, mut index) = (Mirror::default(), Index::default());
        mirror.resolve(0, wire(&messages)).unwrap();
        let slot = store.slot("ses_shared").unwrap();
        index.sync(mirror.messages(), mirror.kept(), slot.resets(), &rules);
        for at in 0..index.calls() {
            let id = index.call_id(at).unwrap().to_string();
            slot.record(&id, PruneRecord { action: Action::Mask, ..record(Strategy::Masking, at % 2 == 0) });
        }
        slot.record("call_not_in_the_history", record(Strategy::Discard, false));
        let (mut view, mut sizes) = (InForce::default(), SavingCache::default());
        let slot = store.slot("ses_shared").unwrap();
        view.update(Sources { slot, index: &index, mirror: &mirror, sizes: &mut sizes }, Views::Kept);
        let shared = |id: &Arc<str>| index.shared_position(id).is_some_and(|(own, _)| Arc::ptr_eq(own, id));
        let waiting = view.waiting.keys().filter(|id| &***id != "call_not_in_the_history");
        let held: Vec<&Arc<str>> = view.members.keys().chain(waiting).chain(sizes.keys()).collect();
        assert!(held.len() > 2 * 20, "too few ids held: {}", held.len());
        assert!(held.iter().all(|id| shared(id)), "an id held is a copy");
    }

    #[test]
    fn the_agent_s_prunes_counted_as_they_come_are_those_counted_from_every_prune() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        let (mut kept, mut rebuilt) = (AgentPrunes::default(), AgentPrunes::default());
        let strategies = [Strategy::Masking, Strategy::Discard, Strategy::Deduplication, Strategy::Extract];
        let mut agent = 0;
        for i in 0..120 {
            let slot = store.slot("ses_agent").unwrap();
            let strategy = strategies[i % strategies.len()];
            slot.record(&format!("call_{i}"), record(strategy, i % 3 == 0));
            if i % 5 == 0 {
                slot.apply(&format!("call_{}", i / 2));
            }
            if i % 17 == 16 {
                // A prune taken back without a reset.
                slot.state_mut().pruned.remove(&format!("call_{}", i - 3));
            }
            if i == 60 {
                // A newer compaction clears the prunes: a reset.
                store.observe_newest("ses_agent", 1_000).unwrap();
            }
            let slot = store.slot("ses_agent").unwrap();
            let expected = counted_again(slot);
            assert_eq!(kept.count(slot, Views::Kept), expected, "after prune {i}");
            assert_eq!(rebuilt.count(slot, Views::Rebuilt), expected, "after prune {i}");
            agent = agent.max(expected);
        }
        assert!(agent > 20, "the agent's prunes were counted ({agent})");
    }
}
