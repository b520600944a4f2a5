//! The held-out sessions (`bench/real/holdout.json`) and the mini-swe-agent format most of them
//! come in: every stored log imports with its source and licence recorded, none comes from a
//! repository of the corpus, and both trajectory formats keep their commands and their clock.

use std::collections::HashSet;
use std::path::Path;

use rusqlite::Connection;
use serde_json::Value;

use crate::import::{dcp_json, import, sample};

/// mini-swe-agent format 1: commands in fenced blocks, answers as user messages, a reply without
/// a command that the harness answers with a complaint, and the submission.
const MINI_V1: &str = r#"{"trajectory_format":"mini-swe-agent-1","info":{"mini_version":"1.15.0",
"config":{"model":{"model_name":"openrouter/google/gemini-3-pro-preview"},"environment":{"cwd":"/testbed"}}},
"messages":[{"role":"system","content":"You are a helpful assistant."},
{"role":"user","content":"Fix the bug in a.py."},
{"role":"assistant","content":"THOUGHT: Look at it.\n\n```bash\ncat a.py\n```","extra":{"response":{"created":1763509284,
"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":40}}}}},
{"role":"user","content":"<returncode>0</returncode>\n<output>\nx = 1\n</output>"},
{"role":"assistant","content":"THOUGHT: I will run it.","extra":{"response":{"created":1763509290}}},
{"role":"user","content":"Please always provide EXACTLY ONE action in triple backticks."},
{"role":"assistant","content":"THOUGHT: Run it.\n\n```bash\npython a.py\n```","extra":{"response":{"created":1763509300}}},
{"role":"user","content":"<returncode>1</returncode>\n<output>\nTraceback\n</output>"},
{"role":"assistant","content":"THOUGHT: Submit.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\n```",
"extra":{"response":{"created":1763509360}}},
{"role":"user","content":"diff --git a/a.py b/a.py"}]}"#;

/// mini-swe-agent format 1.1: function calls answered by stamped `tool` messages.
const MINI_V11: &str = r#"{"trajectory_format":"mini-swe-agent-1.1","info":{"mini_version":"2.2.7",
"config":{"model":{"model_name":"deepseek/deepseek-chat"}}},
"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Fix the bug."},
{"role":"assistant","content":"Look.","tool_calls":[
{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\": \"grep -n x a.py\"}"}},
{"id":"c2","type":"function","function":{"name":"bash","arguments":"{\"command\": \"ls -la\"}"}}],
"extra":{"response":{"created":1775795343},"timestamp":1775795344.5}},
{"role":"tool","tool_call_id":"c1","content":"<returncode>0</returncode>\n<output>\n1:x = 1\n</output>",
"extra":{"returncode":0,"timestamp":1775795345.0}},
{"role":"tool","tool_call_id":"c2","content":"<returncode>0</returncode>\n<output>\na.py\n</output>",
"extra":{"returncode":0,"timestamp":1775795345.25}},
{"role":"assistant","content":"Done.","tool_calls":[
{"id":"c3","type":"function","function":{"name":"bash","arguments":"{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}],
"extra":{"response":{"created":1775795346},"timestamp":1775795348.0}},
{"role":"exit","content":"","extra":{"exit_status":"Submitted"}}]}"#;

/// `(role, time_created)` of every message, in order.
fn messages(db: &Path) -> Vec<(String, i64)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(data, '$.role'), time_created FROM message ORDER BY time_created, id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
}

/// `(tool, state)` of every tool part, in order.
fn tools(db: &Path) -> Vec<(String, Value)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(data, '$.tool'), json_extract(data, '$.state') FROM part WHERE json_extract(data, '$.type') = 'tool' ORDER BY time_created, id")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).unwrap();
    rows.map(Result::unwrap).map(|(t, s)| (t, serde_json::from_str(&s).unwrap())).collect()
}

#[test]
fn a_mini_swe_agent_trajectory_of_format_1_keeps_its_commands_turns_and_response_times() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "a.traj.json", MINI_V1);
    let written = import("mini-swe-agent", &source, dir.path()).unwrap();
    assert_eq!(written[0]["tool_calls"], 3);
    let calls = tools(&dir.path().join("opencode.db"));
    let names: Vec<&str> = calls.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["read", "bash", "bash"], "cat becomes read, the rest stays bash");
    assert_eq!(calls[0].1["input"]["filePath"], "/testbed/a.py");
    assert_eq!(calls[0].1["output"], "<returncode>0</returncode>\n<output>\nx = 1\n</output>", "verbatim");
    assert_eq!(calls[1].1["metadata"]["exit"], 1, "the exit status is read from <returncode>");
    let rows = messages(&dir.path().join("opencode.db"));
    let users: Vec<i64> = rows.iter().filter(|(r, _)| r == "user").map(|(_, t)| *t).collect();
    // The task at the first response's second; the harness's complaint opens a turn of its own,
    // sent with the request after it (1763509300).
    assert_eq!(users, [1_763_509_284_000, 1_763_509_300_000]);
    let asked: Vec<i64> = rows.iter().filter(|(r, _)| r == "assistant").map(|(_, t)| *t).collect();
    assert_eq!(asked.len(), 4);
    // The writer spaces parts a few milliseconds apart.
    assert!((0..10).contains(&(asked[1] - 1_763_509_290_000)), "a request starts at its recorded second: {asked:?}");
    let replay = dcp_json(&["replay", "--all"], dir.path());
    assert_eq!(replay["sessions"][0]["requests"], 4, "{replay}");
}

#[test]
fn a_mini_swe_agent_trajectory_of_format_1_1_keeps_every_call_and_its_stamped_time() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "b.traj.json", MINI_V11);
    import("mini-swe-agent", &source, dir.path()).unwrap();
    let calls = tools(&dir.path().join("opencode.db"));
    let names: Vec<&str> = calls.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["grep", "bash", "bash"]);
    assert_eq!(calls[0].1["time"]["end"], 1_775_795_345_000_i64, "the tool answer's own stamp");
    assert_eq!(calls[1].1["time"]["end"], 1_775_795_345_250_i64);
    let asked: Vec<i64> = messages(&dir.path().join("opencode.db"))
        .into_iter()
        .filter(|(r, _)| r == "assistant")
        .map(|(_, t)| t)
        .collect();
    // The first request at the provider's second; the second as the last answer of the first
    // comes back (the writer spaces parts a few milliseconds apart).
    assert_eq!(asked[0], 1_775_795_343_002);
    assert!((0..10).contains(&(asked[1] - 1_775_795_345_250)), "{asked:?}");
}

#[test]
fn a_document_that_is_not_a_mini_swe_agent_trajectory_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path(), "other.json", r#"{"history": []}"#);
    let err = import("mini-swe-agent", &source, &dir.path().join("out")).unwrap_err().to_string();
    assert!(err.starts_with(&source.display().to_string()) && err.contains("not a mini-swe-agent trajectory"), "{err}");
    let empty = sample(dir.path(), "empty.json", r#"{"messages": [{"role": "user", "content": "hi"}]}"#);
    let err = import("mini-swe-agent", &empty, &dir.path().join("out2")).unwrap_err().to_string();
    assert!(err.contains("no assistant messages"), "{err}");
}

#[test]
fn the_held_out_manifest_imports_every_session_from_repositories_outside_the_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/real");
    let held = dcp_testkit::import::manifest::read(&root.join("holdout.json")).unwrap();
    let corpus = dcp_testkit::import::manifest::read(&root.join("sources.json")).unwrap();
    let corpus_repos: HashSet<&str> = corpus.sessions.iter().map(|e| e.repo.as_str()).collect();
    let corpus_titles: HashSet<&str> = corpus.sessions.iter().map(|e| e.title.as_str()).collect();
    assert!(held.sessions.len() >= 15, "{} sessions", held.sessions.len());
    let (mut names, mut titles, mut repos) = (HashSet::new(), HashSet::new(), HashSet::new());
    for e in &held.sessions {
        assert!(names.insert(&e.name) && titles.insert(&e.title), "{}: name or title twice", e.name);
        assert!(!corpus_titles.contains(e.title.as_str()), "{}: a corpus title", e.name);
        assert!(!corpus_repos.contains(e.repo.as_str()), "{}: {} is in the corpus", e.name, e.repo);
        repos.insert(e.repo.as_str());
        assert!(e.file.starts_with("holdout") && root.join(&e.file).is_file(), "{}: no {}", e.name, e.file.display());
        assert!(e.prompt_file.as_ref().is_none_or(|p| root.join(p).is_file()), "{}: no prompt file", e.name);
        assert!(e.repo.contains('/') && !e.path.is_empty() && e.commit.len() == 40, "{}: source incomplete", e.name);
        assert!(["MIT", "Apache-2.0", "BSD-3-Clause"].contains(&e.license.as_str()), "{}: {}", e.name, e.license);
        assert!(["continuous", "interactive"].contains(&e.kind.as_str()), "{}: kind {}", e.name, e.kind);
        assert!(e.clock.starts_with("recorded") || e.clock.starts_with("estimated"), "{}: clock {}", e.name, e.clock);
    }
    assert!(repos.len() >= 4, "{repos:?}");
    let dir = tempfile::tempdir().unwrap();
    let manifest = root.join("holdout.json");
    let mut buf = Vec::new();
    let args = ["import", "--manifest", manifest.to_str().unwrap(), "--out", dir.path().to_str().unwrap(), "--json"];
    dcp_testkit::cli::run(args, &mut buf).unwrap();
    let written: Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(written.as_array().unwrap().len(), held.sessions.len());
    let replay = dcp_json(&["replay", "--all", "--estimator", "chars"], dir.path());
    assert_eq!(replay["sessions"].as_array().unwrap().len(), held.sessions.len());
}
