//! What a newer dcp writes that this version does not know: a strategy key (in a prune record
//! or `dcp.byStrategy`), a block origin, a field.
//!
//! Users run several versions side by side (the plugin, a cargo-installed CLI, an older `dcp` on
//! the PATH), so a state file is read by versions older than the one that wrote it. Such a file
//! loads: an unknown strategy is counted under "other" in every report and written back under its
//! own key, an unknown origin's range is counted under "other" and keeps its `dcpOrigin`, a prune
//! of an unknown action stays recorded but rewrites nothing here, and unknown fields are kept (at
//! the top, in a block, a prune record, a tally, the ledger, the `dcp` section), so the newer
//! version reads back what it wrote and no prune is lost. Only a file that is not valid JSON or
//! holds a wrong type is set aside as corrupt.
//!
//! An unknown strategy key is an [`Unknown`]: a small copyable handle to the key, interned for
//! the life of the process so that [`Strategy`](super::Strategy) stays `Copy` and small. The
//! table is bounded (a file is untrusted input): past [`MAX_KEYS`] keys, or for a key longer
//! than [`MAX_KEY_BYTES`], the handle is the shared `other` key, and what the file had is
//! written back as `other`.

use std::sync::Mutex;

use serde_json::{Map, Value};

use super::{Action, PruneRecord};

/// How many distinct unknown strategy keys a process keeps; later ones share `other`.
pub const MAX_KEYS: usize = 256;

/// The longest unknown strategy key kept, in bytes; a longer one is read as `other`.
pub const MAX_KEY_BYTES: usize = 64;

// A strategy is in every prune record, and a legacy file holds millions: the handle keeps a
// record at the size it had before unknown strategies were read.
const _: () = assert!(std::mem::size_of::<super::PruneRecord>() <= 64);

/// The key of the shared bucket, and what every unknown strategy is called in reports.
pub const OTHER: &str = "other";

/// The unknown strategy keys read so far, by handle.
static KEYS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// A strategy key this version does not know, as a state file wrote it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unknown(u16);

impl Unknown {
    /// The shared bucket, `other`.
    pub const OTHER: Unknown = Unknown(u16::MAX);

    /// The handle of `key` (not a known strategy's name): the same for the same key.
    pub fn new(key: &str) -> Unknown {
        intern(&mut KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner), key)
    }

    /// The key as the state file has it.
    pub fn key(self) -> &'static str {
        if self == Unknown::OTHER {
            return OTHER;
        }
        let keys = KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.get(usize::from(self.0)).copied().unwrap_or(OTHER)
    }
}

/// The handle of `key` in `keys`, which it joins if it is new and there is room.
fn intern(keys: &mut Vec<&'static str>, key: &str) -> Unknown {
    if key == OTHER || key.len() > MAX_KEY_BYTES {
        return Unknown::OTHER;
    }
    if let Some(i) = keys.iter().position(|k| *k == key) {
        return Unknown(i as u16);
    }
    if keys.len() >= MAX_KEYS {
        return Unknown::OTHER;
    }
    // Bounded above: at most `MAX_KEYS` keys of `MAX_KEY_BYTES` each, for the process.
    keys.push(Box::leak(key.into()));
    Unknown((keys.len() - 1) as u16)
}

/// Unknown keys sort by key, so a file's `dcp.byStrategy` is written in the same order by
/// every process.
impl Ord for Unknown {
    fn cmp(&self, other: &Unknown) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

impl PartialOrd for Unknown {
    fn partial_cmp(&self, other: &Unknown) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unknown({:?})", self.key())
    }
}

/// The fields of a prune record this version reads and writes.
const RECORD_FIELDS: [&str; 6] = ["strategy", "action", "distillation", "tokens", "tool", "applied"];

/// The record `read` from a state file, parsed as `record`, when it holds what this version
/// does not know (a field, an action), so that it is written back with it; `None` otherwise.
pub fn record_as_read(read: &Value, record: &PruneRecord) -> Option<Map<String, Value>> {
    let read = read.as_object()?;
    let foreign = record.action == Action::Unknown || read.keys().any(|k| !RECORD_FIELDS.contains(&k.as_str()));
    foreign.then(|| read.clone())
}

/// The state file's entry for `record`, read as `read`: what this version does not know as it
/// was, the rest as `record` has it now. An unknown action keeps its own fields.
pub fn record_value(record: &PruneRecord, read: &Map<String, Value>) -> Value {
    let mut out = read.clone();
    let Ok(Value::Object(known)) = serde_json::to_value(record) else { return Value::Object(out) };
    for (key, value) in known {
        if key == "action" && record.action == Action::Unknown {
            continue;
        }
        out.insert(key, value);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_key_is_the_same_handle_and_reads_back() {
        let a = Unknown::new("summarised-reads");
        assert_eq!(a, Unknown::new("summarised-reads"));
        assert_ne!(a, Unknown::new("summarised-writes"));
        assert_eq!(a.key(), "summarised-reads");
        assert_eq!(Unknown::new(OTHER), Unknown::OTHER);
        assert_eq!(Unknown::OTHER.key(), OTHER);
    }

    #[test]
    fn an_overlong_key_shares_the_other_bucket() {
        assert_eq!(Unknown::new(&"x".repeat(MAX_KEY_BYTES + 1)), Unknown::OTHER);
        assert_ne!(Unknown::new(&"y".repeat(MAX_KEY_BYTES)), Unknown::OTHER);
    }

    #[test]
    fn a_file_of_endless_unknown_keys_fills_a_bounded_table_and_then_shares_other() {
        let mut keys = Vec::new();
        let handles: Vec<Unknown> = (0..MAX_KEYS + 10).map(|n| intern(&mut keys, &format!("k{n}"))).collect();
        assert_eq!(keys.len(), MAX_KEYS);
        assert!(handles[..MAX_KEYS].iter().all(|h| *h != Unknown::OTHER));
        assert!(handles[MAX_KEYS..].iter().all(|h| *h == Unknown::OTHER));
        assert_eq!(intern(&mut keys, "k3"), handles[3], "a key already kept keeps its handle");
    }
}
