//! The importer of other harnesses' sessions (`dcp-testkit import`): each format becomes an
//! OpenCode database that `dcp replay` and `dcp context` read, recorded clocks are kept, and a
//! garbled or foreign input is refused with the file (and line) named.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde_json::Value;

/// A Claude Code transcript: two prompts with a person's pause of ten minutes between them.
const TRANSCRIPT: &str = r#"{"type":"summary","summary":"Fix the parser","leafUuid":"x"}
{"parentUuid":null,"isSidechain":false,"type":"user","cwd":"/w","version":"2.0.1","message":{"role":"user","content":"Read src/lib.rs"},"uuid":"u1","timestamp":"2025-09-03T10:00:00.000Z"}
{"isSidechain":false,"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/w/src/lib.rs"}}],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":50}},"uuid":"a1","timestamp":"2025-09-03T10:00:04.000Z"}
{"isSidechain":false,"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"     1\tfn main() {}\n"}]},"uuid":"r1","timestamp":"2025-09-03T10:00:05.000Z"}
{"isSidechain":false,"type":"assistant","message":{"id":"m2","model":"claude-sonnet-4-5","role":"assistant","content":[{"type":"text","text":"It is empty."}]},"uuid":"a2","timestamp":"2025-09-03T10:00:09.000Z"}
{"parentUuid":"a2","isSidechain":false,"type":"user","message":{"role":"user","content":"Now run the tests"},"uuid":"u2","timestamp":"2025-09-03T10:10:09.000Z"}
{"isSidechain":false,"type":"assistant","message":{"id":"m3","model":"claude-sonnet-4-5","role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"cargo test","description":"Run tests"}}]},"uuid":"a3","timestamp":"2025-09-03T10:10:12.000Z"}
{"isSidechain":false,"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"test result: ok","is_error":false}]},"uuid":"r2","timestamp":"2025-09-03T10:10:40.000Z"}
"#;

/// Claude Code stream-json (`claude -p`): one step that reads a file.
const STREAM_JSON: &str = r#"{"type":"system","subtype":"init","cwd":"/w","model":"claude-sonnet-4-5","claude_code_version":"2.0.1"}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/w/a.rs"}}],"usage":{"input_tokens":3,"output_tokens":2}},"parent_tool_use_id":null}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fn a() {}"}]},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"Done."}]},"parent_tool_use_id":null}
{"type":"result","duration_ms":20000}
"#;

/// Codex `exec --json`: a file view through the shell, then the answer.
const CODEX: &str = r#"{"type":"thread.started","thread_id":"x"}
{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"Look at the file."}}
{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc 'sed -n 1,5p src/a.rs'","aggregated_output":"fn a() {}\n","exit_code":0}}
{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"The file defines a."}}
"#;

/// A Codex rollout: a file view, an answer, and after the person's ten-minute pause a patch.
const ROLLOUT: &str = r#"{"timestamp":"2025-09-03T10:00:00.000Z","type":"session_meta","payload":{"id":"s1","cwd":"/w","cli_version":"0.125.0"}}
{"timestamp":"2025-09-03T10:00:00.010Z","type":"turn_context","payload":{"cwd":"/w","model":"gpt-5.4"}}
{"timestamp":"2025-09-03T10:00:00.020Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Read src/a.rs"}]}}
{"timestamp":"2025-09-03T10:00:00.030Z","type":"event_msg","payload":{"type":"user_message","message":"Read src/a.rs"}}
{"timestamp":"2025-09-03T10:00:02.000Z","type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"Look at it."}],"encrypted_content":"x"}}
{"timestamp":"2025-09-03T10:00:03.000Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"sed -n 1,5p src/a.rs\",\"workdir\":\"/w\"}","call_id":"c1"}}
{"timestamp":"2025-09-03T10:00:03.500Z","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":1000,"cached_input_tokens":800,"output_tokens":50,"reasoning_output_tokens":20}}}}
{"timestamp":"2025-09-03T10:00:04.000Z","type":"event_msg","payload":{"type":"exec_command_end","call_id":"c1","exit_code":0}}
{"timestamp":"2025-09-03T10:00:04.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"fn a() {}\n"}}
{"timestamp":"2025-09-03T10:00:08.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It defines a."}]}}
{"timestamp":"2025-09-03T10:10:08.000Z","type":"event_msg","payload":{"type":"user_message","message":"Rename it to b"}}
{"timestamp":"2025-09-03T10:10:12.000Z","type":"response_item","payload":{"type":"custom_tool_call","name":"apply_patch","call_id":"c2","input":"*** Begin Patch\n*** Update File: src/a.rs\n@@\n-fn a() {}\n+fn b() {}\n*** End Patch"}}
{"timestamp":"2025-09-03T10:10:13.000Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"c2","output":"Success. Updated the following files:\nM src/a.rs\n"}}
{"timestamp":"2025-09-03T10:10:15.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Renamed."}]}}
"#;

/// SWE-agent 1.x: an editor view and a bash command.
const SWE_AGENT: &str = r#"{"history":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the bug."},
{"role":"assistant","content":"Let me look.","action":"str_replace_editor view /testbed/a.py","tool_calls":[{"id":"c1","function":{"name":"str_replace_editor","arguments":"{\"command\":\"view\",\"path\":\"/testbed/a.py\"}"}}]},
{"role":"tool","content":"OBSERVATION:\n     1\tx = 1\n","tool_call_ids":["c1"]},
{"role":"assistant","content":"Run it.","action":"python a.py","tool_calls":[{"id":"c2","function":{"name":"bash","arguments":"{\"command\":\"python a.py\"}"}}]},
{"role":"tool","content":"OBSERVATION:\nok\n","tool_call_ids":["c2"]}],
"trajectory":[{"action":"python a.py","execution_time":1.5}],"info":{"swe_agent_version":"1.1.0"},
"replay_config":"{\"agent\":{\"model\":{\"name\":\"anthropic/claude-sonnet-4\"}}}"}"#;

/// `dcp-testkit import FORMAT SOURCE --out DIR`, in process.
pub(crate) fn import(format: &str, source: &Path, out: &Path) -> anyhow::Result<Value> {
    let mut buf = Vec::new();
    let args = ["import", format, source.to_str().unwrap(), "--out", out.to_str().unwrap(), "--json"];
    dcp_testkit::cli::run(args, &mut buf)?;
    Ok(serde_json::from_slice(&buf)?)
}

pub(crate) fn dcp_json(args: &[&str], data: &Path) -> Value {
    let home = data.join("home");
    let env = [("HOME", home.clone()), ("XDG_CONFIG_HOME", home.join(".config"))];
    let args = args.iter().map(std::ffi::OsStr::new).chain([std::ffi::OsStr::new("--data-dir"), data.as_os_str()]);
    let out = crate::support::run_dcp(
        args.chain([std::ffi::OsStr::new("--json")]),
        data,
        &env,
        std::time::Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

pub(crate) fn sample(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn each_format_imports_a_sample_that_replay_and_context_read() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("claude-transcript", TRANSCRIPT, 3, 2),
        ("claude-stream-json", STREAM_JSON, 2, 1),
        ("codex-exec-json", CODEX, 2, 1),
        ("codex-rollout", ROLLOUT, 4, 2),
        ("swe-agent", SWE_AGENT, 2, 2),
    ];
    for (format, text, steps, calls) in cases {
        let source = sample(dir.path(), &format!("{format}.log"), text);
        let out = dir.path().join(format);
        let written = import(format, &source, &out).unwrap();
        assert_eq!(written[0]["tool_calls"], calls, "{format}");
        let replay = dcp_json(&["replay", "--all"], &out);
        assert_eq!(replay["sessions"][0]["requests"], steps, "{format}: {replay}");
        let context = dcp_json(&["context"], &out);
        assert_eq!(context["tool_calls"], calls, "{format}: {context}");
    }
}

#[test]
fn a_transcript_keeps_its_recorded_times_and_the_persons_pause() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "t.jsonl", TRANSCRIPT);
    import("claude-transcript", &source, dir.path()).unwrap();
    let conn = Connection::open(dir.path().join("opencode.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(data, '$.role'), time_created FROM message ORDER BY time_created, id")
        .unwrap();
    let rows: Vec<(String, i64)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    let users: Vec<i64> = rows.iter().filter(|(role, _)| role == "user").map(|(_, t)| *t).collect();
    // 2025-09-03T10:00:00Z and 10:10:09Z: the second prompt keeps the person's ten-minute pause.
    assert_eq!(users, [1_756_893_600_000, 1_756_894_209_000]);
    let output: String = conn
        .query_row(
            "SELECT json_extract(data, '$.state.output') FROM part WHERE json_extract(data, '$.tool') = 'read'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(output, "     1\tfn main() {}\n", "outputs are kept verbatim");
    let end: i64 = conn
        .query_row(
            "SELECT json_extract(data, '$.state.time.end') FROM part WHERE json_extract(data, '$.tool') = 'bash'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(end, 1_756_894_240_000, "the tool's result time is the recorded one");
}

#[test]
fn every_call_of_a_session_of_several_prompts_has_its_own_id() {
    // Both prompts of the transcript open with a step of one call: ids counted per prompt
    // were the same, and dcp, which keys its prunes by call id, took a prune of the first
    // call for one of the second.
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "t.jsonl", TRANSCRIPT);
    import("claude-transcript", &source, dir.path()).unwrap();
    let conn = Connection::open(dir.path().join("opencode.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(data, '$.callID') FROM part WHERE json_extract(data, '$.type') = 'tool'")
        .unwrap();
    let ids: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "{ids:?}");
}

#[test]
fn a_garbled_line_is_refused_with_the_file_and_line_named() {
    let dir = tempfile::tempdir().unwrap();
    let garbled = TRANSCRIPT.replacen("{\"isSidechain\":false,\"type\":\"assistant\"", "{\"isSidechain\":fals", 1);
    let source = sample(dir.path(), "garbled.jsonl", &garbled);
    let err = import("claude-transcript", &source, &dir.path().join("out")).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:3: not JSON", source.display())), "{err}");
}

#[test]
fn a_log_of_another_format_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "codex.jsonl", CODEX);
    let err = import("claude-stream-json", &source, &dir.path().join("out")).unwrap_err().to_string();
    assert!(
        err.starts_with(&source.display().to_string()) && err.contains("not a Claude Code stream-json log"),
        "{err}"
    );
    let err = import("swe-agent", &source, &dir.path().join("out2")).unwrap_err().to_string();
    assert!(err.contains(&source.display().to_string()) && err.contains("not JSON"), "{err}");
    let transcript = sample(dir.path(), "transcript.jsonl", TRANSCRIPT);
    let err = import("codex-rollout", &transcript, &dir.path().join("out3")).unwrap_err().to_string();
    assert!(err.starts_with(&transcript.display().to_string()) && err.contains("not a Codex rollout"), "{err}");
}

#[test]
fn the_corpus_manifest_builds_its_sessions_into_one_database() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/real/sources.json");
    let only = ["cc-issue46-planning-execute", "swe-ctf-flash", "cc-transcript-todo-app-orchestrator"];
    let mut args =
        vec!["import", "--manifest", manifest.to_str().unwrap(), "--out", dir.path().to_str().unwrap(), "--json"];
    for name in &only {
        args.extend(["--only", name]);
    }
    let mut buf = Vec::new();
    dcp_testkit::cli::run(args, &mut buf).unwrap();
    let written: Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(written.as_array().unwrap().len(), only.len());
    let replay = dcp_json(&["replay", "--all"], dir.path());
    assert_eq!(replay["sessions"].as_array().unwrap().len(), only.len());
}

#[test]
fn a_subagent_file_named_by_a_task_result_becomes_a_child_session() {
    let dir = tempfile::tempdir().unwrap();
    let main = r#"{"isSidechain":false,"type":"user","cwd":"/w","message":{"role":"user","content":"Fix lint in the background"},"timestamp":"2026-02-02T04:52:44.000Z"}
{"isSidechain":false,"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Task","input":{"description":"Fix lint","prompt":"Run the linter and fix it","subagent_type":"general-purpose"}}]},"timestamp":"2026-02-02T04:52:50.000Z"}
{"isSidechain":false,"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Async agent launched"}]},"toolUseResult":{"isAsync":true,"agentId":"abc1234"},"timestamp":"2026-02-02T04:52:51.000Z"}
"#;
    let agent = r#"{"isSidechain":true,"agentId":"abc1234","type":"user","cwd":"/w","message":{"role":"user","content":"Run the linter and fix it"},"timestamp":"2026-02-02T04:52:51.500Z"}
{"isSidechain":true,"agentId":"abc1234","type":"assistant","message":{"id":"s1","role":"assistant","content":[{"type":"tool_use","id":"u1","name":"Bash","input":{"command":"make lint"}}]},"timestamp":"2026-02-02T04:52:55.000Z"}
{"isSidechain":true,"agentId":"abc1234","type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok"}]},"timestamp":"2026-02-02T04:53:20.000Z"}
"#;
    let source = sample(dir.path(), "main.jsonl", main);
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    sample(&agents, "agent-abc1234.jsonl", agent);
    let out = dir.path().join("out");
    let mut buf = Vec::new();
    let args = [
        "import",
        "claude-transcript",
        source.to_str().unwrap(),
        "--subagents",
        agents.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    dcp_testkit::cli::run(args, &mut buf).unwrap();
    let replay = dcp_json(&["replay", "--all"], &out);
    let sessions = replay["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{replay}");
    let child = sessions.iter().find(|s| !s["parent_id"].is_null()).expect("a child session");
    assert_eq!(child["requests"], 1);
    // The request starts as its prompt is sent (04:52:51.500Z), on the subagent's own clock.
    assert_eq!(child["modes"]["none"]["per_request"][0]["time"], 1_770_007_971_502_i64);
}

#[test]
fn a_subagent_file_that_names_itself_stops_at_a_depth_limit() {
    let dir = tempfile::tempdir().unwrap();
    let task = |ts: &str, side: bool| {
        format!(
            r#"{{"isSidechain":{side},"type":"user","cwd":"/w","message":{{"role":"user","content":"go"}},"timestamp":"2026-02-02T04:52:{ts}.000Z"}}
{{"isSidechain":{side},"type":"assistant","message":{{"id":"m","role":"assistant","content":[{{"type":"tool_use","id":"t","name":"Task","input":{{"prompt":"go"}}}}]}},"timestamp":"2026-02-02T04:52:{ts}.100Z"}}
{{"isSidechain":{side},"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":"launched"}}]}},"toolUseResult":{{"agentId":"loop"}},"timestamp":"2026-02-02T04:52:{ts}.200Z"}}
"#
        )
    };
    let source = sample(dir.path(), "main.jsonl", &task("10", false));
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    sample(&agents, "agent-loop.jsonl", &task("20", true));
    let out = dir.path().join("out");
    let mut buf = Vec::new();
    let args = [
        "import",
        "claude-transcript",
        source.to_str().unwrap(),
        "--subagents",
        agents.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    dcp_testkit::cli::run(args, &mut buf).unwrap();
    let written: Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(written[0]["sessions"], 5, "the main session and four levels of the same subagent");
}

#[test]
fn every_corpus_entry_names_its_source_licence_kind_and_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/real");
    let manifest = dcp_testkit::import::manifest::read(&root.join("sources.json")).unwrap();
    assert!(manifest.sessions.len() >= 40, "{} sessions", manifest.sessions.len());
    let mut names = std::collections::HashSet::new();
    for e in &manifest.sessions {
        assert!(names.insert(&e.name), "{} twice", e.name);
        assert!(root.join(&e.file).is_file(), "{}: no {}", e.name, e.file.display());
        assert!(e.prompt_file.as_ref().is_none_or(|p| root.join(p).is_file()), "{}: no prompt file", e.name);
        assert!(e.repo.contains('/') && !e.path.is_empty() && e.commit.len() == 40, "{}: source incomplete", e.name);
        assert!(
            ["MIT", "Apache-2.0", "BSD-3-Clause", "CC-BY-4.0"].contains(&e.license.as_str()),
            "{}: {}",
            e.name,
            e.license
        );
        assert!(["continuous", "interactive"].contains(&e.kind.as_str()), "{}: kind {}", e.name, e.kind);
        assert!(e.clock.starts_with("recorded") || e.clock.starts_with("estimated"), "{}: clock {}", e.name, e.clock);
    }
    let held_back = [
        "issue-115/04_implementation/execute",
        "issue-127/06_testing/revise",
        "issue-174/06_testing/execute",
        "issue-221/04_implementation/execute",
        "issue-38/06_testing/revise",
        "issue-119/04_implementation/execute",
    ];
    for e in manifest.sessions.iter().filter(|e| e.repo == "tielec/ai-workflow-agent") {
        assert!(!held_back.iter().any(|h| e.path.contains(h)), "{} is held back", e.name);
    }
}

#[test]
fn shell_commands_map_onto_opencode_tools_only_when_unambiguous() {
    use dcp_testkit::import::shell::{shell_call, ShellRun};
    let call = |command: &str, exit: Option<i64>| {
        let run = ShellRun { command, output: "x\n", cwd: "/w", root: "/w", exit, dur_ms: 10 };
        let c = shell_call(&run);
        (c.tool, c.input)
    };
    assert_eq!(call("cat src/a.rs", Some(0)), ("read".into(), serde_json::json!({"filePath": "/w/src/a.rs"})));
    let (tool, input) = call("nl -ba src/a.rs | sed -n '10,29p'", Some(0));
    assert_eq!(
        (tool.as_str(), &input["offset"], &input["limit"]),
        ("read", &serde_json::json!(10), &serde_json::json!(20))
    );
    assert_eq!(call("cd sub && sed -n 1,5p ../b.rs", Some(0)).1["filePath"], "/w/b.rs");
    assert_eq!(call("rg -n TODO src", Some(1)).0, "grep");
    assert_eq!(call("find . -name setup.py", Some(0)).1, serde_json::json!({"pattern": "**/setup.py", "path": "/w"}));
    // A glob character stays with the shell, as in the converter of the shared sessions.
    for kept in
        ["find . -name '*.rs'", "ls | wc -l", "cat a.rs b.rs", "grep -A3 x f", "sed -i s/a/b/ f", "echo 'open quote"]
    {
        assert_eq!(call(kept, Some(0)).0, "bash", "{kept}");
    }
    assert_eq!(call("rg TODO", Some(127)).0, "bash", "a search that failed to run stays bash");
}

#[test]
fn a_compaction_in_a_transcript_becomes_opencodes_so_only_the_summary_and_after_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let compacted = format!(
        "{TRANSCRIPT}{}",
        r#"{"type":"system","subtype":"compact_boundary","compactMetadata":{"trigger":"auto","preTokens":170000},"timestamp":"2025-09-03T10:20:00.000Z"}
{"isSidechain":false,"type":"user","isCompactSummary":true,"message":{"role":"user","content":"This session is being continued. Summary: the tests pass."},"timestamp":"2025-09-03T10:20:00.000Z"}
{"isSidechain":false,"type":"assistant","message":{"id":"m9","role":"assistant","content":[{"type":"text","text":"Continuing."}]},"timestamp":"2025-09-03T10:20:05.000Z"}
"#
    );
    let source = sample(dir.path(), "compacted.jsonl", &compacted);
    import("claude-transcript", &source, dir.path()).unwrap();
    let context = dcp_json(&["context"], dir.path());
    // The compaction request, its summary and the step after it; the five messages before are gone.
    assert_eq!(context["messages"], 3, "{context}");
    assert_eq!(context["tool_calls"], 0, "{context}");
}

#[test]
fn a_codex_rollout_keeps_its_clock_and_pairs_each_call_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "rollout.jsonl", ROLLOUT);
    import("codex-rollout", &source, dir.path()).unwrap();
    let conn = Connection::open(dir.path().join("opencode.db")).unwrap();
    let users: Vec<i64> = conn
        .prepare("SELECT time_created FROM message WHERE json_extract(data, '$.role') = 'user' ORDER BY time_created")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // 10:00:00.030Z and 10:10:08Z: one user message per prompt (not the echoed input item),
    // and the person's pause is kept.
    assert_eq!(users, [1_756_893_600_030, 1_756_894_208_000]);
    let part = |tool: &str, key: &str| -> String {
        let sql = format!(
            "SELECT json_quote(json_extract(data, '$.state.{key}')) FROM part WHERE json_extract(data, '$.tool') = ?1"
        );
        conn.query_row(&sql, [tool], |r| r.get(0)).unwrap()
    };
    assert_eq!(part("read", "output"), "\"fn a() {}\\n\"", "the shell view maps onto read, output verbatim");
    assert_eq!(part("read", "time.end"), "1756893604000", "the output's recorded time");
    assert!(part("edit", "input").contains("*** Update File: src/a.rs"), "the patch is the edit's input");
    let (cache_read, reasoning): (i64, i64) = conn
        .query_row(
            "SELECT json_extract(data, '$.tokens.cache.read'), json_extract(data, '$.tokens.reasoning') FROM message \
             WHERE json_extract(data, '$.role') = 'assistant' ORDER BY time_created LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((cache_read, reasoning), (800, 20), "the token count after a response is that step's");
}
