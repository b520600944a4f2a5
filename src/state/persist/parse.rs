//! Reading a state file: [`parse`] reads every DCP layout (0.3 `prunedIds`, 1.x
//! `prune.toolIds`, 2.x/3.x `prune.tools` and `prune.messages`, and dcp's own `dcp` section)
//! into a [`SessionState`], naming the key of anything wrong in a [`FormatError`]. Ids only an
//! older layout knows are imported as pruned by another DCP. Writing is in `render.rs`.

use serde_json::{Map, Value};

use crate::state::blocks::Blocks;
use crate::state::foreign;
use crate::state::{Action, PruneRecord, SessionState, Strategy, Tally};

/// What is wrong with a state file, by key where one is to blame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not UTF-8 ({0})")]
    NotUtf8(String),
    #[error("not valid JSON ({0})")]
    NotJson(String),
    #[error("the top level is not a JSON object")]
    NotAnObject,
    /// `key` holds a value of the wrong type; `found` is an excerpt of it.
    #[error("`{key}` must be {expected}, not {found}")]
    WrongType { key: String, expected: &'static str, found: String },
    /// `key` has the right type but does not decode as `what`.
    #[error("`{key}` is not {what} ({detail})")]
    Invalid { key: String, what: &'static str, detail: String },
    #[error("`{0}` is too large")]
    TooLarge(String),
}

impl FormatError {
    /// The key to blame, if one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            FormatError::WrongType { key, .. } | FormatError::Invalid { key, .. } | FormatError::TooLarge(key) => {
                Some(key)
            }
            FormatError::NotUtf8(_) | FormatError::NotJson(_) | FormatError::NotAnObject => None,
        }
    }
}

/// Parses a state file of any DCP layout. The error says what is wrong, by key.
pub fn parse(bytes: &[u8]) -> Result<SessionState, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|e| FormatError::NotUtf8(e.to_string()))?;
    let value: Value = serde_json::from_str(text).map_err(|e| FormatError::NotJson(e.to_string()))?;
    let Value::Object(mut raw) = value else {
        return Err(FormatError::NotAnObject);
    };
    // The legacy lists (often most of the file) are taken out of the tree, not copied: a file
    // is held in memory about twice over at most, as text and as its tree.
    let legacy = legacy_ids(&mut raw)?;
    let mut state = SessionState::default();
    // A file written before `offered` existed is of a session whose requests carried the
    // agent tools from the start (so did the published DCP's): taking them away now would
    // re-bill its cached prompt.
    state.ledger.offered = true;
    state.session_name = opt_string(&raw, "sessionName")?;
    // `lastUpdated` is written afresh with every save; read, it is only checked.
    opt_string(&raw, "lastUpdated")?;
    parse_stats(&raw, &mut state)?;
    parse_savings(&raw, &mut state)?;
    state.blocks = parse_blocks(&raw)?;
    if let Some(own) = raw.get("dcp") {
        parse_own(own, &mut state)?;
    }
    import_legacy(&mut state, legacy);
    drop_rendered_fields(&mut raw);
    state.raw = raw;
    Ok(state)
}

/// The pruned ids of the older layouts, with their tokens where the layout says, taken out of
/// `raw` (their keys stay, holding `null`, as [`drop_rendered_fields`] leaves them). Sorted by
/// id, each once: where lists disagree, `prune.tools` (which has tokens) wins.
fn legacy_ids(raw: &mut Map<String, Value>) -> Result<Vec<(String, u64)>, FormatError> {
    let mut legacy: Vec<(String, u64)> = Vec::new();
    // 0.3: a flat list of pruned ids.
    legacy.extend(string_list(take(raw, "prunedIds"), "prunedIds")?.into_iter().map(|id| (id, 0)));
    if let Some(prune) = raw.get_mut("prune") {
        let Value::Object(prune) = prune else {
            return Err(type_error("prune", "an object", prune));
        };
        // 1.x: a list of ids.
        legacy.extend(string_list(take(prune, "toolIds"), "prune.toolIds")?.into_iter().map(|id| (id, 0)));
        // 2.x/3.x: ids with their token counts.
        match take(prune, "tools") {
            None | Some(Value::Null) => {}
            Some(Value::Object(tools)) => {
                for (id, tokens) in tools {
                    let n = count(&tokens, &format!("prune.tools.{id}"))?;
                    legacy.push((id, n));
                }
            }
            Some(tools) => return Err(type_error("prune.tools", "an object", &tools)),
        }
    }
    // Reversed, a stable sort puts the last-listed of each id first, and dedup keeps it.
    legacy.reverse();
    legacy.sort_by(|a, b| a.0.cmp(&b.0));
    legacy.dedup_by(|later, first| later.0 == first.0);
    Ok(legacy)
}

/// The value at `key`, taken out of `object` and `null` left in its place; `None` when the
/// key is not there.
fn take(object: &mut Map<String, Value>, key: &str) -> Option<Value> {
    object.get_mut(key).map(Value::take)
}

/// 3.x: the compressed ranges of `prune.messages`.
fn parse_blocks(raw: &Map<String, Value>) -> Result<Blocks, FormatError> {
    match raw.get("prune").and_then(|p| p.get("messages")).filter(|m| !m.is_null()) {
        None => Ok(Blocks::default()),
        Some(messages) => Blocks::parse(messages).map_err(|detail| FormatError::Invalid {
            key: "prune.messages".to_string(),
            what: "a set of compressed ranges",
            detail,
        }),
    }
}

fn parse_stats(raw: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    let Some(stats) = raw.get("stats") else { return Ok(()) };
    let stats = stats.as_object().ok_or_else(|| type_error("stats", "an object", stats))?;
    if let Some(v) = stats.get("pruneTokenCounter") {
        state.stats.prune_token_counter = count(v, "stats.pruneTokenCounter")?;
    }
    if let Some(v) = stats.get("totalPruneTokens") {
        state.stats.total_prune_tokens = count(v, "stats.totalPruneTokens")?;
    }
    Ok(())
}

/// Ids only an older layout knows about were pruned by another DCP: keeps them in force.
/// The prune list is built in one go from sorted ids, so its nodes are full: a legacy file of
/// millions of ids takes about half the memory that inserting them one by one would.
fn import_legacy(state: &mut SessionState, legacy: Vec<(String, u64)>) {
    let own = std::mem::take(&mut state.pruned);
    let mut imported = Tally::default();
    let record = |tokens| PruneRecord {
        strategy: Strategy::Imported,
        action: Action::Output,
        tokens,
        tool: String::new(),
        applied: true,
    };
    let fresh: Vec<(String, PruneRecord)> = legacy
        .into_iter()
        .filter(|(id, _)| !own.contains_key(id))
        .inspect(|(_, tokens)| {
            imported.tools += 1;
            imported.tokens = imported.tokens.saturating_add(*tokens);
        })
        .map(|(id, tokens)| (id, record(tokens)))
        .collect();
    state.pruned = if own.is_empty() { fresh.into_iter().collect() } else { fresh.into_iter().chain(own).collect() };
    imported.tokens = imported.tokens.min(super::MAX_COUNT);
    if imported.tools > 0 && !state.stats.by_strategy.contains_key(&Strategy::Imported) {
        state.stats.by_strategy.insert(Strategy::Imported, imported);
    }
}

/// What `render` rewrites from the parsed fields need not be kept twice: the keys stay, to
/// hold their place in the file, but the prune lists, often most of the file, go. A state is
/// copied for every save, so this keeps the copies small.
fn drop_rendered_fields(raw: &mut Map<String, Value>) {
    // Of dcp's own section, only what a newer dcp added is kept (see `crate::state::foreign`).
    match raw.get_mut("dcp") {
        Some(Value::Object(own)) => keep_foreign_own(own),
        Some(own) => *own = Value::Null,
        None => {}
    }
    if let Some(Value::Object(prune)) = raw.get_mut("prune") {
        for key in ["toolIds", "tools", "messages"] {
            if let Some(v) = prune.get_mut(key) {
                *v = Value::Null;
            }
        }
    }
    if let Some(ids) = raw.get_mut("prunedIds") {
        *ids = Value::Null;
    }
    // dcp's savings keys are written afresh from the state, or left out when they would be 0.
    if let Some(Value::Object(stats)) = raw.get_mut("stats") {
        for key in SAVINGS_KEYS.iter().chain(&crate::state::misses::KEYS) {
            stats.shift_remove(*key);
        }
    }
}

/// Leaves in `own`, dcp's section as read, only what a newer dcp added: its own keys, and the
/// fields it added to a tally of `byStrategy` or to the `ledger`, which `render` writes after
/// this version's.
fn keep_foreign_own(own: &mut Map<String, Value>) {
    let added = |value: &mut Value, known: &[&str]| match value {
        Value::Object(fields) => fields.retain(|k, _| !known.contains(&k.as_str())),
        _ => *value = Value::Null,
    };
    if let Some(Value::Object(by)) = own.get_mut("byStrategy") {
        by.values_mut().for_each(|tally| added(tally, &["tokens", "tools"]));
        by.retain(|_, tally| tally.as_object().is_some_and(|t| !t.is_empty()));
    }
    if let Some(ledger) = own.get_mut("ledger") {
        added(ledger, &super::LEDGER_KEYS);
    }
    own.retain(|key, value| match key.as_str() {
        "byStrategy" | "ledger" => value.as_object().is_some_and(|v| !v.is_empty()),
        key => !super::OWN_KEYS.contains(&key),
    });
}

/// dcp's keys in `stats`, beside DCP's (see `crate::state::savings`).
const SAVINGS_KEYS: [&str; 6] =
    ["inForceTokens", "waitingTokens", "requests", "keptOutTokens", "costWithout", "costSaved"];

/// dcp's running savings: the sums in `stats`, the points in `dcp.trail`.
fn parse_savings(raw: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    let Some(stats) = raw.get("stats").and_then(Value::as_object) else { return Ok(()) };
    let s = &mut state.savings;
    let number = |key: &str| -> Result<Option<f64>, FormatError> {
        let Some(v) = stats.get(key).filter(|v| !v.is_null()) else { return Ok(None) };
        v.as_f64().map(Some).ok_or_else(|| type_error(&format!("stats.{key}"), "a number", v))
    };
    if let Some(v) = stats.get("requests") {
        s.requests = count(v, "stats.requests")?;
    }
    if let Some(v) = stats.get("keptOutTokens") {
        s.kept_out_tokens = v.as_i64().ok_or_else(|| type_error("stats.keptOutTokens", "a whole number", v))?;
    }
    s.cost_without = number("costWithout")?.unwrap_or(0.0);
    s.cost_saved = number("costSaved")?.unwrap_or(0.0);
    if let Some(v) = stats.get("refetches") {
        state.misses.refetches = count(v, "stats.refetches")?;
    }
    if let Some(v) = stats.get("restores") {
        state.misses.restores = count(v, "stats.restores")?;
    }
    Ok(())
}

/// `dcp.lastContext`, `dcp.lastSent`, `dcp.lastAppended`, `dcp.trail` and `dcp.reported`.
fn parse_trail(own: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    if let Some(v) = own.get("lastContext") {
        state.savings.last_context = count(v, "dcp.lastContext")?;
    }
    if let Some(v) = own.get("lastSent") {
        state.savings.last_sent = count(v, "dcp.lastSent")?;
    }
    if let Some(v) = own.get("lastAppended") {
        state.savings.last_appended = count(v, "dcp.lastAppended")?;
    }
    parse_reported(own, state)?;
    parse_models(own, state)?;
    let Some(trail) = own.get("trail") else { return Ok(()) };
    let trail = trail.as_array().ok_or_else(|| type_error("dcp.trail", "a list", trail))?;
    for (i, line) in trail.iter().enumerate() {
        let point = line.as_str().and_then(crate::state::savings::Point::from_line);
        let point = point
            .ok_or_else(|| type_error(&format!("dcp.trail.{i}"), "\"<time> <without> <with> <saved> <mark>\"", line))?;
        state.savings.trail.push(point);
    }
    Ok(())
}

/// `dcp.reported`: what the provider reported per request, in order of request.
fn parse_reported(own: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    let Some(reported) = own.get("reported") else { return Ok(()) };
    let lines = reported.as_array().ok_or_else(|| type_error("dcp.reported", "a list", reported))?;
    let what = "\"<request> <input> <output> <reasoning> <cacheRead> <cacheWrite> <cost or ->\"";
    for (i, line) in lines.iter().enumerate() {
        let key = format!("dcp.reported.{i}");
        let r = line.as_str().and_then(crate::state::savings::Reported::from_line);
        let r = r.ok_or_else(|| type_error(&key, what, line))?;
        let u = r.usage;
        for n in [r.request, u.input, u.output, u.reasoning, u.cache_read, u.cache_write] {
            bounded(n, &key)?;
        }
        // Kept in order of request, one entry each: a file edited out of order still reads.
        let list = &mut state.savings.reported;
        let at = list.partition_point(|x| x.request < r.request);
        match list.get_mut(at).filter(|x| x.request == r.request) {
            Some(x) => *x = r,
            None => list.insert(at, r),
        }
    }
    Ok(())
}

/// `dcp.models`: the models the requests went to or the client named, read whether or not the
/// provider reported any usage.
fn parse_models(own: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    let Some(models) = own.get("models") else { return Ok(()) };
    let models = models.as_array().ok_or_else(|| type_error("dcp.models", "a list", models))?;
    for (i, model) in models.iter().enumerate() {
        state.savings.models.push(parse_model(model, &format!("dcp.models.{i}"))?);
    }
    Ok(())
}

/// A model of `dcp.models`: `{"provider", "id", "cost": {"input", "output", "cacheRead",
/// "cacheWrite"}, "context"}`, the cost and the context optional.
fn parse_model(v: &Value, key: &str) -> Result<crate::state::savings::Model, FormatError> {
    let text = |field: &str| -> Result<String, FormatError> {
        let v = v.get(field).unwrap_or(&Value::Null);
        v.as_str().map(str::to_string).ok_or_else(|| type_error(&format!("{key}.{field}"), "a string", v))
    };
    let (provider, id) = (text("provider")?, text("id")?);
    let context = v.get("context").filter(|c| !c.is_null()).map(|c| count(c, &format!("{key}.context"))).transpose()?;
    let prices = match v.get("cost").filter(|c| !c.is_null()) {
        None => None,
        Some(cost) => {
            let price = |field: &str| -> Result<f64, FormatError> {
                let p = cost.get(field).unwrap_or(&Value::Null);
                let ok = p.as_f64().filter(|p| p.is_finite() && *p >= 0.0);
                ok.ok_or_else(|| type_error(&format!("{key}.cost.{field}"), "a price of 0 or more", p))
            };
            let (input, output) = (price("input")?, price("output")?);
            let (cache_read, cache_write) = (price("cacheRead")?, price("cacheWrite")?);
            Some(crate::state::savings::ModelPrices { input, output, cache_read, cache_write })
        }
    };
    Ok(crate::state::savings::Model { provider, id, prices, context })
}

fn parse_own(own: &Value, state: &mut SessionState) -> Result<(), FormatError> {
    let own = own.as_object().ok_or_else(|| type_error("dcp", "an object", own))?;
    if let Some(pruned) = own.get("pruned") {
        let pruned = pruned.as_object().ok_or_else(|| type_error("dcp.pruned", "an object", pruned))?;
        for (id, raw_record) in pruned {
            let record: PruneRecord = serde_json::from_value(raw_record.clone()).map_err(|e| FormatError::Invalid {
                key: format!("dcp.pruned.{id}"),
                what: "a prune record",
                detail: e.to_string(),
            })?;
            bounded(record.tokens, &format!("dcp.pruned.{id}.tokens"))?;
            if let Some(read) = foreign::record_as_read(raw_record, &record) {
                state.foreign_records.insert(id.clone(), read);
            }
            state.pruned.insert(id.clone(), record);
        }
    }
    if let Some(by) = own.get("byStrategy") {
        let by = by.as_object().ok_or_else(|| type_error("dcp.byStrategy", "an object", by))?;
        for (name, tally) in by {
            // A key a newer dcp wrote reads as "other" (see `crate::state::foreign`).
            let strategy = Strategy::read(name);
            let tally: Tally = serde_json::from_value(tally.clone()).map_err(|e| FormatError::Invalid {
                key: format!("dcp.byStrategy.{name}"),
                what: "a tally",
                detail: e.to_string(),
            })?;
            bounded(tally.tokens, &format!("dcp.byStrategy.{name}.tokens"))?;
            bounded(tally.tools, &format!("dcp.byStrategy.{name}.tools"))?;
            // Keys past the bound of unknown ones share one tally.
            let sum = state.stats.by_strategy.entry(strategy).or_default();
            let both = sum.plus(tally);
            *sum = Tally { tokens: both.tokens.min(super::MAX_COUNT), tools: both.tools.min(super::MAX_COUNT) };
        }
    }
    if let Some(ids) = own.get("ids") {
        let ids = ids.as_object().ok_or_else(|| type_error("dcp.ids", "an object", ids))?;
        for (call, n) in ids {
            let key = format!("dcp.ids.{call}");
            let n = u32::try_from(count(n, &key)?).map_err(|_| FormatError::TooLarge(key))?;
            state.ids.insert(call.clone(), n);
        }
    }
    let max_id = state.ids.values().copied().max().unwrap_or(0);
    let next = own.get("nextId").map(|v| count(v, "dcp.nextId")).transpose()?.unwrap_or(0);
    state.next_id = u32::try_from(next).unwrap_or(u32::MAX).max(max_id.saturating_add(1));
    if let Some(v) = own.get("lastCompaction") {
        state.last_compaction = v.as_i64().ok_or_else(|| type_error("dcp.lastCompaction", "a number", v))?;
    }
    parse_trail(own, state)?;
    if let Some(v) = own.get("holdout") {
        let trial = crate::state::trial::Trial::from_value(v);
        state.trial =
            Some(trial.ok_or_else(|| {
                type_error("dcp.holdout", "{\"arm\": \"pruned\" or \"unpruned\", \"prompts\": N}", v)
            })?);
    }
    parse_ledger(own, state)
}

/// The policy's ledger under `dcp.ledger`.
fn parse_ledger(own: &Map<String, Value>, state: &mut SessionState) -> Result<(), FormatError> {
    let Some(ledger) = own.get("ledger") else { return Ok(()) };
    let number = |key: &str| ledger.get(key).filter(|v| !v.is_null());
    let key = |key: &str| format!("dcp.ledger.{key}");
    let float = |k: &str| number(k).map(|v| v.as_f64().ok_or_else(|| type_error(&key(k), "a number", v))).transpose();
    let counted = |k: &str| number(k).map(|v| count(v, &key(k))).transpose();
    let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let l = &mut state.ledger;
    l.banked = float("banked")?.unwrap_or(l.banked);
    l.warm = counted("warm")?.map_or(l.warm, narrow);
    if let Some(v) = number("lastRequest") {
        l.last_request = Some(v.as_i64().ok_or_else(|| type_error("dcp.ledger.lastRequest", "a number", v))?);
    }
    if let Some(v) = number("offered") {
        l.offered = v.as_bool().ok_or_else(|| type_error("dcp.ledger.offered", "true or false", v))?;
    }
    (l.baseline, l.added, l.unpruned) =
        (float("baseline")?.unwrap_or(0.0), float("added")?.unwrap_or(0.0), counted("unpruned")?);
    l.lists.shown = counted("listShown")?;
    (l.lists.answered, l.lists.calls_at_nudge) =
        (counted("listAnswered")?.unwrap_or(0), counted("nudgedAtCalls")?.unwrap_or(0));
    l.lists.unanswered = counted("listUnanswered")?.map_or(0, narrow);
    Ok(())
}

fn type_error(key: &str, expected: &'static str, found: &Value) -> FormatError {
    FormatError::WrongType { key: key.to_string(), expected, found: crate::format::excerpt(found) }
}

fn opt_string(raw: &Map<String, Value>, key: &str) -> Result<Option<String>, FormatError> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(type_error(key, "a string", other)),
    }
}

fn string_list(value: Option<Value>, key: &str) -> Result<Vec<String>, FormatError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(type_error(key, "a list of strings", &other)),
            })
            .collect(),
        Some(other) => Err(type_error(key, "a list of strings", &other)),
    }
}

/// A count: a number from 0 to [`MAX_COUNT`](super::MAX_COUNT); one past it is corruption.
fn count(value: &Value, key: &str) -> Result<u64, FormatError> {
    let n = match (value.as_u64(), value.as_f64()) {
        (Some(n), _) => n,
        (None, Some(f)) if f >= 0.0 && f.is_finite() => f as u64,
        _ => return Err(type_error(key, "a number >= 0", value)),
    };
    bounded(n, key)
}

/// `n`, if it is within [`MAX_COUNT`](super::MAX_COUNT).
fn bounded(n: u64, key: &str) -> Result<u64, FormatError> {
    if n > super::MAX_COUNT {
        return Err(FormatError::TooLarge(key.to_string()));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrongly_typed_fields_name_the_key() {
        let err = parse(br#"{"prune": {"toolIds": 7}}"#).unwrap_err();
        assert_eq!(err.to_string(), "`prune.toolIds` must be a list of strings, not 7");
        assert_eq!(err.key(), Some("prune.toolIds"));
        let err = parse(br#"{"stats": {"totalPruneTokens": "lots"}}"#).unwrap_err();
        assert_eq!(err.to_string(), "`stats.totalPruneTokens` must be a number >= 0, not \"lots\"");
        let err = parse(br#"{"dcp": {"ids": {"call_1": 5000000000}}}"#).unwrap_err();
        assert_eq!((err.to_string().as_str(), err.key()), ("`dcp.ids.call_1` is too large", Some("dcp.ids.call_1")));
        assert!(parse(b"[]").unwrap_err().to_string().contains("not a JSON object"));
        assert!(parse(b"{\"prune\": ").unwrap_err().to_string().starts_with("not valid JSON"));
        assert!(parse(&[0xff, 0xfe]).unwrap_err().to_string().starts_with("not UTF-8"));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn a_wrongly_typed_state_field_with_multibyte_text_names_the_key() {
        // The value is cut for the message at byte 60, which falls inside an `é`.
        let text = format!("{{\"prune\": \"{}\"}}", "é".repeat(40));
        let error = parse(text.as_bytes()).unwrap_err();
        assert_eq!(error.key(), Some("prune"));
        let reason = error.to_string();
        assert!(reason.starts_with("`prune` must be an object, not \"éé"), "{reason}");
        assert!(reason.ends_with('…') && reason.len() < 120, "{reason}");
    }

    #[test]
    fn a_state_file_with_the_largest_id_does_not_overflow() {
        let bytes = format!(r#"{{"dcp": {{"ids": {{"call_1": {max}}}, "nextId": {max}}}}}"#, max = u32::MAX);
        let mut state = parse(bytes.as_bytes()).unwrap();
        assert_eq!(state.next_id, u32::MAX);
        assert_eq!(state.id_for("call_1"), u32::MAX);
        // No id is left to hand out: the next one is clamped rather than overflowing.
        assert_eq!(state.id_for("call_2"), u32::MAX);
        assert_eq!(state.next_id, u32::MAX);
    }
}
