//! What the provider reported it billed, kept beside what dcp counted (issue 37): a step's
//! usage reaches the request that produced it, by the plugin's `usage` notification or by the
//! next request's history; the state file keeps it, reads older files as before and names a
//! bad line; `dcp stats --json` gives it per request.

use serde_json::{json, Value};

use crate::support::{dcp, Sandbox, SessionBuilder, Sidecar};
use dcp::state::persist::{parse, render};

const SID: &str = "ses_test";

/// A step's tokens and cost, as OpenCode stores them on its message.
fn tokens(input: u64, read: u64) -> Value {
    json!({"total": input + read + 7, "input": input, "output": 7, "reasoning": 0, "cache": {"read": read, "write": 0}})
}

/// A prompt and three steps, a second apart, each step's message created as its request is
/// made; the first step carries what the provider billed it.
fn history() -> Vec<Value> {
    let b = SessionBuilder::new().user("look around").tool("a1", "read", json!({"filePath": "/p/a.py"}), "x = 1\n");
    let b = b.tool("a2", "read", json!({"filePath": "/p/b.py"}), "y = 2\n").text("Done.");
    let mut messages: Vec<Value> = b.build().into_iter().map(|m| serde_json::to_value(m).unwrap()).collect();
    let info = &mut messages[1]["info"];
    info["tokens"] = tokens(900, 0);
    info["cost"] = json!(0.0028);
    info["providerID"] = json!("fake");
    info["modelID"] = json!("fake-model");
    messages
}

fn created(message: &Value) -> i64 {
    message["info"]["time"]["created"].as_i64().unwrap()
}

fn usage_params(created: i64, input: u64, read: u64) -> Value {
    json!({"sessionID": SID, "created": created,
        "usage": {"input": input, "output": 7, "reasoning": 0, "cacheRead": read, "cacheWrite": 0, "cost": 0.001},
        "model": {"provider": "fake", "id": "fake-model", "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}, "context": 128000}})
}

fn notify(sidecar: &mut Sidecar, method: &str, params: Value) {
    sidecar.write(json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string().as_bytes());
}

#[test]
fn a_step_s_usage_reaches_the_request_that_produced_it_by_notification_or_by_the_next_history() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, r#"{"pruneNotification": "off"}"#);
    let messages = history();
    // Request k carries the messages before step k and is made when step k's message is created.
    for k in 1..=3 {
        let params = json!({"sessionID": SID, "now": created(&messages[k]) + 5, "messages": messages[..k]});
        sidecar.result("transform", params);
        if k == 2 {
            // Step 2 is told by the plugin; step 1 was read from this request's history.
            notify(&mut sidecar, "usage", usage_params(created(&messages[2]), 80, 900));
        }
    }
    // Step 3 too; and a step created long before any request dcp answered goes nowhere.
    notify(&mut sidecar, "usage", usage_params(created(&messages[3]), 10, 1_000));
    notify(&mut sidecar, "usage", usage_params(created(&messages[1]) - 600_000, 5, 5));
    notify(&mut sidecar, "usage", json!({"sessionID": SID, "usage": {"input": -3}}));
    sidecar.result("shutdown", json!({}));
    let file = s.state_dir().join("ses_test.json");
    let saved = || std::fs::read_to_string(&file).is_ok_and(|t| t.contains("\"3 10 7 0 1000 0 0.001"));
    assert!(crate::support::poll(saved, std::time::Duration::from_secs(10)), "the usage was never saved");
    let out = dcp(&s, &["--json", "stats", "--session", SID]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = &stats["session"];
    let rows = session["per_request"].as_array().unwrap();
    let got: Vec<(u64, u64, Option<f64>, &str)> = rows
        .iter()
        .map(|r| {
            let u = &r["reported"];
            (
                u["input"].as_u64().unwrap(),
                u["cache_read"].as_u64().unwrap(),
                u["cost"].as_f64(),
                u["model"].as_str().unwrap(),
            )
        })
        .collect();
    let model = "fake/fake-model";
    assert_eq!(
        got,
        vec![(900, 0, Some(0.0028), model), (80, 900, Some(0.001), model), (10, 1_000, Some(0.001), model)]
    );
    assert_eq!(session["reported"]["requests"], 3, "{session}");
    assert_eq!(session["reported"]["input"], 990, "{session}");
    assert!(rows.iter().all(|r| r["without"].as_u64() > Some(0) && r["with"].as_u64() > Some(0)), "{rows:?}");
    let state: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let lines: Vec<&str> = state["dcp"]["reported"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(lines, vec!["1 900 7 0 0 0 0.0028 0", "2 80 7 0 900 0 0.001 1", "3 10 7 0 1000 0 0.001 1"]);
    let models = &state["dcp"]["models"];
    assert_eq!(
        models[1]["cost"],
        json!({"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}),
        "{models}"
    );
}

/// A state file as dcp wrote it before issue 37: its savings, no provider usage.
const OLDER: &str = r#"{"stats": {"pruneTokenCounter": 0, "totalPruneTokens": 0, "requests": 2, "keptOutTokens": -40,
  "costWithout": 1700.0, "costSaved": -50.0}, "prune": {"toolIds": []}, "lastUpdated": "2026-11-22T03:15:07.482Z",
  "dcp": {"version": 1, "pruned": {}, "byStrategy": {}, "ids": {}, "nextId": 1, "lastCompaction": 0,
  "lastContext": 700, "lastSent": 720, "trail": ["1 600 620 -25 -", "2 700 720 -25 -"]}}"#;

#[test]
fn a_state_file_keeps_the_provider_s_usage_reads_an_older_one_as_before_and_names_a_bad_line() {
    let older = parse(OLDER.as_bytes()).unwrap();
    assert_eq!((older.savings.requests, older.savings.trail.len(), older.savings.reported.len()), (2, 2, 0));
    assert_eq!(older.savings.last_appended, 0);
    let mut raw: Value = serde_json::from_str(OLDER).unwrap();
    raw["dcp"]["lastAppended"] = json!(20);
    raw["dcp"]["reported"] = json!(["2 80 7 0 900 0 - 0", "1 900 7 0 0 0 0.0028 -"]);
    raw["dcp"]["models"] = json!([{"provider": "fake", "id": "fake-model", "context": 128000}]);
    let state = parse(raw.to_string().as_bytes()).unwrap();
    let requests: Vec<u64> = state.savings.reported.iter().map(|r| r.request).collect();
    assert_eq!(requests, vec![1, 2], "kept in order of request");
    assert_eq!((state.savings.last_appended, state.savings.models[0].context), (20, Some(128_000)));
    // Written and read again, it is the same.
    let again = parse(&render(&state, "2026-11-22T03:15:07.482Z")).unwrap();
    assert_eq!(again.savings, state.savings);
    for (key, bad, named) in [
        ("reported", json!(["1 900 7 0 0 0"]), "dcp.reported.0"),
        ("reported", json!("1 900 7 0 0 0 - -"), "dcp.reported"),
        ("models", json!([{"provider": "fake"}]), "dcp.models.0.id"),
        (
            "models",
            json!([{"provider": "p", "id": "m", "cost": {"input": -1, "output": 1, "cacheRead": 0, "cacheWrite": 0}}]),
            "dcp.models.0.cost.input",
        ),
    ] {
        let mut broken = raw.clone();
        broken["dcp"][key] = bad;
        let err = parse(broken.to_string().as_bytes()).unwrap_err().to_string();
        assert!(err.contains(named), "{named}: {err}");
    }
}

/// `cost_without` of session `sid` in `dcp stats --json`.
fn cost_without(s: &Sandbox, sid: &str) -> f64 {
    let out = dcp(s, &["--json", "stats", "--session", sid]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    stats["session"]["cost_without"].as_f64().unwrap()
}

/// Two requests of session `sid`, a second apart, each in a process of its own; the first
/// names `model` (OpenCode's model data) in its `transform`, the second names `second`, as
/// OpenCode's first request of a process does not (it asks for the messages before it names
/// the model).
fn two_processes(s: &Sandbox, sid: &str, messages: &[Value], model: Option<&Value>, second: Option<&Value>) {
    for (k, named) in [(1, model), (2, second)] {
        let mut sidecar = Sidecar::spawn(s, r#"{"pruneNotification": "off"}"#);
        let mut params =
            json!({"sessionID": sid, "now": 1_800_000_000_000i64 + 1_000 * k as i64, "messages": messages[..k + 1]});
        if let Some(named) = named {
            params["model"] = named.clone();
        }
        sidecar.result("transform", params);
        sidecar.shutdown();
    }
}

#[test]
fn a_process_s_first_request_is_priced_by_the_model_its_session_remembered() {
    let s = Sandbox::new();
    let messages = history();
    // Reads at half the input price and writes at the input price: not the default sheet's.
    let model = json!({"provider": "fake", "id": "fake-model", "cost": {"input": 2, "output": 10, "cacheRead": 1, "cacheWrite": 2}});
    two_processes(&s, "ses_named", &messages, Some(&model), Some(&model));
    two_processes(&s, "ses_remembered", &messages, Some(&model), None);
    let named = cost_without(&s, "ses_named");
    assert!(named > 0.0);
    assert_eq!(cost_without(&s, "ses_remembered"), named, "the second process priced its first request as the model's");
    // A session whose client never gave a model's prices: the config's sheet, as for a caller
    // that names no model (`dcp replay`), whatever its prompt names.
    let mut prompted = messages.clone();
    prompted[0]["info"]["model"] = json!({"providerID": "openai", "modelID": "gpt-5"});
    two_processes(&s, "ses_config", &prompted, None, None);
    assert_ne!(cost_without(&s, "ses_config"), named, "the config's sheet prices the same requests apart");
}

#[test]
fn a_state_file_s_models_read_back_without_any_reported_usage() {
    let mut raw: Value = serde_json::from_str(OLDER).unwrap();
    raw["dcp"]["models"] = json!([{"provider": "fake", "id": "fake-model", "cost": {"input": 2.0, "output": 10.0, "cacheRead": 1.0, "cacheWrite": 2.0}}]);
    let state = parse(raw.to_string().as_bytes()).unwrap();
    assert_eq!(state.savings.models.len(), 1, "the model the client named is kept");
    let again = parse(&render(&state, "2026-11-22T03:15:07.482Z")).unwrap();
    assert_eq!(again.savings.models, state.savings.models);
}
