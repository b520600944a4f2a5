//! `/dcp context` and `dcp context` as a user reads them in a TUI pane: every line fits
//! [`PANE_WIDTH`] columns, whatever the keys, ids and topics, and the Tools column counts the
//! calls of the ranges in force as `/dcp stats` counts them.

use dcp::format::PANE_WIDTH;
use serde_json::{json, Value};

use crate::sidecar::recorded_messages;
use crate::support::{dcp, Sandbox, Sidecar, DB_SESSION};

fn command(sidecar: &mut Sidecar, arguments: &str) -> String {
    let answer = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": arguments}));
    answer["text"].as_str().unwrap_or_default().to_string()
}

/// The lines of `text` wider than a pane, with their widths in characters.
fn too_wide(text: &str) -> Vec<(usize, &str)> {
    text.lines().map(|l| (l.chars().count(), l)).filter(|(n, _)| *n > PANE_WIDTH).collect()
}

/// The recorded session's messages with the long names real sessions have: every call id as
/// long as a provider's, one tool an MCP server's, and every path deep in a home directory.
fn with_long_keys(messages: Vec<Value>) -> Vec<Value> {
    let deep = "/home/someone/work/clients/acme/monorepo/packages/backend/services/billing/src/";
    let mut messages = messages;
    let parts = messages.iter_mut().flat_map(|m| m["parts"].as_array_mut().unwrap().iter_mut());
    for part in parts.filter(|p| p["type"] == "tool") {
        let id = part["callID"].as_str().unwrap().to_string();
        part["callID"] = json!(format!("toolu_vrtx_01XyZw9Qa7bC3dE5fG7hJ9kL_{id}"));
        if part["tool"] == "grep" {
            part["tool"] = json!("mcp_github_search_code_in_repository");
        }
        for key in ["filePath", "path"] {
            if let Some(path) = part["state"]["input"][key].as_str() {
                let name = path.rsplit('/').next().unwrap_or(path).to_string();
                part["state"]["input"][key] = json!(format!("{deep}{name}"));
            }
        }
    }
    messages
}

/// The bug: the pruned calls' rows ran to 121 columns, and a range's row with its topic past
/// 100, so OpenCode's message area (narrower than a 118-column terminal) wrapped every row.
#[test]
fn every_line_of_dcp_context_fits_a_96_column_pane_with_long_keys_ids_and_topics() {
    let s = Sandbox::new();
    let out = dcp(&s, &["context", "--session", DB_SESSION]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("Pruned ("), "{text}");
    assert_eq!(too_wide(&text), Vec::<(usize, &str)>::new(), "the fixtures' report:\n{text}");

    let messages = with_long_keys(recorded_messages(&s));
    let mut sidecar = Sidecar::spawn(&s, crate::sidecar::IMMEDIATE);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let topic = "a very long topic: ".repeat(12);
    let args = json!({"topic": topic, "content": [
        {"startId": "m1", "endId": "m6", "summary": "The project has parser.py and calc.py."},
    ]});
    sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let text = command(&mut sidecar, "context");
    sidecar.shutdown();
    println!("{text}");
    assert!(
        text.contains("…_call_11_0_abe54fbd")
            && text.contains("/billing/src/parser.py")
            && text.contains("a very long"),
        "{text}"
    );
    assert!(text.contains("compressed by the agent"), "{text}");
    assert_eq!(too_wide(&text), Vec::<(usize, &str)>::new(), "the long keys' report:\n{text}");
}

/// Only the agent's `compress` prunes: no strategy of dcp's runs, so every call taken out of
/// requests is one a range stands for.
const RANGES_ONLY: &str = r#"{"rewrite": {"mode": "immediate"}, "pruneNotification": "minimal",
    "strategies": {"deduplication": {"enabled": false}, "supersedeWrites": {"enabled": false},
    "purgeErrors": {"enabled": false}, "masking": {"enabled": false}},
    "tools": {"settings": {"minTokens": 0}, "compress": {"tagsFrom": 0}}}"#;

/// The bug: the "in force" row counted the calls pruned one by one and none of those inside
/// the compressed ranges in force, so it said 1 tool where `/dcp stats` said 7.
#[test]
fn the_in_force_row_counts_the_calls_of_the_ranges_in_force_as_dcp_stats_does() {
    let s = Sandbox::new();
    let messages = recorded_messages(&s);
    let mut sidecar = Sidecar::spawn(&s, RANGES_ONLY);
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages.clone()}));
    let args = json!({"topic": "overview", "content": [
        {"startId": "m1", "endId": "m12", "summary": "The project has parser.py and calc.py."},
    ]});
    let answer = sidecar.result("tool", json!({"sessionID": DB_SESSION, "name": "compress", "args": args}));
    assert!(answer["output"].as_str().unwrap_or_default().starts_with("Compressed"), "{answer}");
    sidecar.result("transform", json!({"sessionID": DB_SESSION, "messages": messages}));
    let text = command(&mut sidecar, "context");
    sidecar.shutdown();
    let stats: Value = serde_json::from_slice(&dcp(&s, &["--json", "stats", "--session", DB_SESSION]).stdout).unwrap();
    let tools = stats["session"]["tools_pruned"].as_u64().unwrap();
    assert!(tools > 1, "the range stands for several calls: {stats}");
    let row = text.lines().find(|l| l.trim_start().starts_with("in force ") && !l.contains("now:")).unwrap_or_default();
    let counted: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(counted.last(), Some(&tools.to_string().as_str()), "/dcp stats says {tools} tools:\n{text}");
    let context: Value =
        serde_json::from_slice(&dcp(&s, &["--json", "context", "--session", DB_SESSION]).stdout).unwrap();
    let steps = context["steps"].as_array().unwrap();
    let of = |step: &str| steps.iter().find(|s| s["step"] == step).map(|s| s["tools"].as_u64().unwrap());
    assert_eq!((of("in force"), of("waiting")), (Some(tools), Some(0)), "dcp context --json: {steps:?}");
}
