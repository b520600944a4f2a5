//! The session store: many sessions at once, loading on first sight, compaction.

use std::path::Path;

use dcp::session::Message;
use dcp::state::persist;
use dcp::state::store::SessionStore;
use dcp::state::{Action, PruneRecord, Strategy};
use dcp::tokens::EstimatorChoice;
use serde_json::json;

use crate::support::SessionBuilder;

fn record(tokens: u64) -> PruneRecord {
    PruneRecord { strategy: Strategy::Discard, action: Action::Output, tokens, tool: "read".into(), applied: true }
}

/// A store in `dir` that saw `session`, one read `c1`, pruned it for `tokens` (giving it an
/// agent id) and saved it. Returns the store and the messages.
fn one_saved_prune(dir: &Path, session: &str, tokens: u64) -> (SessionStore, Vec<Message>) {
    let mut m = SessionStore::new(dir, EstimatorChoice::CharsDiv4);
    let messages = SessionBuilder::new().user("go").tool("c1", "read", json!({"filePath": "/a"}), "A").build();
    m.observe(session, &messages).unwrap();
    let slot = m.slot(session).unwrap();
    slot.record("c1", record(tokens));
    slot.id_for("c1");
    m.save_now(session).unwrap();
    (m, messages)
}

#[test]
fn each_session_keeps_its_own_state_across_switches() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ses_b.json"),
        json!({"prune": {"toolIds": ["old_1"]}, "stats": {"pruneTokenCounter": 0, "totalPruneTokens": 40}}).to_string(),
    )
    .unwrap();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let a = SessionBuilder::new().user("a").build();
    assert!(m.observe("ses_a", &a).unwrap().first_seen);
    m.slot("ses_a").unwrap().record("call_a", record(10));

    // Switching to b loads b's file; a's state is untouched by it.
    let seen = m.observe("ses_b", &a).unwrap();
    assert!(seen.first_seen && !seen.compacted);
    let b = &m.slot("ses_b").unwrap().state();
    assert_eq!(b.pruned.keys().collect::<Vec<_>>(), ["old_1"]);
    assert_eq!(b.stats.tokens(), 40);

    // And back: a is as we left it, and not re-read from disk.
    assert!(!m.observe("ses_a", &a).unwrap().first_seen);
    let a_state = &m.slot("ses_a").unwrap().state();
    assert_eq!(a_state.pruned.keys().collect::<Vec<_>>(), ["call_a"]);
    assert_eq!(a_state.stats.tokens(), 10);
    m.save_now("ses_a").unwrap();
    let on_disk = persist::parse(&std::fs::read(dir.path().join("ses_a.json")).unwrap()).unwrap();
    assert_eq!(on_disk.stats.total_prune_tokens, 10);
    assert_eq!(on_disk.stats.prune_token_counter, 0);
}

#[test]
fn a_compaction_clears_the_prune_list_and_keeps_the_stats() {
    let dir = tempfile::tempdir().unwrap();
    let (mut m, before) = one_saved_prune(dir.path(), "ses_c", 25);

    let after = SessionBuilder::continuing(before).compaction("summary of work").user("next").build();
    let seen = m.observe("ses_c", &after).unwrap();
    assert!(seen.compacted);
    assert_eq!(m.dirty(), ["ses_c"]);
    let slot = m.slot("ses_c").unwrap();
    assert!(slot.state().pruned.is_empty());
    assert_eq!(slot.state().stats.tokens(), 25);
    assert_eq!(slot.state().stats.tools(), 1);
    m.save_now("ses_c").unwrap();

    // The same compaction is not handled twice, also after a restart.
    assert!(!m.observe("ses_c", &after).unwrap().compacted);
    let mut restarted = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let seen = restarted.observe("ses_c", &after).unwrap();
    assert!(seen.first_seen && !seen.compacted);
    let file = persist::parse(&std::fs::read(dir.path().join("ses_c.json")).unwrap()).unwrap();
    assert!(file.pruned.is_empty());
    assert_eq!(file.stats.total_prune_tokens, 25);
    assert_eq!(file.ids.get("c1"), Some(&1), "agent ids stay reserved");
}

#[test]
fn a_compaction_that_happened_while_dcp_was_away_is_noticed_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let (m, before) = one_saved_prune(dir.path(), "ses_d", 5);
    drop(m);
    let after = SessionBuilder::continuing(before).compaction("s").build();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let seen = m.observe("ses_d", &after).unwrap();
    assert!(seen.first_seen && seen.compacted);
    assert!(m.slot("ses_d").unwrap().state().pruned.is_empty());
}

#[test]
fn a_file_from_the_published_dcp_takes_the_newest_compaction_as_its_baseline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ses_e.json"),
        r#"{"prune": {"toolIds": ["c9"]}, "stats": {"totalPruneTokens": 3}}"#,
    )
    .unwrap();
    let messages =
        SessionBuilder::new().user("go").compaction("s").tool("c9", "read", json!({"filePath": "/a"}), "A").build();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let seen = m.observe("ses_e", &messages).unwrap();
    assert!(!seen.compacted, "the pruning may well postdate that compaction");
    assert_eq!(m.slot("ses_e").unwrap().state().pruned.len(), 1);
}

#[test]
fn bad_session_ids_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = SessionStore::new(&dir.path().join("dcp"), EstimatorChoice::CharsDiv4);
    for bad in ["../x", "a/b", "a\0b", &"z".repeat(10_000), ""] {
        let err = m.observe(bad, &[]).unwrap_err().to_string();
        assert!(err.starts_with("invalid session id"), "{err}");
        assert!(m.save_now(bad).is_err());
    }
    assert!(!dir.path().join("dcp").exists());
    assert!(!dir.path().join("x.json").exists());
}

/// A save handed out while an earlier one was still in flight, where the earlier one merged
/// another process's changes: the later one must read what the earlier one wrote, not take
/// it for its own and overwrite those changes.
#[test]
fn a_save_after_a_merge_still_in_flight_keeps_the_other_process_changes() {
    let dir = tempfile::tempdir().unwrap();
    let id = "ses_inflight";
    let mut a = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    a.slot(id).unwrap().record("c1", record(1));
    a.save_now(id).unwrap();
    // Another process adds c2.
    let mut b = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    b.slot(id).unwrap().record("c2", record(2));
    b.save_now(id).unwrap();
    // This process hands out two saves before the first one's outcome is taken in.
    a.slot(id).unwrap().record("c3", record(3));
    let first = a.save_job(id).unwrap();
    a.slot(id).unwrap().record("c4", record(4));
    let second = a.save_job(id).unwrap();
    first.run().unwrap();
    second.run().unwrap();
    let on_disk = persist::load_path(&dir.path().join(format!("{id}.json")));
    let persist::LoadOutcome::Loaded(state) = on_disk else { panic!("{on_disk:?}") };
    let ids: Vec<&str> = state.pruned.keys().map(String::as_str).collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
    assert_eq!(state.stats.tokens(), 1 + 2 + 3 + 4);
    // And this process takes them in.
    a.refresh(id).unwrap();
    let slot = a.slot(id).unwrap();
    assert_eq!(slot.state().pruned.len(), 4);
    assert_eq!(slot.state().stats.tokens(), 10);
}
