//! Reading OpenCode's stores: the recorded `opencode.db` and the JSON tree.

use dcp::host::paths::Env;
use dcp::host::{DataDir, HostError, Source};
use dcp::session::{tool_calls, visible_history, Role, ToolStatus};

use crate::support::{fixtures, Sandbox, DB_SESSION, TREE_SESSION};

fn data() -> DataDir {
    DataDir::new(&fixtures().join("data"), &Env::default())
}

#[test]
fn both_stores_are_listed_newest_first() {
    let sessions = data().sessions().unwrap();
    let ids: Vec<_> = sessions.iter().map(|s| (s.id.as_str(), s.source, s.messages)).collect();
    assert_eq!(ids, [(DB_SESSION, Source::Sqlite, 30), (TREE_SESSION, Source::JsonTree, 15)]);
}

#[test]
fn the_recorded_session_reads_in_history_order() {
    let loaded = data().load(DB_SESSION).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let m = &loaded.messages;
    assert_eq!(m.len(), 30);
    assert_eq!(m[0].role(), Role::User);
    assert!(m.windows(2).all(|w| w[0].time_created() <= w[1].time_created()));
    assert_eq!(m[0].info["id"], m[0].id());
    assert_eq!(m[0].session_id(), Some(DB_SESSION));
    let calls = tool_calls(m);
    let errored: Vec<_> = calls.iter().filter(|c| c.status == ToolStatus::Error).map(|c| c.call_id).collect();
    assert_eq!(errored, ["call_5_0_fbb28fb4"]);
    assert_eq!(
        calls.iter().filter(|c| c.tool == "read" && c.key_argument().unwrap().ends_with("src/parser.py")).count(),
        3
    );
    // Parts carry the ids OpenCode hands to plugins.
    let part = &m[2].parts[0];
    assert!(part["id"].as_str().unwrap().starts_with("prt_"));
    assert_eq!(part["messageID"], m[2].id());
}

#[test]
fn the_json_tree_reads_into_the_same_model() {
    let loaded = data().load(TREE_SESSION).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.info.source, Source::JsonTree);
    assert_eq!(loaded.messages.len(), 15);
    assert!(tool_calls(&loaded.messages).len() >= 5);
    assert!(loaded.messages.windows(2).all(|w| w[0].time_created() <= w[1].time_created()));
}

#[test]
fn ids_that_wrapped_still_order_by_time() {
    // Rows whose ids sort against their creation time are put in time order.
    let sandbox = Sandbox::new();
    let db = sandbox.data().join("opencode.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    // Give the first user message an id that sorts last, as after the 2026-08-14 wrap.
    let first: String = conn
        .query_row("SELECT id FROM message WHERE session_id = ?1 ORDER BY time_created LIMIT 1", [DB_SESSION], |r| {
            r.get(0)
        })
        .unwrap();
    conn.execute("UPDATE message SET id = 'msg_ffffffffffff0000000000zzzz' WHERE id = ?1", [&first]).unwrap();
    conn.execute("UPDATE part SET message_id = 'msg_ffffffffffff0000000000zzzz' WHERE message_id = ?1", [&first])
        .unwrap();
    drop(conn);
    let loaded = DataDir::new(&sandbox.data(), &Env::default()).load(DB_SESSION).unwrap();
    assert_eq!(loaded.messages[0].id(), "msg_ffffffffffff0000000000zzzz");
    assert_eq!(loaded.messages[0].parts.len(), 1);
}

#[test]
fn malformed_rows_are_skipped_with_a_warning_that_names_them() {
    let sandbox = Sandbox::new();
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    let part: String =
        conn.query_row("SELECT id FROM part WHERE session_id = ?1 LIMIT 1", [DB_SESSION], |r| r.get(0)).unwrap();
    conn.execute("UPDATE part SET data = '{not json' WHERE id = ?1", [&part]).unwrap();
    drop(conn);
    let loaded = DataDir::new(&sandbox.data(), &Env::default()).load(DB_SESSION).unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.warnings[0].contains(&format!("part {part}: malformed JSON")), "{}", loaded.warnings[0]);
}

#[test]
fn opencode_db_env_and_missing_data_are_handled() {
    let sandbox = Sandbox::new();
    std::fs::rename(sandbox.data().join("opencode.db"), sandbox.data().join("elsewhere.db")).unwrap();
    let env = Env { opencode_db: Some("elsewhere.db".into()), ..Env::default() };
    assert!(DataDir::new(&sandbox.data(), &env).load(DB_SESSION).is_ok());
    let empty = tempfile::tempdir().unwrap();
    let err = DataDir::new(empty.path(), &Env::default()).sessions().unwrap_err();
    assert!(matches!(err, HostError::NoData(_)), "{err}");
}

#[test]
fn compaction_hides_what_came_before_the_summary() {
    use crate::support::SessionBuilder;
    let messages = SessionBuilder::new().user("a").text("b").compaction("sum").user("c").build();
    let visible = visible_history(messages);
    assert_eq!(visible.len(), 3);
    assert!(visible[1].is_compaction_summary());
}
