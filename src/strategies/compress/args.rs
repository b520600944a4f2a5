//! The agent's `compress` arguments, read forgivingly into [`RangeRequest`]s: the registered
//! form (`range`, `summary`), the published DCP's (`topic`, `content`), and their variants.

use serde_json::Value;

use crate::session::str_field;

/// One range the agent asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub start: String,
    pub end: String,
    pub summary: String,
}

/// Reads the agent's `compress` arguments: one `range` ([`range_ends`]) and its `summary`, as
/// the tool is registered, or the published DCP's `topic` and `content`, a list of
/// `{startId, endId, summary}`. Forgiving about form: `content` may be one object or a JSON
/// string of either, a lone range may sit at the top level, and its ends may also be `from`
/// and `to` or `start` and `end`.
pub fn ranges_from_args(args: &Value) -> (String, Vec<RangeRequest>) {
    let topic = str_field(args, "topic").unwrap_or("").to_string();
    let content = match args.get("content") {
        Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => args.clone(),
    };
    let items = match content {
        Value::Array(items) => items,
        Value::Object(_) => vec![content],
        _ => Vec::new(),
    };
    let field = |item: &Value, keys: &[&str]| -> String {
        keys.iter()
            .find_map(|k| match item.get(*k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let ranges = items
        .iter()
        .filter(|item| item.is_object())
        .map(|item| {
            let (mut start, mut end) =
                (field(item, &["startId", "start", "from"]), field(item, &["endId", "end", "to"]));
            if start.is_empty() && end.is_empty() {
                (start, end) = range_ends(&field(item, &["range"]));
            }
            RangeRequest { start, end, summary: field(item, &["summary", "text"]) }
        })
        .filter(|r| !(r.start.is_empty() && r.end.is_empty() && r.summary.is_empty()))
        .collect();
    (topic, ranges)
}

/// The ends of a `range` argument: `from..to` (or `from...to`, `from…to`, `from to to`); an
/// id alone is a range of one message. It splits at the first separator: a call id with `..`
/// in it (no provider writes one) is refused as an end, and a tag names its message.
pub fn range_ends(range: &str) -> (String, String) {
    let range = range.trim();
    for separator in ["..", "\u{2026}", " to "] {
        if let Some((from, to)) = range.split_once(separator) {
            return (from.trim().to_string(), to.trim_start_matches('.').trim().to_string());
        }
    }
    (range.to_string(), range.to_string())
}
