//! Claude Code's tools, mapped onto OpenCode's.
//!
//! Read, Edit, Write, Grep, Glob, Bash, TodoWrite and Task have OpenCode counterparts; their
//! inputs are renamed to OpenCode's keys (`file_path` → `filePath`, `old_string` →
//! `oldString`…). Other tools keep their name in lower case. A Bash call Claude Code flagged
//! as an error stays `completed` (OpenCode's bash completes on a non-zero exit), with
//! `metadata.error` set; the other tools' errors are OpenCode errors.

use serde_json::{json, Map, Value};

use super::model::Call;
use super::shell::{bash_call, relative};

fn opencode_tool(name: &str) -> String {
    match name {
        "Read" => "read",
        "Bash" => "bash",
        "Grep" => "grep",
        "Glob" => "glob",
        "Edit" | "MultiEdit" | "NotebookEdit" => "edit",
        "Write" => "write",
        "TodoWrite" => "todowrite",
        "Task" | "Agent" => "task",
        "WebFetch" => "webfetch",
        "WebSearch" => "websearch",
        other => return other.to_lowercase(),
    }
    .to_string()
}

fn opencode_key(key: &str) -> &str {
    match key {
        "file_path" | "notebook_path" => "filePath",
        "old_string" => "oldString",
        "new_string" => "newString",
        "replace_all" => "replaceAll",
        "glob" => "include",
        other => other,
    }
}

/// The text of a `tool_result` block's content (a string or a list of blocks).
pub fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).unwrap_or("").to_string(),
                Some(other) => format!("[{other}]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The call a Claude Code `tool_use` block becomes, given the result text and error flag.
pub fn claude_call(block: &Value, output: &str, is_error: bool, root: &str) -> Call {
    let name = block.get("name").and_then(Value::as_str).unwrap_or("unknown");
    let tool = opencode_tool(name);
    let mut input = Map::new();
    if let Some(obj) = block.get("input").and_then(Value::as_object) {
        for (k, v) in obj {
            input.insert(opencode_key(k).to_string(), v.clone());
        }
    }
    let str_of = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if tool == "bash" {
        let description = input.get("description").and_then(Value::as_str).map(str::to_string);
        let mut call = bash_call(&str_of("command"), output, None, description.as_deref());
        call.input = Value::Object(input);
        return if is_error { call.with_meta("error", json!(true)) } else { call };
    }
    let path = if input.contains_key("filePath") { str_of("filePath") } else { str_of("path") };
    let input_value = Value::Object(input.clone());
    if is_error {
        return Call::failed(&tool, input_value, output);
    }
    let call = Call::completed(&tool, input_value, output);
    match tool.as_str() {
        "read" => call
            .with_title(&relative(&path, root))
            .with_meta("preview", json!(output.lines().take(20).collect::<Vec<_>>().join("\n")))
            .with_meta("truncated", json!(false)),
        "grep" => call.with_title(&str_of("pattern")).with_meta("truncated", json!(false)),
        "glob" => call.with_title(&relative(&path, root)).with_meta("truncated", json!(false)),
        "edit" | "write" => call
            .with_title(&relative(&path, root))
            .with_meta("diagnostics", json!({}))
            .with_meta("truncated", json!(false)),
        "todowrite" => {
            let todos = input.get("todos").cloned().unwrap_or(json!([]));
            let open = todos.as_array().map_or(0, |t| t.iter().filter(|x| x["status"] != "completed").count());
            call.with_title(&format!("{open} todos")).with_meta("todos", todos)
        }
        "task" => call.with_title(&str_of("description")),
        _ => call.with_meta("truncated", json!(false)),
    }
}

/// Usage of a Claude message as the importer's token counts.
pub fn usage_tokens(usage: Option<&Value>) -> super::model::Tokens {
    let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    super::model::Tokens {
        input: n("input_tokens"),
        output: n("output_tokens"),
        reasoning: 0,
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        // Claude Code 2.1 says which cache the writes went to: `cache_creation` splits them
        // into the 5-minute and the 1-hour one, priced 1.25x and 2x.
        cache_write_1h: usage.and_then(|u| u["cache_creation"]["ephemeral_1h_input_tokens"].as_u64()).unwrap_or(0),
    }
}
