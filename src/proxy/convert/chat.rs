//! OpenAI Chat Completions (`/v1/chat/completions`): `messages` of `{role, content}`, where an
//! assistant's `tool_calls` are answered by `tool` messages (`tool_call_id`), and a call's
//! arguments are a string of JSON.

use serde_json::Value;

use super::{Builder, InputForm, Seg};

/// Reads message `i` of `messages`.
pub(super) fn item(b: &mut Builder, i: usize, message: &Value) {
    let content = message.get("content").unwrap_or(&Value::Null);
    match message.get("role").and_then(Value::as_str) {
        Some("assistant") => assistant(b, i, message, content),
        Some("user") => {
            let text = super::content_text(content);
            b.user_text(&text);
        }
        Some("tool") => {
            let Some(id) = message.get("tool_call_id").and_then(Value::as_str) else { return };
            b.result(id, content, false, vec![Seg::Key("messages"), Seg::Index(i), Seg::Key("content")]);
        }
        _ => {}
    }
}

fn assistant(b: &mut Builder, i: usize, message: &Value, content: &Value) {
    b.assistant();
    let text = super::content_text(content);
    if !text.is_empty() {
        b.model_text(&text);
    }
    let calls = message.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (k, call) in calls.iter().enumerate() {
        let function = call.get("function").unwrap_or(&Value::Null);
        let (Some(id), Some(name)) =
            (call.get("id").and_then(Value::as_str), function.get("name").and_then(Value::as_str))
        else {
            continue;
        };
        let arguments = function.get("arguments").and_then(Value::as_str).unwrap_or("{}");
        let input = serde_json::from_str::<Value>(arguments).ok();
        let at = vec![
            Seg::Key("messages"),
            Seg::Index(i),
            Seg::Key("tool_calls"),
            Seg::Index(k),
            Seg::Key("function"),
            Seg::Key("arguments"),
        ];
        b.call(id, name, input.as_ref(), Some((at, InputForm::JsonText)));
    }
    b.end_assistant();
}
