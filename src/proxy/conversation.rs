//! A proxied conversation as the proxy last read it, so that each request is read, mapped
//! and sent to the engine only where it differs from the one before, and written back only
//! where the engine changes it.
//!
//! A client resends its whole history on every request. A body that starts with every byte
//! of a conversation's last one up to its last item is read only past them
//! ([`Raw::read_after`]; any other is read whole, [`Raw::read`]); an item whose bytes equal
//! the previous request's is neither parsed nor mapped again: the conversation keeps the
//! [`Builder`] that read the previous list (a left fold, so reading only the new items gives
//! what reading all of them would), and the engine is sent only the messages from the first
//! one the new items made or changed (`base`). The edits are written into copies of the
//! items they touch, and the body goes upstream as the client's own bytes around those
//! items, in pieces that share the client's buffer ([`splice`]). A history that changed
//! anywhere but at its end is read whole again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::convert::{Api, Builder, EngineEdit};
use super::raw::{Head, Raw};

/// What the proxy keeps of a conversation's last request: its body as read, the builder
/// that read it, and each rewritten item with the edits written into it.
pub struct Conversation {
    head: Arc<Head>,
    builder: Builder,
    written: Written,
}

/// Rewritten items by index: the edits written into each, and its new bytes (`None`: the
/// edits change nothing in it).
pub type Written = HashMap<usize, (Vec<EngineEdit>, Option<Bytes>)>;

/// How `raw` was read: past `head`'s known part (whose items it then holds as they were), or
/// whole.
pub enum Read<'h> {
    After(&'h Arc<Head>),
    Whole,
}

/// The builder for `raw`: `held`'s, fed only the items after those it read, when they are
/// unchanged; else a new one that reads them all. Also the rewritten items of `held` that
/// are still good: every one, when the builder is `held`'s.
pub fn fold(
    api: Api,
    sid: &str,
    body: &[u8],
    raw: &Raw,
    read: &Read<'_>,
    held: Option<Conversation>,
) -> (Builder, Written) {
    let kept = held.filter(|c| match read {
        Read::After(head) if Arc::ptr_eq(head, &c.head) => true,
        _ => {
            let (old, spans) = (&c.head.body, &c.head.raw.spans);
            spans.len() <= raw.spans.len()
                && spans.iter().zip(&raw.spans).all(|(&(a, b), &(x, y))| old[a..b] == body[x..y])
        }
    });
    let (mut builder, from, written) = match kept {
        Some(c) => (c.builder, c.head.raw.spans.len(), c.written),
        None => (Builder::new(sid), 0, Written::new()),
    };
    for i in from..raw.spans.len() {
        builder.fold(api, i, &raw.item(body, i));
    }
    (builder, written)
}

impl Conversation {
    pub fn new(head: Arc<Head>, builder: Builder, written: Written) -> Conversation {
        Conversation { head, builder, written }
    }
}

/// `body` with `edits` written in, as pieces that share `body`'s buffer around the items
/// written anew (or taken from `written`, which is left holding this request's); `None` when
/// nothing changes.
pub fn splice(
    body: &Bytes,
    raw: &Raw,
    builder: &Builder,
    edits: &[EngineEdit],
    written: &mut Written,
) -> Option<Vec<Bytes>> {
    let mut by_item: BTreeMap<usize, Vec<&EngineEdit>> = BTreeMap::new();
    for edit in edits {
        if let Some(i) = builder.item_of(edit).filter(|i| *i < raw.spans.len()) {
            by_item.entry(i).or_default().push(edit);
        }
    }
    let mut before = std::mem::take(written);
    let mut out = Vec::new();
    let mut copied = 0;
    for (i, edits) in by_item {
        let new = match before.remove(&i) {
            Some((same, new)) if same.iter().eq(edits.iter().copied()) => {
                let Some(new) = new else {
                    written.insert(i, (same, None));
                    continue;
                };
                written.insert(i, (same, Some(new.clone())));
                Some(new)
            }
            _ => {
                let mut item = raw.item(body, i);
                let changed = edits.iter().filter(|edit| builder.apply_to_item(i, &mut item, edit)).count();
                (changed > 0).then(|| serde_json::to_vec(&item).map(Bytes::from)).transpose().ok()?
            }
        };
        let owned = || edits.iter().map(|e| (*e).clone()).collect();
        let Some(new) = new else {
            // Edits that change nothing here (a field already so, a locked result) are
            // remembered too, so that the item is not read again for them.
            written.entry(i).or_insert_with(|| (owned(), None));
            continue;
        };
        let (start, end) = raw.spans[i];
        out.push(body.slice(copied..start));
        out.push(new.clone());
        written.entry(i).or_insert_with(|| (owned(), Some(new)));
        copied = end;
    }
    if copied == 0 {
        return None;
    }
    out.push(body.slice(copied..));
    Some(out)
}

/// Every conversation's last request, each behind a lock of its own so that a
/// conversation's requests are read in turn, and the bodies they were read from, to find
/// the one a new body continues.
#[derive(Default)]
pub struct Conversations {
    slots: Mutex<HashMap<String, Slot>>,
    heads: Mutex<HashMap<String, Arc<Head>>>,
    reading: Reading,
    resumed: std::sync::atomic::AtomicUsize,
}

/// How a body is read: past the known body it continues, where there is one, or always
/// whole (the reference the first is tested against).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reading {
    #[default]
    PastKnown,
    Whole,
}

pub type Slot = Arc<tokio::sync::Mutex<Option<Conversation>>>;

/// How many conversations are kept; past it, those not in use are dropped (their next
/// request is read whole).
const KEPT: usize = 64;

impl Conversations {
    pub fn reading(reading: Reading) -> Conversations {
        Conversations { reading, ..Conversations::default() }
    }

    /// How many bodies were read past a known one.
    pub fn resumed(&self) -> usize {
        self.resumed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts a body read past a known one.
    pub fn count_resumed(&self) {
        self.resumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn slot(&self, sid: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= KEPT && !slots.contains_key(sid) {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
            let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            heads.retain(|sid, _| slots.contains_key(sid));
        }
        Arc::clone(slots.entry(sid.to_string()).or_default())
    }

    /// Keeps `conversation` as `sid`'s last request, in `held` (`sid`'s slot, locked).
    pub fn keep(&self, sid: &str, held: &mut Option<Conversation>, conversation: Conversation) {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        heads.insert(sid.to_string(), Arc::clone(&conversation.head));
        *held = Some(conversation);
    }

    /// The kept body that `body` continues (starts with every byte of, up to its last
    /// item), the longest if several do.
    pub fn continued(&self, api: Api, body: &[u8]) -> Option<Arc<Head>> {
        if self.reading == Reading::Whole {
            return None;
        }
        let heads: Vec<Arc<Head>> = {
            let heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            heads.values().filter(|h| h.api == api && h.end().is_some_and(|e| e <= body.len())).cloned().collect()
        };
        let mut found: Option<(usize, Arc<Head>)> = None;
        for head in heads {
            let longer = found.as_ref().is_none_or(|(end, _)| head.end() > Some(*end));
            if let Some(end) = longer.then(|| head.is_prefix_of(api, body)).flatten() {
                found = Some((end, head));
            }
        }
        found.map(|(_, head)| head)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

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

    /// The builder `fold` gives for `body` after `before` (read past it when it continues
    /// it), and the one a whole read gives.
    fn both(before: &[u8], body: &[u8]) -> (Builder, Builder) {
        let raw = Raw::read(Api::Chat, before).unwrap().unwrap();
        let (mut held, written) = fold(Api::Chat, "s", before, &raw, &Read::Whole, None);
        held.mark_sent();
        let head = Arc::new(Head { api: Api::Chat, body: Bytes::copy_from_slice(before), raw });
        let held = Conversation::new(Arc::clone(&head), held, written);
        let whole = Raw::read(Api::Chat, body).unwrap().unwrap();
        let (raw, read) = match Raw::read_after(Api::Chat, body, &head) {
            Some(raw) => (raw, Read::After(&head)),
            None => (whole.clone(), Read::Whole),
        };
        assert_eq!(raw, whole);
        (
            fold(Api::Chat, "s", body, &raw, &read, Some(held)).0,
            fold(Api::Chat, "s", body, &whole, &Read::Whole, None).0,
        )
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
        let body = Bytes::from(chat(&["a", "b"]));
        let raw = Raw::read(Api::Chat, &body).unwrap().unwrap();
        let (builder, mut written) = fold(Api::Chat, "s", &body, &raw, &Read::Whole, None);
        let edits = [convert::EngineEdit {
            m: 1,
            p: 0,
            path: vec!["state".into(), "output".into()],
            value: Some(json!("pruned")),
        }];
        let spliced = splice(&body, &raw, &builder, &edits, &mut written).unwrap().concat();
        let again = splice(&body, &raw, &builder, &edits, &mut written).unwrap();
        assert_eq!(again.concat(), spliced, "taken as written");
        assert_eq!(
            again[1].as_ptr(),
            written[&2].1.as_ref().unwrap().as_ptr(),
            "the rewritten item is not copied again"
        );
        assert_eq!(again[0].as_ptr(), body.as_ptr(), "the client's bytes are not copied");
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
