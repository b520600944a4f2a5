use super::*;
use serde_json::{json, Value};

/// The placeholder of a part given as a `Value`.
fn placeholder(part: &Value) -> String {
    super::placeholder(&Node::from(part))
}

/// A prompt, then one step per call, `(call id, tool, input)`, each with a 200-token output.
fn session(calls: &[(&str, &str, Value)]) -> Vec<Message> {
    let user = json!({"id": "m0", "sessionID": "s", "role": "user", "time": {"created": 0}});
    let mut out = vec![Message::from_values(user, vec![json!({"id": "p0", "type": "text", "text": "go"})])];
    for (i, (call, tool, input)) in calls.iter().enumerate() {
        let info =
            json!({"id": format!("m{}", i + 1), "sessionID": "s", "role": "assistant", "time": {"created": i + 1}});
        let state = json!({"status": "completed", "input": input, "output": "let x = 1;\n".repeat(80)});
        let part = json!({"id": format!("p{}", i + 1), "type": "tool", "callID": call, "tool": tool, "state": state});
        out.push(Message::from_values(info, vec![part]));
    }
    out
}

/// The calls masking takes of `messages` at the defaults (`tests/it/index.rs` holds the
/// sidecar's index to the same).
fn taken(messages: &[Message]) -> Vec<String> {
    let rules = Rules::new(crate::config::Config::default()).unwrap();
    let (state, mut counter) = (SessionState::default(), TokenCounter::new(crate::tokens::EstimatorChoice::Auto));
    let decided = decide_over_history(&History::new(messages), &state, &rules, &mut counter);
    decided.into_iter().map(|d| d.call_id).collect()
}

#[test]
fn a_read_of_part_of_a_file_leaves_the_earlier_read_of_the_whole_file_in_the_working_set() {
    let read = |path: &str| json!({"filePath": path});
    let mut calls = vec![
        ("whole", "read", read("/p/a.rs")),
        ("part", "read", json!({"filePath": "/p/a.rs", "offset": 40, "limit": 20})),
    ];
    // One search more than the window keeps beside the edit: the two oldest leave it.
    let searches = crate::config::KEEP_LAST as usize + 1;
    let greps: Vec<String> = (0..searches).map(|i| format!("g{i}")).collect();
    calls.extend(greps.iter().map(|g| (g.as_str(), "grep", json!({"pattern": g}))));
    calls.push(("edit", "edit", json!({"filePath": "/p/a.rs", "oldString": "x = 1", "newString": "x = 2"})));
    // a.rs is being edited: the agent edits from the whole file, not from the part it
    // looked at again; the part and the old searches go.
    assert_eq!(taken(&session(&calls)), ["part", "g0", "g1"]);
    // A later read of the whole file is the file's view from then on.
    calls.insert(2, ("again", "read", read("/p/a.rs")));
    assert_eq!(taken(&session(&calls)), ["whole", "part", "g0", "g1"]);
}

#[test]
fn a_call_opencode_could_not_run_is_masked_whole_and_names_the_tool_it_asked_for() {
    let error = "Model tried to call unavailable tool 'discard'. Available tools: bash, read.";
    let part = json!({"type": "tool", "callID": "c5", "tool": "invalid", "state": {"status": "completed",
        "input": {"tool": "discard", "error": error},
        "output": format!("The arguments provided to the tool are invalid: {error}")}});
    assert_eq!(placeholder(&part), "[Masked: `discard` was not an available tool]");
    let edits = crate::strategies::field_edits(&Node::from(&part), &Action::Mask, None);
    let paths: Vec<String> = edits.iter().map(|e| e.path.join(".")).collect();
    assert_eq!(paths, ["state.output", "state.input.error"]);
    assert_eq!(edits[1].value, INVALID_INPUT_PLACEHOLDER);
    // Another tool's input named `error` stays.
    let bash = json!({"type": "tool", "callID": "c6", "tool": "bash", "state": {"status": "completed",
        "input": {"command": "true", "error": error}, "output": error}});
    assert_eq!(crate::strategies::field_edits(&Node::from(&bash), &Action::Mask, None).len(), 1);
}

#[test]
fn the_placeholder_names_the_call_and_says_it_can_be_run_again() {
    let part = json!({"type": "tool", "callID": "c1", "tool": "read",
        "state": {"status": "completed", "input": {"filePath": "/p/src/a.rs"}, "output": "x"}});
    assert_eq!(placeholder(&part), "[Output masked; run read `a.rs` again if needed]");
    let long = json!({"type": "tool", "callID": "c2", "tool": "bash",
        "state": {"status": "completed", "input": {"command": format!("echo {}\nls", "y".repeat(200))}}});
    let text = placeholder(&long);
    assert!(text.starts_with("[Output masked; run bash `echo yyy"), "{text}");
    assert!(text.contains("…` again") && !text.contains('\n'), "{text}");
    let dir = json!({"type": "tool", "callID": "c4", "tool": "list", "state": {"status": "completed", "input": {"path": "/p/src/"}}});
    assert_eq!(placeholder(&dir), "[Output masked; run list `src` again if needed]");
    let bare = json!({"type": "tool", "callID": "c3", "tool": "lsp", "state": {"status": "completed"}});
    assert_eq!(placeholder(&bare), "[Output masked; run this lsp call again if needed]");
}

#[test]
fn a_write_after_a_read_is_its_file_s_view_and_the_read_leaves_the_working_set() {
    let content = "fn main() {}\n".repeat(40);
    let mut calls = vec![
        ("read", "read", json!({"filePath": "/p/a.rs"})),
        ("write", "write", json!({"filePath": "/p/a.rs", "content": content})),
    ];
    let greps: Vec<String> = (0..7).map(|i| format!("g{i}")).collect();
    calls.extend(greps.iter().map(|g| (g.as_str(), "grep", json!({"pattern": g}))));
    calls.push(("edit", "edit", json!({"filePath": "/p/a.rs", "oldString": "x = 1", "newString": "x = 2"})));
    // a.rs is being edited, but the agent edits the file it wrote, not the one it read before:
    // the read is no working material, and goes with the other old outputs.
    assert_eq!(taken(&session(&calls)), ["read", "write", "g0", "g1"]);
}
