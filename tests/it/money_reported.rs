//! Money against what the provider reported (issue 37): no saving is claimed where the bill
//! the provider reported for a session's requests is not below dcp's estimate of what they
//! would have cost without pruning, and the control group compares the arms on the bill the
//! provider reported per request, with Welch's interval.

use serde_json::{json, Value};

use crate::support::{dcp, rendered, Sandbox};

/// A state file of session `sid`: three requests a second apart (10,000, 11,000 and 12,000
/// tokens without dcp), each with `reported` as the provider's usage line (`<input> <output>
/// <reasoning> <cache read> <cache write>`), in `arm` of the trial when given.
fn state_file(s: &Sandbox, sid: &str, reported: &str, arm: Option<&str>) {
    let mut file = json!({
        "stats": {"pruneTokenCounter": 0, "totalPruneTokens": 0, "totalPrunedTools": 0, "requests": 3,
                  "keptOutTokens": 6000, "costWithout": 17100.0, "costSaved": 3000.0},
        "dcp": {"version": 1, "lastContext": 12000, "lastSent": 10000,
                "trail": ["1000 10000 8000 2500 -", "2000 11000 9000 250 -", "3000 12000 10000 250 -"],
                "reported": (1..=3).map(|r| format!("{r} {reported} - -")).collect::<Vec<_>>()}
    });
    if let Some(arm) = arm {
        file["dcp"]["holdout"] = json!({"arm": arm, "prompts": 1});
    }
    std::fs::create_dir_all(s.state_dir()).unwrap();
    std::fs::write(s.state_dir().join(format!("{sid}.json")), serde_json::to_vec(&file).unwrap()).unwrap();
}

fn config(s: &Sandbox, config: &str) {
    std::fs::create_dir_all(s.dir.path().join("home/.config/opencode")).unwrap();
    std::fs::write(s.dir.path().join("home/.config/opencode/dcp.jsonc"), config).unwrap();
}

fn stats_json(s: &Sandbox, args: &[&str]) -> Value {
    let out = dcp(s, &[&["--json", "stats"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_saving_the_reported_bill_contradicts_is_claimed_nowhere() {
    let s = Sandbox::new();
    config(&s, r#"{"prices": {"sheet": "claude-sonnet-4"}}"#);
    // dcp's estimate without pruning, warm a second apart: 1.25 x 10,000, then 0.1 x the
    // context before + 1.25 x the growth: 12,500 + 2,250 + 2,350 = 17,100.
    // Billed below it: 100 + 0.1 x 9,000 + 1.25 x 1,000 = 2,250 a request.
    state_file(&s, "ses_below", "100 50 0 9000 1000", None);
    // Billed above it: 20,000 uncached a request.
    state_file(&s, "ses_above", "20000 50 0 0 0", None);
    let below = &stats_json(&s, &["--session", "ses_below"])["session"];
    assert_eq!(
        below["reported_check"],
        json!({"requests": 3, "reported": 6750.0, "estimate_without": 17100.0, "contradicted": false})
    );
    assert!(below["money_saved"].as_f64() > Some(0.0), "{below}");
    let above = &stats_json(&s, &["--session", "ses_above"])["session"];
    assert_eq!(above["reported_check"]["contradicted"], json!(true), "{above}");
    let text = rendered(&dcp(&s, &["stats", "--session", "ses_above"]));
    let session = text.split("All-time").next().unwrap();
    assert!(session.contains("none claimed"), "{text}");
    assert!(!session.contains("Money saved:     $"), "{text}");
    let text = rendered(&dcp(&s, &["stats", "--session", "ses_below"]));
    assert!(!text.contains("none claimed"), "{text}");
}

#[test]
fn the_control_group_compares_the_bill_the_provider_reported_per_request() {
    let s = Sandbox::new();
    config(&s, r#"{"holdout": 0.5}"#);
    // The default sheet has no money prices: the bill is its prompt tokens at the input price.
    for i in 0..5u64 {
        state_file(&s, &format!("ses_pruned_{i}"), &format!("{} 50 0 0 0", 1_000 + 100 * i), Some("pruned"));
    }
    for i in 0..4u64 {
        state_file(&s, &format!("ses_held_{i}"), &format!("{} 50 0 0 0", 2_000 + 100 * i), Some("unpruned"));
    }
    let bill = |holdout: &Value| {
        holdout["measures"].as_array().unwrap().iter().find(|m| m["name"] == "bill_per_request").unwrap().clone()
    };
    let four = bill(&stats_json(&s, &[])["holdout"]);
    assert_eq!(four["verdict"], json!("too few sessions"), "{four}");
    assert_eq!((&four["pruned"]["mean"], &four["unpruned"]["mean"]), (&json!(1200.0), &json!(2150.0)), "{four}");
    state_file(&s, "ses_held_4", "2400 50 0 0 0", Some("unpruned"));
    let five = bill(&stats_json(&s, &[])["holdout"]);
    // 1,000..1,400 against 2,000..2,400 by 100: difference -1,000, s² = 25,000 each, se = 100,
    // df = 8, t = 2.306.
    assert_eq!(five["verdict"], json!("compared"), "{five}");
    assert_eq!(five["difference"], json!(-1000.0), "{five}");
    let (low, high) = (five["low"].as_f64().unwrap(), five["high"].as_f64().unwrap());
    assert!((low - (-1000.0 - 230.6)).abs() < 0.5 && (high - (-1000.0 + 230.6)).abs() < 0.5, "{five}");
}
