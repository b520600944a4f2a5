//! The compressed ranges where the user looks for them: `/dcp context` and `dcp context` name
//! the agent's ranges and dcp's finished turns, and `dcp report` counts them in force by
//! strategy, as `/dcp stats` does.

use serde_json::{json, Value};

use crate::sidecar::{recorded_messages, IMMEDIATE};
use crate::support::{dcp, rendered, Sandbox, Sidecar, DB_SESSION};

fn command(sidecar: &mut Sidecar, arguments: &str) -> String {
    let answer = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": arguments}));
    answer["text"].as_str().unwrap_or_default().to_string()
}

/// The recorded session with dcp's finished turn b1 and the agent's range b2 (its topic holds
/// a terminal escape) in force, made through `dcp serve`, which is left running.
fn session_with_ranges(s: &Sandbox) -> Sidecar {
    let messages: Vec<Value> = recorded_messages(s);
    let mut sidecar = Sidecar::spawn(s, IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let args = json!({"topic": "overview \u{1b}[31mred", "content": [
        {"startId": "m1", "endId": "m6", "summary": "The project has parser.py (18 section parsers) and calc.py."},
    ]});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    assert!(answer["output"].as_str().unwrap_or_default().starts_with("Compressed 6 messages into b2"), "{answer}");
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    sidecar
}

/// The section of a context report that starts with `first`, up to its blank line.
fn section(text: &str, first: &str) -> String {
    let start = text.find(first).unwrap_or_else(|| panic!("no {first:?} in:\n{text}"));
    text[start..].split("\n\n").next().unwrap_or_default().to_string()
}

/// The bug: `/dcp context` and `dcp context` listed the calls pruned and named no range, so a
/// user who saw most of the savings in force could not find where they went.
#[test]
fn dcp_context_names_the_ranges_in_force_not_only_the_calls() {
    let s = Sandbox::new();
    let mut sidecar = session_with_ranges(&s);
    let context = command(&mut sidecar, "context");
    let ranges = section(&context, "Compressed ranges");
    println!("{ranges}");
    let lines: Vec<&str> = ranges.lines().collect();
    assert_eq!(lines[0], "Compressed ranges (2 in force, 0 waiting for the policy)", "{context}");
    let row = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(row(lines[1]).starts_with("b2 m1..m6 compressed by the agent in force "), "{ranges}");
    assert!(lines[1].ends_with("overview \\x1b[31mred"), "the topic, escaped: {ranges}");
    assert!(row(lines[2]).starts_with("b1 m25 finished turn (dcp) in force "), "{ranges}");
    assert!(!context.contains('\u{1b}'), "a raw escape reached the pane: {context:?}");
    // `/dcp decompress` names them the same way.
    let list = command(&mut sidecar, "decompress");
    assert!(list.contains("\n  b2  6 messages") && list.contains("\n  b1  1 message"), "{list}");
    // A range the user restored removes nothing: counted, not listed.
    assert!(command(&mut sidecar, "decompress b1").starts_with("Restored b1"));
    let context = command(&mut sidecar, "context");
    let ranges = section(&context, "Compressed ranges");
    assert!(ranges.starts_with("Compressed ranges (1 in force, 0 waiting for the policy; 1 restored"), "{ranges}");
    assert!(!ranges.contains("\n  b1 "), "{ranges}");
    sidecar.shutdown();
    // The terminal's `dcp context` reads the state file and says the same.
    insta::assert_snapshot!(rendered(&dcp(&s, &["context", "--session", DB_SESSION])));
}

/// The bug: the report's "in force" by strategy counted per-call prunes only, so it showed 0
/// for `compress` and `finished-turns` while their ranges were in force.
#[test]
fn the_report_counts_the_ranges_in_force_by_strategy_as_dcp_stats_does() {
    let s = Sandbox::new();
    session_with_ranges(&s).shutdown();
    let page = s.dir.path().join("report.html");
    let out = dcp(&s, &["report", "--out", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    // `DCP_KEEP_REPORT=DIR` keeps the page, to look at in a browser.
    if let Some(dir) = std::env::var_os("DCP_KEEP_REPORT") {
        std::fs::copy(&page, std::path::Path::new(&dir).join("report-ranges.html")).unwrap();
    }
    let solid = |strategy: &str| -> u64 {
        let bar = html.split(&format!(">{strategy}</text>")).nth(1).unwrap_or_else(|| panic!("no {strategy} bar"));
        let value = bar.split("data-solid=\"").nth(1).and_then(|v| v.split('"').next());
        value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no figure on the {strategy} bar"))
    };
    let stats = dcp(&s, &["--json", "stats", "--session", DB_SESSION]);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let file: Value =
        serde_json::from_slice(&std::fs::read(s.state_dir().join(format!("{DB_SESSION}.json"))).unwrap()).unwrap();
    let blocks = file["prune"]["messages"]["blocksById"].as_object().unwrap();
    let net =
        |id: &str| blocks[id]["compressedTokens"].as_u64().unwrap() - blocks[id]["summaryTokens"].as_u64().unwrap();
    assert_eq!(solid("compress"), net("2"), "the agent's range b2");
    assert_eq!(solid("finished-turns"), net("1"), "dcp's finished turn b1");
    let bars: Vec<u64> =
        html.split("data-solid=\"").skip(1).filter_map(|v| v.split('"').next()?.parse().ok()).collect();
    let in_force = stats["session"]["in_force_tokens"].as_u64().unwrap();
    assert_eq!(bars.iter().sum::<u64>(), in_force, "the bars add up to /dcp stats' in force: {bars:?}");
}

/// The bug: `/dcp context` proposed masking calls a range already stands for, which the
/// sidecar never masks, so the user read savings to come that never would.
#[test]
fn dcp_context_never_proposes_masking_a_call_a_range_stands_for() {
    let s = Sandbox::new();
    let mut sidecar = session_with_ranges(&s);
    let context = command(&mut sidecar, "context");
    sidecar.shutdown();
    let file: Value =
        serde_json::from_slice(&std::fs::read(s.state_dir().join(format!("{DB_SESSION}.json"))).unwrap()).unwrap();
    let blocks = file["prune"]["messages"]["blocksById"].as_object().unwrap();
    let ranged: Vec<&str> = blocks
        .values()
        .filter(|b| b["active"] == true)
        .flat_map(|b| b["effectiveToolIds"].as_array().unwrap().iter().filter_map(Value::as_str))
        .collect();
    assert!(!ranged.is_empty(), "{file}");
    let proposed: Vec<&str> = context.lines().filter(|l| l.contains(" masking ") && l.contains(" proposed ")).collect();
    let inside: Vec<&&str> =
        proposed.iter().filter(|l| ranged.iter().any(|id| l.trim_start().starts_with(id))).collect();
    assert!(inside.is_empty(), "ranged calls {ranged:?} proposed for masking:\n{context}");
}
