//! State files: every DCP layout reads, dcp's layout round-trips, corrupt files survive;
//! hostile ones (truncated, not UTF-8, huge, too deep, wrongly typed, a FIFO) load as corrupt
//! with a reason.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use dcp::state::persist::{self, LoadOutcome};
use dcp::state::store::SessionStore;
use dcp::state::{Action, PruneRecord, SessionState, Strategy};
use dcp::tokens::EstimatorChoice;
use serde_json::{json, Value};

use crate::support::{dcp_in, fixtures, stderr, Sandbox, DB_SESSION, TREE_SESSION};

fn fixture_state(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join("data/storage/plugin/dcp").join(name)).unwrap()
}

fn reparse(state: &SessionState) -> (SessionState, Value) {
    let bytes = persist::render(state, "2026-11-22T00:00:00.000Z");
    let value: Value = serde_json::from_slice(&bytes).unwrap();
    (persist::parse(&bytes).unwrap(), value)
}

#[test]
fn the_1x_layout_round_trips() {
    let state = persist::parse(&fixture_state(&format!("{TREE_SESSION}.json"))).unwrap();
    assert_eq!(state.session_name.as_deref(), Some("Project overview, div fix and parser notes"));
    assert_eq!(state.pruned.len(), 2);
    assert_eq!(state.stats.total_prune_tokens, 1520);
    let (again, value) = reparse(&state);
    assert_eq!(again.pruned.keys().collect::<Vec<_>>(), state.pruned.keys().collect::<Vec<_>>());
    assert_eq!(again.stats.tokens(), 1520);
    assert_eq!(again.session_name, state.session_name);
    assert_eq!(value["prune"]["toolIds"], json!(state.pruned.keys().collect::<Vec<_>>()));
    assert_eq!(value["stats"], json!({"pruneTokenCounter": 0, "totalPruneTokens": 1520, "totalPrunedTools": 2}));
    assert_eq!(value["lastUpdated"], "2026-11-22T00:00:00.000Z");
}

#[test]
fn the_3x_layout_round_trips_and_keeps_what_dcp_does_not_understand() {
    let original: Value = serde_json::from_slice(&fixture_state(&format!("{DB_SESSION}.json"))).unwrap();
    let mut state = persist::parse(&fixture_state(&format!("{DB_SESSION}.json"))).unwrap();
    assert_eq!(state.pruned["call_3_0_fa6f4b33"].tokens, 812);
    assert_eq!(state.pruned["call_4_0_fa492d8a"].strategy, Strategy::Imported);
    state.record(
        "call_7_0_cd57d47e",
        PruneRecord {
            strategy: Strategy::Deduplication,
            action: Action::Output,
            tokens: 162,
            tool: "read".into(),
            applied: false,
        },
    );
    state.fold_counter();
    let (again, value) = reparse(&state);
    for key in ["manualMode", "nudges"] {
        assert_eq!(value[key], original[key], "{key} kept");
    }
    assert_eq!(value["prune"]["messages"], original["prune"]["messages"]);
    assert_eq!(value["prune"]["tools"]["call_7_0_cd57d47e"], 162, "prune.tools is kept up to date");
    assert_eq!(value["stats"]["totalPruneTokens"], 907 + 162);
    assert_eq!(again.pruned["call_7_0_cd57d47e"].strategy, Strategy::Deduplication);
    assert!(!again.pruned["call_7_0_cd57d47e"].applied);
    assert_eq!(again.stats.by_strategy[&Strategy::Deduplication].tokens, 162);
}

#[test]
fn the_03_layout_is_read() {
    let state = persist::parse(&fixture_state("ses_0a1b2c3d4e5fLegacy03Layout.json")).unwrap();
    assert_eq!(state.pruned.keys().collect::<Vec<_>>(), ["call_old_1", "call_old_2", "call_old_3"]);
    assert_eq!(state.stats.tokens(), 2300);
    let (_, value) = reparse(&state);
    assert!(value.get("prunedIds").is_none(), "rewritten in the 1.x layout");
    assert_eq!(value["prune"]["toolIds"].as_array().unwrap().len(), 3);
}

#[test]
fn dcp_s_own_fields_round_trip() {
    let mut state = SessionState::default();
    state.session_name = Some("s".into());
    state.record(
        "c1",
        PruneRecord {
            strategy: Strategy::Extract,
            action: Action::Distill { distillation: "short".into() },
            tokens: 90,
            tool: "read".into(),
            applied: true,
        },
    );
    state.record(
        "c2",
        PruneRecord {
            strategy: Strategy::PurgeErrors,
            action: Action::ErrorInputs,
            tokens: 7,
            tool: "bash".into(),
            applied: false,
        },
    );
    state.id_for("c1");
    state.id_for("c2");
    state.last_compaction = 1234;
    state.fold_counter();
    let (again, _) = reparse(&state);
    assert_eq!(again.pruned, state.pruned);
    assert_eq!(again.stats, state.stats);
    assert_eq!(again.ids, state.ids);
    assert_eq!(again.next_id, 3);
    assert_eq!(again.last_compaction, 1234);
}

#[test]
fn a_corrupt_file_is_reported_by_name_and_set_aside_before_a_write() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["ses_0a1b2c3d4e5fTruncatedJson.json", "ses_0a1b2c3d4e5fWrongTyped001.json"] {
        let original = fixture_state(name);
        std::fs::write(dir.path().join(name), &original).unwrap();
        let id = name.trim_end_matches(".json");
        match persist::load(dir.path(), id).unwrap() {
            LoadOutcome::Corrupt { path, reason } => {
                assert!(path.ends_with(name));
                assert!(!reason.is_empty());
            }
            other => panic!("{name}: {other:?}"),
        }
        let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        let slot = m.slot(id).unwrap();
        assert!(slot.corrupt().is_some());
        slot.record(
            "c1",
            PruneRecord {
                strategy: Strategy::Sweep,
                action: Action::Output,
                tokens: 3,
                tool: String::new(),
                applied: true,
            },
        );
        let aside = m.save_now(id).unwrap().expect("set aside");
        assert!(aside.file_name().unwrap().to_string_lossy().starts_with(&format!("{name}.corrupt-")));
        assert_eq!(std::fs::read(&aside).unwrap(), original, "nothing of the corrupt file is lost");
        let fresh = persist::parse(&std::fs::read(dir.path().join(name)).unwrap()).unwrap();
        assert_eq!(fresh.stats.tokens(), 3);
        // A second save does not set the new, valid file aside.
        assert!(m.save_now(id).unwrap().is_none());
    }
}

#[test]
fn a_corrupt_file_refreshed_before_its_first_save_is_set_aside_not_overwritten() {
    // The sidecar refreshes a session on every request; the refresh took the corrupt file's
    // version as known, so the save wrote over it without reading it or setting it aside.
    let dir = tempfile::tempdir().unwrap();
    let name = "ses_0a1b2c3d4e5fTruncatedJson.json";
    let original = fixture_state(name);
    std::fs::write(dir.path().join(name), &original).unwrap();
    let id = name.trim_end_matches(".json");
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    m.observe_newest(id, 0).unwrap();
    m.observe_newest(id, 0).unwrap();
    let aside = m.save_now(id).unwrap().expect("the corrupt file is set aside");
    assert_eq!(std::fs::read(&aside).unwrap(), original, "nothing of the corrupt file is lost");
    assert!(m.save_now(id).unwrap().is_none(), "the new, valid file is not set aside");
}

#[test]
fn saves_leave_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    for _ in 0..3 {
        m.save_now("ses_t").unwrap();
    }
    let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    // The lock file stays: it is empty, and removing it would race with another process.
    assert_eq!(names, [".ses_t.lock", "ses_t.json"]);
}

#[test]
fn the_async_saver_writes_the_newest_state_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let saver = dcp::state::saver::Saver::spawn();
        let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
        for tokens in 1..=20u64 {
            let slot = m.slot("ses_async").unwrap();
            slot.record(
                &format!("c{tokens}"),
                PruneRecord {
                    strategy: Strategy::Sweep,
                    action: Action::Output,
                    tokens,
                    tool: String::new(),
                    applied: true,
                },
            );
            saver.save(m.save_job("ses_async").unwrap());
        }
        saver.flush().await;
    });
    let state = persist::parse(&std::fs::read(dir.path().join("ses_async.json")).unwrap()).unwrap();
    assert_eq!(state.pruned.len(), 20);
    assert_eq!(state.stats.tokens(), (1..=20).sum::<u64>());
}

#[test]
fn all_time_reads_the_head_of_dcps_files_and_notices_changes_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    for (i, id) in ["ses_a", "ses_b"].iter().enumerate() {
        let slot = m.slot(id).unwrap();
        for n in 0..=i as u64 {
            let record = PruneRecord {
                strategy: Strategy::Sweep,
                action: Action::Output,
                tokens: 10 + n,
                tool: String::new(),
                applied: true,
            };
            slot.record(&format!("c{n}"), record);
        }
        m.save_now(id).unwrap();
    }
    let bytes = std::fs::read(dir.path().join("ses_b.json")).unwrap();
    assert!(String::from_utf8_lossy(&bytes).starts_with("{\n  \"stats\": {"), "stats come first");
    let mut reports = dcp::stats::AllTimeCache::default();
    let all = reports.all_time(dir.path(), None).unwrap();
    assert_eq!((all.files, all.pruned_tokens, all.tools_pruned, all.sessions), (2, 31, 3, 2));
    // A later save is seen by a repeated report.
    let slot = m.slot("ses_a").unwrap();
    let record = PruneRecord {
        strategy: Strategy::Sweep,
        action: Action::Output,
        tokens: 100,
        tool: String::new(),
        applied: true,
    };
    slot.record("c9", record);
    m.save_now("ses_a").unwrap();
    let all = reports.all_time(dir.path(), None).unwrap();
    assert_eq!((all.pruned_tokens, all.tools_pruned), (131, 4));
    // A file cut short keeps a good head, but is reported, not counted.
    std::fs::write(dir.path().join("ses_b.json"), &bytes[..bytes.len() - 40]).unwrap();
    let all = reports.all_time(dir.path(), None).unwrap();
    assert_eq!((all.pruned_tokens, all.corrupt.len()), (110, 1));
}

/// A long-lived process watches the state dir: a file rewritten in place, even one that
/// keeps its size and modification time, is read again at the next report.
#[cfg(target_os = "linux")]
#[test]
fn a_repeated_all_time_report_sees_an_in_place_rewrite_that_keeps_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let write = |tokens: u64| {
        let text = format!(
            "{{\"stats\":{{\"pruneTokenCounter\":0,\"totalPruneTokens\":{tokens},\"totalPrunedTools\":1}},\"prune\":{{\"tools\":{{}}}}}}"
        );
        std::fs::write(dir.path().join("ses_w.json"), text).unwrap();
    };
    write(111);
    let path = dir.path().join("ses_w.json");
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mut reports = dcp::stats::AllTimeCache::default();
    assert_eq!(reports.all_time(dir.path(), None).unwrap().pruned_tokens, 111);
    write(222);
    std::fs::File::options().append(true).open(&path).unwrap().set_modified(modified).unwrap();
    assert_eq!(reports.all_time(dir.path(), None).unwrap().pruned_tokens, 222);
}

/// The largest state file dcp reads, plus one byte.
pub const OVER_LIMIT: u64 = persist::MAX_STATE_BYTES + 1;

/// A hostile state file: its session id, how to write it, and what the reason must say.
pub struct BadState {
    pub id: &'static str,
    pub write: fn(&Path),
    pub reason: &'static str,
}

/// The first bytes of the oversized state file, so a set-aside copy can be recognised.
pub const HUGE_HEAD: &[u8] = b"{\"sessionName\": \"huge\", \"pad\": \"";

/// Hostile state files: truncated, not UTF-8, over the size limit, nested too deep, wrongly
/// typed. The CLI's tests (`cli.rs`) give them to `dcp stats` and `dcp sweep`.
pub fn bad_states() -> Vec<BadState> {
    vec![
        BadState {
            id: "ses_hostileTruncatedState",
            write: |p| std::fs::write(p, br#"{"prune": {"toolIds": ["call_1", "ca"#).unwrap(),
            reason: "not valid JSON",
        },
        BadState {
            id: "ses_hostileNotUtf8State",
            write: |p| std::fs::write(p, b"{\"sessionName\": \"caf\xe9 \xff\xfe\"}").unwrap(),
            reason: "not UTF-8",
        },
        BadState {
            id: "ses_hostileHugeState",
            write: |p| {
                // A sparse file: it claims more than the limit but costs no disk.
                let mut file = std::fs::File::create(p).unwrap();
                file.write_all(HUGE_HEAD).unwrap();
                file.set_len(OVER_LIMIT).unwrap();
            },
            reason: "larger than the",
        },
        BadState {
            id: "ses_hostileDeepState",
            write: |p| std::fs::write(p, "[".repeat(100_000)).unwrap(),
            reason: "not valid JSON",
        },
        BadState {
            id: "ses_hostileWrongTypes",
            write: |p| std::fs::write(p, br#"{"prune": {"toolIds": ["call_1"]}, "dcp": {"pruned": [1, 2]}}"#).unwrap(),
            reason: "`dcp.pruned` must be an object",
        },
    ]
}

#[test]
fn hostile_state_files_load_as_corrupt_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    for bad in bad_states() {
        let path = dir.path().join(format!("{}.json", bad.id));
        (bad.write)(&path);
        match persist::load(dir.path(), bad.id).unwrap() {
            LoadOutcome::Corrupt { path: named, reason } => {
                assert_eq!(named, path);
                assert!(reason.contains(bad.reason), "{}: {reason}", bad.id);
                assert!(reason.len() < 400, "{}: an unreadably long reason: {reason}", bad.id);
            }
            other => panic!("{}: {other:?}", bad.id),
        }
    }
}

#[cfg(unix)]
#[test]
fn a_state_file_that_is_a_fifo_does_not_hang() {
    let s = Sandbox::new();
    let id = "ses_hostileFifoState";
    let path = s.state_dir().join(format!("{id}.json"));
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    match persist::load_path(&path) {
        LoadOutcome::Corrupt { reason, .. } => assert!(reason.contains("not a regular file"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let out = dcp_in(&s, &s.data(), &["stats"], Duration::from_secs(10));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&path.display().to_string()) && err.contains("not a regular file"), "{err}");
}
