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
//! slot's changes ([`AgentPrunes`]).

use std::collections::BTreeSet;

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

/// The prunes of one session, as of [`InForce::update`].
#[derive(Debug, Default)]
pub(super) struct InForce {
    basis: Option<Basis>,
    members: HashMap<String, Member>,
    approx: u64,
    waiting: BTreeSet<String>,
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

    /// The ids of the prunes waiting for the policy, in id order.
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.waiting.iter().map(String::as_str)
    }

    /// Takes in the calls new to the index and the prunes changed since `before`.
    fn advance(&mut self, before: Basis, from: &mut Sources<'_>) {
        let (slot, index) = (from.slot, from.index);
        let pruned = &slot.state().pruned;
        for at in before.calls..index.calls() {
            let Some(id) = index.call_id(at) else { continue };
            if let Some(record) = pruned.get(id).filter(|r| r.applied) {
                self.put(id, record, from);
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

    /// Takes in the prune of call `id` as it is now: in force, or waiting.
    fn take(&mut self, id: &str, record: &PruneRecord, from: &mut Sources<'_>) {
        if record.applied {
            self.waiting.remove(id);
            self.put(id, record, from);
        } else {
            self.waiting.insert(id.to_string());
        }
    }

    /// Counts the prune in force of call `id`, if its call is in the history (where the
    /// index finds the id now: the latest call of that id).
    fn put(&mut self, id: &str, record: &PruneRecord, from: &mut Sources<'_>) {
        let Some(at) = from.index.position(id) else { return };
        let approx = from.sizes.approx_saving(from.mirror, id, at, &record.action);
        let member = Member { approx };
        if let Some(old) = self.members.insert(id.to_string(), member) {
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
