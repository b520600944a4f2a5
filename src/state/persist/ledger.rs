//! The rewrite policy's running figures under `dcp.ledger` of a state file
//! ([`crate::state::Ledger`]), as written (`parse.rs` reads them): a new sidecar goes on where
//! the last one stopped and decides as one that had answered every request would.

use serde_json::{json, Map, Value};

use crate::state::Ledger;

/// The policy's ledger as the state file holds it, followed by what a newer dcp `added`. The
/// costs so far and the lists sent are written once they are not nothing: a session dcp never
/// answered a request of keeps the file it had.
pub(super) fn render(l: &Ledger, added: Option<&Map<String, Value>>) -> Value {
    let mut out = json!({
        "banked": (l.banked * 10.0).round() / 10.0,
        "warm": l.warm,
        "lastRequest": l.last_request,
        "offered": l.offered,
    });
    let lists = &l.lists;
    let since = [
        ("baseline", json!(l.baseline), l.baseline == 0.0),
        ("unpruned", json!(l.unpruned), l.unpruned.is_none()),
        ("added", json!(l.added), l.added == 0.0),
        ("listShown", json!(lists.shown), lists.shown.is_none()),
        ("listAnswered", json!(lists.answered), lists.answered == 0),
        ("listUnanswered", json!(lists.unanswered), lists.unanswered == 0),
        ("nudgedAtCalls", json!(lists.calls_at_nudge), lists.calls_at_nudge == 0),
    ];
    if let Value::Object(out) = &mut out {
        out.extend(since.into_iter().filter(|(_, _, nothing)| !nothing).map(|(k, v, _)| (k.to_string(), v)));
        out.extend(added.into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
    }
    out
}
