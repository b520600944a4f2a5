//! dcp's head (its agent tools, their instructions, the prunable list and the message id
//! tags): by default (`tools.settings.offer = "paid"`) only once its ledger has paid for it
//! (`turn`, `policy::offer`), and with `"always"` from a session's first request.

use serde_json::{json, Value};

use crate::sidecar::recorded_messages;
use crate::support::{Sandbox, Sidecar, DB_SESSION};

/// One request of the recorded session at `now`, after a `turn`: what `turn`, `system` and
/// `transform` answered.
fn request(sidecar: &mut Sidecar, sandbox: &Sandbox, now: i64) -> (bool, Value, Value) {
    let turn = sidecar.result("turn", json!({"sessionID": DB_SESSION, "parentID": null, "now": now}));
    let system = sidecar.result("system", json!({"sessionID": DB_SESSION}));
    let params = json!({"sessionID": DB_SESSION, "parentID": null, "now": now, "messages": recorded_messages(sandbox)});
    let transformed = sidecar.result("transform", params);
    (turn["offer"] == json!(true), system["system"].clone(), transformed)
}

/// The offer of the tools once paid for.
const PAID: &str = r#"{"tools": {"settings": {"offer": "paid"}}}"#;

fn tagged(transformed: &Value) -> bool {
    transformed["edits"].as_array().unwrap().iter().any(|e| e.get("append").is_some())
}

#[test]
fn a_new_session_is_offered_nothing_it_has_not_paid_for() {
    let sandbox = Sandbox::new();
    // The fixture's state file was written by a dcp that offered the tools from the start
    // (as one that predates `offered` did); a new session has none.
    let _ = std::fs::remove_file(sandbox.state_dir().join(format!("{DB_SESSION}.json")));
    let mut sidecar = Sidecar::spawn(&sandbox, PAID);
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert!(!offer, "nothing is banked on a session's first turn");
    assert_eq!(system, json!([]), "no instructions for tools the session does not have");
    assert_eq!(transformed["append"], json!([]), "no <prunable-tools> list");
    assert!(!tagged(&transformed), "no message id tags");
    // A session dcp never saved anything on never gets them.
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_900_000);
    assert!(!offer);
    sidecar.shutdown();
}

#[test]
fn offer_always_gives_the_tools_from_the_first_request_as_the_published_dcp_does() {
    let sandbox = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"tools": {"settings": {"offer": "always"}}}"#);
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert!(offer);
    assert!(system[0].as_str().unwrap().contains("compress"), "{system}");
    assert!(tagged(&transformed), "message id tags from the first request");
    sidecar.shutdown();
}

#[test]
fn the_tools_come_at_a_cold_turn_once_the_bank_covers_them_and_stay() {
    let sandbox = Sandbox::new();
    // A session whose ledger has banked enough (as a restarted sidecar finds it).
    let state = json!({"sessionName": "t", "dcp": {"ledger": {"banked": 20000.0, "warm": 3,
        "lastRequest": 1_790_000_000_000_i64, "offered": false}}});
    std::fs::create_dir_all(sandbox.state_dir()).unwrap();
    let file = sandbox.state_dir().join(format!("{DB_SESSION}.json"));
    std::fs::write(&file, state.to_string()).unwrap();
    let mut sidecar = Sidecar::spawn(&sandbox, PAID);
    // Warm (a minute later): offering would re-bill the whole cached prompt.
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_060_000);
    assert!(!offer, "a warm turn would re-bill the prompt: not paid for");
    // Cold (ten minutes later): the prompt is written again anyway; only the head costs.
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_660_000);
    assert!(offer, "a cold turn with the head paid for");
    assert!(!system.as_array().unwrap().is_empty());
    assert!(tagged(&transformed), "the tags come with the head, on the request that re-bills anyway");
    let (offer, ..) = request(&mut sidecar, &sandbox, 1_790_000_720_000);
    assert!(offer, "once offered, the tools stay");
    sidecar.shutdown();
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["dcp"]["ledger"]["offered"], json!(true), "{saved}");
}

#[test]
fn with_offer_always_the_tools_are_offered_from_a_sessions_first_request() {
    let sandbox = Sandbox::new();
    let _ = std::fs::remove_file(sandbox.state_dir().join(format!("{DB_SESSION}.json")));
    let mut sidecar = Sidecar::spawn(&sandbox, r#"{"tools": {"settings": {"offer": "always"}}}"#);
    let (offer, system, transformed) = request(&mut sidecar, &sandbox, 1_790_000_000_000);
    assert!(offer, "the first turn has the tools");
    assert!(system[0].as_str().unwrap().contains("Call `discard`"), "{system}");
    assert!(tagged(&transformed), "message id tags for compress");
    sidecar.shutdown();
}
