//! Deduplication: the same tool called with the same arguments. Only the newest output is
//! kept; every older one is pruned.
//!
//! Arguments are compared in a normal form: object keys sorted, `null` fields dropped, so
//! `{"filePath": "a", "limit": null}` and `{"filePath": "a"}` are the same call. Only
//! completed calls take part; errored ones are purge-errors' business.

use rustc_hash::FxHashMap as HashMap;

use serde_json::Value;

use super::{open_in, pruned_ids, Decision, Rules};
use crate::session::{slim, History, Kind, Node, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::TokenCounter;

/// The normal form of a call: tool name and canonical arguments.
pub fn signature(tool: &str, input: &Node) -> String {
    let mut out = String::with_capacity(64);
    out.push_str(tool);
    out.push('\u{0}');
    canonical(input, &mut out);
    out
}

fn canonical(value: &Node, out: &mut String) {
    match value.kind() {
        Kind::Object(map) => {
            let mut fields: Vec<(&str, &Node)> = map.iter().filter(|(_, v)| !v.is_null()).collect();
            fields.sort_unstable_by_key(|(k, _)| *k);
            out.push('{');
            for (i, (k, v)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.to_string()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Kind::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        // A big string as what the mirror keeps of it (see `crate::session::slim`).
        Kind::String(s) => slim::canonical(s, out),
        _ => out.push_str(&value.to_string()),
    }
}

/// A 64-bit hash of [`signature`]: what the strategy compares, remembered per part.
pub fn signature_hash(tool: &str, input: &Node) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    signature(tool, input).hash(&mut hasher);
    hasher.finish()
}

/// Whether `call` takes part in deduplication at all: completed, not cleared by OpenCode, and
/// of no protected tool or file.
pub fn eligible(call: &ToolCall<'_>, rules: &Rules) -> bool {
    call.status == ToolStatus::Completed
        && !call.compacted
        && !rules.config().dedup_protects(call.tool)
        && !rules.protects_file(call)
}

/// The prune of `call`, which a newer identical call superseded: none when its output is
/// no longer than the placeholder.
pub fn prune(call: &ToolCall<'_>, counter: &mut TokenCounter) -> Option<Decision> {
    Decision::honest(call, Strategy::Deduplication, Action::Output, counter)
}

pub fn decide(history: &History<'_>, state: &SessionState, rules: &Rules, counter: &mut TokenCounter) -> Vec<Decision> {
    let calls = &history.calls;
    let current = history.current;
    let mut newest: HashMap<u64, usize> = HashMap::default();
    // A completed call's input never changes, so its signature is worked out once.
    let signatures: Vec<Option<u64>> = calls
        .iter()
        .map(|c| eligible(c, rules).then(|| counter.signature(c.part_id, || signature_hash(c.tool, c.input()))))
        .collect();
    for (i, sig) in signatures.iter().enumerate() {
        if let Some(sig) = sig {
            newest.insert(*sig, i);
        }
    }
    let pruned = pruned_ids(state);
    let mut out = Vec::new();
    for (i, sig) in signatures.iter().enumerate() {
        let Some(sig) = sig else { continue };
        let call = &calls[i];
        if newest[sig] == i || !open_in(call, &pruned) || rules.protects_turn(call, current) {
            continue;
        }
        out.extend(prune(call, counter));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The signature of an input given as a `Value`.
    fn signature(tool: &str, input: &Value) -> String {
        super::signature(tool, &Node::from(input))
    }

    #[test]
    fn signatures_ignore_key_order_and_nulls() {
        let a = signature("read", &json!({"filePath": "/a", "limit": null, "offset": 1}));
        let b = signature("read", &json!({"offset": 1, "filePath": "/a"}));
        assert_eq!(a, b);
        assert_ne!(a, signature("grep", &json!({"offset": 1, "filePath": "/a"})));
        assert_ne!(a, signature("read", &json!({"offset": 2, "filePath": "/a"})));
        let nested = signature("x", &json!({"b": {"d": 1, "c": [2, {"f": 1, "e": null}]}, "a": true}));
        assert_eq!(nested, "x\u{0}{\"a\":true,\"b\":{\"c\":[2,{\"f\":1}],\"d\":1}}");
    }
}
