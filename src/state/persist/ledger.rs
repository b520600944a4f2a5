//! The rewrite policy's running figures under `dcp.ledger` of a state file
//! ([`crate::state::Ledger`]), as written (`parse.rs` reads them): a new sidecar goes on where
//! the last one stopped and decides as one that had answered every request would.

use serde_json::{json, Map, Value};

use crate::state::Ledger;

/// The policy's ledger as the state file holds it, followed by what a newer dcp `added`.
pub(super) fn render(l: &Ledger, added: Option<&Map<String, Value>>) -> Value {
    let mut out = json!({
        "banked": (l.banked * 10.0).round() / 10.0,
        "warm": l.warm,
        "lastRequest": l.last_request,
        "offered": l.offered,
        "baseline": l.baseline,
        "unpruned": l.unpruned,
        "added": l.added,
        "listShown": l.lists.shown,
        "listAnswered": l.lists.answered,
        "listUnanswered": l.lists.unanswered,
        "nudgedAtCalls": l.lists.calls_at_nudge,
    });
    if let (Value::Object(out), Some(added)) = (&mut out, added) {
        out.extend(added.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out
}
