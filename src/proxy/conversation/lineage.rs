//! Which conversation a request continues when its client sends no id of its own: the one
//! whose last request it extends, item for item.
//!
//! Without a client id, a conversation is named by its opening (the system prompt and the
//! first user message, `crate::proxy::identity`), and two conversations that open alike
//! would share one state: one's prunes applied to the other's calls by id (`call_0`,
//! `call_1`, as many servers number them), its ledger and its stats mixed in. So each
//! conversation keeps a record of what it has seen: how many items its last request had,
//! and a digest of them (a chain: each item's digest folded into the ones before, so that a
//! request's first `n` items are compared in one number). A request that extends a
//! conversation's record (its first `n` items are the record's) is that conversation; the
//! longest record wins. A request that extends none, when its opening has conversations
//! already, diverged from all of them: it is a conversation of its own, named by the opening
//! and its own digest, and starts with a state of its own (nothing of the others' carried
//! over). The first conversation of an opening keeps the opening's name. A request that
//! continues a body the proxy holds is that body's conversation without being hashed whole.
//!
//! The records live beside the state files (`proxy/<client>/<session id>.lineage`, written
//! off the request's path by a thread of their own), so that a restarted proxy tells its
//! conversations apart again. An item's digest leaves out the cache markers a client moves
//! from request to request (`cache_control`). A client that rewrites its own history (edits
//! an early message, drops old ones) diverges on every such request: each one starts a
//! conversation of its own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Mutex;

use serde_json::Value;

use crate::proxy::identity::fnv1a;
use crate::proxy::raw::ByteSpan;

/// What a conversation has seen: its last request's item count and the chain of their
/// digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    items: usize,
    chain: u64,
}

/// How many openings' records are kept in memory; past it they are read again from disk.
const OPENINGS: usize = 256;

/// The records of every opening's conversations, and where they are written.
#[derive(Default)]
pub struct Lineage {
    by_opening: Mutex<HashMap<String, Vec<(String, Seen)>>>,
    writer: Option<Writer>,
}

/// The thread that writes records, and the state dir they go under.
struct Writer {
    dir: PathBuf,
    records: Option<Sender<(PathBuf, Vec<u8>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Lineage {
    /// Records kept under state dir `dir`, as well as in memory.
    pub fn under(dir: PathBuf) -> Lineage {
        let (records, pending) = std::sync::mpsc::channel::<(PathBuf, Vec<u8>)>();
        let thread = std::thread::Builder::new().name("dcp-proxy-lineage".into()).spawn(move || {
            while let Ok(first) = pending.recv() {
                // Only the newest record of each conversation is worth writing.
                let mut newest: HashMap<PathBuf, Vec<u8>> = HashMap::from([first]);
                newest.extend(pending.try_iter());
                for (path, bytes) in newest {
                    if let Err(e) = crate::state::persist::write_atomic(&path, &bytes) {
                        tracing::warn!("{}: {e}", path.display());
                    }
                }
            }
        });
        let writer = Writer { dir, records: Some(records), thread: thread.ok() };
        Lineage { by_opening: Mutex::default(), writer: Some(writer) }
    }

    /// The session id of the conversation a request continues: `opening` (the name of its
    /// system prompt and first user message) when it is the opening's first, that of the
    /// conversation whose record its items extend, or a new one. `held` names the
    /// conversation whose last body this one continues, when the proxy holds one. The
    /// request's own record is kept.
    pub fn resolve(&self, opening: &str, body: &[u8], spans: &[ByteSpan], held: Option<&str>) -> String {
        let mut by_opening = self.by_opening.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if by_opening.len() >= OPENINGS && !by_opening.contains_key(opening) {
            by_opening.clear();
        }
        let records = by_opening.entry(opening.to_string()).or_insert_with(|| self.read(opening));
        let items = |from: usize, chain: u64| spans[from..].iter().fold(chain, |c, &(a, b)| link(c, &body[a..b]));
        let held = held.filter(|sid| sid.starts_with(opening));
        let continued = held.and_then(|sid| records.iter().find(|(s, seen)| s == sid && seen.items <= spans.len()));
        let (sid, seen) = match continued {
            Some((sid, seen)) => (sid.clone(), Seen { items: spans.len(), chain: items(seen.items, seen.chain) }),
            None => {
                let chains = chains(body, spans);
                let at = |n: usize| if n == 0 { START } else { chains[n - 1] };
                let extended =
                    records.iter().filter(|(_, seen)| seen.items <= spans.len() && at(seen.items) == seen.chain);
                let seen = Seen { items: spans.len(), chain: at(spans.len()) };
                match extended.max_by_key(|(_, seen)| seen.items) {
                    Some((sid, _)) => (sid.clone(), seen),
                    None if records.is_empty() => (opening.to_string(), seen),
                    None => (format!("{opening}-{:08x}", seen.chain as u32), seen),
                }
            }
        };
        match records.iter_mut().find(|(s, _)| *s == sid) {
            Some((_, kept)) if *kept == seen => return sid,
            Some((_, kept)) => *kept = seen,
            None => records.push((sid.clone(), seen)),
        }
        self.write(&sid, seen);
        sid
    }

    /// The records of `opening`'s conversations on disk.
    fn read(&self, opening: &str) -> Vec<(String, Seen)> {
        let Some(writer) = &self.writer else { return Vec::new() };
        let folder = crate::state::persist::file_dir(&writer.dir, opening);
        let Ok(entries) = std::fs::read_dir(folder) else { return Vec::new() };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else { continue };
            let Some(sid) = name.strip_suffix(".lineage").filter(|sid| sid.starts_with(opening)) else { continue };
            let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
            let Ok(record) = serde_json::from_str::<Value>(&text) else { continue };
            let items = record["items"].as_u64().and_then(|n| usize::try_from(n).ok());
            let chain = record["chain"].as_str().and_then(|c| u64::from_str_radix(c, 16).ok());
            if let (Some(items), Some(chain)) = (items, chain) {
                out.push((sid.to_string(), Seen { items, chain }));
            }
        }
        out
    }

    /// Hands conversation `sid`'s record to the writer, if records are kept on disk.
    fn write(&self, sid: &str, seen: Seen) {
        let Some(writer) = &self.writer else { return };
        let Some(records) = &writer.records else { return };
        let path = crate::state::persist::file_dir(&writer.dir, sid).join(format!("{sid}.lineage"));
        let record = serde_json::json!({"items": seen.items, "chain": format!("{:016x}", seen.chain)});
        let _ = records.send((path, record.to_string().into_bytes()));
    }
}

impl Drop for Writer {
    /// Writes the records handed over before the proxy stops.
    fn drop(&mut self) {
        self.records.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The chain of no items.
const START: u64 = 0xcbf2_9ce4_8422_2325;

/// The chain after each item of `body`'s list.
fn chains(body: &[u8], spans: &[ByteSpan]) -> Vec<u64> {
    let mut chain = START;
    spans
        .iter()
        .map(|&(a, b)| {
            chain = link(chain, &body[a..b]);
            chain
        })
        .collect()
}

/// `chain` with `item` folded in.
fn link(chain: u64, item: &[u8]) -> u64 {
    let mut bytes = chain.to_le_bytes().to_vec();
    bytes.extend(digest(item).to_le_bytes());
    fnv1a(&bytes)
}

/// An item's digest: of its bytes, without the cache markers a client moves from request to
/// request (`"cache_control": {…}`, with the comma that joins it to the object's other keys).
fn digest(item: &[u8]) -> u64 {
    const MARKER: &[u8] = b"\"cache_control\"";
    let Some(at) = find(item, MARKER) else { return fnv1a(item) };
    let mut rest = item.to_vec();
    let mut from = at;
    while let Some(at) = find(&rest[from..], MARKER).map(|i| from + i) {
        let Some(end) = marker_end(&rest, at + MARKER.len()) else { break };
        let before = rest[..at].iter().rposition(|b| !b.is_ascii_whitespace());
        let (cut_from, cut_to) = match before {
            Some(comma) if rest[comma] == b',' => (comma, end),
            _ => {
                let after = rest[end..].iter().position(|b| !b.is_ascii_whitespace()).map_or(end, |i| end + i);
                let past = if rest.get(after) == Some(&b',') { after + 1 } else { end };
                let ws = rest[past..].iter().position(|b| !b.is_ascii_whitespace()).map_or(past, |i| past + i);
                (at, ws)
            }
        };
        rest.drain(cut_from..cut_to);
        from = cut_from;
    }
    fnv1a(&rest)
}

/// Where the value of the key that ends at `key_end` ends: after white space, a colon and
/// white space, one JSON value.
fn marker_end(bytes: &[u8], key_end: usize) -> Option<usize> {
    let skip = |at: usize| bytes[at..].iter().position(|b| !b.is_ascii_whitespace()).map(|i| at + i);
    let colon = skip(key_end).filter(|&i| bytes[i] == b':')?;
    let start = skip(colon + 1)?;
    let mut values = serde_json::Deserializer::from_slice(&bytes[start..]).into_iter::<&serde_json::value::RawValue>();
    let value = values.next()?.ok()?;
    Some(value.get().as_ptr() as usize - bytes.as_ptr() as usize + value.get().len())
}

/// Where `needle` first is in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of `items` (JSON texts) and their spans.
    fn body(items: &[&str]) -> (Vec<u8>, Vec<ByteSpan>) {
        let mut out = b"{\"messages\": [".to_vec();
        let mut spans = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            spans.push((out.len(), out.len() + item.len()));
            out.extend(item.as_bytes());
        }
        out.extend(b"]}");
        (out, spans)
    }

    fn resolve(lineage: &Lineage, items: &[&str], held: Option<&str>) -> String {
        let (bytes, spans) = body(items);
        lineage.resolve("proxy-openai-f", &bytes, &spans, held)
    }

    #[test]
    fn conversations_that_share_only_their_opening_are_told_apart_by_their_first_different_item() {
        let lineage = Lineage::default();
        let (s, u) = (r#"{"role":"system"}"#, r#"{"role":"user","content":"go"}"#);
        let (x1, y1) = (r#"{"role":"assistant","n":"x"}"#, r#"{"role":"assistant","n":"y"}"#);
        assert_eq!(resolve(&lineage, &[s, u], None), "proxy-openai-f");
        assert_eq!(resolve(&lineage, &[s, u], None), "proxy-openai-f", "the same opening again");
        assert_eq!(resolve(&lineage, &[s, u, x1], None), "proxy-openai-f", "the first to go on keeps the name");
        let y = resolve(&lineage, &[s, u, y1], None);
        assert!(y.starts_with("proxy-openai-f-") && y.len() == "proxy-openai-f-".len() + 8, "{y}");
        assert_eq!(resolve(&lineage, &[s, u, x1, u], None), "proxy-openai-f");
        assert_eq!(resolve(&lineage, &[s, u, y1, u], None), y);
        assert_eq!(resolve(&lineage, &[s, u, y1, u, x1], Some(&y)), y, "a held body's conversation");
        let marked = r#"{"role":"user","content":"go","cache_control":{"type":"ephemeral"}}"#;
        assert_eq!(resolve(&lineage, &[s, marked, x1, u, s], None), "proxy-openai-f", "markers moved");
    }

    #[test]
    fn an_item_s_digest_leaves_out_its_cache_markers_wherever_they_are() {
        let plain = digest(br#"{"role": "user", "content": [{"type": "text", "text": "a \"cache_control\": 1"}]}"#);
        let marked = [
            &br#"{"role": "user", "content": [{"type": "text", "text": "a \"cache_control\": 1", "cache_control": {"type": "ephemeral"}}]}"#[..],
            br#"{"role": "user", "content": [{"cache_control": {"type": "ephemeral", "ttl": "1h"}, "type": "text", "text": "a \"cache_control\": 1"}]}"#,
            br#"{"role": "user", "content": [{"type": "text", "text": "a \"cache_control\": 1"}], "cache_control" : {"type": "ephemeral"}}"#,
        ];
        for item in marked {
            assert_eq!(digest(item), plain, "{}", String::from_utf8_lossy(item));
        }
        assert_ne!(digest(br#"{"role": "user", "content": "b"}"#), plain);
    }
}
