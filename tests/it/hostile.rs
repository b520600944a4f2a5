//! Hostile input: corrupt state files, broken configs, odd session ids, malformed protocol
//! lines and damaged databases. Each gets an error that names its source, nothing panics,
//! nothing hangs, and OpenCode's data is never touched.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dcp::state::persist::{self, LoadOutcome};
use serde_json::Value;

use crate::support::{
    assert_error, bad_ids, clone_session, dcp, dcp_in, stderr, tree, Sandbox, DB_SESSION, TREE_SESSION,
};

/// The largest state file dcp reads, plus one byte.
const OVER_LIMIT: u64 = persist::MAX_STATE_BYTES + 1;

/// A hostile state file: its session id, how to write it, and what the reason must say.
struct BadState {
    id: &'static str,
    write: fn(&Path),
    reason: &'static str,
}

/// The first bytes of the oversized state file, so a set-aside copy can be recognised.
const HUGE_HEAD: &[u8] = b"{\"sessionName\": \"huge\", \"pad\": \"";

fn bad_states() -> Vec<BadState> {
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

#[test]
fn dcp_stats_warns_about_each_hostile_state_file_by_name() {
    let s = Sandbox::new();
    for bad in bad_states() {
        (bad.write)(&s.state_dir().join(format!("{}.json", bad.id)));
    }
    let out = dcp(&s, &["stats"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for bad in bad_states() {
        let file = s.state_dir().join(format!("{}.json", bad.id));
        let line = err
            .lines()
            .find(|l| l.contains(&file.display().to_string()))
            .unwrap_or_else(|| panic!("no warning names {}: {err}", file.display()));
        assert!(line.contains("warning") && line.contains(bad.reason), "{line}");
    }
    let out = dcp(&s, &["stats", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The fixtures' two corrupt files, and ours.
    assert_eq!(v["all_time"]["corrupt"].as_array().unwrap().len(), 2 + bad_states().len());
}

#[test]
fn dcp_sweep_sets_each_hostile_state_file_aside_byte_for_byte() {
    let s = Sandbox::new();
    for bad in bad_states() {
        let path = s.state_dir().join(format!("{}.json", bad.id));
        (bad.write)(&path);
        let small = std::fs::metadata(&path).unwrap().len() < OVER_LIMIT;
        let original = if small { std::fs::read(&path).unwrap() } else { Vec::new() };
        clone_session(&s, bad.id);
        let out = dcp(&s, &["sweep", "--session", bad.id, "2"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{}: {err}", bad.id);
        assert!(err.contains(&path.display().to_string()), "{}: the warning does not name the file: {err}", bad.id);
        let aside: Vec<PathBuf> = std::fs::read_dir(s.state_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{}.json.corrupt-", bad.id)))
            .collect();
        assert_eq!(aside.len(), 1, "{}: {aside:?} {err}", bad.id);
        if small {
            assert!(std::fs::read(&aside[0]).unwrap() == original, "{}: the set-aside bytes differ", bad.id);
        } else {
            assert_eq!(std::fs::metadata(&aside[0]).unwrap().len(), OVER_LIMIT);
            let mut head = vec![0; HUGE_HEAD.len()];
            std::io::Read::read_exact(&mut std::fs::File::open(&aside[0]).unwrap(), &mut head).unwrap();
            assert_eq!(head, HUGE_HEAD);
        }
        // The new state file is a good one.
        assert!(matches!(persist::load_path(&path), LoadOutcome::Loaded(_)), "{}", bad.id);
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

/// Writes `bytes` as the project's `.opencode/dcp.jsonc` and returns its path.
fn project_config(sandbox: &Sandbox, bytes: &[u8]) -> PathBuf {
    let dir = sandbox.dir.path().join("project/.opencode");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dcp.jsonc");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn hostile_config_files_are_errors_naming_the_file_and_key() {
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("truncated", br#"{"strategies": {"purgeErrors": {"turns": 4"#.to_vec(), &["is not valid JSONC"]),
        ("not UTF-8", b"{\"debug\": \"\xff\"}".to_vec(), &["is not valid JSONC", "not UTF-8"]),
        ("deeply nested objects", "{\"a\":".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        ("deeply nested lists", "[".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        (
            "nesting behind a quote in a comment",
            format!("// \"\n{}", "[".repeat(100_000)).into_bytes(),
            &["is not valid JSONC", "nest"],
        ),
        ("the top level a list", b"[1, 2]".to_vec(), &["is not valid JSONC", "top level"]),
        (
            "a wrongly typed value",
            br#"{"strategies": {"purgeErrors": {"turns": "four"}}}"#.to_vec(),
            &["`strategies.purgeErrors.turns` must be a whole number"],
        ),
        ("a wrongly typed section", br#"{"rewrite": [1]}"#.to_vec(), &["`rewrite` must be an object"]),
        (
            "a huge number",
            br#"{"rewrite": {"expectedRequests": 1e999}}"#.to_vec(),
            &["Number is out of range", "line 1"],
        ),
        ("a ratio out of range", br#"{"rewrite": {"pressureRatio": -0.5}}"#.to_vec(), &["rewrite.pressureRatio"]),
    ];
    let s = Sandbox::new();
    for (what, bytes, needles) in cases {
        let path = project_config(&s, &bytes);
        let out = dcp(&s, &["stats"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.starts_with("dcp: config ") && err.contains(&path.display().to_string()), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        for n in needles {
            assert!(err.contains(n), "{what}: no {n:?} in {err}");
        }
        assert!(err.len() < 1000, "{what}: an unreadably long error: {err}");
    }
}

#[test]
fn a_huge_config_of_whitespace_and_comments_is_read_quickly() {
    let s = Sandbox::new();
    let mut text = String::with_capacity(21 << 20);
    text.push_str("// padding\n");
    text.push_str(&" \n".repeat(5 << 20));
    text.push_str("/* ");
    text.push_str(&"x".repeat(10 << 20));
    text.push_str(" */\n{\"pruneNotification\": \"minimal\"}\n");
    project_config(&s, text.as_bytes());
    let start = Instant::now();
    let out = dcp_in(&s, &s.data(), &["stats"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(15), "{:?}", start.elapsed());
}

/// Session ids that must never reach a file name. A NUL byte cannot be passed on a command
/// line, so the CLI gets the others and the sidecar gets all of them.
#[test]
fn odd_session_ids_are_refused_by_the_cli_and_nothing_is_written() {
    let s = Sandbox::new();
    let before = tree(s.dir.path());
    for id in bad_ids().iter().filter(|id| !id.contains('\0')) {
        for args in [
            vec!["context", "--session", id],
            vec!["sweep", "--session", id],
            vec!["sweep", "--session", id, "1"],
            vec!["stats", "--session", id],
        ] {
            let out = dcp(&s, &args);
            assert_error(&out, &["invalid session id"]);
            assert!(stderr(&out).len() < 400, "{}", stderr(&out));
        }
    }
    assert!(tree(s.dir.path()) == before, "something was written");
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

#[test]
fn a_wrongly_typed_state_field_with_multibyte_text_names_the_key() {
    // The value is cut for the message at byte 60, which falls inside an `é`.
    let text = format!("{{\"prune\": \"{}\"}}", "é".repeat(40));
    let error = persist::parse(text.as_bytes()).unwrap_err();
    assert_eq!(error.key(), Some("prune"));
    let reason = error.to_string();
    assert!(reason.starts_with("`prune` must be an object, not \"éé"), "{reason}");
    assert!(reason.ends_with('…') && reason.len() < 120, "{reason}");
}

#[test]
fn rendering_a_state_file_twice_gives_the_same_bytes() {
    // Found by the `state_file` fuzz target on the fixtures' 0.3 layout: `Map::remove` swapped
    // the last key into the removed one's place, so every save reordered the file.
    const WHEN: &str = "2026-01-01T00:00:00.000Z";
    for file in std::fs::read_dir(crate::support::fixtures().join("data/storage/plugin/dcp")).unwrap() {
        let bytes = std::fs::read(file.unwrap().path()).unwrap();
        let Ok(state) = persist::parse(&bytes) else {
            continue;
        };
        let once = persist::render(&state, WHEN);
        let twice = persist::render(&persist::parse(&once).unwrap(), WHEN);
        assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once).unwrap());
    }
}

#[test]
fn a_state_file_with_the_largest_id_does_not_overflow() {
    let bytes = format!(r#"{{"dcp": {{"ids": {{"call_1": {max}}}, "nextId": {max}}}}}"#, max = u32::MAX);
    let mut state = persist::parse(bytes.as_bytes()).unwrap();
    assert_eq!(state.next_id, u32::MAX);
    assert_eq!(state.id_for("call_1"), u32::MAX);
    // No id is left to hand out: the next one is clamped rather than overflowing.
    assert_eq!(state.id_for("call_2"), u32::MAX);
    assert_eq!(state.next_id, u32::MAX);
}

#[test]
fn an_unknown_float_field_survives_saves_exactly() {
    // Found by the `state_file` fuzz target: without serde_json's `float_roundtrip`, a float
    // kept from an unknown field lost its last digit on every save.
    const WHEN: &str = "2026-01-01T00:00:00.000Z";
    let state = persist::parse(br#"{"theirs": 2.2222222001722586e28}"#).unwrap();
    let once = persist::render(&state, WHEN);
    let twice = persist::render(&persist::parse(&once).unwrap(), WHEN);
    assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once.clone()).unwrap());
    assert!(String::from_utf8(once).unwrap().contains("2.2222222001722586e+28"));
}
