//! Money (issue 37, part 4) and the control group (part 6): what dcp saved priced at the
//! session's sheet in `dcp stats --json` and `/dcp stats`, in tokens where the sheet has no
//! money prices; a held-out session sent unpruned, its arm kept across a restart; and the
//! comparison's "too few sessions" and its interval.

use serde_json::{json, Value};

use crate::savings::session;
use crate::support::{dcp, rendered, Sandbox, SessionBuilder, Sidecar};

const SID: &str = "ses_money";

/// Prunes in force from the first request, the tools not offered: dcp only removes.
const PRUNING: &str = r#""rewrite": {"mode": "immediate"}, "tools": {"settings": {"offer": "paid"}}"#;

/// A session that read each of `n + 1` files twice: each request has a new duplicate.
fn duplicates(n: usize) -> Vec<Value> {
    let mut b = SessionBuilder::new().user("look around");
    for k in 0..=n {
        let path = json!({"filePath": format!("/p/f{k}.py")});
        let text = format!("def f{k}():\n    return {k}\n").repeat(200);
        b = b.tool(&format!("r{k}a"), "read", path.clone(), &text).tool(&format!("r{k}b"), "read", path, &text);
    }
    b.build().into_iter().map(|m| serde_json::to_value(m).unwrap()).collect()
}

/// Sends `requests` requests of the growing session `sid` (a duplicate read and a big one), a
/// second apart; returns the answers.
fn drive(sidecar: &mut Sidecar, sid: &str, requests: usize) -> Vec<Value> {
    let t0 = 1_800_000_000_000i64;
    (0..requests)
        .map(|i| {
            let params = json!({"sessionID": sid, "now": t0 + 1000 * i as i64, "messages": session(i)});
            sidecar.result("transform", params)
        })
        .collect()
}

fn stats_json(s: &Sandbox, args: &[&str]) -> Value {
    let mut all = vec!["--json", "stats"];
    all.extend_from_slice(args);
    let out = dcp(s, &all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sandbox_with(config: &str, requests: usize) -> Sandbox {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, config);
    drive(&mut sidecar, SID, requests);
    sidecar.shutdown();
    s
}

/// Claude Sonnet 4's sheet: $3 per million input tokens. The money figures are the cost saved
/// and the cost without dcp (tokens at the input price) at that price, per session, per model
/// and all-time.
#[test]
fn money_in_stats_json_is_the_cost_saved_at_the_sheet_s_input_price() {
    let s = sandbox_with(&format!(r#"{{{PRUNING}, "prices": {{"sheet": "claude-sonnet-4"}}}}"#), 4);
    let v = stats_json(&s, &["--session", SID]);
    let session = &v["session"];
    let (saved, without) = (session["cost_saved"].as_f64().unwrap(), session["cost_without"].as_f64().unwrap());
    assert!(saved > 1_000.0, "{session}");
    let near = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-5;
    assert!(near(&session["money_saved"], saved * 3.0 / 1e6), "{session}");
    assert!(near(&session["money_without"], without * 3.0 / 1e6), "{session}");
    assert_eq!((&session["currency"], &session["sheet"]), (&json!("USD"), &json!("claude-sonnet-4")));
    let by_model = session["by_model"].as_array().unwrap();
    assert_eq!(by_model.len(), 1, "{session}");
    assert_eq!((&by_model[0]["requests"], &by_model[0]["money_saved"]), (&json!(4), &session["money_saved"]));
    // All-time: this session is the only one with requests in the sandbox.
    let all = &v["all_time"];
    assert_eq!((&all["currency"], &all["money_saved"]), (&json!("USD"), &session["money_saved"]), "{all}");
}

/// A set input price and currency price the same figures in that currency.
#[test]
fn a_price_set_by_hand_prices_the_saving_in_its_currency() {
    let s = sandbox_with(&format!(r#"{{{PRUNING}, "prices": {{"input": 2, "currency": "EUR"}}}}"#), 3);
    let session = &stats_json(&s, &["--session", SID])["session"];
    let saved = session["cost_saved"].as_f64().unwrap();
    assert!((session["money_saved"].as_f64().unwrap() - saved * 2.0 / 1e6).abs() < 1e-5, "{session}");
    assert_eq!((&session["currency"], &session["sheet"]), (&json!("EUR"), &json!("custom")));
}

/// The default sheet (Anthropic's 5-minute cache) has no money prices: no money figure, and
/// the text says the saving in tokens and why.
#[test]
fn without_money_prices_the_saving_is_told_in_tokens() {
    let s = sandbox_with(&format!("{{{PRUNING}}}"), 3);
    let session = &stats_json(&s, &["--session", SID])["session"];
    assert_eq!((&session["money_saved"], &session["currency"]), (&Value::Null, &Value::Null), "{session}");
    let out = dcp(&s, &["stats", "--session", SID]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  Money saved:     ~") && text.contains("tokens' worth; anthropic-5m has no money prices"),
        "{text}"
    );
}

/// `dcp stats` with money, as the person reads it.
#[test]
fn stats_show_the_money_saved_at_the_session_s_sheet() {
    let s = sandbox_with(&format!(r#"{{{PRUNING}, "prices": {{"sheet": "claude-opus-4-5"}}}}"#), 4);
    let out = dcp(&s, &["stats", "--session", SID]);
    let root = s.dir.path().display().to_string();
    insta::assert_snapshot!(rendered(&out).replace(&root, "[SANDBOX]"));
}

/// `/dcp stats` in the session says the same, and the notice of a prune says what the session
/// saved so far.
#[test]
fn the_notice_and_slash_stats_say_the_money_saved() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(
        &s,
        &format!(r#"{{{PRUNING}, "pruneNotification": "minimal", "prices": {{"sheet": "gpt-5"}}}}"#),
    );
    let t0 = 1_800_000_000_000i64;
    let answers: Vec<Value> = (0..3)
        .map(|i| {
            let params = json!({"sessionID": SID, "now": t0 + 1000 * i as i64, "messages": duplicates(i)});
            sidecar.result("transform", params)
        })
        .collect();
    let text = sidecar.result("command", json!({"sessionID": SID, "arguments": "stats"}))["text"].clone();
    sidecar.shutdown();
    let text = text.as_str().unwrap();
    assert!(text.contains("  Money saved:     $") && text.contains("without dcp (gpt-5 prices)"), "{text}");
    // Each request prunes a new duplicate. The first notice comes before any request was
    // counted; the next ones say the saving.
    let notices: Vec<&str> = answers.iter().filter_map(|a| a["notify"].as_str()).collect();
    assert!(notices.iter().skip(1).any(|n| n.contains(" · saved so far: $")), "{notices:?}");
}

fn edits_none(answer: &Value) -> bool {
    let edits = &answer["edits"];
    let empty = edits.as_array().is_some_and(Vec::is_empty) || edits.is_string();
    let replaced = answer.get("replace").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
    empty && answer["append"].as_array().is_some_and(Vec::is_empty) && !replaced
}

fn arm(s: &Sandbox, sid: &str) -> Value {
    let file: Value =
        serde_json::from_slice(&std::fs::read(s.state_dir().join(format!("{sid}.json"))).unwrap()).unwrap();
    file["dcp"]["holdout"].clone()
}

/// A session drawn into the unpruned arm is recorded there at its start, and stays there
/// after a restart whose config no longer holds any session out; its requests are still
/// counted. A session that starts then is pruned.
#[test]
fn a_held_out_session_stays_unpruned_across_a_restart() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, &format!(r#"{{{PRUNING}, "holdout": 1}}"#));
    let answers = drive(&mut sidecar, SID, 2);
    sidecar.shutdown();
    assert!(answers.iter().all(edits_none), "{answers:?}");
    assert_eq!(arm(&s, SID)["arm"], json!("unpruned"));

    let mut sidecar = Sidecar::spawn(&s, &format!("{{{PRUNING}}}"));
    let t0 = 1_800_000_000_000i64;
    let answers: Vec<Value> = (2..6)
        .map(|i| {
            let params = json!({"sessionID": SID, "now": t0 + 1000 * i as i64, "messages": session(i)});
            sidecar.result("transform", params)
        })
        .collect();
    let fresh = drive(&mut sidecar, "ses_after", 4);
    sidecar.shutdown();
    assert!(answers.iter().all(edits_none), "the restart pruned a held-out session: {answers:?}");
    assert!(!fresh.iter().all(edits_none), "a session outside the trial was not pruned");
    assert_eq!(arm(&s, SID), json!({"arm": "unpruned", "prompts": 1}));
    assert_eq!(arm(&s, "ses_after"), Value::Null);
    let session = &stats_json(&s, &["--session", SID])["session"];
    // Every request counted, nothing kept out or saved.
    let counted = (&session["requests"], &session["kept_out_tokens"], &session["cost_saved"]);
    assert_eq!(counted, (&json!(6), &json!(0), &json!(0.0)), "{session}");
}

/// Writes a state file of session `sid` in arm `arm`, with `requests` requests over `prompts`
/// prompts.
fn trial_file(s: &Sandbox, sid: &str, arm: &str, requests: u64, prompts: u64) {
    let file = json!({
        "stats": {"pruneTokenCounter": 0, "totalPruneTokens": 0, "totalPrunedTools": 0, "requests": requests,
                  "keptOutTokens": 0, "costWithout": 1000.0, "costSaved": 0.0},
        "dcp": {"version": 1, "holdout": {"arm": arm, "prompts": prompts}}
    });
    std::fs::create_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir().join(format!("{sid}.json")), serde_json::to_vec(&file).unwrap()).unwrap();
}

/// While an arm has fewer than five sessions the comparison says so and gives no interval;
/// with five in each, Welch's interval of the difference of the means.
#[test]
fn the_control_group_says_too_few_sessions_until_each_arm_has_five() {
    let s = Sandbox::new();
    std::fs::create_dir_all(s.dir.path().join("home/.config/opencode")).unwrap();
    std::fs::write(s.dir.path().join("home/.config/opencode/dcp.jsonc"), r#"{"holdout": 0.5}"#).unwrap();
    for i in 0..5u64 {
        trial_file(&s, &format!("ses_pruned_{i}"), "pruned", 10 + 2 * i, 2);
    }
    for i in 0..4u64 {
        trial_file(&s, &format!("ses_held_{i}"), "unpruned", 20 + 2 * i, 2);
    }
    let holdout = stats_json(&s, &[])["holdout"].clone();
    assert_eq!(
        (&holdout["verdict"], &holdout["pruned"], &holdout["unpruned"]),
        (&json!("too few sessions"), &json!(5), &json!(4)),
        "{holdout}"
    );
    trial_file(&s, "ses_held_4", "unpruned", 28, 2);
    let holdout = stats_json(&s, &[])["holdout"].clone();
    assert_eq!(holdout["verdict"], json!("compared"), "{holdout}");
    let requests = holdout["measures"].as_array().unwrap().iter().find(|m| m["name"] == "requests").unwrap().clone();
    // 10..18 against 20..28 by 2: difference -10, s² = 10 each, se = 2, df = 8, t = 2.306.
    assert_eq!(requests["difference"], json!(-10.0), "{requests}");
    let low = requests["low"].as_f64().unwrap();
    assert!((low - (-10.0 - 2.306 * 2.0)).abs() < 0.01, "{requests}");
    let bill =
        holdout["measures"].as_array().unwrap().iter().find(|m| m["name"] == "bill_per_request").unwrap().clone();
    assert_eq!(bill["verdict"], json!("too few sessions"), "no session reported its usage: {bill}");
}
