//! A request's body read as raw JSON: where its list's items are, and the fields that name
//! its conversation; read whole, or only past the bytes it shares with the last body read.
//!
//! A client resends its whole history on every request, so a body is mostly the previous
//! one's bytes followed by a few new items. [`Raw::read`] reads a body in one pass, taking
//! the list's items as spans and skipping the fields the conversation's name does not need.
//! [`Raw::read_after`] reads a body that starts with every byte of a known one ([`Head`])
//! up to the end of its last item: those items and the fields before the list are the known
//! ones, at the same offsets, and only the bytes after them are read (the new items, the
//! list's end and the fields after it). Anything it does not expect there (the list's key
//! again, a byte out of place) makes it give up, and the body is read whole.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::convert::Api;

/// Byte ranges in a body.
pub type ByteSpan = (usize, usize);

/// Where a body's list items and conversation-naming fields are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Raw {
    fields: BTreeMap<String, ByteSpan>,
    pub spans: Vec<ByteSpan>,
    /// The items that name the conversation (the first system and first user message), by
    /// role, in list order; found once, so that a body read past a known one is looked
    /// through only in its new items.
    named: Vec<(String, usize)>,
}

/// The top-level fields [`Raw::identity_body`] reads.
const IDENTITY_KEYS: [&str; 4] = ["metadata", "prompt_cache_key", "system", "instructions"];

/// A body already read, kept to read the next one of its conversation after it.
#[derive(Debug)]
pub struct Head {
    pub api: Api,
    pub body: Bytes,
    pub raw: Raw,
}

impl Head {
    /// Where the known part ends: the end of the list's last item (`None`: an empty list,
    /// which gives nothing to skip).
    pub fn end(&self) -> Option<usize> {
        self.raw.spans.last().map(|s| s.1)
    }

    /// How many bytes `body` shares with this head's known part: all of them, or `None`.
    pub fn is_prefix_of(&self, api: Api, body: &[u8]) -> Option<usize> {
        let end = self.end()?;
        let known = self.body.get(..end)?;
        (api == self.api && body.get(..end) == Some(known)).then_some(end)
    }
}

impl Raw {
    /// Reads `body`; `None` when it holds no conversation list, or why it cannot be read.
    pub fn read(api: Api, body: &[u8]) -> Result<Option<Raw>, String> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let top = serde::Deserializer::deserialize_map(&mut de, TopVisitor { list_key: api.list_key() })
            .and_then(|top| de.end().map(|()| top));
        let (fields, list) = match top {
            Ok(top) => top,
            Err(e) => {
                return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                    Ok(_) => Ok(None),
                    Err(_) => Err(format!("the body is not JSON: {e}")),
                }
            }
        };
        let Some(items) = list else { return Ok(None) };
        let origin = body.as_ptr() as usize;
        let span = |raw: &RawValue| {
            let start = raw.get().as_ptr() as usize - origin;
            (start, start + raw.get().len())
        };
        let fields = fields.into_iter().map(|(k, v)| (k, span(v))).collect();
        let mut raw = Raw { fields, spans: items.into_iter().map(span).collect(), named: Vec::new() };
        raw.name_from(api, body, 0);
        Ok(Some(raw))
    }

    /// Reads `body`, which starts with `head`'s known part, past it; `None` when the rest is
    /// not what a list's new items and the fields after it look like (then read it whole),
    /// or when it does not start so.
    pub fn read_after(api: Api, body: &[u8], head: &Head) -> Option<Raw> {
        head.is_prefix_of(api, body)?;
        Raw::read_past(api, body, head)
    }

    /// As [`Raw::read_after`], for a body the caller has found to start with `head`'s known
    /// part (its bytes are not compared again).
    pub fn read_past(api: Api, body: &[u8], head: &Head) -> Option<Raw> {
        let end = head.end().filter(|&end| api == head.api && end <= body.len())?;
        debug_assert!(head.is_prefix_of(api, body).is_some(), "the body continues the head");
        let fields = head.raw.fields.iter().filter(|(_, s)| s.1 <= end).map(|(k, s)| (k.clone(), *s)).collect();
        let mut raw = Raw { fields, spans: head.raw.spans.clone(), named: head.raw.named.clone() };
        let mut at = Cursor { body, at: end };
        while at.next_byte()? == b',' {
            raw.spans.push(at.value_span()?);
        }
        if body[at.at - 1] != b']' {
            return None;
        }
        loop {
            match at.next_byte()? {
                b'}' => break,
                b',' => {
                    let (a, b) = at.value_span()?;
                    let key: String = serde_json::from_slice(&body[a..b]).ok()?;
                    if at.next_byte()? != b':' {
                        return None;
                    }
                    let value = at.value_span()?;
                    if key == api.list_key() {
                        return None;
                    }
                    if IDENTITY_KEYS.contains(&key.as_str()) {
                        raw.fields.insert(key, value);
                    }
                }
                _ => return None,
            }
        }
        if !body[at.at..].iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        raw.name_from(api, body, head.raw.spans.len());
        Some(raw)
    }

    /// Finds, from item `from` on, the naming items not found yet.
    fn name_from(&mut self, api: Api, body: &[u8], from: usize) {
        #[derive(Deserialize)]
        struct Role<'r> {
            #[serde(borrow)]
            role: Option<std::borrow::Cow<'r, str>>,
        }
        let mut wanted: Vec<&str> = if api == Api::Chat { vec!["system", "user"] } else { vec!["user"] };
        wanted.retain(|w| !self.named.iter().any(|(role, _)| role == w));
        for (i, &(a, b)) in self.spans.iter().enumerate().skip(from) {
            if wanted.is_empty() {
                break;
            }
            let role = serde_json::from_slice::<Role<'_>>(&body[a..b]).ok().and_then(|r| r.role);
            let Some(at) = role.and_then(|r| wanted.iter().position(|w| *w == r)) else { continue };
            self.named.push((wanted.remove(at).to_string(), i));
        }
    }

    /// What [`super::identity::session_id`] reads of the body: the fields that name the
    /// conversation, and the list's first system and first user messages.
    pub fn identity_body(&self, api: Api, body: &[u8]) -> Value {
        let mut out = Map::new();
        for (key, &(a, b)) in &self.fields {
            if let Ok(v) = serde_json::from_slice(&body[a..b]) {
                out.insert(key.clone(), v);
            }
        }
        let mut list = Vec::new();
        for &(_, i) in &self.named {
            let (a, b) = self.spans[i];
            list.extend(serde_json::from_slice::<Value>(&body[a..b]).ok());
        }
        out.insert(api.list_key().to_string(), Value::Array(list));
        Value::Object(out)
    }

    /// Item `i` of the list, parsed.
    pub fn item(&self, body: &[u8], i: usize) -> Value {
        let (a, b) = self.spans[i];
        serde_json::from_slice(&body[a..b]).unwrap_or(Value::Null)
    }
}

/// A position in a body being read past a known part.
struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// The next byte that is not white space, stepped over.
    fn next_byte(&mut self) -> Option<u8> {
        let skip = self.body[self.at..].iter().position(|b| !b.is_ascii_whitespace())?;
        self.at += skip + 1;
        Some(self.body[self.at - 1])
    }

    /// The span of the JSON value that starts here (after white space), stepped over.
    fn value_span(&mut self) -> Option<ByteSpan> {
        let mut values = serde_json::Deserializer::from_slice(&self.body[self.at..]).into_iter::<&RawValue>();
        let value = values.next()?.ok()?;
        let start = value.get().as_ptr() as usize - self.body.as_ptr() as usize;
        self.at = start + value.get().len();
        Some((start, self.at))
    }
}

type Top<'a> = (BTreeMap<String, &'a RawValue>, Option<Vec<&'a RawValue>>);

/// Reads a body's top level: the list's items (the last list, as a JSON value would keep
/// it; `None` when it is no array) and the fields that name the conversation; skips the rest.
struct TopVisitor {
    list_key: &'static str,
}

impl<'de> serde::de::Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Top<'de>, M::Error> {
        let (mut fields, mut list) = (BTreeMap::new(), None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.list_key {
                list = map.next_value::<List<'de>>()?.0;
            } else if IDENTITY_KEYS.contains(&key.as_ref()) {
                fields.insert(key.into_owned(), map.next_value::<&RawValue>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok((fields, list))
    }
}

/// A list's items as raw spans; `None` for any value but an array.
struct List<'a>(Option<Vec<&'a RawValue>>);

impl<'de> Deserialize<'de> for List<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<List<'de>, D::Error> {
        d.deserialize_any(ListVisitor)
    }
}

struct ListVisitor;

impl<'de> serde::de::Visitor<'de> for ListVisitor {
    type Value = List<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<List<'de>, S::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&RawValue>()? {
            items.push(item);
        }
        Ok(List(Some(items)))
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<List<'de>, M::Error> {
        while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(List(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<List<'de>, E> {
        Ok(List(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<List<'de>, E> {
        Ok(List(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<List<'de>, E> {
        Ok(List(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<List<'de>, E> {
        Ok(List(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<List<'de>, E> {
        Ok(List(None))
    }

    fn visit_unit<E>(self) -> Result<List<'de>, E> {
        Ok(List(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(api: Api, body: &str) -> Head {
        Head {
            api,
            body: Bytes::copy_from_slice(body.as_bytes()),
            raw: Raw::read(api, body.as_bytes()).unwrap().unwrap(),
        }
    }

    #[test]
    fn a_body_read_past_the_one_it_continues_reads_as_it_does_whole() {
        let before = r#"{"system": "s", "messages": [{"role": "user", "content": "go"}, {"a": [1, 2]}], "metadata": {"user_id": "u1"}}"#;
        let known = head(Api::Anthropic, before);
        let continued = [
            r#"{"system": "s", "messages": [{"role": "user", "content": "go"}, {"a": [1, 2]}], "metadata": {"user_id": "u1"}}"#,
            r#"{"system": "s", "messages": [{"role": "user", "content": "go"}, {"a": [1, 2]}, 3 ,"x",{"b":{}} ] , "metadata": {"user_id": "u2"},"stream":true}"#,
            "{\"system\": \"s\", \"messages\": [{\"role\": \"user\", \"content\": \"go\"}, {\"a\": [1, 2]}\n,\n{}\n]\n}\n",
        ];
        for body in continued {
            let whole = Raw::read(Api::Anthropic, body.as_bytes()).unwrap().unwrap();
            assert_eq!(Raw::read_after(Api::Anthropic, body.as_bytes(), &known), Some(whole.clone()), "{body}");
            let ids = (whole.identity_body(Api::Anthropic, body.as_bytes()), body);
            assert_eq!(ids.0["metadata"], serde_json::from_str::<Value>(body).unwrap()["metadata"], "{}", ids.1);
        }
    }

    #[test]
    fn a_body_that_does_not_continue_the_known_one_as_expected_is_read_whole() {
        let known = head(Api::Chat, r#"{"messages": [{"role": "user", "content": "go"}, 1]}"#);
        let not = [
            r#"{"messages": [{"role": "user", "content": "go"}, 2]}"#,
            r#"{"messages": [{"role": "user", "content": "go"}, 1], "messages": []}"#,
            r#"{"messages": [{"role": "user", "content": "go"}, 1, ]}"#,
            r#"{"messages": [{"role": "user", "content": "go"}, 1]} x"#,
            r#"{"messages": [{"role": "user", "content": "go"}, 1], 7: 1}"#,
            r#"{"messages": [{"role": "user", "content": "go"}, 1"#,
        ];
        for body in not {
            assert_eq!(Raw::read_after(Api::Chat, body.as_bytes(), &known), None, "{body}");
        }
        let body = r#"{"messages": [{"role": "user", "content": "go"}, 1, 2]}"#;
        assert_eq!(Raw::read_after(Api::Responses, body.as_bytes(), &known), None, "another API's body");
    }
}
