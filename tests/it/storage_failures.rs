//! A state dir that cannot be written, and a write that fails part way (a full disk): pruning goes on in memory, the
//! failure is reported once, nothing already saved is damaged, and the save is retried.

use std::process::{Command, Stdio};
use std::time::Duration;

use dcp::state::persist;
use dcp::state::store::SessionStore;
use dcp::state::{Action, PruneRecord, Strategy};
use dcp::tokens::EstimatorChoice;
use serde_json::json;

use crate::sidecar::IMMEDIATE;
use crate::support::Sidecar;
use crate::support::{duplicate_reads, poll, run_with_limit, Sandbox, DB_SESSION};

fn record(tokens: u64) -> PruneRecord {
    PruneRecord { strategy: Strategy::Sweep, action: Action::Output, tokens, tool: String::new(), applied: true }
}

#[test]
fn a_state_dir_that_cannot_be_written_keeps_pruning_in_memory_and_saves_later() {
    let s = Sandbox::new();
    // The state dir is a plain file: nothing can be created in it, even by root.
    std::fs::remove_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir(), "not a dir").unwrap();
    let log = s.dir.path().join("sidecar.log");
    let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut sidecar = Sidecar::spawn_with(&s, Some(IMMEDIATE), &[("DCP_SAVE_RETRY_MS", "50")], stderr);
    for i in 1..=3 {
        let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": duplicate_reads(i)}));
        assert_eq!(crate::sidecar::prunes(&result, "edits").len(), 1, "request {i} was not pruned: {result}");
    }
    // Wait for the first failed save to be logged, then let four retries (every 50 ms) fail.
    let failed = || std::fs::read_to_string(&log).unwrap_or_default().contains("pruning goes on in memory");
    assert!(poll(failed, Duration::from_secs(10)), "no save failed");
    std::thread::sleep(Duration::from_millis(4 * 50));
    std::fs::remove_file(s.state_dir()).unwrap();
    std::fs::create_dir(s.state_dir()).unwrap();
    // The retry timer saves without waiting for another request.
    let file = s.state_dir().join("ses_test.json");
    assert!(poll(|| file.exists(), Duration::from_secs(10)), "the state was never saved");
    let state = persist::parse(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(state.stats.by_strategy[&Strategy::Deduplication].tools, 3);
    sidecar.shutdown();
    let text = std::fs::read_to_string(&log).unwrap();
    let failures: Vec<&str> = text.lines().filter(|l| l.contains("pruning goes on in memory")).collect();
    assert_eq!(failures.len(), 1, "one warning, not one per attempt: {text}");
    assert!(failures[0].contains("cannot create state dir") && failures[0].contains("storage/plugin/dcp"), "{text}");
    assert!(!text.contains("corrupt"), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("saved the state of ses_test again")).count(), 1, "{text}");
}

#[test]
fn a_write_that_fails_midway_keeps_the_old_file_names_the_error_and_leaves_no_temp_file() {
    use std::os::unix::process::CommandExt;
    let s = Sandbox::new();
    let file = s.state_dir().join(format!("{DB_SESSION}.json"));
    let before = std::fs::read(&file).unwrap();
    // A file size limit below the new file's size: its write fails part way, as on a full
    // disk (dcp writes only files it has just created, so /dev/full cannot stand in).
    let mut command = Command::new(env!("CARGO_BIN_EXE_dcp"));
    command.args(["sweep", "--session", DB_SESSION, "4", "--data-dir"]).arg(s.data());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit { rlim_cur: 200, rlim_max: libc::RLIM_INFINITY };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            Ok(())
        });
    }
    let out = run_with_limit(command, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write state file") && err.contains(&format!("{DB_SESSION}.json")), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "a failed save damaged the saved file");
    let left: Vec<_> = std::fs::read_dir(s.state_dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().ends_with(".tmp")), "{left:?}");
    // Without the limit, the same sweep saves.
    let again = crate::support::dcp(&s, &["sweep", "--session", DB_SESSION, "4"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(persist::parse(&std::fs::read(&file).unwrap()).unwrap().pruned.len() >= 4);
}

#[test]
fn a_temp_file_left_by_a_killed_save_is_replaced_not_piled_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".ses_t.json.tmp"), "{\"half\": ").unwrap();
    let mut m = SessionStore::new(dir.path(), EstimatorChoice::CharsDiv4);
    m.slot("ses_t").unwrap().record("c1", record(1));
    m.save_now("ses_t").unwrap();
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".ses_t.lock", "ses_t.json"]);
}

/// The state dir made a plain file, for the sidecar of `s` with saves retried every 50 ms; its
/// stderr goes to the returned log.
fn sidecar_on_a_file_for_a_state_dir(s: &Sandbox) -> (Sidecar, std::path::PathBuf) {
    std::fs::remove_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir(), "not a dir").unwrap();
    let log = s.dir.path().join("sidecar.log");
    let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
    (Sidecar::spawn_with(s, Some(IMMEDIATE), &[("DCP_SAVE_RETRY_MS", "50")], stderr), log)
}

/// Whether a notice tells of the state's saving (its failure or its recovery), not of the
/// money or tokens saved so far.
fn told_of_saving(notice: &str) -> bool {
    notice.contains("cannot be saved") || notice.contains("saved again")
}

/// The notice of request `i` of session `ses_test`, with the prunes it made.
fn notice(sidecar: &mut Sidecar, i: u64) -> String {
    let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": duplicate_reads(i)}));
    assert_eq!(crate::sidecar::prunes(&result, "edits").len(), 1, "request {i} was not pruned: {result}");
    result["notify"].as_str().unwrap_or_default().to_string()
}

/// The bug: the TUI showed prunes "in force" and never said that nothing was being saved (only
/// OpenCode's log did); after a restart every prune was gone.
#[test]
fn a_save_that_fails_is_told_once_in_the_session_s_notice_and_so_is_the_save_that_works_again() {
    let s = Sandbox::new();
    let (mut sidecar, log) = sidecar_on_a_file_for_a_state_dir(&s);
    let first = notice(&mut sidecar, 1);
    assert!(!first.contains("cannot be saved"), "no save has failed yet: {first}");
    let failed = || std::fs::read_to_string(&log).unwrap_or_default().contains("pruning goes on in memory");
    assert!(poll(failed, Duration::from_secs(10)), "no save failed");
    let told = notice(&mut sidecar, 2);
    let dir = s.state_dir().display().to_string();
    let expected = format!(
        "▣ DCP | this session's pruning cannot be saved: cannot create state dir {dir}: {dir} is not a \
         directory. It goes on in memory but is lost when OpenCode restarts; dcp retries the save, and \
         `dcp doctor` checks the state dir\n▣ DCP | in force: -"
    );
    assert!(told.starts_with(&expected), "{told}");
    // Retries fail every 50 ms meanwhile: the same failure is not told again.
    std::thread::sleep(Duration::from_millis(4 * 50));
    let again = notice(&mut sidecar, 3);
    assert!(again.starts_with("▣ DCP | in force: -") && !told_of_saving(&again), "{again}");

    std::fs::remove_file(s.state_dir()).unwrap();
    std::fs::create_dir(s.state_dir()).unwrap();
    let file = s.state_dir().join("ses_test.json");
    assert!(poll(|| file.exists(), Duration::from_secs(10)), "the state was never saved");
    // The writer hands its outcome to the store just after the file appears: the recovery is
    // told by the first request that follows the handover, and only by it.
    let told_again =
        |n: &str| n.starts_with("▣ DCP | this session's pruning is saved again: a restart no longer loses it\n");
    let mut saved = notice(&mut sidecar, 4);
    for i in 5..10 {
        if told_again(&saved) {
            break;
        }
        assert!(!told_of_saving(&saved), "{saved}");
        std::thread::sleep(Duration::from_millis(50));
        saved = notice(&mut sidecar, i);
    }
    assert!(told_again(&saved), "{saved}");
    let after = notice(&mut sidecar, 10);
    assert!(!told_of_saving(&after), "told once: {after}");
    sidecar.shutdown();
}

/// The bug: `/dcp stats` with a file for a state dir answered "Not a directory (os error 20)",
/// naming no path, and a failed save "cannot create state dir X: File exists (os error 17)".
#[test]
fn a_state_dir_that_is_a_file_is_named_with_the_cause_in_words_by_stats_and_by_the_save() {
    let s = Sandbox::new();
    let (mut sidecar, log) = sidecar_on_a_file_for_a_state_dir(&s);
    notice(&mut sidecar, 1);
    let dir = s.state_dir().display().to_string();
    let answer = sidecar.call("command", json!({"sessionID": "ses_test", "arguments": "stats"}));
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(message, format!("cannot read the state files in {dir}: {dir} is not a directory"));
    sidecar.shutdown();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&format!("cannot create state dir {dir}: {dir} is not a directory")), "{text}");
    assert!(!text.contains("os error"), "{text}");
}
