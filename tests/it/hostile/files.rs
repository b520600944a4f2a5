//! A state dir, `dcp.jsonc` or `opencode.db` that is not what it should be is reported by
//! `dcp doctor` and by every command, never silently taken for "not there".

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use serde_json::Value;

use super::mkfifo;
use crate::support::{assert_error, dcp, Sandbox, DB_SESSION};

/// The doctor's check named `name`: its status and message.
fn doctor_check(s: &Sandbox, name: &str) -> (String, String) {
    let out = dcp(s, &["doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = report["checks"].as_array().unwrap();
    let found: Vec<&Value> = checks.iter().filter(|c| c["check"] == name && c["status"] != "ok").collect();
    let check = found.first().copied().or_else(|| checks.iter().find(|c| c["check"] == name)).unwrap();
    (check["status"].as_str().unwrap().to_string(), check["message"].as_str().unwrap().to_string())
}

/// The project's `dcp.jsonc` path, its dir made.
fn project_config(s: &Sandbox) -> PathBuf {
    let dir = s.dir.path().join("project/.opencode");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("dcp.jsonc")
}

#[test]
fn doctor_reports_a_state_dir_that_is_a_regular_file_instead_of_ok() {
    let s = Sandbox::new();
    std::fs::remove_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir(), "not a dir").unwrap();
    let (status, message) = doctor_check(&s, "state dir");
    assert_eq!(status, "fail", "{message}");
    assert!(message.contains("not a directory") && message.contains("storage/plugin/dcp"), "{message}");
    // The commands say so too.
    let err = crate::support::stderr(&dcp(&s, &["sessions"]));
    assert!(err.contains("storage/plugin/dcp is not a directory"), "{err}");
    assert_error(&dcp(&s, &["sweep", "--session", DB_SESSION, "2"]), &["storage/plugin/dcp"]);
}

#[test]
fn a_dcp_jsonc_that_is_a_directory_a_fifo_or_a_link_loop_is_reported_not_ignored() {
    for (kind, what) in [("dir", "a directory"), ("fifo", "not a regular file"), ("loop", "a symbolic link loop")] {
        let s = Sandbox::new();
        let path = project_config(&s);
        match kind {
            "dir" => std::fs::create_dir(&path).unwrap(),
            "fifo" => mkfifo(&path),
            _ => {
                let other = path.with_file_name("other.jsonc");
                symlink(&other, &path).unwrap();
                symlink(&path, &other).unwrap();
            }
        }
        let (status, message) = doctor_check(&s, "dcp.jsonc");
        assert_eq!(status, "fail", "{kind}: {message}");
        assert!(message.contains(what) && message.contains(".opencode/dcp.jsonc"), "{kind}: {message}");
        assert_error(&dcp(&s, &["stats"]), &[".opencode/dcp.jsonc", what]);
    }
}

#[test]
fn a_dcp_jsonc_starting_with_a_byte_order_mark_is_read() {
    let s = Sandbox::new();
    std::fs::write(project_config(&s), "\u{feff}{ \"pruneNotification\": \"minimal\" }\n").unwrap();
    let out = dcp(&s, &["stats"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (status, message) = doctor_check(&s, "dcp.jsonc");
    assert_eq!(status, "ok", "{message}");
}

#[test]
fn an_invalid_glob_in_dcp_jsonc_is_an_error_naming_the_file_and_key() {
    let s = Sandbox::new();
    std::fs::write(project_config(&s), r#"{ "protectedFilePatterns": ["src/**", "[unclosed"] }"#).unwrap();
    let out = dcp(&s, &["sweep", "--session", DB_SESSION, "--dry-run"]);
    assert_error(&out, &[".opencode/dcp.jsonc", "protectedFilePatterns", "[unclosed"]);
    let (status, message) = doctor_check(&s, "dcp.jsonc");
    assert_eq!(status, "fail", "{message}");
    assert!(message.contains(".opencode/dcp.jsonc") && message.contains("protectedFilePatterns"), "{message}");
}

#[test]
fn an_opencode_db_that_is_a_directory_or_a_fifo_is_named_not_taken_for_missing() {
    for kind in ["dir", "fifo"] {
        let s = Sandbox::new();
        let db = s.data().join("opencode.db");
        std::fs::remove_file(&db).unwrap();
        if kind == "dir" {
            std::fs::create_dir(&db).unwrap();
        } else {
            mkfifo(&db);
        }
        let out = dcp(&s, &["sessions"]);
        assert_error(&out, &["opencode.db is a", "not OpenCode's database file"]);
        let (status, message) = doctor_check(&s, "opencode.db");
        assert_eq!(status, "fail", "{kind}: {message}");
    }
}

#[test]
fn a_big_legacy_state_file_is_rewritten_no_larger_than_it_came() {
    let s = Sandbox::new();
    let file = s.state_dir().join(format!("{DB_SESSION}.json"));
    let ids: Vec<String> = (0..200_000).map(|i| format!("toolu_{i:016}")).collect();
    let legacy =
        serde_json::json!({"sessionName": "legacy", "prune": {"toolIds": ids}, "stats": {"totalPruneTokens": 5}});
    let bytes = serde_json::to_vec(&legacy).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    super::sweep(&s);
    let after = std::fs::read(&file).unwrap();
    // Two new prunes with their records, and dcp's own section: well under 4 KB.
    assert!(after.len() <= bytes.len() + 4096, "{} bytes rewritten as {}", bytes.len(), after.len());
    let state = dcp::state::persist::parse(&after).unwrap();
    assert_eq!(state.pruned.len(), ids.len() + 2);
    assert!(ids.iter().all(|id| state.pruned[id].strategy == dcp::state::Strategy::Imported));
}
