use serde_json::json;

use super::*;

fn edit(m: usize, p: usize, path: &[&str], value: &str) -> Edit {
    Edit { m, p, path: path.iter().map(|s| s.to_string()).collect(), value: Some(json!(value)), append: None }
}

#[test]
fn a_tool_use_and_its_result_are_one_tool_part_in_the_model_s_words() {
    let body = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "text"}]},
    ]});
    let mapped = map(Api::Anthropic, &body, "s").unwrap();
    assert_eq!(mapped.messages.len(), 2, "a user message of results only is no message of its own");
    let part = &mapped.messages[1]["parts"][0];
    assert_eq!(part["tool"], "read");
    assert_eq!(part["state"], json!({"status": "completed", "input": {"filePath": "/a"}, "output": "text"}));
}

#[test]
fn a_result_with_a_cache_marker_is_never_rewritten() {
    let marked = json!([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]);
    let mut body = json!({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": marked.clone()}]},
    ]});
    let before = body.clone();
    let mapped = map(Api::Anthropic, &body, "s").unwrap();
    assert_eq!(mapped.apply(&mut body, &[edit(0, 0, &["state", "output"], "pruned")]), 0);
    assert_eq!(body, before);
}

#[test]
fn a_block_level_cache_marker_stays_on_its_block_when_the_content_is_pruned() {
    let mut body = json!({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "long", "cache_control": {"type": "ephemeral"}}]},
    ]});
    let mapped = map(Api::Anthropic, &body, "s").unwrap();
    assert_eq!(mapped.apply(&mut body, &[edit(0, 0, &["state", "output"], "pruned")]), 1);
    let block = &body["messages"][1]["content"][0];
    assert_eq!(block["content"], "pruned");
    assert_eq!(block["cache_control"], json!({"type": "ephemeral"}));
}

#[test]
fn an_input_edit_is_written_back_into_the_arguments_string_under_the_client_s_key() {
    let args = json!({"file_path": "/a", "content": "big"}).to_string();
    let mut body = json!({"messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "write", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]});
    let mapped = map(Api::Chat, &body, "s").unwrap();
    let edits =
        [edit(0, 0, &["state", "input", "content"], "[gone]"), edit(0, 0, &["state", "input", "filePath"], "/b")];
    assert_eq!(mapped.apply(&mut body, &edits), 2);
    let written: Value =
        serde_json::from_str(body["messages"][0]["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(written, json!({"file_path": "/b", "content": "[gone]"}));
}

#[test]
fn responses_items_between_outputs_are_one_assistant_step_each() {
    let body = json!({"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
        {"type": "function_call_output", "call_id": "a", "output": "one"},
        {"type": "function_call", "call_id": "b", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
        {"type": "function_call_output", "call_id": "b", "output": "two"},
    ]});
    let mut body = body;
    let mapped = map(Api::Responses, &body, "s").unwrap();
    let roles: Vec<&str> = mapped.messages.iter().map(|m| m["info"]["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    assert_eq!(mapped.apply(&mut body, &[edit(1, 0, &["state", "output"], "pruned")]), 1);
    assert_eq!(body["input"][3]["output"], "pruned");
}

#[test]
fn claude_code_s_unchanged_file_note_is_no_output_to_keep() {
    let body = json!({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "File unchanged since last read."}]},
    ]});
    let mapped = map(Api::Anthropic, &body, "s").unwrap();
    assert_eq!(mapped.messages[0]["parts"][0]["state"]["status"], "error");
}

#[test]
fn a_client_s_reminders_are_no_prompt_and_a_result_carrying_the_person_s_message_is_never_rewritten() {
    let reminder = "<system-reminder>\nToday's date is 2026-12-07.\n</system-reminder>";
    let queued = "one\n\n<system-reminder>\nThe user sent a new message while you were working:\nalso check the docs\n</system-reminder>";
    let mut body = json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": reminder}, {"type": "text", "text": "Run the checks."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "sleep 5"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": queued}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [{"type": "text", "text": reminder}]},
    ]});
    let mapped = map(Api::Anthropic, &body, "s").unwrap();
    let parts = |m: usize| mapped.messages[m]["parts"].as_array().unwrap().clone();
    assert_eq!(parts(0)[0]["synthetic"], true, "the reminder is the client's");
    assert!(parts(0)[1].get("synthetic").is_none(), "the prompt is the person's");
    assert_eq!(parts(3)[0]["synthetic"], true, "a reminder alone is no prompt");
    let before = body.clone();
    assert_eq!(mapped.apply(&mut body, &[edit(1, 0, &["state", "output"], "pruned")]), 0);
    assert_eq!(body, before, "the person's message stays with the output it came in");
    let codex = json!({"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/p</cwd>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Run the checks."}]},
    ]});
    let mapped = map(Api::Responses, &codex, "s").unwrap();
    let parts = mapped.messages[0]["parts"].as_array().unwrap();
    assert_eq!((parts[0]["synthetic"].clone(), parts[1].get("synthetic")), (json!(true), None));
}
