//! State files a newer dcp wrote: a strategy key, a block origin, a prune action and fields
//! this version does not know load (counted as "other"), keep their prunes, and are written
//! back as they were read; the reports over them print nothing raw.

use std::path::Path;

use dcp::state::blocks::Origin;
use dcp::state::persist::{self, LoadOutcome};
use dcp::state::store::SessionStore;
use dcp::state::{Action, PruneRecord, Strategy};
use dcp::tokens::EstimatorChoice;
use serde_json::{json, Value};

use crate::support::{dcp, output_of, stderr, Sandbox, SessionBuilder, Sidecar, DB_SESSION};

/// A state file as the next dcp might write it: a strategy (`summarised-reads`), a prune
/// action (`summarise`), a block origin (`planned`) and fields this version does not know,
/// and a strategy key with terminal escapes in it. `sessionName` comes first, so the
/// all-time report cannot take the file's figures from its head and loads it whole.
pub(crate) const NEWER: &str = r#"{
  "sessionName": "A session a newer dcp saved",
  "stats": {"pruneTokenCounter": 0, "totalPruneTokens": 1405, "totalPrunedTools": 4, "futureCounter": 7},
  "prune": {
    "toolIds": ["call_a", "call_b", "call_c"],
    "messages": {
      "blocksById": {"1": {
        "blockId": 1, "runId": 1, "active": true, "deactivatedByUser": false,
        "compressedTokens": 2000, "summaryTokens": 50, "mode": "range", "topic": "the plan",
        "startId": "m1", "endId": "m2", "anchorMessageId": "msg_p1",
        "compressMessageId": null, "compressCallId": null,
        "consumedBlockIds": [], "parentBlockIds": [],
        "directMessageIds": ["msg_p1", "msg_p2"], "directToolIds": [],
        "effectiveMessageIds": ["msg_p1", "msg_p2"], "effectiveToolIds": [],
        "createdAt": 1, "summary": "the plan so far", "dcpOrigin": "planned", "planStep": 2
      }},
      "nextBlockId": 2,
      "nextRunId": 2
    }
  },
  "lastUpdated": "2026-12-01T00:00:00.000Z",
  "dcp": {
    "version": 2,
    "pruned": {
      "call_a": {"strategy": "summarised-reads", "action": "output", "tokens": 600, "tool": "read", "applied": true},
      "call_b": {"strategy": "deduplication", "action": "output", "tokens": 300, "tool": "read", "applied": true, "reason": "read again"},
      "call_c": {"strategy": "summarised-reads", "action": "summarise", "summary": "three files", "tokens": 500, "tool": "bash", "applied": true}
    },
    "byStrategy": {
      "summarised-reads": {"tokens": 1100, "tools": 2, "inForce": 600},
      "deduplication": {"tokens": 300, "tools": 1},
      "\u001b]52;c;aGk=\u0007\u001b[31mred": {"tokens": 5, "tools": 1}
    },
    "ids": {"call_a": 1},
    "nextId": 2,
    "lastCompaction": 0,
    "ledger": {"banked": 10.5, "warm": 3, "lastRequest": 5, "offered": true, "mood": "calm"},
    "plans": {"next": 3}
  }
}"#;

const ID: &str = "ses_newer";

fn write_newer(dir: &Path, id: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{id}.json")), NEWER).unwrap();
}

/// The files of `dir` set aside as corrupt.
fn set_aside(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|n| n.contains(".corrupt-")).collect()
}

/// The bug: a dcp older than the `finished-turns` key failed on it, started the session
/// afresh (every prune lost: the model saw every old output again) and set the file aside.
#[test]
fn a_state_file_with_a_strategy_this_version_does_not_know_loads_and_keeps_its_prunes() {
    let dir = tempfile::tempdir().unwrap();
    write_newer(dir.path(), ID);
    let LoadOutcome::Loaded(state) = persist::load(dir.path(), ID).unwrap() else { panic!("set aside") };
    assert_eq!(state.pruned.keys().collect::<Vec<_>>(), ["call_a", "call_b", "call_c"]);
    let a = &state.pruned["call_a"];
    assert!(matches!(a.strategy, Strategy::Other(_)), "{a:?}");
    assert_eq!((a.strategy.name(), a.strategy.key()), ("other", "summarised-reads"));
    assert_eq!(state.pruned["call_c"].action, Action::Unknown);
    // The prune of a known action is still made: the model does not see the output again.
    let messages =
        SessionBuilder::new().user("go").tool("call_a", "read", json!({"filePath": "/a"}), "the whole file").build();
    let mut sent = messages.clone();
    dcp::strategies::apply(&mut sent, &state, |r| r.applied);
    assert_ne!(output_of(&sent, "call_a"), output_of(&messages, "call_a"));
    // Every strategy this version does not know is one "other" row of the report.
    let stats = dcp::stats::session(ID, &state);
    let rows: Vec<(&str, u64, u64)> = stats.by_strategy.iter().map(|t| (t.strategy, t.tokens, t.tools)).collect();
    assert_eq!(rows, [("deduplication", 300, 1), ("other", 1105, 3)]);
    assert_eq!((stats.pruned_tokens, stats.tools_pruned), (1405, 4));
    // The store takes it as the session's state, and its save sets nothing aside.
    let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let slot = store.slot(ID).unwrap();
    assert!(slot.corrupt().is_none());
    assert_eq!(slot.state().pruned.len(), 3);
    slot.ledger_mut().warm = 1;
    assert_eq!(store.save_now(ID).unwrap(), None);
    assert!(set_aside(dir.path()).is_empty());
}

#[test]
fn a_range_of_an_origin_this_version_does_not_know_loads_counts_as_other_and_keeps_its_origin() {
    let state = persist::parse(NEWER.as_bytes()).unwrap();
    let block = &state.blocks.by_id[&1];
    assert_eq!(block.origin, Origin::Other);
    assert!(block.active && block.applied, "the range still stands in for its messages");
    assert_eq!(block.origin.strategy().name(), "other");
    let listed = dcp::texts::blocks(&state.blocks);
    assert!(listed.contains("b1  2 messages") && listed.contains("made by a newer dcp"), "{listed}");
    let written: Value = serde_json::from_slice(&persist::render(&state, "t")).unwrap();
    assert_eq!(written["prune"]["messages"]["blocksById"]["1"]["dcpOrigin"], "planned");
}

#[test]
fn a_save_writes_back_what_this_version_did_not_know() {
    let dir = tempfile::tempdir().unwrap();
    write_newer(dir.path(), ID);
    let original: Value = serde_json::from_str(NEWER).unwrap();
    let mut store = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    let record = PruneRecord {
        strategy: Strategy::Sweep,
        action: Action::Output,
        tokens: 40,
        tool: "bash".into(),
        applied: true,
    };
    store.slot(ID).unwrap().record("call_d", record);
    store.save_now(ID).unwrap();
    let written: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(format!("{ID}.json"))).unwrap()).unwrap();
    let (was, now) = (&original["dcp"], &written["dcp"]);
    for call in ["call_a", "call_b", "call_c"] {
        assert_eq!(now["pruned"][call], was["pruned"][call], "{call} is written back as it was read");
    }
    assert_eq!(now["pruned"]["call_d"]["strategy"], "sweep");
    for key in ["summarised-reads", "deduplication", "\u{1b}]52;c;aGk=\u{7}\u{1b}[31mred"] {
        assert_eq!(now["byStrategy"][key], was["byStrategy"][key], "{key:?}");
    }
    assert_eq!((&now["plans"], &now["ledger"]["mood"]), (&was["plans"], &json!("calm")));
    assert_eq!(written["stats"]["futureCounter"], 7);
    let block = &written["prune"]["messages"]["blocksById"]["1"];
    assert_eq!((&block["dcpOrigin"], &block["planStep"]), (&json!("planned"), &json!(2)));
    assert_eq!(written["stats"]["totalPruneTokens"], 1445);
    // What was written reads back, and writes the same again.
    let once = persist::render(&persist::parse(NEWER.as_bytes()).unwrap(), "t");
    let again = persist::parse(&once).unwrap();
    assert_eq!(again.pruned.len(), 3);
    assert_eq!(String::from_utf8(persist::render(&again, "t")).unwrap(), String::from_utf8(once).unwrap());
}

/// The all-time report and `dcp stats` over a newer file: it is counted, not listed as
/// corrupt, and the strategy key with terminal escapes is never printed.
#[test]
fn the_all_time_stats_over_a_newer_state_file_still_render() {
    let s = Sandbox::new();
    write_newer(&s.state_dir(), DB_SESSION);
    let all = dcp::stats::AllTimeCache::default().all_time(&s.state_dir(), None).unwrap();
    // The sandbox holds two corrupt files of its own; the newer one is not among them.
    let newer = format!("{DB_SESSION}.json");
    assert!(!all.corrupt.iter().any(|c| c.file.ends_with(&newer)), "{:?}", all.corrupt);
    assert!(all.pruned_tokens >= 1405, "{all:?}");
    let out = dcp(&s, &["stats", "--session", DB_SESSION]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("    other               ~1,105  3 tools"), "{text}");
    // The prune of an action this version does not know is not made here: not in force.
    assert!(text.contains("In force:        ~2,850 per request (3 prunes)"), "{text}");
    assert!(!text.contains(&newer) && !text.contains("red"), "{text}");
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    // `/dcp stats` in OpenCode says the same.
    let mut sidecar = Sidecar::spawn(&s, "{}");
    let stats = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": "stats"}));
    let shown = stats["text"].as_str().unwrap();
    assert!(shown.contains("    other ") && !shown.contains("red"), "{shown}");
    assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{shown:?}");
    sidecar.shutdown();
    assert!(set_aside(&s.state_dir()).is_empty());
}
