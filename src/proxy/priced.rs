//! The price sheet a proxied request asks for (`crate::prices::live::for_request`): its API,
//! its top-level `model`, an OpenAI `prompt_cache_retention` of `"24h"`, and an Anthropic
//! `cache_control` with `"ttl": "1h"` in its system prompt or tools. Read from the body's
//! bytes before and after its list of messages (the top-level fields), without parsing the
//! messages again: a `cache_control` only in the messages is not seen (Anthropic orders a
//! request's 1-hour breakpoints before its 5-minute ones, so a client that asks for the hour
//! asks it first on its system prompt and tools).

use super::convert::Api;
use super::raw::Raw;
use crate::prices::live::{self, Asked};
use crate::prices::Sheet;

/// The sheet `body`, read as `raw`, asks for.
pub fn sheet_of(api: Api, body: &[u8], raw: &Raw) -> Sheet {
    let mut found = Found::default();
    match (raw.spans.first(), raw.spans.last()) {
        (Some(first), Some(last)) => {
            scan(&body[..first.0.min(body.len())], 0, &mut found);
            // After the last item: inside the list (depth 2), then the object's other fields.
            scan(&body[last.1.min(body.len())..], 2, &mut found);
        }
        _ => scan(body, 0, &mut found),
    }
    let api = match api {
        Api::Anthropic => live::CacheApi::Anthropic,
        Api::Responses => live::CacheApi::OpenAi,
        Api::Chat => live::CacheApi::Chat,
    };
    live::for_request(api, found.model.as_deref(), found.asked)
}

#[derive(Default)]
struct Found {
    model: Option<String>,
    asked: Asked,
}

impl Found {
    fn pair(&mut self, depth: i32, key: &[u8], value: &[u8]) {
        match (depth, key) {
            (1, b"model") if self.model.is_none() => {
                self.model = std::str::from_utf8(value).ok().filter(|m| m.len() <= 200).map(str::to_string);
            }
            (1, b"prompt_cache_retention") => self.asked.retention_24h |= value == b"24h",
            (_, b"ttl") => self.asked.one_hour |= value == b"1h",
            _ => {}
        }
    }
}

/// Walks JSON text that starts at object depth `depth`, handing `found` each key whose value
/// is a string, with the depth of the object that holds it.
fn scan(text: &[u8], mut depth: i32, found: &mut Found) {
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let (key, after) = string(text, i);
                let colon = skip_space(text, after);
                if text.get(colon) != Some(&b':') {
                    i = after;
                    continue;
                }
                let value_at = skip_space(text, colon + 1);
                if text.get(value_at) != Some(&b'"') {
                    i = value_at;
                    continue;
                }
                let (value, end) = string(text, value_at);
                found.pair(depth, key, value);
                i = end;
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
}

/// The raw bytes of the string literal that opens at `at`, and where it ends (past its
/// closing quote, or the text's end).
fn string(text: &[u8], at: usize) -> (&[u8], usize) {
    let mut i = at + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return (&text[at + 1..i], i + 1),
            _ => i += 1,
        }
    }
    (&text[(at + 1).min(text.len())..], text.len())
}

fn skip_space(text: &[u8], mut i: usize) -> usize {
    while text.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prices::{family, Ttl};

    fn sheet(api: Api, body: &str) -> Sheet {
        let raw = Raw::read(api, body.as_bytes()).unwrap().unwrap();
        sheet_of(api, body.as_bytes(), &raw)
    }

    #[test]
    fn an_anthropic_request_that_asks_the_hour_is_priced_by_the_one_hour_sheet() {
        let one_hour = r#"{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}],
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}"#;
        let s = sheet(Api::Anthropic, one_hour);
        assert_eq!((s.rates.write, s.ttl), (2.0, Ttl::Seconds(3600)), "{s:?}");
        let plain = one_hour.replace(r#", "ttl": "1h""#, "");
        assert_eq!(sheet(Api::Anthropic, &plain).ttl, Ttl::Seconds(300));
        // A `ttl` or a `model` the messages quote is no ask of the request.
        let quoted = r#"{"messages": [{"role": "user", "content": "{\"ttl\": \"1h\", \"model\": \"gpt-5\"}"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "task", "input": {"model": "gpt-5"}}]}],
            "model": "claude-haiku-4-5", "tools": [{"name": "task", "input_schema": {"properties": {"model": {"type": "string"}}}}]}"#;
        let s = sheet(Api::Anthropic, quoted);
        assert_eq!((s.name.as_str(), s.ttl), ("claude-haiku-4-5", Ttl::Seconds(300)));
    }

    #[test]
    fn an_openai_request_that_asks_a_day_is_priced_by_the_24_hour_sheet() {
        let body =
            r#"{"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "prompt_cache_retention": "24h"}"#;
        let s = sheet(Api::Responses, body);
        assert_eq!((s.rates.write, s.ttl), (1.0, Ttl::Seconds(86_400)));
        let chat = r#"{"model": "some-local-model", "messages": [{"role": "user", "content": "hi"}]}"#;
        assert_eq!(sheet(Api::Chat, chat), Sheet::default());
        let unknown = r#"{"model": "o-something", "input": [{"role": "user", "content": "hi"}]}"#;
        assert_eq!(sheet(Api::Responses, unknown), family("openai").unwrap());
    }
}
