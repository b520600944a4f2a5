//! Anthropic Messages (`/v1/messages`): `messages` of `{role, content}`, where an assistant's
//! `tool_use` block is answered by a `tool_result` block in the next user message.

use serde_json::Value;

use super::{Builder, InputForm, Seg};

/// Reads message `i` of `messages`.
pub(super) fn item(b: &mut Builder, i: usize, message: &Value) {
    let content = message.get("content").unwrap_or(&Value::Null);
    match message.get("role").and_then(Value::as_str) {
        Some("assistant") => {
            b.assistant();
            assistant(b, i, content);
            b.end_assistant();
        }
        Some("user") => user(b, i, content),
        _ => {}
    }
}

fn assistant(b: &mut Builder, i: usize, content: &Value) {
    let blocks = match content {
        Value::String(text) => return b.model_text(text),
        Value::Array(blocks) => blocks,
        _ => return,
    };
    for (j, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => b.model_text(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let (Some(id), Some(name)) = (str_of(block, "id"), str_of(block, "name")) else { continue };
                let at =
                    vec![Seg::Key("messages"), Seg::Index(i), Seg::Key("content"), Seg::Index(j), Seg::Key("input")];
                b.call(id, name, block.get("input"), Some((at, InputForm::Object)));
            }
            _ => {}
        }
    }
}

fn user(b: &mut Builder, i: usize, content: &Value) {
    let blocks = match content {
        Value::String(text) => return b.user_text(text),
        Value::Array(blocks) => blocks,
        _ => return,
    };
    for (j, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => b.user_text(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_result") => {
                let Some(id) = str_of(block, "tool_use_id") else { continue };
                let is_error = block.get("is_error").and_then(Value::as_bool) == Some(true);
                let at =
                    vec![Seg::Key("messages"), Seg::Index(i), Seg::Key("content"), Seg::Index(j), Seg::Key("content")];
                b.result(id, block.get("content").unwrap_or(&Value::Null), is_error, at);
            }
            _ => {}
        }
    }
}

fn str_of<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}
