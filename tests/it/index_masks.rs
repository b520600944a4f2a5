//! The index's masking candidates checked against the prunes only when the slot's prunes
//! changed, against the same index checking every candidate on every request: over a
//! generated session, with prunes recorded by masking and by other strategies, the last
//! message read again, the index rebuilt, a prune dropped and a compaction, both must answer
//! the same after every step.

use dcp::config::Config;
use dcp::session::Message;
use dcp::state::store::{SessionStore, Slot};
use dcp::state::{Action, PruneRecord, Strategy};
use dcp::strategies::incremental::Index;
use dcp::strategies::Rules;
use dcp::tokens::{EstimatorChoice, TokenCounter};
use dcp_testkit::gen::{self, SessionSpec};

const ID: &str = "ses_masks";

/// The ids of the candidates `index` gives, checking every one (`skip` false) or only when the
/// slot's prunes changed since its last check.
fn candidates(index: &mut Index, messages: &[Message], slot: &Slot, skip: bool, rules: &Rules) -> Vec<String> {
    let mut counter = TokenCounter::new(EstimatorChoice::CharsDiv4);
    let seen = skip.then(|| slot.changes_mark());
    let got = index.mask_candidates(messages, slot.state(), seen, rules, &mut counter).to_vec();
    got.iter().map(|c| index.candidate(c).0.to_string()).collect()
}

fn record(slot: &mut Slot, id: &str, strategy: Strategy) {
    let record = PruneRecord { strategy, action: Action::Mask, tokens: 10, tool: "read".into(), applied: true };
    slot.record(id, record);
}

#[test]
fn masking_candidates_checked_only_when_the_prunes_changed_are_those_of_checking_every_one() {
    let rules = Rules::new(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    store.observe_newest(ID, 0).unwrap();
    let session = gen::session(&SessionSpec { messages: 300, steps: 150, seed: 13 });
    let mut messages = session.messages.clone();
    let (mut full, mut skipping) = (Index::default(), Index::default());
    let (mut indexed, mut dropped_by_check) = (0usize, 0usize);
    let mut before: Vec<String> = Vec::new();
    for step in 0..=session.steps.len() {
        if step > 0 {
            messages.extend(session.steps[step - 1].iter().cloned());
        }
        // Every 7th step the last message read changed (the index goes back to it); every
        // 23rd, messages before it did (the index is rebuilt).
        let kept = match step {
            s if s % 23 == 22 => indexed.saturating_sub(3),
            s if s % 7 == 6 => indexed.saturating_sub(1),
            _ => indexed,
        };
        if step == 90 {
            store.observe_newest(ID, 1_000).unwrap();
        }
        let slot = store.slot(ID).unwrap();
        for index in [&mut full, &mut skipping] {
            index.sync(&messages, kept, slot.resets(), &rules);
        }
        indexed = messages.len();
        let got = candidates(&mut skipping, &messages, slot, true, &rules);
        let expected = candidates(&mut full, &messages, slot, false, &rules);
        assert_eq!(got, expected, "step {step}: masking candidates");
        dropped_by_check +=
            before.iter().filter(|id| !got.contains(id) && slot.state().pruned.contains_key(*id)).count();
        // Prune as the policy and the other strategies would: the oldest candidate by masking
        // every third step, another by deduplication every fifth (twice, before one check),
        // a call that is no candidate; drop a prune now and then (a reset).
        if step % 3 == 0 {
            got.first().into_iter().for_each(|id| record(slot, id, Strategy::Masking));
        }
        if step % 5 == 0 {
            got.iter().rev().take(2).for_each(|id| record(slot, id, Strategy::Deduplication));
        }
        if let Some(id) = skipping.call_id(step % skipping.calls().max(1)).map(str::to_string) {
            record(slot, &id, Strategy::PurgeErrors);
        }
        if step % 31 == 30 {
            let id = slot.state().pruned.keys().next().cloned();
            assert!(id.is_some_and(|id| slot.drop_prune(&id)), "step {step}: nothing to drop");
        }
        before = got;
    }
    assert!(dropped_by_check > 20, "only {dropped_by_check} candidates left for a prune");
}
