//! A rewound history keeps no prunes from the branch it left: a prune whose reason is a later
//! call holds only while that call is in the request. In the plugin's path (OpenCode's revert
//! and `/undo`) and through the proxy (Claude Code's rewind: the same session id, the history
//! cut back).

use serde_json::{json, Value};

use crate::proxy::{ProxyProcess, Recorder};
use crate::restore::is_pruned;
use crate::sidecar::apply;
use crate::support::{Sandbox, SessionBuilder, Sidecar};

fn main_rs() -> String {
    "fn main() { run(); }\n".repeat(120)
}

/// The output of call `call` in `messages`.
fn output<'a>(messages: &'a [Value], call: &str) -> &'a str {
    let parts = messages.iter().flat_map(|m| m["parts"].as_array().unwrap());
    parts.filter(|p| p["callID"] == call).find_map(|p| p["state"]["output"].as_str()).unwrap()
}

#[test]
fn a_history_opencode_reverted_keeps_no_prune_from_the_turn_it_undid() {
    let s = Sandbox::new();
    // Every decision at once, and no masking: the turns stay as they were sent.
    let config = r#"{"rewrite": {"mode": "immediate"}, "strategies": {"masking": {"enabled": false}}}"#;
    let mut sidecar = Sidecar::spawn(&s, config);
    let read = json!({"filePath": "/p/src/main.rs"});
    let first = SessionBuilder::new()
        .user("Look at main.rs.")
        .tool("r0", "read", read.clone(), &main_rs())
        .text("It runs the app.")
        .user("Now look around.");
    let mut b = first.clone();
    for i in 1..9 {
        b = b.tool(&format!("g{i}"), "grep", json!({"pattern": format!("p{i}")}), &format!("hit {i}\n").repeat(50));
    }
    let whole: Vec<Value> = b
        .tool("r9", "read", read, &main_rs())
        .text("Done.")
        .build()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let result = sidecar.result("transform", json!({"sessionID": "ses_test", "messages": whole.clone()}));
    let mut seen = whole.clone();
    apply(&mut seen, &result);
    assert!(is_pruned(Some(output(&seen, "r0"))), "r9 reads main.rs again: r0 is deduplicated");
    // `/undo` reverts the last prompt; the next prompt's cleanup removes it and every message
    // after it (OpenCode 1.18.33's `SessionRevert.cleanup`, in its bundled source: the revert
    // message and those after it go), and the new prompt follows what is left.
    let kept = first.clone().build().len() - 1;
    let undone = SessionBuilder::continuing(first.build()[..kept].to_vec()).user("Look at the tests instead.").build();
    let undone: Vec<Value> = undone.iter().map(|m| serde_json::to_value(m).unwrap()).collect();
    let have = result["seq"].clone();
    let params = json!({"sessionID": "ses_test", "base": kept, "have": have, "messages": undone[kept..].to_vec()});
    let result = sidecar.result("transform", params);
    assert!(result.get("edits").is_some(), "the edits go out whole: {result}");
    let mut seen = undone.clone();
    apply(&mut seen, &result);
    assert_eq!(output(&seen, "r0"), main_rs(), "r0 is the only read of main.rs now");
}

/// An Anthropic request of Claude Code's session `sid`: a prompt, then one step per call of
/// `steps`, each with its result.
fn claude_request(sid: &str, steps: &[(&str, Value, String)]) -> Value {
    crate::proxy::claude_request(sid, steps, json!("You are Claude Code."))
}

#[test]
fn a_conversation_claude_code_rewound_keeps_no_prune_from_the_branch_it_left() {
    let upstream = Recorder::start();
    let dir = tempfile::tempdir().unwrap();
    let env = crate::proxy::immediate_env(dir.path());
    let proxy =
        ProxyProcess::start_logging(&format!("http://127.0.0.1:{}", upstream.port), env, &dir.path().join("stderr"));
    let read = json!({"file_path": "/p/src/main.rs"});
    let mut steps = vec![("toolu_0", read.clone(), main_rs())];
    steps.extend((1..9).map(|i| {
        (
            ["toolu_1", "toolu_2", "toolu_3", "toolu_4", "toolu_5", "toolu_6", "toolu_7", "toolu_8"][i - 1],
            json!({"pattern": format!("p{i}")}),
            format!("hit {i}\n").repeat(50),
        )
    }));
    steps.push(("toolu_9", read, main_rs()));
    let results = |body: &Value| -> Vec<String> {
        let blocks = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
        blocks.filter(|b| b["type"] == "tool_result").map(|b| b["content"].as_str().unwrap_or("").to_string()).collect()
    };
    let post = |body: &Value| {
        let answer = crate::proxy::post_bytes(proxy.port, "/v1/messages", body.to_string().as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        results(&upstream.last())
    };
    let whole = post(&claude_request("3f0c9a", &steps));
    assert!(is_pruned(Some(&whole[0])), "step 9 reads main.rs again: step 0 is deduplicated: {}", whole[0]);
    let rewound = post(&claude_request("3f0c9a", &steps[..2]));
    assert_eq!(rewound[0], main_rs(), "rewound to step 1, the read of step 0 is the only one");
    assert!(proxy.stop());
}
