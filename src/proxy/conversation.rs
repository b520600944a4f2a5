//! A proxied conversation as the proxy last read it, so that each request is read, mapped
//! and sent to the engine only where it differs from the one before, and written back only
//! where the engine changes it.
//!
//! A client resends its whole history on every request. The request's list (`messages` or
//! `input`) is read as raw JSON spans ([`Raw`]); an item whose bytes equal the previous
//! request's is neither parsed nor mapped again: the conversation keeps the [`Builder`] that
//! read the previous list (a left fold, so reading only the new items gives what reading all
//! of them would), and the engine is sent only the messages from the first one the new items
//! made or changed (`base`). The edits are written into copies of the items they touch, and
//! those items' spans are replaced in the request's own bytes: every other byte is forwarded
//! as the client sent it. A history that changed anywhere but at its end is read whole again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::convert::{Api, Builder, EngineEdit};

/// A request's body read as raw JSON: its top-level fields, and its list's items with their
/// spans in the body.
pub struct Raw<'a> {
    fields: BTreeMap<String, &'a RawValue>,
    items: Vec<&'a RawValue>,
    spans: Vec<(usize, usize)>,
}

impl<'a> Raw<'a> {
    /// Reads `bytes`; `None` when it holds no conversation list, or why it cannot be read.
    /// One pass: the list's items are taken as raw spans as the body is read.
    pub fn read(api: Api, bytes: &'a [u8]) -> Result<Option<Raw<'a>>, String> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let top = serde::Deserializer::deserialize_map(&mut de, TopVisitor { list_key: api.list_key() })
            .and_then(|top| de.end().map(|()| top));
        let (fields, list) = match top {
            Ok(top) => top,
            Err(e) => {
                return match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                    Ok(_) => Ok(None),
                    Err(_) => Err(format!("the body is not JSON: {e}")),
                }
            }
        };
        let Some(items) = list else { return Ok(None) };
        let origin = bytes.as_ptr() as usize;
        let spans = items
            .iter()
            .map(|item| {
                let start = item.get().as_ptr() as usize - origin;
                (start, start + item.get().len())
            })
            .collect();
        Ok(Some(Raw { fields, items, spans }))
    }

    /// What [`super::identity::session_id`] reads of the body: the fields that name the
    /// conversation, and the list's first system and first user messages.
    pub fn identity_body(&self, api: Api) -> Value {
        let mut body = Map::new();
        for key in IDENTITY_KEYS {
            if let Some(v) = self.fields.get(key).and_then(|raw| serde_json::from_str(raw.get()).ok()) {
                body.insert(key.to_string(), v);
            }
        }
        #[derive(Deserialize)]
        struct Role<'r> {
            #[serde(borrow)]
            role: Option<std::borrow::Cow<'r, str>>,
        }
        let mut list = Vec::new();
        let mut wanted: Vec<&str> = if api == Api::Chat { vec!["system", "user"] } else { vec!["user"] };
        for item in &self.items {
            let role = serde_json::from_str::<Role<'_>>(item.get()).ok().and_then(|r| r.role);
            let Some(at) = role.and_then(|r| wanted.iter().position(|w| *w == r)) else { continue };
            wanted.remove(at);
            list.extend(serde_json::from_str::<Value>(item.get()).ok());
            if wanted.is_empty() {
                break;
            }
        }
        body.insert(api.list_key().to_string(), Value::Array(list));
        Value::Object(body)
    }

    fn item(&self, i: usize) -> Value {
        serde_json::from_str(self.items[i].get()).unwrap_or(Value::Null)
    }
}

/// The top-level fields [`Raw::identity_body`] reads.
const IDENTITY_KEYS: [&str; 4] = ["metadata", "prompt_cache_key", "system", "instructions"];

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

/// What the proxy keeps of a conversation's last request: its body, its items' spans, the
/// builder that read them, and each rewritten item with the edits written into it.
pub struct Conversation {
    body: Bytes,
    spans: Vec<(usize, usize)>,
    builder: Builder,
    written: Written,
}

/// Rewritten items by index: the edits written into each, and its new bytes.
pub type Written = HashMap<usize, (Vec<EngineEdit>, Vec<u8>)>;

/// The builder for `raw`: `held`'s, fed only the items after those it read, when they are
/// unchanged; else a new one that reads them all. Also the rewritten items of `held` that
/// are still good: every one, when the builder is `held`'s.
pub fn fold(api: Api, sid: &str, body: &[u8], raw: &Raw<'_>, held: Option<Conversation>) -> (Builder, Written) {
    let kept = held.filter(|c| {
        c.spans.len() <= raw.spans.len()
            && c.spans.iter().zip(&raw.spans).all(|(&(a, b), &(x, y))| c.body[a..b] == body[x..y])
    });
    let (mut builder, from, written) = match kept {
        Some(c) => (c.builder, c.spans.len(), c.written),
        None => (Builder::new(sid), 0, Written::new()),
    };
    for i in from..raw.items.len() {
        builder.fold(api, i, &raw.item(i));
    }
    (builder, written)
}

impl Conversation {
    pub fn new(body: Bytes, raw: &Raw<'_>, builder: Builder, written: Written) -> Conversation {
        Conversation { body, spans: raw.spans.clone(), builder, written }
    }
}

/// `body` with `edits` written in: only the items they change are written anew (or taken
/// from `written`, which is left holding this request's); `None` when nothing changes.
pub fn splice(
    body: &[u8],
    raw: &Raw<'_>,
    builder: &Builder,
    edits: &[EngineEdit],
    written: &mut Written,
) -> Option<Vec<u8>> {
    let mut by_item: BTreeMap<usize, Vec<EngineEdit>> = BTreeMap::new();
    for edit in edits {
        if let Some(i) = builder.item_of(edit).filter(|i| *i < raw.items.len()) {
            by_item.entry(i).or_default().push(edit.clone());
        }
    }
    let mut before = std::mem::take(written);
    let mut out = Vec::new();
    let mut copied = 0;
    for (i, edits) in by_item {
        let new = match before.remove(&i) {
            Some((same, new)) if same == edits => new,
            _ => {
                let mut item = raw.item(i);
                let changed = edits.iter().filter(|edit| builder.apply_to_item(i, &mut item, edit)).count();
                if changed == 0 {
                    continue;
                }
                serde_json::to_vec(&item).ok()?
            }
        };
        let (start, end) = raw.spans[i];
        if out.is_empty() {
            out.reserve(body.len() + body.len() / 8);
        }
        out.extend_from_slice(&body[copied..start]);
        out.extend_from_slice(&new);
        written.insert(i, (edits, new));
        copied = end;
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(&body[copied..]);
    Some(out)
}

/// Every conversation's last request, each behind a lock of its own so that a
/// conversation's requests are read in turn.
#[derive(Default)]
pub struct Conversations {
    slots: Mutex<HashMap<String, Slot>>,
}

pub type Slot = Arc<tokio::sync::Mutex<Option<Conversation>>>;

/// How many conversations are kept; past it, those not in use are dropped (their next
/// request is read whole).
const KEPT: usize = 64;

impl Conversations {
    pub fn slot(&self, sid: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= KEPT && !slots.contains_key(sid) {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        Arc::clone(slots.entry(sid.to_string()).or_default())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::proxy::convert;

    fn chat(outputs: &[&str]) -> Vec<u8> {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        for (i, output) in outputs.iter().enumerate() {
            let call =
                json!({"id": format!("c{i}"), "function": {"name": "Read", "arguments": "{\"file_path\":\"/a\"}"}});
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": output}));
        }
        serde_json::to_vec_pretty(&json!({"model": "m", "messages": messages})).unwrap()
    }

    /// The builder `fold` gives for `body` after `before`, and the one a whole read gives.
    fn both(before: &[u8], body: &[u8]) -> (Builder, Builder) {
        let raw = Raw::read(Api::Chat, before).unwrap().unwrap();
        let (mut held, written) = fold(Api::Chat, "s", before, &raw, None);
        held.mark_sent();
        let held = Conversation::new(Bytes::copy_from_slice(before), &raw, held, written);
        let raw = Raw::read(Api::Chat, body).unwrap().unwrap();
        (fold(Api::Chat, "s", body, &raw, Some(held)).0, fold(Api::Chat, "s", body, &raw, None).0)
    }

    #[test]
    fn a_conversation_read_on_from_its_last_request_maps_as_one_read_whole() {
        let (resumed, whole) = both(&chat(&["a", "b"]), &chat(&["a", "b", "c"]));
        assert_eq!(resumed.messages(), whole.messages());
        assert_eq!(resumed.dirty_from(), 3, "only the new call's message is sent again");
        assert_eq!(whole.dirty_from(), 0);
    }

    #[test]
    fn a_body_without_a_list_holds_no_conversation_and_one_that_is_not_json_is_refused() {
        assert!(Raw::read(Api::Chat, br#"{"messages": "x", "system": {"a": [1]}}"#).unwrap().is_none());
        assert!(Raw::read(Api::Chat, br#"[{"messages": []}]"#).unwrap().is_none());
        assert!(Raw::read(Api::Chat, br#"{"messages": [1], "messages": null}"#).unwrap().is_none());
        assert!(Raw::read(Api::Chat, br#"{"messages": [1]} x"#).err().unwrap().contains("not JSON"));
        let raw = Raw::read(Api::Responses, br#"{"model": {"k": [2]}, "input": [ {"a": 1} , 2 ]}"#).unwrap().unwrap();
        assert_eq!(raw.spans, [(33, 41), (44, 45)]);
    }

    #[test]
    fn a_history_changed_before_its_end_is_read_whole_again() {
        let (resumed, whole) = both(&chat(&["a", "b"]), &chat(&["x", "b", "c"]));
        assert_eq!(resumed.messages(), whole.messages());
        assert_eq!(resumed.dirty_from(), 0);
    }

    #[test]
    fn spliced_edits_give_the_body_a_whole_rewrite_gives_and_keep_every_other_byte() {
        let body = chat(&["a", "b"]);
        let raw = Raw::read(Api::Chat, &body).unwrap().unwrap();
        let (builder, mut written) = fold(Api::Chat, "s", &body, &raw, None);
        let edits = [convert::EngineEdit {
            m: 1,
            p: 0,
            path: vec!["state".into(), "output".into()],
            value: Some(json!("pruned")),
        }];
        let spliced = splice(&body, &raw, &builder, &edits, &mut written).unwrap();
        assert_eq!(splice(&body, &raw, &builder, &edits, &mut written).as_ref(), Some(&spliced), "taken as written");
        let mut whole: Value = serde_json::from_slice(&body).unwrap();
        let mapped = convert::map(Api::Chat, &whole, "s").unwrap();
        assert_eq!(mapped.apply(&mut whole, &edits), 1);
        assert_eq!(serde_json::from_slice::<Value>(&spliced).unwrap(), whole);
        let (start, end) = raw.spans[2];
        assert_eq!(spliced[..start], body[..start]);
        assert_eq!(spliced[spliced.len() - (body.len() - end)..], body[end..]);
        assert_eq!(splice(&body, &raw, &builder, &[], &mut written), None, "no edit, no new body");
    }
}
