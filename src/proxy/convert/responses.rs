//! OpenAI Responses (`/v1/responses`): `input` is a list of items. The model's items
//! (`reasoning`, assistant `message`, `function_call`, `custom_tool_call`) that follow one
//! another are one response, an assistant message; `function_call_output` and
//! `custom_tool_call_output` answer a call by its `call_id`.

use serde_json::Value;

use super::{Builder, InputForm, Seg};

/// Reads item `i` of `input`.
pub(super) fn item(b: &mut Builder, i: usize, item: &Value) {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    let role = item.get("role").and_then(Value::as_str);
    let call_id = item.get("call_id").and_then(Value::as_str);
    match (kind, role, call_id) {
        ("message", Some("user"), _) => {
            let text = super::content_text(item.get("content").unwrap_or(&Value::Null));
            b.end_assistant();
            b.user_text(&text);
        }
        ("message", Some("assistant"), _) => {
            let text = super::content_text(item.get("content").unwrap_or(&Value::Null));
            b.model_text(&text);
        }
        ("reasoning", _, _) => b.model_item(),
        ("function_call", _, Some(id)) => {
            let name = item.get("name").and_then(Value::as_str).unwrap_or("");
            let arguments = item.get("arguments").and_then(Value::as_str).unwrap_or("{}");
            let input = serde_json::from_str::<Value>(arguments).ok();
            let at = vec![Seg::Key("input"), Seg::Index(i), Seg::Key("arguments")];
            b.call(id, name, input.as_ref(), Some((at, InputForm::JsonText)));
        }
        ("custom_tool_call", _, Some(id)) => {
            let name = item.get("name").and_then(Value::as_str).unwrap_or("");
            b.call(id, name, item.get("input"), None);
        }
        ("function_call_output" | "custom_tool_call_output", _, Some(id)) => {
            let output = item.get("output").unwrap_or(&Value::Null);
            b.result(id, output, false, vec![Seg::Key("input"), Seg::Index(i), Seg::Key("output")]);
        }
        _ => {}
    }
}
