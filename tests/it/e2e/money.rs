//! Money and the control group end to end (issue 37, parts 4 and 6): two sessions through the
//! real OpenCode, one in the pruned arm and one held out (`holdout`), the held-out one's
//! requests reaching the model unpruned; `dcp report`'s page, rendered by headless Chromium,
//! shows the money saved and the arms' comparison as `dcp stats --json` gives them.

use std::process::{Command, Output};

use serde_json::Value;

use super::fake_llm::Turn;
use super::savings::{chromium, figure};
use super::scenarios::read;
use super::{tail, Lab};

/// Every decision applied at once, priced at Claude Sonnet 4's sheet ($3 per million input
/// tokens, Anthropic's 5-minute cache: the policy decides as with the default sheet). `holdout`
/// is set so that the session drawn now lands in the arm the test wants.
fn config(holdout: &str) -> String {
    format!(
        r#"{{"rewrite": {{"mode": "immediate"}}, "pruneNotification": "minimal",
            "prices": {{"sheet": "claude-sonnet-4"}}, "holdout": {holdout}}}"#
    )
}

/// A prompt that reads the parser twice: deduplication prunes the first read.
fn explore(lab: &Lab, label: &str) -> String {
    let turns = vec![
        read(&format!("{label}.parser"), "src/parser.py"),
        read(&format!("{label}.records"), "data/records.csv"),
        read(&format!("{label}.parser_again"), "src/parser.py"),
        Turn::text(&format!("{label}.answer"), "A parser with 12 sections and 150 records."),
    ];
    lab.prompt(None, "Explore the project.", turns);
    lab.session_id()
}

fn dcp(lab: &Lab, args: &[&str]) -> Output {
    let mut cmd = Command::new(&lab.dcp_bin);
    cmd.arg("--data-dir").arg(lab.data_dir()).args(args).current_dir(lab.project()).envs(lab.env());
    cmd.output().unwrap()
}

fn dcp_json(lab: &Lab, args: &[&str]) -> Value {
    let out = dcp(lab, &[&["--json"], args].concat());
    assert!(out.status.success(), "dcp {args:?}: {}", tail(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Whether the model's request for `label` still carried the first read of the parser whole.
fn carried_whole(lab: &Lab, label: &str) -> bool {
    let body = lab.llm.request_for(label).body.to_string();
    body.matches("def parse_section_12(").count() >= 2
}

#[test]
fn the_report_in_chromium_shows_the_money_saved_and_the_control_group_as_stats_json_does() {
    // A holdout of one in a million: the session is drawn into the pruned arm.
    let lab = Lab::new(&config("0.000001"));
    let pruned = explore(&lab, "a");
    assert!(!carried_whole(&lab, "a.answer"), "the pruned arm's duplicate read reached the model whole");
    std::fs::write(lab.root().join("xdg/config/opencode/dcp.jsonc"), config("1")).unwrap();
    let held = explore(&lab, "b");
    assert!(carried_whole(&lab, "b.answer"), "the held-out session was pruned");
    let tools = lab.llm.request_for("b.answer").body["tools"].to_string();
    assert!(!tools.contains("\"discard\""), "the held-out session was offered dcp's tools: {tools}");
    assert_eq!(lab.state(&pruned)["dcp"]["holdout"]["arm"], "pruned");
    assert_eq!(lab.state(&held)["dcp"]["holdout"]["arm"], "unpruned");

    let stats = dcp_json(&lab, &["stats", "--session", &pruned]);
    let (session, all, holdout) = (&stats["session"], &stats["all_time"], &stats["holdout"]);
    let saved = session["money_saved"].as_f64().unwrap();
    let expected = session["cost_saved"].as_f64().unwrap() * 3.0 / 1e6;
    assert!(saved != 0.0 && (saved - expected).abs() < 1e-5, "{session}");
    assert_eq!(holdout["verdict"], "too few sessions", "{holdout}");
    assert_eq!((&holdout["pruned"], &holdout["unpruned"]), (&Value::from(1), &Value::from(1)), "{holdout}");
    pruned_bill_is_the_reported_one(session, holdout);

    let page = lab.root().join("report.html");
    let out = dcp(&lab, &["report", "--out", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let (status, dom) = chromium(&["--dump-dom".to_string()], &page);
    assert!(status, "chromium could not read the page");
    let (value, text) = figure(&dom, "money-saved").expect("no #money-saved in the rendered page");
    println!("money saved, as rendered: {text} ({value}); all-time: {all}");
    assert_eq!(value.parse::<f64>().ok(), all["money_saved"].as_f64(), "#money-saved against all_time.money_saved");
    // What dcp added (its tools, before pruning won them back) is said as added, never as a
    // negative saving.
    let all_saved = all["money_saved"].as_f64().unwrap();
    let added = if all["cost_saved"].as_f64() < Some(0.0) { "added " } else { "" };
    let shown = format!("{added}{}", dcp::stats::money::amount(all_saved.abs(), "USD"));
    assert_eq!(text, shown, "#money-saved shows {text:?}, stats say {shown}");
    let (verdict, _) = figure(&dom, "holdout-verdict").expect("no #holdout-verdict in the rendered page");
    assert_eq!(verdict, holdout["verdict"].as_str().unwrap());
    for measure in holdout["measures"].as_array().unwrap() {
        let id = format!("holdout-{}", measure["name"].as_str().unwrap());
        let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the rendered page"));
        let row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
        for (attr, arm) in [("data-pruned", "pruned"), ("data-unpruned", "unpruned")] {
            let shown = row.split(&format!("{attr}=\"")).nth(1).unwrap().split('"').next().unwrap();
            assert_eq!(shown.parse::<f64>().ok(), measure[arm]["mean"].as_f64(), "#{id} {attr}: {row}");
        }
        assert!(row.contains("too few sessions"), "#{id}: {row}");
    }
}

/// The pruned arm's bill per request is what the fake provider reported for the session's
/// requests (`per_request` of `dcp stats --json`), at Claude Sonnet 4's sheet: uncached input
/// whole, cache reads at 0.1, writes at 1.25, output at $15 / $3 = 5 times the input price.
fn pruned_bill_is_the_reported_one(session: &Value, holdout: &Value) {
    let rows = session["per_request"].as_array().unwrap();
    let reported: Vec<&Value> = rows.iter().filter_map(|r| r.get("reported")).collect();
    assert!(!reported.is_empty(), "the fake provider's usage was recorded: {session}");
    let n = |r: &Value, key: &str| r[key].as_f64().unwrap();
    let bill: f64 = reported
        .iter()
        .map(|r| {
            n(r, "input")
                + 0.1 * n(r, "cache_read")
                + 1.25 * n(r, "cache_write")
                + 5.0 * (n(r, "output") + n(r, "reasoning"))
        })
        .sum();
    let measures = holdout["measures"].as_array().unwrap();
    let measure = measures.iter().find(|m| m["name"] == "bill_per_request").unwrap();
    let mean = measure["pruned"]["mean"].as_f64().expect("the pruned arm's reported bill per request");
    let expected = bill / reported.len() as f64;
    assert!(
        (mean - expected).abs() <= 0.01 * expected.max(1.0),
        "bill per request {mean}, reported {expected}: {measure}"
    );
}
