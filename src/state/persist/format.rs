//! The state file's format: [`parse`] reads every DCP layout (0.3 `prunedIds`, 1.x
//! `prune.toolIds`, 2.x/3.x `prune.tools`, and dcp's own `dcp` section) into a
//! [`SessionState`], naming the key of anything wrong in a [`FormatError`]; [`render`] writes
//! the 1.x layout plus the `dcp` section, keeping every field it does not understand.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::FORMAT_VERSION;
use crate::state::blocks::Blocks;
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
    #[error("`dcp.byStrategy` has unknown strategy {0:?}")]
    UnknownStrategy(String),
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
            FormatError::UnknownStrategy(_) => Some("dcp.byStrategy"),
            FormatError::NotUtf8(_) | FormatError::NotJson(_) | FormatError::NotAnObject => None,
        }
    }
}

/// Parses a state file of any DCP layout. The error says what is wrong, by key.
pub fn parse(bytes: &[u8]) -> Result<SessionState, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|e| FormatError::NotUtf8(e.to_string()))?;
    let value: Value = serde_json::from_str(text).map_err(|e| FormatError::NotJson(e.to_string()))?;
    let Value::Object(raw) = value else {
        return Err(FormatError::NotAnObject);
    };
    let mut state = SessionState { raw: raw.clone(), ..SessionState::default() };
    state.session_name = opt_string(&raw, "sessionName")?;
    state.last_updated = opt_string(&raw, "lastUpdated")?;
    let legacy = legacy_ids(&raw)?;
    parse_stats(&raw, &mut state)?;
    state.blocks = parse_blocks(&raw)?;
    if let Some(own) = raw.get("dcp") {
        parse_own(own, &mut state)?;
    }
    import_legacy(&mut state, legacy);
    drop_rendered_fields(&mut state.raw);
    Ok(state)
}

/// The pruned ids of the older layouts, with their tokens where the layout says.
fn legacy_ids(raw: &Map<String, Value>) -> Result<BTreeMap<String, u64>, FormatError> {
    let mut legacy: BTreeMap<String, u64> = BTreeMap::new();
    // 0.3: a flat list of pruned ids.
    for id in string_list(raw.get("prunedIds"), "prunedIds")? {
        legacy.entry(id).or_insert(0);
    }
    if let Some(prune) = raw.get("prune") {
        let prune = prune.as_object().ok_or_else(|| type_error("prune", "an object", prune))?;
        // 1.x: a list of ids.
        for id in string_list(prune.get("toolIds"), "prune.toolIds")? {
            legacy.entry(id).or_insert(0);
        }
        // 2.x/3.x: ids with their token counts.
        if let Some(tools) = prune.get("tools") {
            let tools = tools.as_object().ok_or_else(|| type_error("prune.tools", "an object", tools))?;
            for (id, tokens) in tools {
                let n = count(tokens, &format!("prune.tools.{id}"))?;
                legacy.insert(id.clone(), n);
            }
        }
    }
    Ok(legacy)
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
fn import_legacy(state: &mut SessionState, legacy: BTreeMap<String, u64>) {
    let mut imported = Tally::default();
    for (id, tokens) in legacy {
        if state.pruned.contains_key(&id) {
            continue;
        }
        imported.tools += 1;
        imported.tokens += tokens;
        let record = PruneRecord {
            strategy: Strategy::Imported,
            action: Action::Output,
            tokens,
            tool: String::new(),
            applied: true,
        };
        state.pruned.insert(id, record);
    }
    if imported.tools > 0 && !state.stats.by_strategy.contains_key(&Strategy::Imported) {
        state.stats.by_strategy.insert(Strategy::Imported, imported);
    }
}

/// What `render` rewrites from the parsed fields need not be kept twice: the keys stay, to
/// hold their place in the file, but the prune lists, often most of the file, go. A state is
/// copied for every save, so this keeps the copies small.
fn drop_rendered_fields(raw: &mut Map<String, Value>) {
    if let Some(own) = raw.get_mut("dcp") {
        *own = Value::Null;
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
}

fn parse_own(own: &Value, state: &mut SessionState) -> Result<(), FormatError> {
    let own = own.as_object().ok_or_else(|| type_error("dcp", "an object", own))?;
    if let Some(pruned) = own.get("pruned") {
        let pruned = pruned.as_object().ok_or_else(|| type_error("dcp.pruned", "an object", pruned))?;
        for (id, record) in pruned {
            let record: PruneRecord = serde_json::from_value(record.clone()).map_err(|e| FormatError::Invalid {
                key: format!("dcp.pruned.{id}"),
                what: "a prune record",
                detail: e.to_string(),
            })?;
            state.pruned.insert(id.clone(), record);
        }
    }
    if let Some(by) = own.get("byStrategy") {
        let by = by.as_object().ok_or_else(|| type_error("dcp.byStrategy", "an object", by))?;
        for (name, tally) in by {
            let strategy = Strategy::from_name(name).ok_or_else(|| FormatError::UnknownStrategy(name.clone()))?;
            let tally: Tally = serde_json::from_value(tally.clone()).map_err(|e| FormatError::Invalid {
                key: format!("dcp.byStrategy.{name}"),
                what: "a tally",
                detail: e.to_string(),
            })?;
            state.stats.by_strategy.insert(strategy, tally);
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
    if let Some(ledger) = own.get("ledger") {
        let number = |key: &str| ledger.get(key).filter(|v| !v.is_null());
        if let Some(v) = number("banked") {
            state.ledger.banked = v.as_f64().ok_or_else(|| type_error("dcp.ledger.banked", "a number", v))?;
        }
        if let Some(v) = number("warm") {
            state.ledger.warm = u32::try_from(count(v, "dcp.ledger.warm")?).unwrap_or(u32::MAX);
        }
        if let Some(v) = number("lastRequest") {
            let t = v.as_i64().ok_or_else(|| type_error("dcp.ledger.lastRequest", "a number", v))?;
            state.ledger.last_request = Some(t);
        }
    }
    Ok(())
}

/// The policy's ledger as the state file holds it.
fn ledger(l: &crate::state::Ledger) -> Value {
    json!({"banked": (l.banked * 10.0).round() / 10.0, "warm": l.warm, "lastRequest": l.last_request})
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

fn string_list(value: Option<&Value>, key: &str) -> Result<Vec<String>, FormatError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| type_error(key, "a list of strings", v)))
            .collect(),
        Some(other) => Err(type_error(key, "a list of strings", other)),
    }
}

fn count(value: &Value, key: &str) -> Result<u64, FormatError> {
    if let Some(n) = value.as_u64() {
        return Ok(n);
    }
    match value.as_f64() {
        Some(f) if f >= 0.0 && f.is_finite() => Ok(f as u64),
        _ => Err(type_error(key, "a number >= 0", value)),
    }
}

/// The file contents for `state`: its original fields, with dcp's own brought up to date.
///
/// Fields keep their order, so rendering a rendered file gives the same bytes: a known key is
/// updated where it stands, a missing one goes at the end. `stats` goes first, with the tools
/// count, so that the all-time report can read a file's savings from its first bytes (see
/// `crate::stats`). The prune list is serialised straight from the state, not copied into a
/// `serde_json::Value` tree first: at 17,000 pruned calls that was 40 ms a save.
pub fn render(state: &SessionState, last_updated: &str) -> Vec<u8> {
    let mut out: Vec<(&str, Out<'_>)> = vec![("stats", Out::Owned(Value::Null))];
    out.extend(
        state.raw.iter().filter(|(k, _)| *k != "stats" && *k != "prunedIds").map(|(k, v)| (k.as_str(), Out::Value(v))),
    );
    if let Some(name) = &state.session_name {
        set(&mut out, "sessionName", Out::Owned(Value::String(name.clone())));
    }
    let mut prune = match state.raw.get("prune") {
        Some(Value::Object(p)) => borrowed(p),
        _ => Vec::new(),
    };
    set(&mut prune, "toolIds", Out::PrunedIds(&state.pruned));
    if prune.iter().any(|(k, _)| *k == "tools") {
        set(&mut prune, "tools", Out::PrunedTokens(&state.pruned));
    }
    if !state.blocks.is_empty() || prune.iter().any(|(k, _)| *k == "messages") {
        set(&mut prune, "messages", Out::Owned(state.blocks.to_value()));
    }
    set(&mut out, "prune", Out::Object(prune));
    let mut stats = match state.raw.get("stats") {
        Some(Value::Object(s)) => borrowed(s),
        _ => Vec::new(),
    };
    set(&mut stats, "pruneTokenCounter", Out::Owned(json!(state.stats.prune_token_counter)));
    set(&mut stats, "totalPruneTokens", Out::Owned(json!(state.stats.total_prune_tokens)));
    let tally: u64 = state.stats.by_strategy.values().map(|t| t.tools).sum();
    set(&mut stats, "totalPrunedTools", Out::Owned(json!(tally.max(state.pruned.len() as u64))));
    set(&mut out, "stats", Out::Object(stats));
    set(&mut out, "lastUpdated", Out::Owned(Value::String(last_updated.to_string())));
    let dcp = vec![
        ("version", Out::Owned(json!(FORMAT_VERSION))),
        ("pruned", Out::Records(&state.pruned)),
        ("byStrategy", Out::ByStrategy(&state.stats.by_strategy)),
        ("ids", Out::Ids(&state.ids)),
        // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
        ("nextId", Out::Owned(json!(state.next_id.max(1)))),
        ("lastCompaction", Out::Owned(json!(state.last_compaction))),
        ("ledger", Out::Owned(ledger(&state.ledger))),
    ];
    set(&mut out, "dcp", Out::Object(dcp));
    let mut bytes = Vec::with_capacity(256 + 256 * state.pruned.len());
    serde_json::to_writer_pretty(&mut bytes, &Out::Object(out)).expect("writing JSON to memory cannot fail");
    bytes.push(b'\n');
    bytes
}

/// The fields of `object`, to render.
fn borrowed(object: &Map<String, Value>) -> Vec<(&str, Out<'_>)> {
    object.iter().map(|(k, v)| (k.as_str(), Out::Value(v))).collect()
}

/// One value of a state file being rendered, borrowed from the state where it is large.
enum Out<'a> {
    Value(&'a Value),
    Owned(Value),
    Object(Vec<(&'a str, Out<'a>)>),
    /// `prune.toolIds`: the pruned call ids.
    PrunedIds(&'a BTreeMap<String, PruneRecord>),
    /// `prune.tools`: tokens by pruned call id.
    PrunedTokens(&'a BTreeMap<String, PruneRecord>),
    /// `dcp.pruned`: the records.
    Records(&'a BTreeMap<String, PruneRecord>),
    ByStrategy(&'a BTreeMap<Strategy, Tally>),
    Ids(&'a BTreeMap<String, u32>),
}

/// Sets `key` of an object being rendered: in place if it is there, else at the end.
fn set<'a>(fields: &mut Vec<(&'a str, Out<'a>)>, key: &'a str, value: Out<'a>) {
    match fields.iter_mut().find(|(k, _)| *k == key) {
        Some(field) => field.1 = value,
        None => fields.push((key, value)),
    }
}

impl serde::Serialize for Out<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Out::Value(v) => v.serialize(s),
            Out::Owned(v) => v.serialize(s),
            Out::Object(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Out::PrunedIds(pruned) => s.collect_seq(pruned.keys()),
            Out::PrunedTokens(pruned) => s.collect_map(pruned.iter().map(|(k, r)| (k, r.tokens))),
            Out::Records(pruned) => pruned.serialize(s),
            Out::ByStrategy(by) => s.collect_map(by.iter().map(|(strategy, tally)| (strategy.name(), tally))),
            Out::Ids(ids) => ids.serialize(s),
        }
    }
}

/// The current time as DCP writes it: ISO 8601, UTC, milliseconds.
pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    /// The renderer as it was, through a `serde_json::Value` tree: the oracle for [`render`].
    fn render_via_value(state: &SessionState, last_updated: &str) -> Vec<u8> {
        // Keys are updated in place (and removed with `shift_remove`) so that the fields keep their
        // order: rendering a rendered file gives the same bytes.
        // `stats` goes first, with the tools count, so that the all-time report can read a file's
        // savings from its first bytes (see `crate::stats`).
        let mut out = Map::new();
        out.insert("stats".into(), Value::Null);
        for (k, v) in &state.raw {
            if k != "stats" {
                out.insert(k.clone(), v.clone());
            }
        }
        out.shift_remove("prunedIds");
        if let Some(name) = &state.session_name {
            out.insert("sessionName".into(), Value::String(name.clone()));
        }
        let mut prune = match out.get_mut("prune") {
            Some(Value::Object(p)) => std::mem::take(p),
            _ => Map::new(),
        };
        let ids: Vec<Value> = state.pruned.keys().map(|k| Value::String(k.clone())).collect();
        prune.insert("toolIds".into(), Value::Array(ids));
        if prune.contains_key("tools") {
            let tools: Map<String, Value> = state.pruned.iter().map(|(k, r)| (k.clone(), json!(r.tokens))).collect();
            prune.insert("tools".into(), Value::Object(tools));
        }
        if !state.blocks.is_empty() || prune.contains_key("messages") {
            prune.insert("messages".into(), state.blocks.to_value());
        }
        out.insert("prune".into(), Value::Object(prune));
        let mut stats = match state.raw.get("stats") {
            Some(Value::Object(s)) => s.clone(),
            _ => Map::new(),
        };
        stats.insert("pruneTokenCounter".into(), json!(state.stats.prune_token_counter));
        stats.insert("totalPruneTokens".into(), json!(state.stats.total_prune_tokens));
        let tally: u64 = state.stats.by_strategy.values().map(|t| t.tools).sum();
        stats.insert("totalPrunedTools".into(), json!(tally.max(state.pruned.len() as u64)));
        out.insert("stats".into(), Value::Object(stats));
        out.insert("lastUpdated".into(), Value::String(last_updated.to_string()));
        out.insert("dcp".into(), own_via_value(state));
        let mut bytes = serde_json::to_vec_pretty(&Value::Object(out)).expect("a JSON value always serialises");
        bytes.push(b'\n');
        bytes
    }

    /// The `dcp` section, as the old renderer built it.
    fn own_via_value(state: &SessionState) -> Value {
        let by: Map<String, Value> = state
            .stats
            .by_strategy
            .iter()
            .map(|(s, t)| (s.name().to_string(), json!({"tokens": t.tokens, "tools": t.tools})))
            .collect();
        let ids: Map<String, Value> = state.ids.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({
            "version": FORMAT_VERSION,
            "pruned": state.pruned,
            "byStrategy": by,
            "ids": ids,
            // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
            "nextId": state.next_id.max(1),
            "lastCompaction": state.last_compaction,
            "ledger": ledger(&state.ledger),
        })
    }

    use super::*;
    use serde_json::json;

    fn rec(strategy: Strategy, tokens: u64, applied: bool) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens, tool: String::new(), applied }
    }

    #[test]
    fn render_writes_what_the_value_tree_renderer_wrote() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/data/storage/plugin/dcp");
        let mut states = vec![SessionState::default()];
        for entry in std::fs::read_dir(&dir).unwrap() {
            if let Ok(state) = parse(&std::fs::read(entry.unwrap().path()).unwrap()) {
                states.push(state);
            }
        }
        assert!(states.len() >= 4, "every readable layout in the fixtures");
        // Each state as read, then with a name, new prunes of every action and agent ids.
        for mut state in states {
            assert_eq!(render(&state, "t"), render_via_value(&state, "t"));
            state.session_name = Some("a \"name\"".into());
            state.record("call_x", rec(Strategy::Deduplication, 12, true));
            let write = PruneRecord { action: Action::WriteContent, ..rec(Strategy::SupersedeWrites, 3, false) };
            state.record("call_y", write);
            let distill = PruneRecord {
                action: Action::Distill { distillation: "in\nshort".into() },
                ..rec(Strategy::Extract, 9, true)
            };
            state.record("call_z", distill);
            state.record("call_w", PruneRecord { action: Action::ErrorInputs, ..rec(Strategy::PurgeErrors, 1, true) });
            state.ids.insert("call_x".into(), 7);
            state.next_id = 8;
            state.last_compaction = 1_790_000_000_000;
            state.record("call_m", PruneRecord { action: Action::Mask, ..rec(Strategy::Masking, 40, true) });
            state.ledger = crate::state::Ledger { banked: 1234.5, warm: 9, last_request: Some(1_790_000_001_000) };
            assert_eq!(
                render(&state, "2026-11-22T00:00:00.000Z"),
                render_via_value(&state, "2026-11-22T00:00:00.000Z")
            );
        }
    }

    #[test]
    fn the_policy_ledger_and_masking_survive_a_round_trip() {
        let mut state = SessionState::default();
        state.record("call_m", PruneRecord { action: Action::Mask, ..rec(Strategy::Masking, 40, true) });
        state.ledger = crate::state::Ledger { banked: -12.5, warm: 3, last_request: Some(1_790_000_001_000) };
        let back = parse(&render(&state, "2026-11-22T00:00:00.000Z")).unwrap();
        assert_eq!(back.ledger, state.ledger);
        assert_eq!(back.pruned["call_m"], state.pruned["call_m"]);
        assert_eq!(back.stats.by_strategy[&Strategy::Masking].tokens, 40);
        // A file written before the ledger existed starts a fresh one.
        assert_eq!(parse(br#"{"dcp": {}}"#).unwrap().ledger, crate::state::Ledger::default());
    }

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
}
