//! The bill the provider reported: the usage `dcp-testkit import` keeps from each format, the
//! price sheet `dcp replay` infers from it, and replay calibrated on it (`replay::calibrate`).

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde_json::Value;

use crate::import::{dcp_json, import, sample};

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/real/sources").join(name)
}

fn gunzip(path: &Path) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_string(&mut text).unwrap();
    text
}

fn db(dir: &Path) -> Connection {
    Connection::open(dir.join("opencode.db")).unwrap()
}

/// Each assistant message's stored tokens and cost, in history order.
fn messages(dir: &Path) -> Vec<Value> {
    let db = db(dir);
    let mut stmt =
        db.prepare("SELECT data FROM message WHERE json_extract(data, '$.role') = 'assistant' ORDER BY id").unwrap();
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| serde_json::from_str(&r.unwrap()).unwrap()).collect()
}

/// The session row's `(tokens_input, tokens_output, tokens_cache_read, cost)`.
fn session_row(dir: &Path) -> (i64, i64, i64, f64) {
    let sql = "SELECT tokens_input, tokens_output, tokens_cache_read, cost FROM session WHERE parent_id IS NULL";
    db(dir).query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap()
}

/// Claude Code stream-json: usage with 1-hour writes, a compaction and its summary, the run's
/// cost and output in `result`.
const STREAM_JSON: &str = r#"{"type":"system","subtype":"init","cwd":"/w","model":"claude-sonnet-4-5","claude_code_version":"2.0.1"}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/w/a.rs"}}],"usage":{"input_tokens":3,"output_tokens":1,"cache_read_input_tokens":12000,"cache_creation_input_tokens":4000,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":3000}}},"parent_tool_use_id":null}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fn a() {}"}]},"parent_tool_use_id":null}
{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":16000}}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"This session is being continued: a.rs was read."}]},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":2,"output_tokens":1,"cache_read_input_tokens":12000,"cache_creation_input_tokens":300}},"parent_tool_use_id":null}
{"type":"result","duration_ms":20000,"total_cost_usd":0.0421,"usage":{"output_tokens":250}}
"#;

/// Codex `exec --json`: usage only in `turn.completed`, cached input included in the input.
const CODEX: &str = r#"{"type":"thread.started","thread_id":"x"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc 'cat a.rs'","aggregated_output":"fn a() {}\n","exit_code":0}}
{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"It defines a."}}
{"type":"turn.completed","usage":{"input_tokens":9000,"cached_input_tokens":6000,"output_tokens":120}}
"#;

/// SWE-agent: usage only in `info.model_stats`.
const SWE_AGENT: &str = r#"{"history":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the bug."},
{"role":"assistant","content":"Run it.","action":"python a.py","tool_calls":[{"id":"c2","function":{"name":"bash","arguments":"{\"command\":\"python a.py\"}"}}]},
{"role":"tool","content":"OBSERVATION:\nok\n","tool_call_ids":["c2"]}],
"trajectory":[{"action":"python a.py","execution_time":1.5}],
"info":{"swe_agent_version":"0.7.0","model_stats":{"instance_cost":0.0712,"tokens_sent":7000,"tokens_received":40,"api_calls":1}}}"#;

#[test]
fn each_format_keeps_the_usage_its_log_records_and_makes_none_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stream");
    import("claude-stream-json", &sample(dir.path(), "s.jsonl", STREAM_JSON), &out).unwrap();
    let m = messages(&out);
    assert_eq!(m[0]["tokens"]["cache"], serde_json::json!({"write": 4000, "read": 12000, "write1h": 3000}));
    // The compaction is OpenCode's: its summary message, then the step after it.
    assert_eq!(
        (m.len(), m[1]["summary"].as_bool(), m[2]["tokens"]["cache"]["write"].as_i64()),
        (3, Some(true), Some(300))
    );
    let (_, output, _, cost) = session_row(&out);
    assert_eq!((output, cost), (250, 0.0421));

    let out = dir.path().join("codex");
    import("codex-exec-json", &sample(dir.path(), "c.jsonl", CODEX), &out).unwrap();
    assert!(messages(&out).iter().all(|m| m["tokens"]["input"] == 0), "no step's usage is made up");
    assert_eq!(session_row(&out), (3000, 120, 6000, 0.0));

    let out = dir.path().join("swe");
    import("swe-agent", &sample(dir.path(), "w.traj", SWE_AGENT), &out).unwrap();
    assert!(messages(&out).iter().all(|m| m["tokens"]["input"] == 0));
    assert_eq!(session_row(&out), (7000, 40, 0, 0.0712));
}

/// What a Claude Code transcript says it was billed, from its own lines (not through the
/// importer): uncached input at 1, reads at 0.1, 5-minute writes at 1.25, 1-hour ones at 2.
/// A message split over several lines repeats its usage: each message counts once.
fn billed(log: &str) -> f64 {
    let mut seen = std::collections::HashSet::new();
    let mut sum = 0.0;
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let (m, u) = (&v["message"], &v["message"]["usage"]);
        if v["type"] != "assistant" || !u.is_object() || !seen.insert(m["id"].as_str().unwrap_or("").to_string()) {
            continue;
        }
        let n = |x: &Value| x.as_f64().unwrap_or(0.0);
        let hour = n(&u["cache_creation"]["ephemeral_1h_input_tokens"]);
        let write = n(&u["cache_creation_input_tokens"]);
        sum += n(&u["input_tokens"]) + 0.1 * n(&u["cache_read_input_tokens"]) + 1.25 * (write - hour) + 2.0 * hour;
    }
    sum
}

#[test]
fn replay_reproduces_the_bill_an_imported_claude_code_session_reported() {
    // A person's session on Claude Code 2.1, whose writes went to the 1-hour cache.
    let dir = tempfile::tempdir().unwrap();
    let source = corpus("cc-lokal.jsonl.gz");
    import("claude-transcript", &source, dir.path()).unwrap();
    let replay = dcp_json(&["replay", "--all"], dir.path());
    let session = &replay["sessions"][0];
    assert_eq!(session["sheet"]["name"], "anthropic-1h", "{}", session["sheet"]);
    let c = &session["calibration"];
    assert_eq!(c["basis"], "requests");
    let expected = billed(&gunzip(&source));
    let reported = c["reported"].as_f64().unwrap();
    assert!((reported - expected).abs() <= 1.0, "reported {reported}, the log says {expected}");
    // The model fitted to it: Claude Code's own prefix, well above OpenCode's 6,700 tokens,
    // and no pruning's bill within 5% of the reported one.
    let (error, prefix) = (c["error"].as_f64().unwrap(), c["fixed_prefix"].as_i64().unwrap());
    assert!(error.abs() < 0.05, "calibration error {error}");
    assert!(prefix > 15_000, "fixed prefix {prefix}");
    let (modelled, dcp) = (c["modelled"].as_f64().unwrap(), c["dcp"].as_f64().unwrap());
    assert!((c["effect"].as_f64().unwrap() - dcp / reported).abs() < 1e-3 && modelled > 0.0);
    // The usage says how it was billed, whatever sheet replay is told: with the 5-minute one
    // the reported bill is the same, and the model (its writes at 1.25) far from it.
    let five = dcp_json(&["replay", "--all", "--prices", "anthropic-5m"], dir.path());
    let c5 = &five["sessions"][0]["calibration"];
    assert_eq!(c5["reported"].as_f64(), Some(reported));
    assert!(c5["error"].as_f64().unwrap() < -0.1, "{c5}");
}

#[test]
fn a_run_that_reports_no_cache_is_billed_without_one() {
    let dir = tempfile::tempdir().unwrap();
    import("swe-agent", &sample(dir.path(), "w.traj", SWE_AGENT), dir.path()).unwrap();
    let replay = dcp_json(&["replay", "--all"], dir.path());
    let session = &replay["sessions"][0];
    assert_eq!((session["sheet"]["name"].as_str(), session["sheet"]["caches"].as_bool()), (Some("none"), Some(false)));
    let c = &session["calibration"];
    // Totals only: the bill is its input, reproduced by construction.
    assert_eq!((c["basis"].as_str(), c["reported"].as_f64()), (Some("totals"), Some(7000.0)));
    assert_eq!(c["error"].as_f64(), Some(0.0));
}

#[test]
fn a_request_that_sent_its_new_content_uncached_leaves_the_next_to_write_it_again() {
    // Claude Code's issue-58 planning run: its fourth request reported 7,366 tokens of input
    // after its last breakpoint (uncached, at the input price), and the fifth wrote them to the
    // cache. A model that caches the whole shared prefix missed that by 5.8%.
    let dir = tempfile::tempdir().unwrap();
    let source = corpus("cc-issue58-planning-execute.jsonl.gz");
    import("claude-stream-json", &source, dir.path()).unwrap();
    let replay = dcp_json(&["replay", "--all"], dir.path());
    let c = &replay["sessions"][0]["calibration"];
    let reported = c["reported"].as_f64().unwrap();
    assert!((reported - billed(&gunzip(&source))).abs() <= 1.0, "{c}");
    let error = c["error"].as_f64().unwrap();
    assert!(error.abs() < 0.01, "calibration error {error}");
}
