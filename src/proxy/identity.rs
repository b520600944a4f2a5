//! Which conversation a request belongs to, and which client sent it.
//!
//! A conversation is named by the client's own session id where it sends one: a header
//! (Claude Code's `x-claude-code-session-id`, Codex's `session-id`; `session_id`,
//! `conversation_id`, `thread-id`, `x-session-id`), Claude Code's `metadata.user_id` (a JSON
//! object with a `session_id` since Claude Code 2; before, a string ending in
//! `_session_<uuid>`), or the `prompt_cache_key` of an OpenAI request; followed by a short
//! digest of the first user message: a client sends its side requests (titles, summaries) and
//! its subagents' conversations under the same session id, and each must be a conversation of
//! its own, or the engine would take turns between unrelated histories. Without a client id,
//! a conversation is named by a digest of its opening: the system prompt and the first user
//! message; conversations that open alike are then told apart by their histories
//! (`crate::proxy::conversation::Lineage`). The state file's session id is
//! `proxy-<client>-<id>`, so `dcp stats` labels it by client.

use hyper::HeaderMap;
use serde_json::Value;

use super::convert::Api;

/// What names a proxied conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// The session id the engine keeps its state under: the client's own id, with a digest
    /// of the first user message.
    Client(String),
    /// The name of its opening (the system prompt and first user message), which the
    /// conversations that open alike share: which of them a request is, its history says
    /// (`crate::proxy::conversation::Lineage`).
    Opening(String),
}

/// What names the conversation of a request.
pub fn name(api: Api, headers: &HeaderMap, body: &Value) -> Name {
    let client = client(api, headers);
    let (system, first) = prefix(api, body);
    match client_session(headers, body) {
        Some(id) => Name::Client(format!("proxy-{client}-{}-{}", file_safe(&id), &digest(&[None, first])[..8])),
        None => Name::Opening(format!("proxy-{client}-{}", digest(&[system, first]))),
    }
}

/// The session id of a request's conversation, or of the first conversation of its opening
/// ([`Name::Opening`]).
pub fn session_id(api: Api, headers: &HeaderMap, body: &Value) -> String {
    match name(api, headers, body) {
        Name::Client(sid) | Name::Opening(sid) => sid,
    }
}

/// The client, by its user agent; else the API's provider. Each is one of
/// [`crate::state::persist::PROXY_CLIENTS`], whose state files have a folder of their own.
pub fn client(api: Api, headers: &HeaderMap) -> &'static str {
    let agent = headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if agent.contains("claude-cli") || agent.contains("claude-code") {
        "claude-code"
    } else if agent.contains("codex") {
        "codex"
    } else if agent.contains("opencode") {
        "opencode"
    } else {
        api.name()
    }
}

const HEADERS: &[&str] =
    &["x-claude-code-session-id", "session-id", "session_id", "conversation_id", "thread-id", "x-session-id"];

/// The session id the client sent, if it sent one.
fn client_session(headers: &HeaderMap, body: &Value) -> Option<String> {
    for name in HEADERS {
        if let Some(v) = headers.get(*name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()) {
            return Some(v.to_string());
        }
    }
    let user_id = body.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str);
    if let Some(id) = user_id.and_then(session_in_user_id) {
        return Some(id);
    }
    body.get("prompt_cache_key").and_then(Value::as_str).filter(|v| !v.is_empty()).map(str::to_string)
}

/// The session id in a `metadata.user_id`: after its last `session_`, or the `session_id`
/// of a JSON object.
fn session_in_user_id(user_id: &str) -> Option<String> {
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(user_id) {
        return o.get("session_id").and_then(Value::as_str).map(str::to_string);
    }
    let at = user_id.rfind("session_")?;
    Some(user_id[at + "session_".len()..].to_string()).filter(|s| !s.is_empty())
}

/// `id` if it can name a file as it is (letters, digits, `-` and `_`, at most 64 bytes),
/// else its digest.
fn file_safe(id: &str) -> String {
    let safe = id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if safe {
        id.to_string()
    } else {
        format!("{:016x}", fnv1a(id.as_bytes()))
    }
}

/// A conversation's system prompt and first user message, which stay the same all along.
fn prefix(api: Api, body: &Value) -> (Option<&Value>, Option<&Value>) {
    let (system, list) = match api {
        Api::Anthropic => (body.get("system"), body.get("messages")),
        Api::Chat => (None, body.get("messages")),
        Api::Responses => (body.get("instructions"), body.get("input")),
    };
    let list = list.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let with_role = |role: &str| list.iter().find(|m| m.get("role").and_then(Value::as_str) == Some(role));
    (system.or_else(|| with_role("system")), with_role("user"))
}

/// A digest of some JSON values, in hex.
fn digest(values: &[Option<&Value>]) -> String {
    let mut bytes = Vec::new();
    for v in values {
        bytes.extend(serde_json::to_vec(v).unwrap_or_default());
        bytes.push(0);
    }
    format!("{:016x}", fnv1a(&bytes))
}

/// FNV-1a, 64 bits: stable across builds, so a restarted proxy finds the same state file.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_codes_user_id_names_its_session() {
        let body = json!({"metadata": {"user_id": "user_ab12_account__session_6f1c-42"}, "messages": []});
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", "claude-cli/2.0.1 (external, cli)".parse().unwrap());
        assert!(session_id(Api::Anthropic, &headers, &body).starts_with("proxy-claude-code-6f1c-42-"));
    }

    #[test]
    fn claude_code_2_s_json_user_id_names_its_session() {
        let user_id = r#"{"device_id":"0895af","account_uuid":"","session_id":"eafd7f6e-c5ef"}"#;
        let body = json!({"metadata": {"user_id": user_id}, "messages": [{"role": "user", "content": "hi"}]});
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", "claude-cli/2.1.197 (external, sdk-cli)".parse().unwrap());
        assert!(session_id(Api::Anthropic, &headers, &body).starts_with("proxy-claude-code-eafd7f6e-c5ef-"));
    }

    #[test]
    fn a_conversation_without_an_id_is_named_by_its_first_message_only() {
        let one = json!({"system": "s", "messages": [{"role": "user", "content": "hi"}]});
        let two = json!({"system": "s", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]});
        let other = json!({"system": "s", "messages": [{"role": "user", "content": "ho"}]});
        let h = HeaderMap::new();
        assert_eq!(session_id(Api::Anthropic, &h, &one), session_id(Api::Anthropic, &h, &two));
        assert_ne!(session_id(Api::Anthropic, &h, &one), session_id(Api::Anthropic, &h, &other));
    }

    #[test]
    fn a_side_request_under_the_same_client_id_is_a_conversation_of_its_own() {
        let mut h = HeaderMap::new();
        h.insert("session-id", "s1".parse().unwrap());
        let main = json!({"input": [{"role": "user", "content": "fix the bug"}, {"type": "function_call"}]});
        let later =
            json!({"input": [{"role": "user", "content": "fix the bug"}, {"type": "function_call"}, {"type": "x"}]});
        let title = json!({"input": [{"role": "user", "content": "Name this conversation"}]});
        assert_eq!(session_id(Api::Responses, &h, &main), session_id(Api::Responses, &h, &later));
        assert_ne!(session_id(Api::Responses, &h, &main), session_id(Api::Responses, &h, &title));
    }

    #[test]
    fn an_id_that_cannot_name_a_file_is_digested() {
        let mut h = HeaderMap::new();
        h.insert("session_id", "../../etc/passwd".parse().unwrap());
        let sid = session_id(Api::Responses, &h, &json!({}));
        assert!(crate::state::persist::is_session_id(&sid), "{sid}");
        assert!(!sid.contains(".."));
    }
}
