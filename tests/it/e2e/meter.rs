//! The live meter against `dcp replay` and against the bill (issue 37): a session through the
//! real OpenCode whose agent calls fail and whose `compress` grows its range, metered live as
//! its replay meters it; what the fake model billed as a caching provider, recorded by dcp
//! request by request; and what dcp says it kept out against what that provider billed less
//! with dcp than without.

use std::process::Command;

use serde_json::{json, Value};

use super::fake_llm::{Logged, Turn};
use super::scenarios::{call_id_of, explore_twice_read, read, result};
use super::{tail, Lab};

/// dcp's defaults, as a user has them, but for the notices.
const DEFAULTS: &str = r#"{ "pruneNotification": "minimal" }"#;

/// A summary of the first prompt alone, longer than it: the range grows.
const GROWN: &str = "The user asked for an overview of the demo project: what it holds, what src/parser.py \
    (twelve section parsers of key = value lines) does, and how many records data/records.csv has, in detail.";

/// The fake model's prices per million tokens, as OpenCode's model data holds them.
const PRICES: (f64, f64, f64, f64) = (3.0, 15.0, 0.3, 3.75);

#[test]
fn a_session_whose_agent_calls_fail_and_whose_compress_grows_is_metered_as_its_replay_meters_it() {
    let lab = Lab::new(DEFAULTS);
    priced(&lab);
    let session = failing_session(&lab);
    let stats = dcp_json(&lab, &["stats", "--session", &session]);
    live_equals_replay(&lab, &session, &stats["session"]);
    let state = lab.state(&session);
    usage_is_what_the_model_billed(&lab, &session, &state);
}

/// Sets the fake model's prices in the lab's `opencode.json`, so that OpenCode prices its steps.
fn priced(lab: &Lab) {
    let path = lab.root().join("xdg/config/opencode/opencode.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let (input, output, cache_read, cache_write) = PRICES;
    config["provider"]["fake"]["models"]["fake-model"]["cost"] =
        json!({"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write});
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// Four prompts: reads (one again), a discard of ids that do not exist and a compress past
/// the newest message (each a step of its own), errored tools (a missing file, an edit whose
/// text is not there), a compress of the first prompt alone with a longer summary (it grows,
/// or is refused where dcp refuses that), a compress of the exploration and a discard that
/// works. Returns the session.
fn failing_session(lab: &Lab) -> String {
    let session = explore_twice_read(lab, "A parser with 12 sections and 150 records.");
    let wrong = Turn::tool("p2.discard_wrong", "discard", json!({"ids": ["999", "call_nowhere_0"], "reason": "noise"}));
    let missing = read("p2.missing", "src/missing_module.py");
    let turns = vec![wrong, read("p2.config", "config.txt"), missing, Turn::text("p2.answer", "Config read.")];
    lab.prompt(Some(&session), "Clean up, then check the config.", turns);
    let grows =
        Turn::tool("p3.grows", "compress", json!({"topic": "The first prompt", "range": "m1..m1", "summary": GROWN}));
    let past =
        Turn::tool("p3.past", "compress", json!({"topic": "Nothing", "range": "m900..m999", "summary": "None."}));
    let turns = vec![grows, past, read("p3.readme", "README.md"), Turn::text("p3.answer", "Read.")];
    lab.prompt(Some(&session), "Note what the first prompt asked, then read the readme.", turns);
    let summary = "Explored src/parser.py (parse_section_1..12) and data/records.csv (150 rows); config: mode fast.";
    let prefix =
        Turn::tool("p4.compress", "compress", json!({"topic": "Exploration", "range": "m2..m8", "summary": summary}));
    let bad_edit = Turn::tool(
        "p4.bad_edit",
        "edit",
        json!({"filePath": "{{cwd}}/config.txt", "oldString": "mode = slow", "newString": "mode = safe"}),
    );
    let discard = Turn::tool("p4.discard", "discard", json!({"ids": ["{{list:records.csv}}"], "reason": "completion"}));
    let turns =
        vec![prefix, bad_edit, read("p4.records", "data/records.csv"), discard, Turn::text("p4.answer", "Done.")];
    lab.prompt(Some(&session), "Compress the exploration, fix the config, and count the records again.", turns);
    calls_failed_and_the_range_grew(lab, &session);
    session
}

/// The agent's calls did what the scenario says: the wrong ids and the range past the newest
/// message were refused, the first prompt's range grew (or was refused for its summary), the
/// edit and the read of a missing file failed, the last discard worked. Each answer is read
/// in the request right after its call: a later one may have it inside a compressed range.
fn calls_failed_and_the_range_grew(lab: &Lab, session: &str) {
    let said = |label: &str| {
        let log = lab.llm.main_requests();
        let at = log.iter().position(|l| l.label.as_deref() == Some(label)).expect(label);
        result(&log[at + 1], &call_id_of(lab, label))
    };
    assert!(said("p2.discard_wrong").starts_with("Nothing was pruned"), "{}", said("p2.discard_wrong"));
    assert!(said("p3.past").starts_with("Nothing was compressed"), "{}", said("p3.past"));
    let grown = said("p3.grows");
    let grew = grown.split(" (~").nth(1).and_then(|t| t.split(" tokens)").next()).and_then(|t| t.split_once(" -> ~"));
    let grew = grew.is_some_and(|(from, to)| from.parse::<u64>().unwrap_or(0) < to.parse::<u64>().unwrap_or(0));
    assert!(grew || grown.starts_with("Nothing was compressed"), "the first prompt's range: {grown}");
    assert!(said("p4.discard").starts_with("Discarded 1 tool output"), "{}", said("p4.discard"));
    for label in ["p2.missing", "p4.bad_edit"] {
        let call = call_id_of(lab, label);
        let stored = lab.stored_parts(session).into_iter().map(|p| serde_json::from_str::<Value>(&p).unwrap());
        let part = stored.into_iter().find(|p| p["callID"] == call.as_str()).unwrap();
        assert_eq!(part["state"]["status"], "error", "{label}: {part}");
    }
}

/// `dcp ARGS --json` in the lab's environment (its config and data dir).
pub fn dcp_json(lab: &Lab, args: &[&str]) -> Value {
    let out = Command::new(&lab.dcp_bin)
        .arg("--data-dir")
        .arg(lab.data_dir())
        .arg("--json")
        .args(args)
        .current_dir(lab.project())
        .envs(lab.env())
        .output()
        .unwrap();
    assert!(out.status.success(), "dcp {args:?}: {}", tail(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("dcp {args:?}: {e}"))
}

/// The live figures against `dcp replay`'s of the same recording (the lab's model window):
/// tokens kept out within 2% of none's tokens sent minus dcp's, the cost share within 0.02 of
/// 1 - dcp's cost / none's, the same requests.
pub fn live_equals_replay(lab: &Lab, session: &str, live: &Value) {
    let replay = dcp_json(lab, &["replay", "--session", session, "--context-limit", "128000"]);
    let s = &replay["sessions"][0];
    let (none, dcp) = (&s["modes"]["none"], &s["modes"]["dcp"]);
    let replay_kept = none["tokens_sent"].as_i64().unwrap() - dcp["tokens_sent"].as_i64().unwrap();
    let replay_share = 1.0 - dcp["cost"].as_f64().unwrap() / none["cost"].as_f64().unwrap();
    let kept = live["kept_out_tokens"].as_i64().unwrap();
    let share = live["cost_saved_share"].as_f64().unwrap();
    let off = (kept - replay_kept).abs() as f64 / replay_kept.abs().max(1) as f64;
    println!(
        "live: kept out {kept}, cost share {share:.4}; replay: {replay_kept}, {replay_share:.4} ({:.2}% apart)",
        100.0 * off
    );
    assert_eq!(live["requests"], s["requests"], "live {live}\nreplay {s}");
    assert!(replay_kept.abs() > 1_000, "the session must keep something out: {s}");
    assert!(off <= 0.02, "kept out: live {kept}, replay {replay_kept} ({:.1}% apart)", 100.0 * off);
    assert!((share - replay_share).abs() <= 0.02, "cost share: live {share:.4}, replay {replay_share:.4}");
}

/// What the state file keeps per request of what the provider reported.
#[derive(Debug, PartialEq)]
pub struct Reported {
    pub request: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: Option<f64>,
}

/// `dcp.reported` of a state file.
pub fn reported(state: &Value) -> Vec<Reported> {
    let lines = state["dcp"]["reported"].as_array().cloned().unwrap_or_default();
    let parse = |line: &Value| {
        let f: Vec<&str> = line.as_str().unwrap().split(' ').collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        let cost = (f[6] != "-").then(|| f[6].parse::<f64>().unwrap());
        Reported { request: n(0), input: n(1), output: n(2), cache_read: n(4), cache_write: n(5), cost }
    };
    lines.iter().map(parse).collect()
}

/// Every request dcp answered has what the fake model billed it beside it, as OpenCode stored
/// it (the prompt tokens not read from the cache as input, the cached ones as cache reads),
/// with OpenCode's cost, and the model's prices are kept.
fn usage_is_what_the_model_billed(lab: &Lab, session: &str, state: &Value) {
    let main: Vec<Logged> = lab.llm.main_requests();
    let got = reported(state);
    let requests = state["stats"]["requests"].as_u64().unwrap();
    assert_eq!(requests as usize, main.len(), "dcp answered every main request");
    let costs = step_costs(lab, session);
    let expected: Vec<Reported> = main
        .iter()
        .zip(&costs)
        .enumerate()
        .map(|(i, (l, cost))| Reported {
            request: i as u64 + 1,
            input: l.billed.prompt - l.billed.cached,
            output: l.output,
            cache_read: l.billed.cached,
            cache_write: 0,
            cost: Some(*cost),
        })
        .collect();
    assert_eq!(got, expected, "what dcp recorded against what the model billed");
    assert!(got.iter().any(|r| r.cache_read > 0), "the fake provider's cache was read: {got:?}");
    let (input, output, cache_read, cache_write) = PRICES;
    let prices = json!({"input": input, "output": output, "cacheRead": cache_read, "cacheWrite": cache_write});
    let models = &state["dcp"]["models"];
    assert_eq!(models, &json!([{"provider": "fake", "id": "fake-model", "cost": prices, "context": 128000}]));
}

/// The cost OpenCode stored on each model step of `session`, in order.
fn step_costs(lab: &Lab, session: &str) -> Vec<f64> {
    let conn = rusqlite::Connection::open_with_flags(lab.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn.prepare("SELECT data FROM message WHERE session_id = ?1 ORDER BY time_created, id").unwrap();
    let rows = stmt.query_map([session], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap);
    let infos: Vec<Value> = rows.map(|d| serde_json::from_str(&d).unwrap()).collect();
    infos
        .iter()
        .filter(|i| i["role"] == "assistant" && i["summary"] != true)
        .map(|i| i["cost"].as_f64().unwrap())
        .collect()
}

/// dcp's defaults as the proxy runs them: no agent tools (a proxied client cannot run them), so
/// that replay runs what the proxy ran.
const PROXIED: &str = r#"{ "tools": {"discard": {"enabled": false}, "compress": {"enabled": false}} }"#;

#[test]
fn opencode_through_the_proxy_is_metered_as_its_replay_and_keeps_what_the_upstream_billed() {
    let lab = Lab::new(PROXIED);
    let proxy = crate::proxy::ProxyProcess::start(&format!("http://127.0.0.1:{}", lab.llm.port), lab.env());
    super::proxy::through_proxy(&lab, proxy.port);
    let session = super::savings::record_session(&lab);
    lab.prompt(
        Some(&session),
        "Read the parser twice more and the records again.",
        vec![
            read("p4.parser", "src/parser.py"),
            read("p4.records", "data/records.csv"),
            read("p4.parser_again", "src/parser.py"),
            Turn::text("p4.answer", "Read."),
        ],
    );
    assert!(proxy.stop(), "the proxy stops cleanly");
    let states = super::proxy::proxied_states(&lab.state_dir());
    let (sid, state) = states.iter().max_by_key(|(_, s)| s["stats"]["requests"].as_u64()).unwrap();
    let stats = super::proxy::stats_of(&lab.env(), &lab.data_dir(), sid);
    live_equals_replay(&lab, &session, &stats["session"]);
    // Each request of the conversation has what the upstream billed it beside it.
    let main = lab.llm.main_requests();
    let expected: Vec<Reported> = main
        .iter()
        .enumerate()
        .map(|(i, l)| Reported {
            request: i as u64 + 1,
            input: l.billed.prompt - l.billed.cached,
            output: l.output,
            cache_read: l.billed.cached,
            cache_write: 0,
            cost: None,
        })
        .collect();
    assert_eq!(reported(state), expected, "what the proxy recorded against what the upstream billed");
    assert_eq!(state["dcp"]["models"][0]["id"], "fake-model", "{}", state["dcp"]["models"]);
}

#[test]
fn what_dcp_kept_out_is_what_a_caching_provider_billed_less_with_dcp_than_without() {
    let with = Lab::new(DEFAULTS);
    let session = super::savings::record_session(&with);
    let without = Lab::new(DEFAULTS);
    no_plugin(&without);
    super::savings::record_session(&without);
    let live = &dcp_json(&with, &["stats", "--session", &session])["session"];
    let (tokens_with, cost_with) = billed(&with);
    let (tokens_without, cost_without) = billed(&without);
    let (kept, share) = (live["kept_out_tokens"].as_i64().unwrap(), live["cost_saved_share"].as_f64().unwrap());
    let (billed_kept, billed_share) = (tokens_without as i64 - tokens_with as i64, 1.0 - cost_with / cost_without);
    let off = (kept - billed_kept).abs() as f64 / billed_kept as f64;
    println!("kept out: live {kept}, billed less {billed_kept} ({:.2}% apart); cost share: live {share:.4}, billed {billed_share:.4}", 100.0 * off);
    assert!(billed_kept > 1_000, "dcp must keep something out: {billed_kept}");
    assert!(off <= 0.02, "kept out: live {kept}, billed less {billed_kept} ({:.1}% apart)", 100.0 * off);
    assert!((share - billed_share).abs() <= 0.02, "cost share: live {share:.4}, billed {billed_share:.4}");
}

/// Loads no plugin in the lab's OpenCode.
fn no_plugin(lab: &Lab) {
    let path = lab.root().join("xdg/config/opencode/opencode.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("plugin");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// What the lab's fake model billed for the main agent's requests: prompt tokens, and their
/// cost in tokens at the input price (cache reads at 0.1x, writes at 1.25x).
fn billed(lab: &Lab) -> (u64, f64) {
    let main = lab.llm.main_requests();
    let tokens = main.iter().map(|l| l.billed.prompt).sum();
    let cost = main.iter().map(|l| 0.1 * l.billed.cached as f64 + 1.25 * l.billed.written as f64).sum();
    (tokens, cost)
}

/// The proxied conversation's recorded usage is what the fake upstream billed its scripted
/// requests, in the API's fields: `fields` maps a billing to the input, cache reads and cache
/// writes the API reports.
pub fn upstream_usage_recorded(
    state: &Value,
    log: &[super::proxy_upstream::Logged],
    fields: impl Fn(&super::prompt_cache::Billed) -> (u64, u64, u64),
) {
    let scripted: Vec<_> = log.iter().filter(|l| l.step.is_some()).filter_map(|l| l.billed).collect();
    // The conversation's requests are the last scripted ones: a client's first request may be
    // a conversation of its own (Claude Code's first user message differs from the next ones').
    let n = state["stats"]["requests"].as_u64().unwrap() as usize;
    assert!(n <= scripted.len() && n + 1 >= scripted.len(), "{n} requests of {} scripted", scripted.len());
    let expected: Vec<Reported> = scripted[scripted.len() - n..]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (input, cache_read, cache_write) = fields(&b);
            let output = super::proxy_upstream::OUTPUT;
            Reported { request: i as u64 + 1, input, output, cache_read, cache_write, cost: None }
        })
        .collect();
    assert_eq!(reported(state), expected, "what the proxy recorded against what the upstream billed");
    assert!(expected.iter().any(|r| r.cache_read > 0), "the upstream's cache was read: {expected:?}");
}
