//! Reading OpenCode's stores: the recorded `opencode.db` and the JSON tree.

use dcp::host::paths::Env;
use dcp::host::{DataDir, HostError, Source};
use dcp::session::{tool_calls, visible_history, Role, ToolStatus};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{assert_error, dcp, dcp_in, fixtures, stderr, tree, Sandbox, DB_SESSION, TREE_SESSION};

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

// Damaged databases: rows that are not JSON, not text, NULL; a locked or foreign file.

/// Runs `sql` on the sandbox's `opencode.db`.
fn edit_db(sandbox: &Sandbox, sql: &str) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// One message row of the recorded session, and one part row.
fn first_rows(sandbox: &Sandbox) -> (String, String) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    let m: String = conn
        .query_row(
            "SELECT id FROM message WHERE session_id = ?1 ORDER BY time_created DESC LIMIT 1",
            [DB_SESSION],
            |r| r.get(0),
        )
        .unwrap();
    let p: String = conn
        .query_row("SELECT id FROM part WHERE session_id = ?1 ORDER BY time_created, id LIMIT 1", [DB_SESSION], |r| {
            r.get(0)
        })
        .unwrap();
    (m, p)
}

/// Stores the SQL `value` as the data of the recorded session's first message and part, and
/// runs `dcp context` on it. Returns the two row ids and the run.
fn context_with_bad_rows(s: &Sandbox, value: &str) -> (String, String, Output) {
    let (m, p) = first_rows(s);
    edit_db(
        s,
        &format!(
            "UPDATE message SET data = {value} WHERE id = '{m}'; UPDATE part SET data = {value} WHERE id = '{p}';"
        ),
    );
    (m, p, dcp(s, &["context", "--session", DB_SESSION]))
}

#[test]
fn malformed_rows_in_opencode_db_are_skipped_with_a_warning() {
    for (what, value) in
        [("not JSON", "'{\"role\": '"), ("a JSON array", "'[1, 2]'"), ("a number", "42"), ("empty", "''")]
    {
        let s = Sandbox::new();
        let (m, p, out) = context_with_bad_rows(&s, value);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        let db = s.data().join("opencode.db").display().to_string();
        for id in [&m, &p] {
            assert!(
                err.lines().any(|l| l.contains("warning") && l.contains(&db) && l.contains(id.as_str())),
                "{what}: {id}: {err}"
            );
        }
    }
}

#[test]
fn a_blob_or_invalid_utf8_row_in_opencode_db_is_skipped_not_fatal() {
    for (what, value) in [("a blob", "X'FFFE00'"), ("text that is not UTF-8", "CAST(X'7B22FF227D' AS TEXT)")] {
        let s = Sandbox::new();
        let (m, p, out) = context_with_bad_rows(&s, value);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        for id in [&m, &p] {
            assert!(err.lines().any(|l| l.contains("warning") && l.contains(id.as_str())), "{what}: {id}: {err}");
        }
    }
}

#[test]
fn a_null_row_in_opencode_db_is_skipped_not_fatal() {
    let s = Sandbox::new();
    // OpenCode's schema says NOT NULL; drop the constraint in this copy to store a NULL.
    edit_db(
        &s,
        &format!(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = replace(sql, '`data` text NOT NULL', '`data` text') WHERE name IN ('message', 'part');
             PRAGMA writable_schema = OFF;"
        ),
    );
    let (m, p, out) = context_with_bad_rows(&s, "NULL");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for id in [&m, &p] {
        assert!(
            err.lines().any(|l| l.contains("warning") && l.contains(id.as_str()) && l.contains("NULL")),
            "{id}: {err}"
        );
    }
}

#[test]
fn a_locked_opencode_db_fails_after_the_busy_timeout_naming_the_db() {
    let s = Sandbox::new();
    let db = s.data().join("opencode.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    // The fixture is in rollback-journal mode: an exclusive lock keeps every reader out.
    conn.execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = title;").unwrap();
    let start = Instant::now();
    let out = dcp_in(&s, &s.data(), &["sessions"], Duration::from_secs(12));
    let waited = start.elapsed();
    assert_error(&out, &[&db.display().to_string(), "locked"]);
    assert!(waited >= dcp::host::sqlite::BUSY_TIMEOUT / 2, "gave up at once: {waited:?}");
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_locked_opencode_db_in_wal_mode_is_still_read() {
    let s = Sandbox::new();
    let conn = rusqlite::Connection::open(s.data().join("opencode.db")).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    // In WAL mode, OpenCode's writer does not block readers: dcp reads the last commit.
    conn.execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = 'uncommitted';").unwrap();
    let out = dcp_in(&s, &s.data(), &["sessions", "--json"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(DB_SESSION) && !text.contains("uncommitted"), "{text}");
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn an_opencode_db_that_is_not_sqlite_is_an_error_naming_it() {
    let s = Sandbox::new();
    let db = s.data().join("opencode.db");
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&db, &noise).unwrap();
    for args in [
        vec!["sessions"],
        vec!["context", "--session", DB_SESSION],
        vec!["sweep", "--session", DB_SESSION, "--dry-run"],
    ] {
        let out = dcp(&s, &args);
        assert_error(&out, &[&db.display().to_string(), "not a database"]);
    }
    assert!(std::fs::read(&db).unwrap() == noise, "the file was changed");
}

#[test]
fn a_missing_db_or_data_dir_is_an_error() {
    let s = Sandbox::new();
    let missing = s.dir.path().join("no/such/dir");
    let out = dcp_in(&s, &missing, &["sessions"], Duration::from_secs(10));
    assert_error(&out, &["no OpenCode data in", &missing.display().to_string()]);
    assert!(!missing.exists(), "the data dir was created");
    // A data dir without opencode.db and without storage/.
    let bare = s.dir.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    for args in [vec!["sessions"], vec!["context"], vec!["context", "--session", DB_SESSION]] {
        let out = dcp_in(&s, &bare, &args, Duration::from_secs(10));
        assert_error(&out, &["no OpenCode data in", &bare.display().to_string()]);
    }
    assert!(std::fs::read_dir(&bare).unwrap().next().is_none(), "something was written in {}", bare.display());
}

#[test]
fn opencode_data_stays_untouched_by_every_command() {
    let s = Sandbox::new();
    let data = s.data();
    let is_dcp = |p: &Path| p.starts_with("storage/plugin/dcp");
    let opencode = |t: &BTreeMap<PathBuf, Vec<u8>>| -> BTreeMap<PathBuf, Vec<u8>> {
        t.iter().filter(|(p, _)| !is_dcp(p)).map(|(p, b)| (p.clone(), b.clone())).collect()
    };
    let original = tree(&data);
    assert!(original.contains_key(Path::new("opencode.db")));
    let commands: Vec<Vec<&str>> = vec![
        vec!["sessions"],
        vec!["sessions", "--json"],
        vec!["context"],
        vec!["context", "--session", TREE_SESSION],
        vec!["context", "--json"],
        vec!["sweep", "--session", DB_SESSION, "--dry-run"],
        vec!["sweep", "--session", DB_SESSION],
        vec!["sweep", "--session", TREE_SESSION, "3"],
        vec!["stats"],
        vec!["stats", "--session", DB_SESSION],
        vec!["stats", "--json", "--session", TREE_SESSION],
    ];
    for args in commands {
        let before = tree(&data);
        let out = dcp(&s, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let after = tree(&data);
        assert!(opencode(&after) == opencode(&before), "{args:?} changed OpenCode's data");
        let new: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p) && !is_dcp(p)).collect();
        assert!(new.is_empty(), "{args:?} created {new:?}");
        let sidecars: Vec<&PathBuf> = after
            .keys()
            .filter(|p| {
                p.to_string_lossy().ends_with("-wal")
                    || p.to_string_lossy().ends_with("-shm")
                    || p.to_string_lossy().ends_with("-journal")
            })
            .collect();
        assert!(sidecars.is_empty(), "{args:?} left {sidecars:?}");
    }
    assert!(opencode(&tree(&data)) == opencode(&original));
}
