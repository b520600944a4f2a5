//! The CLI on the fixtures: stdout, stderr and the exit status, snapshotted together.

use std::path::{Path, PathBuf};
use std::process::Command;

use dcp::state::persist::{self, LoadOutcome};
use serde_json::Value;

use crate::persistence::{bad_states, HUGE_HEAD, OVER_LIMIT};
use crate::support::{self, assert_error, bad_ids, clone_session, stderr, tree, Sandbox, DB_SESSION, TREE_SESSION};

/// `dcp ARGS` on the sandbox's data dir (see [`crate::support::dcp`]): stdout, stderr and
/// the exit status, with the sandbox's path filtered out.
fn dcp(sandbox: &Sandbox, args: &[&str]) -> String {
    let out = crate::support::dcp_in(sandbox, &sandbox.data(), args, std::time::Duration::from_secs(600));
    filter(&crate::support::rendered(&out), sandbox.dir.path())
}

fn filter(text: &str, root: &Path) -> String {
    let text = text.replace(&root.display().to_string(), "[SANDBOX]");
    let re_time = regex_lite_time();
    re_time.iter().fold(text, |t, (from, to)| t.replace(from, to))
}

/// No timestamps appear in CLI output except the fixtures' own, which are stable.
fn regex_lite_time() -> Vec<(String, String)> {
    Vec::new()
}

#[test]
fn sessions_lists_both_stores() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["sessions"]));
}

#[test]
fn sessions_json() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["sessions", "--json"]));
}

#[test]
fn context_of_the_recorded_session() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["context", "--session", DB_SESSION]));
}

#[test]
fn context_defaults_to_the_latest_session() {
    let s = Sandbox::new();
    assert_eq!(dcp(&s, &["context"]), dcp(&s, &["context", "--session", DB_SESSION]));
}

#[test]
fn context_json_of_the_json_tree_session() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["context", "--json", "--session", TREE_SESSION]));
}

#[test]
fn stats_reports_all_time_and_names_corrupt_files() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["stats", "--session", DB_SESSION]));
}

#[test]
fn stats_json_has_the_documented_fields() {
    let s = Sandbox::new();
    let out = dcp(&s, &["stats", "--json"]);
    let json_text = out.split("----- stdout -----\n").nth(1).unwrap().split("----- stderr -----").next().unwrap();
    let v: serde_json::Value = serde_json::from_str(json_text).unwrap();
    assert_eq!(v["all_time"]["pruned_tokens"], 907 + 1520 + 2300);
    assert_eq!(v["all_time"]["tools_pruned"], 2 + 2 + 3);
    assert_eq!(v["all_time"]["sessions"], 3);
    assert_eq!(v["all_time"]["corrupt"].as_array().unwrap().len(), 2);
    insta::assert_snapshot!(out);
}

#[test]
fn sweep_dry_run_saves_nothing() {
    let s = Sandbox::new();
    let before = std::fs::read(s.state_dir().join(format!("{DB_SESSION}.json"))).unwrap();
    insta::assert_snapshot!(dcp(&s, &["sweep", "--session", DB_SESSION, "--dry-run"]));
    assert_eq!(std::fs::read(s.state_dir().join(format!("{DB_SESSION}.json"))).unwrap(), before);
}

#[test]
fn sweep_last_n_records_and_stats_show_it() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["sweep", "--session", DB_SESSION, "4"]));
    insta::assert_snapshot!(dcp(&s, &["stats", "--session", DB_SESSION]));
    // Sweeping again finds nothing new among the calls already pruned.
    let again = dcp(&s, &["sweep", "--session", DB_SESSION, "--json", "1"]);
    assert!(again.contains("\"dry_run\": false"), "{again}");
}

#[test]
fn sweep_of_a_corrupt_state_file_sets_it_aside() {
    let s = Sandbox::new();
    let id = "ses_0a1b2c3d4e5fTruncatedJson";
    // Give the corrupt state a real session to sweep by copying the recorded one's rows.
    let conn = rusqlite::Connection::open(s.data().join("opencode.db")).unwrap();
    conn.execute_batch(&format!(
        "INSERT INTO session SELECT '{id}', project_id, workspace_id, parent_id, 'copy', directory, path, title, version, share_url, summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created, time_updated, time_compacting, time_archived FROM session WHERE id = '{DB_SESSION}';
         INSERT INTO message SELECT 'c' || id, '{id}', time_created, time_updated, data FROM message WHERE session_id = '{DB_SESSION}';
         INSERT INTO part SELECT 'c' || id, 'c' || message_id, '{id}', time_created, time_updated, data FROM part WHERE session_id = '{DB_SESSION}';"
    ))
    .unwrap();
    drop(conn);
    let out = dcp(&s, &["sweep", "--session", id, "2"]);
    let aside: Vec<_> = std::fs::read_dir(s.state_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{id}.json.corrupt-")))
        .collect();
    assert_eq!(aside.len(), 1, "{out}");
    let text = out.replace(&aside[0], &format!("{id}.json.corrupt-[TIME]"));
    insta::assert_snapshot!(text);
}

#[test]
fn a_bad_session_id_is_refused() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["context", "--session", "../../etc/passwd"]));
}

#[test]
fn an_unknown_session_is_an_error() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["sweep", "--session", "ses_nope"]));
}

#[test]
fn an_empty_data_dir_is_an_error() {
    let s = Sandbox::new();
    let empty = s.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = support::dcp_in(&s, &empty, &["sessions"], std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("dcp: no OpenCode data in "), "{stderr}");
}

#[test]
fn bad_usage_exits_2() {
    let s = Sandbox::new();
    let out = dcp(&s, &["sweep"]);
    assert!(out.starts_with("success: false\nexit_code: 2\n"), "{out}");
}

#[test]
fn a_bad_config_value_names_the_file_and_key() {
    let s = Sandbox::new();
    let cfg = s.dir.path().join("project/.opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("dcp.jsonc"),
        "{\n  // mine\n  \"strategies\": {\"purgeErrors\": {\"turns\": -1}},\n  \"colour\": true,\n}\n",
    )
    .unwrap();
    insta::assert_snapshot!(dcp(&s, &["stats"]));
}

#[test]
fn config_changes_what_context_proposes() {
    let s = Sandbox::new();
    let cfg = s.dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("dcp.jsonc"), r#"{"strategies": {"deduplication": {"enabled": false}}, "colour": 1}"#)
        .unwrap();
    let out = dcp(&s, &["context", "--json", "--session", DB_SESSION]);
    assert!(out.contains("unknown key `colour` ignored"), "{out}");
    assert!(!out.contains("\"strategy\": \"deduplication\""), "{out}");
    assert!(out.contains("\"strategy\": \"supersede-writes\""), "{out}");
}

#[test]
fn a_broken_pipe_is_success() {
    use std::io::Read;
    use std::process::Stdio;
    let s = Sandbox::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["context", "--json", "--data-dir"])
        .arg(s.data())
        .env("HOME", s.dir.path().join("home"))
        .env_remove("XDG_CONFIG_HOME")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?} {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn debug_logs_go_to_daily_files_under_the_config_dir() {
    let s = Sandbox::new();
    let cfg = s.dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("dcp.jsonc"), r#"{"debug": true}"#).unwrap();
    let out = dcp(&s, &["sessions"]);
    assert!(out.starts_with("success: true"), "{out}");
    let logs: Vec<_> = std::fs::read_dir(cfg.join("logs/dcp")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let name = logs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("dcp.log."), "{name}");
    let text = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(text.contains("DEBUG") && text.contains("Sessions"), "{text}");
    assert!(!out.contains("DEBUG"), "nothing but warnings on stderr, nothing on stdout");
}

/// The all-time figures of `dcp stats --json`.
fn all_time(s: &Sandbox) -> serde_json::Value {
    let out = dcp(s, &["stats", "--json"]);
    let json_text = out.split("----- stdout -----\n").nth(1).unwrap().split("----- stderr -----").next().unwrap();
    let v: serde_json::Value = serde_json::from_str(json_text).unwrap();
    v["all_time"].clone()
}

#[test]
fn stats_remembers_summaries_across_runs_in_the_cache_dir() {
    let s = Sandbox::new();
    let first = all_time(&s);
    assert_eq!(first["pruned_tokens"], 907 + 1520 + 2300);
    let cache_dir = s.dir.path().join("home/.cache/dcp");
    let cache = std::fs::read_dir(&cache_dir).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(&cache).unwrap();
    // The corrupt files are not cached: they are read and reported on every run.
    assert!(text.ends_with("end\t4\n"), "{text}");
    assert_eq!(all_time(&s), first);

    // The next run trusts the cache for a file whose size and time are unchanged: a cache
    // that says otherwise is believed (which shows it is read)...
    let id = "ses_204d30935ffeIhuHRntLhlCv3U.json";
    let line = text.lines().find(|l| l.starts_with(id)).unwrap();
    let mut fields: Vec<&str> = line.split('\t').collect();
    let tokens: u64 = fields[4].parse().unwrap();
    fields[4] = "1000000";
    std::fs::write(&cache, text.replace(line, &fields.join("\t"))).unwrap();
    assert_eq!(all_time(&s)["pruned_tokens"], 907 + 1520 + 2300 - tokens + 1_000_000);

    // ...until the file's time changes.
    let file = std::fs::File::options().append(true).open(s.state_dir().join(id)).unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(all_time(&s), first);

    // A removed file stops counting, and a cache that is not whole is ignored.
    std::fs::remove_file(s.state_dir().join(id)).unwrap();
    std::fs::write(&cache, "dcp all-time cache 1\tgarbage").unwrap();
    let after = all_time(&s);
    assert_eq!(after["pruned_tokens"], 907 + 1520 + 2300 - tokens);
    assert_eq!(after["files"], first["files"].as_u64().unwrap() - 1);
}

#[test]
fn replay_of_the_recorded_session() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["replay", "--session", DB_SESSION, "--mode", "immediate,deduplication"]));
}

/// The bug: the `recorded` row put the provider's input tokens under `cost` when the provider
/// reported no cache reads or writes, a token count read as a cost.
#[test]
fn replay_s_recorded_row_leaves_the_cost_blank_when_the_provider_reported_no_cache_counts() {
    let s = Sandbox::new();
    let out = dcp(&s, &["replay", "--session", DB_SESSION, "--mode", "none"]);
    let row = out.lines().find(|l| l.trim_start().starts_with("recorded ")).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().take(3).collect();
    assert_eq!(cells, ["recorded", "317,763", "-"], "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn replay_all_gives_the_ratios_over_every_session() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["replay", "--all", "--cache-ttl", "never"]));
}

#[test]
fn replay_json_has_the_documented_fields() {
    let s = Sandbox::new();
    let out = support::dcp(&s, &["replay", "--json", "--mode", "all"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = &v["sessions"][0];
    assert_eq!(session["session_id"], DB_SESSION);
    let modes: Vec<&str> = session["modes"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        modes,
        ["none", "dcp", "immediate", "deduplication", "supersede-writes", "purge-errors", "masking", "agent-tools"]
    );
    for mode in &modes {
        let m = &session["modes"][mode];
        for key in ["tokens_sent", "cost", "final_context", "rewrites"] {
            assert!(m[key].is_u64() && v["total"][mode][key].is_u64(), "{mode}.{key}");
        }
        assert_eq!(m["per_request"].as_array().unwrap().len() as u64, session["requests"].as_u64().unwrap());
    }
    // Without pruning, nothing is rewritten; the recorded session's provider counts are shown.
    assert_eq!(session["modes"]["none"]["rewrites"], 0);
    assert!(session["recorded"]["input"].as_u64().unwrap() > 0);
    assert!(v["aggregate"]["dcp"]["cost"]["median"].is_f64());
}

#[test]
fn replay_refuses_a_bad_ttl_and_an_unknown_mode() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["replay", "--cache-ttl", "soon"]));
    insta::assert_snapshot!(dcp(&s, &["replay", "--mode", "aggressive"]));
}

#[test]
fn replay_refuses_a_price_sheet_it_does_not_know_and_names_a_bad_price_files_key() {
    let s = Sandbox::new();
    insta::assert_snapshot!(dcp(&s, &["replay", "--prices", "anthropic-2h"]));
    let file = s.dir.path().join("prices.json");
    std::fs::write(&file, r#"{"input": 3, "cacheRead": "cheap"}"#).unwrap();
    insta::assert_snapshot!(dcp(&s, &["replay", "--prices", file.to_str().unwrap()]));
    std::fs::write(&file, r#"{"cacheWrite": 3.75}"#).unwrap();
    insta::assert_snapshot!(dcp(&s, &["replay", "--prices", file.to_str().unwrap()]));
}

#[test]
fn dcp_stats_warns_about_each_hostile_state_file_by_name() {
    let s = Sandbox::new();
    for bad in bad_states() {
        (bad.write)(&s.state_dir().join(format!("{}.json", bad.id)));
    }
    let out = support::dcp(&s, &["stats"]);
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
    let out = support::dcp(&s, &["stats", "--json"]);
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
        let out = support::dcp(&s, &["sweep", "--session", bad.id, "2"]);
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
            let out = support::dcp(&s, &args);
            assert_error(&out, &["invalid session id"]);
            assert!(stderr(&out).len() < 400, "{}", stderr(&out));
        }
    }
    assert!(tree(s.dir.path()) == before, "something was written");
}

/// README's first command shows what `dcp context` prints on the fixtures: its block is a run
/// of the command's lines, so a change of the figures fails here until README says it too.
#[test]
fn readme_shows_what_the_first_command_prints() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme.split("## What the first command shows").nth(1).expect("README has the section");
    let block = section.split("```").nth(1).expect("the section has a code block").trim_matches('\n');
    let out = dcp(&Sandbox::new(), &["context"]);
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let want: Vec<&str> = block.lines().map(str::trim_end).collect();
    assert!(
        lines.windows(want.len()).any(|w| w == want.as_slice()),
        "README's block:\n{block}\n\nis not a run of what `dcp context` prints:\n{out}"
    );
}

/// The bug: with a file where the state dir should be, `dcp stats` said "Not a directory (os
/// error 20)" without the path that is not one, and `dcp sweep` "File exists (os error 17)".
#[test]
fn a_file_for_a_state_dir_is_named_as_not_a_directory_by_stats_and_sweep() {
    let s = Sandbox::new();
    std::fs::remove_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir(), "not a dir").unwrap();
    insta::assert_snapshot!(dcp(&s, &["stats", "--session", DB_SESSION]));
    insta::assert_snapshot!(dcp(&s, &["sweep", "--session", DB_SESSION, "4"]));
}
