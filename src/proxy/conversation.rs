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
//! items they touch ([`rewrite`]), and the body goes upstream as the client's own bytes around
//! those items, in pieces that share the client's buffer, laid out only as it is sent
//! ([`Layout::pieces`]). A history that changed anywhere but at its end is read whole again.

mod layout;
mod lineage;
pub use layout::{Items, Layout, Sent};
pub use lineage::Lineage;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::convert::{Api, Builder, Edit};
use super::engine::Edits;
use super::identity::Name;
use super::raw::{Head, Raw};

/// What the proxy keeps of a conversation's last request: its body as read, the builder
/// that read it, and each rewritten item with the edits written into it.
pub struct Conversation {
    head: Arc<Head>,
    builder: Builder,
    memory: Memory,
}

/// What a conversation remembers of the bodies it wrote.
#[derive(Default)]
pub struct Memory {
    written: RewrittenItems,
    last: Option<Last>,
}

/// The last body's layout: its edits, the items written anew in it with their bytes, and how
/// many messages it had. A body read past it whose new items changed none of those messages,
/// under the same edits (the same list, not a copy), is written as it was without looking
/// at the edits again.
struct Last {
    edits: Edits,
    items: Items,
    messages: usize,
}

/// Rewritten items by index: the edits written into each, and its new bytes (`None`: the
/// edits change nothing in it).
pub type RewrittenItems = HashMap<usize, (Vec<Edit>, Option<Bytes>)>;

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
) -> (Builder, Memory) {
    let same_places = |c: &Conversation| matches!(read, Read::After(head) if Arc::ptr_eq(head, &c.head));
    let kept = held.filter(|c| match read {
        _ if same_places(c) => true,
        _ => {
            let (old, spans) = (&c.head.body, &c.head.raw.spans);
            spans.len() <= raw.spans.len()
                && spans.iter().zip(&raw.spans).all(|(&(a, b), &(x, y))| old[a..b] == body[x..y])
        }
    });
    let (mut builder, from, mut memory) = match kept {
        Some(c) => {
            let same = same_places(&c);
            let mut memory = c.memory;
            if !same {
                memory.last = None;
            }
            (c.builder, c.head.raw.spans.len(), memory)
        }
        None => (Builder::new(sid), 0, Memory::default()),
    };
    for i in from..raw.spans.len() {
        builder.fold(api, i, &raw.item(body, i));
    }
    if memory.last.as_ref().is_some_and(|last| builder.dirty_from() < last.messages) {
        memory.last = None;
    }
    (builder, memory)
}

impl Conversation {
    /// The builder that read the conversation's last request: its messages as the session
    /// model holds them, every output whole (what `dcp restore` answers from).
    pub fn builder(&self) -> &Builder {
        &self.builder
    }

    pub fn new(head: Arc<Head>, builder: Builder, memory: Memory) -> Conversation {
        Conversation { head, builder, memory }
    }
}

/// Writes `edits` into the body: the items they rewrite, with their new bytes, laid out as
/// last time when the edits are last time's list, else found item by item
/// ([`written_items`]), kept as the conversation's last layout. The body itself is laid out
/// only when it is sent ([`Layout::rewritten`]).
pub fn rewrite(body: &Bytes, raw: &Raw, builder: &Builder, edits: &Edits, memory: &mut Memory) {
    let items = match memory.last.take().filter(|last| Arc::ptr_eq(&last.edits, edits)) {
        Some(last) => last.items,
        None => match written_items(body, raw, builder, edits, &mut memory.written) {
            Some(items) => Arc::new(items),
            None => return,
        },
    };
    memory.last = Some(Last { edits: Arc::clone(edits), items, messages: builder.messages().len() });
}

/// `body` with `edits` written in ([`rewrite`]), as pieces that share `body`'s buffer
/// around the items written anew; `None` when nothing changes.
#[cfg(test)]
fn splice(body: &Bytes, raw: &Raw, builder: &Builder, edits: &Edits, memory: &mut Memory) -> Option<Vec<Bytes>> {
    rewrite(body, raw, builder, edits, memory);
    let items = memory.last.as_ref().map(|last| Arc::clone(&last.items)).unwrap_or_default();
    let head = Head { api: Api::Chat, body: body.clone(), raw: raw.clone() };
    Layout::new(Arc::new(head), items).rewritten()
}

/// The items `edits` rewrite, in list order, with their new bytes: written anew, or taken
/// from `written` (which is left holding this request's) when their edits did not change.
fn written_items(
    body: &Bytes,
    raw: &Raw,
    builder: &Builder,
    edits: &[Edit],
    written: &mut RewrittenItems,
) -> Option<Vec<(usize, Bytes)>> {
    let mut by_item: BTreeMap<usize, Vec<&Edit>> = BTreeMap::new();
    for edit in edits {
        if let Some(i) = builder.item_of(edit).filter(|i| *i < raw.spans.len()) {
            by_item.entry(i).or_default().push(edit);
        }
    }
    let mut before = std::mem::take(written);
    let mut out = Vec::new();
    for (i, edits) in by_item {
        let new = match before.remove(&i) {
            Some((same, new)) if same.iter().eq(edits.iter().copied()) => {
                written.insert(i, (same, new.clone()));
                new
            }
            _ => {
                let mut item = raw.item(body, i);
                let changed = edits.iter().filter(|edit| builder.apply_to_item(i, &mut item, edit)).count();
                let new = (changed > 0).then(|| serde_json::to_vec(&item).map(Bytes::from)).transpose().ok()?;
                // Edits that change nothing here (a field already so, a locked result) are
                // remembered too, so that the item is not read again for them.
                written.insert(i, (edits.iter().map(|e| (*e).clone()).collect(), new.clone()));
                new
            }
        };
        out.extend(new.map(|new| (i, new)));
    }
    Some(out)
}

/// Every conversation's last request, each behind a lock of its own so that a
/// conversation's requests are read in turn, and the bodies they were read from, to find
/// the one a new body continues.
#[derive(Default)]
pub struct Conversations {
    slots: Mutex<HashMap<String, ConversationSlot>>,
    heads: Mutex<HashMap<String, Arc<Head>>>,
    layouts: Mutex<HashMap<String, Arc<Layout>>>,
    reading: Reading,
    pipelining: Pipelining,
    resumed: std::sync::atomic::AtomicUsize,
    /// The buffers of replaced bodies, for the bodies to come.
    pub spare: super::buffers::Buffers,
    /// Requests sent upstream before the engine answered, and those of them aborted.
    pub speculated: std::sync::atomic::AtomicUsize,
    pub aborted: std::sync::atomic::AtomicUsize,
    /// Requests whose known part went as slices of the last upstream body's frames.
    pub from_sent: std::sync::atomic::AtomicUsize,
    /// What each conversation named by its opening alone has seen.
    lineage: Lineage,
}

/// Whether a request that continues a known body is sent upstream while its body arrives
/// and the engine runs ([`crate::proxy::pipeline`]), or only once the engine has answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pipelining {
    #[default]
    On,
    Off,
}

/// How a body is read: past the known body it continues, where there is one, or always
/// whole (the reference the first is tested against).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reading {
    #[default]
    PastKnown,
    Whole,
}

pub type ConversationSlot = Arc<tokio::sync::Mutex<Option<Conversation>>>;

/// How many conversations are kept; past it, those not in use are dropped (their next
/// request is read whole).
const KEPT: usize = 64;

impl Conversations {
    pub fn reading(reading: Reading) -> Conversations {
        Conversations { reading, ..Conversations::default() }
    }

    /// As [`Conversations::reading`], with `pipelining`.
    pub fn with(reading: Reading, pipelining: Pipelining) -> Conversations {
        Conversations { reading, pipelining, ..Conversations::default() }
    }

    pub fn pipelining(&self) -> Pipelining {
        self.pipelining
    }

    /// The ids of the conversations kept.
    pub fn sids(&self) -> Vec<String> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect()
    }

    /// These conversations, keeping the records of those named by their opening alone under
    /// state dir `dir` ([`Lineage`]), so that a restarted proxy tells them apart again.
    pub fn remembering(self, dir: std::path::PathBuf) -> Conversations {
        Conversations { lineage: Lineage::under(dir), ..self }
    }

    /// The session id of a request: the client's ([`super::identity::name`]), or for a
    /// conversation named by its opening alone, the one of that opening whose history the
    /// request extends ([`Lineage`]); `held` is the kept body it continues, if any.
    pub fn session_id(
        &self,
        api: Api,
        headers: &hyper::HeaderMap,
        body: &[u8],
        raw: &Raw,
        held: Option<&Arc<Head>>,
    ) -> String {
        match super::identity::name(api, headers, &raw.identity_body(api, body)) {
            Name::Client(sid) => sid,
            Name::Opening(opening) => {
                let heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let held =
                    held.and_then(|h| heads.iter().find(|(_, kept)| Arc::ptr_eq(kept, h)).map(|(sid, _)| sid.clone()));
                drop(heads);
                self.lineage.resolve(&opening, body, &raw.spans, held.as_deref())
            }
        }
    }

    /// The last layouts of `api`'s conversations whose client body's known part starts as
    /// `start` does (as far as both go).
    pub fn layouts_starting(&self, api: Api, start: &[u8]) -> Vec<Arc<Layout>> {
        let layouts = self.layouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let starts = |l: &Layout| {
            let n = l.head.end().unwrap_or(0).min(start.len());
            n > 0 && l.head.body[..n] == start[..n]
        };
        layouts.values().filter(|l| l.head.api == api && starts(l)).cloned().collect()
    }

    /// How many bodies were read past a known one.
    pub fn resumed(&self) -> usize {
        self.resumed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts a body read past a known one.
    pub fn count_resumed(&self) {
        self.resumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn slot(&self, sid: &str) -> ConversationSlot {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= KEPT && !slots.contains_key(sid) {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
            let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            heads.retain(|sid, _| slots.contains_key(sid));
            let mut layouts = self.layouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            layouts.retain(|sid, _| slots.contains_key(sid));
        }
        Arc::clone(slots.entry(sid.to_string()).or_default())
    }

    /// Keeps `conversation` as `sid`'s last request, in `held` (`sid`'s slot, locked), and
    /// hands back its layout, when it has one.
    pub fn keep(&self, sid: &str, held: &mut Option<Conversation>, conversation: Conversation) -> Option<Arc<Layout>> {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let replaced = heads.insert(sid.to_string(), Arc::clone(&conversation.head));
        if let Some(replaced) = replaced.filter(|r| !Arc::ptr_eq(r, &conversation.head)) {
            self.spare.retire(&replaced.body);
        }
        let mut layouts = self.layouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let layout = match &conversation.memory.last {
            Some(last) => {
                let layout = Arc::new(Layout::new(Arc::clone(&conversation.head), Arc::clone(&last.items)));
                layouts.insert(sid.to_string(), Arc::clone(&layout));
                Some(layout)
            }
            None => {
                layouts.remove(sid);
                None
            }
        };
        *held = Some(conversation);
        layout
    }

    /// Forgets `sid`'s last request (`held` is its slot, locked): its next request is read
    /// whole.
    pub fn forget(&self, sid: &str, held: &mut Option<Conversation>) {
        self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(sid);
        self.layouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(sid);
        *held = None;
    }

    /// The kept body that `body` continues (starts with every byte of, up to its last
    /// item), the longest if several do; `checked` when the caller has compared them
    /// already (any body it continues reads it alike, [`Raw::read_after`]).
    pub fn continued(&self, api: Api, body: &[u8], checked: Option<Arc<Head>>) -> Option<Arc<Head>> {
        if self.reading == Reading::Whole {
            return None;
        }
        if let Some(checked) = checked.filter(|h| h.api == api) {
            return Some(checked);
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

/// Whether `a` and `b` are the same bytes in memory (one buffer, the same span of it), not
/// only equal bytes.
pub fn same_memory(a: &[u8], b: &[u8]) -> bool {
    std::ptr::eq(a, b)
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

    #[test]
    fn bytes_are_the_same_memory_only_as_the_same_span_of_one_buffer() {
        let body = Bytes::from_static(b"{\"a\": 1}");
        let copy = Bytes::copy_from_slice(&body);
        assert!(same_memory(&body, &body.slice(..)));
        assert!(!same_memory(&body, &copy), "equal bytes elsewhere are not the same memory");
        assert!(!same_memory(&body, &body.slice(..3)), "a shorter span of the same buffer is not");
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

    /// The edits that prune the first call's output.
    fn first_output_pruned() -> Edits {
        Edits::new(vec![convert::Edit {
            m: 1,
            p: 0,
            path: vec!["state".into(), "output".into()],
            value: Some(json!("pruned")),
            append: None,
        }])
    }

    #[test]
    fn spliced_edits_give_the_body_a_whole_rewrite_gives_and_keep_every_other_byte() {
        let body = Bytes::from(chat(&["a", "b"]));
        let raw = Raw::read(Api::Chat, &body).unwrap().unwrap();
        let (builder, mut memory) = fold(Api::Chat, "s", &body, &raw, &Read::Whole, None);
        let edits = first_output_pruned();
        let first = splice(&body, &raw, &builder, &edits, &mut memory).unwrap();
        let spliced = first.concat();
        let again = splice(&body, &raw, &builder, &edits, &mut memory).unwrap();
        assert_eq!(again.concat(), spliced, "laid out as last time");
        assert_eq!(again[1].as_ptr(), first[1].as_ptr(), "the rewritten item is not written again");
        let copy = Edits::new(edits.to_vec());
        let third = splice(&body, &raw, &builder, &copy, &mut memory).unwrap();
        assert_eq!(third[1].as_ptr(), first[1].as_ptr(), "equal edits: the item is taken as written");
        assert_eq!(again[0].as_ptr(), body.as_ptr(), "the client's bytes are not copied");
        let mut whole: Value = serde_json::from_slice(&body).unwrap();
        let mapped = convert::map(Api::Chat, &whole, "s").unwrap();
        assert_eq!(mapped.apply(&mut whole, &edits), 1);
        assert_eq!(serde_json::from_slice::<Value>(&spliced).unwrap(), whole);
        let (start, end) = raw.spans[2];
        assert_eq!(spliced[..start], body[..start]);
        assert_eq!(spliced[spliced.len() - (body.len() - end)..], body[end..]);
        assert_eq!(splice(&body, &raw, &builder, &Edits::default(), &mut memory), None, "no edit, no new body");
    }

    #[test]
    fn a_result_that_comes_after_its_call_makes_the_next_body_look_at_the_edits_again() {
        let mut pending: Value = serde_json::from_slice(&chat(&["a", "b"])).unwrap();
        let messages = pending["messages"].as_array_mut().unwrap();
        let result = messages.pop().unwrap();
        let before = Bytes::from(serde_json::to_vec_pretty(&pending).unwrap());
        let raw = Raw::read(Api::Chat, &before).unwrap().unwrap();
        let (mut builder, mut memory) = fold(Api::Chat, "s", &before, &raw, &Read::Whole, None);
        builder.mark_sent();
        let edits = first_output_pruned();
        assert!(splice(&before, &raw, &builder, &edits, &mut memory).is_some());
        let head = Arc::new(Head { api: Api::Chat, body: before, raw });
        let held = Conversation::new(Arc::clone(&head), builder, memory);
        pending["messages"].as_array_mut().unwrap().push(result);
        let body = serde_json::to_vec_pretty(&pending).unwrap();
        let raw = Raw::read_after(Api::Chat, &body, &head).expect("the body continues the last one");
        let (_, memory) = fold(Api::Chat, "s", &body, &raw, &Read::After(&head), Some(held));
        assert!(memory.last.is_none(), "the late result changed a message the last layout was made for");
        assert_eq!(memory.written.len(), 1, "the rewritten items are still remembered");
    }
}
