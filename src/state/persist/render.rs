//! Writing a state file: [`render`] writes the 1.x layout plus dcp's own `dcp` section,
//! keeping every field it does not understand where it stands, so that rendering a rendered file
//! gives the same bytes. Large parts are serialised straight from the state (`Out`), not
//! through a `serde_json::Value` tree. Reading is in `parse.rs`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{FORMAT_VERSION, OWN_KEYS};
use crate::state::{Action, PruneRecord, SessionState, Strategy, Tally};

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
    let mut carried = Carried::Ids;
    if prune.iter().any(|(k, _)| *k == "tools") {
        set(&mut prune, "tools", Out::PrunedTokens(&state.pruned));
        carried = Carried::IdsAndTokens;
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
    for (key, value) in savings_stats(state) {
        set(&mut stats, key, Out::Owned(value));
    }
    set(&mut out, "stats", Out::Object(stats));
    set(&mut out, "lastUpdated", Out::Owned(Value::String(last_updated.to_string())));
    let mut dcp = vec![
        ("version", Out::Owned(json!(FORMAT_VERSION))),
        ("pruned", Out::Records(&state.pruned, &state.foreign_records, carried)),
        ("byStrategy", Out::ByStrategy(&state.stats.by_strategy, own_added(state, "byStrategy"))),
        ("ids", Out::Ids(&state.ids)),
        // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
        ("nextId", Out::Owned(json!(state.next_id.max(1)))),
        ("lastCompaction", Out::Owned(json!(state.last_compaction))),
        ("ledger", Out::Owned(super::ledger::render(&state.ledger, own_added(state, "ledger")))),
    ];
    for (key, value) in savings_own(state).into_iter().chain(state.trial.map(|t| ("holdout", t.to_value()))) {
        dcp.push((key, Out::Owned(value)));
    }
    // What a newer dcp added to the section follows, as it was read.
    if let Some(Value::Object(kept)) = state.raw.get("dcp") {
        dcp.extend(
            kept.iter().filter(|(k, _)| !OWN_KEYS.contains(&k.as_str())).map(|(k, v)| (k.as_str(), Out::Value(v))),
        );
    }
    set(&mut out, "dcp", Out::Object(dcp));
    let mut bytes = Vec::with_capacity(256 + 256 * state.pruned.len());
    super::layout::write(&mut bytes, &Out::Object(out));
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
    /// `dcp.pruned`: the records the prune lists do not carry already, each over what it was
    /// read with that this version does not know (`SessionState::foreign_records`).
    Records(&'a BTreeMap<String, PruneRecord>, &'a BTreeMap<String, Map<String, Value>>, Carried),
    /// `dcp.byStrategy`, each tally followed by the fields a newer dcp added to it, if any.
    ByStrategy(&'a BTreeMap<Strategy, Tally>, Option<&'a Map<String, Value>>),
    Ids(&'a BTreeMap<String, u32>),
}

/// What the prune lists written beside `dcp.pruned` carry of each pruned call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    /// `prune.toolIds`: the id.
    Ids,
    /// `prune.toolIds` and `prune.tools`: the id and its tokens.
    IdsAndTokens,
}

impl Carried {
    /// Whether `record` is what parsing imports for an id found only in the prune lists, so
    /// that `dcp.pruned` need not repeat it: an id another DCP pruned. A legacy file of
    /// millions of such ids is written back about as large as it was, not seven times larger.
    fn covers(self, record: &PruneRecord) -> bool {
        record.strategy == Strategy::Imported
            && record.action == Action::Output
            && record.tool.is_empty()
            && record.applied
            && (record.tokens == 0 || self == Carried::IdsAndTokens)
    }
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
            Out::Records(pruned, foreign, carried) => {
                let records = pruned.iter().filter(|(id, r)| !carried.covers(r) || foreign.contains_key(*id));
                s.collect_map(records.map(|(id, record)| (id, RecordOut { record, read: foreign.get(id) })))
            }
            Out::ByStrategy(by, added) => s.collect_map(by.iter().map(|(strategy, tally)| {
                let added = added.and_then(|a| a.get(strategy.key())).and_then(Value::as_object);
                (strategy.key(), TallyOut { tally, added })
            })),
            Out::Ids(ids) => ids.serialize(s),
        }
    }
}

/// One record of `dcp.pruned`: serialised straight from the state, or, when it was read with
/// what this version does not know, over what it was read as (`crate::state::foreign`).
struct RecordOut<'a> {
    record: &'a PruneRecord,
    read: Option<&'a Map<String, Value>>,
}

impl serde::Serialize for RecordOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.read {
            None => self.record.serialize(s),
            Some(read) => crate::state::foreign::record_value(self.record, read).serialize(s),
        }
    }
}

/// A digest of a rendered file that leaves out its `lastUpdated` time: two renders of the same
/// state at different times have the same digest, so a save can tell that it would write
/// nothing new. `last_updated` is the time the file was rendered with; the top-level key is
/// the only one [`render`] indents by two spaces, so a field of the same name deeper in a kept
/// object is not mistaken for it.
pub fn digest_but_time(bytes: &[u8], last_updated: &str) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let key = format!("\n  \"lastUpdated\": {}", Value::String(last_updated.to_string()));
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes());
    let mut hasher = DefaultHasher::new();
    match at {
        Some(at) => {
            hasher.write(&bytes[..at]);
            hasher.write(&bytes[at + key.len()..]);
        }
        None => hasher.write(bytes),
    }
    hasher.finish()
}

/// The current time as DCP writes it: ISO 8601, UTC, milliseconds.
pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// dcp's savings keys of `stats` (see `crate::state::savings`), beside DCP's: the prunes in
/// force and waiting when they are above 0, the request sums once a request was answered.
fn savings_stats(state: &SessionState) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let (in_force, waiting) = state.in_force_and_waiting();
    if in_force > 0 || waiting > 0 {
        out.extend([("inForceTokens", json!(in_force)), ("waitingTokens", json!(waiting))]);
    }
    let s = &state.savings;
    if s.requests > 0 {
        out.extend([
            ("requests", json!(s.requests)),
            ("keptOutTokens", json!(s.kept_out_tokens)),
            ("costWithout", json!((s.cost_without * 10.0).round() / 10.0)),
            ("costSaved", json!((s.cost_saved * 10.0).round() / 10.0)),
        ]);
    }
    out.extend(state.misses.keys().into_iter().map(|(k, n)| (k, json!(n))));
    out
}

/// dcp's savings keys of its own section: the last request's sizes, each request's point, and
/// what the provider reported of the requests it was learned for (left out while none was).
fn savings_own(state: &SessionState) -> Vec<(&'static str, Value)> {
    let s = &state.savings;
    if s.requests == 0 {
        return Vec::new();
    }
    let trail: Vec<Value> = s.trail.iter().map(|p| Value::String(p.to_line())).collect();
    let mut out = vec![("lastContext", json!(s.last_context)), ("lastSent", json!(s.last_sent))];
    if s.last_appended > 0 {
        out.push(("lastAppended", json!(s.last_appended)));
    }
    out.push(("trail", Value::Array(trail)));
    if !s.reported.is_empty() {
        out.push(("reported", Value::Array(s.reported.iter().map(|r| Value::String(r.to_line())).collect())));
    }
    if !s.models.is_empty() {
        out.push(("models", Value::Array(s.models.iter().map(model).collect())));
    }
    out
}

/// A model of `dcp.models` (see `crate::state::savings::Model`).
fn model(m: &crate::state::savings::Model) -> Value {
    let mut out = json!({"provider": m.provider, "id": m.id});
    if let Some(p) = m.prices {
        out["cost"] =
            json!({"input": p.input, "output": p.output, "cacheRead": p.cache_read, "cacheWrite": p.cache_write});
    }
    if let Some(context) = m.context {
        out["context"] = json!(context);
    }
    out
}

/// What a newer dcp added to `key` of the `dcp` section, as parsing kept it.
fn own_added<'a>(state: &'a SessionState, key: &str) -> Option<&'a Map<String, Value>> {
    state.raw.get("dcp")?.get(key)?.as_object()
}

/// One tally of `dcp.byStrategy`, followed by the fields a newer dcp added to it.
struct TallyOut<'a> {
    tally: &'a Tally,
    added: Option<&'a Map<String, Value>>,
}

impl serde::Serialize for TallyOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let added = self.added.into_iter().flatten().filter(|(k, _)| *k != "tokens" && *k != "tools");
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("tokens", &self.tally.tokens)?;
        map.serialize_entry("tools", &self.tally.tools)?;
        for (k, v) in added {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::persist::parse;
    use crate::state::Action;

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
        let tokens_listed = prune.contains_key("tools");
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
        stats.extend(savings_stats(state).into_iter().map(|(k, v)| (k.to_string(), v)));
        out.insert("stats".into(), Value::Object(stats));
        out.insert("lastUpdated".into(), Value::String(last_updated.to_string()));
        out.insert("dcp".into(), own_via_value(state, tokens_listed));
        let mut bytes = Vec::new();
        crate::state::persist::layout::write(&mut bytes, &Value::Object(out));
        bytes.push(b'\n');
        bytes
    }

    /// The `dcp` section, as the old renderer built it.
    /// Records parsing gets back from the prune lists alone (imported ids, with their
    /// tokens when `prune.tools` lists them) are left out.
    fn own_via_value(state: &SessionState, tokens_listed: bool) -> Value {
        let listed = |r: &PruneRecord| {
            let plain = PruneRecord { tokens: r.tokens, ..rec(Strategy::Imported, 0, true) };
            *r == plain && (r.tokens == 0 || tokens_listed)
        };
        let pruned: BTreeMap<&String, &PruneRecord> = state.pruned.iter().filter(|(_, r)| !listed(r)).collect();
        let by: Map<String, Value> = state
            .stats
            .by_strategy
            .iter()
            .map(|(s, t)| (s.key().to_string(), json!({"tokens": t.tokens, "tools": t.tools})))
            .collect();
        let ids: Map<String, Value> = state.ids.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let mut own = json!({
            "version": FORMAT_VERSION,
            "pruned": pruned,
            "byStrategy": by,
            "ids": ids,
            // 0 means no id was handed out yet; ids start at 1, as a parsed file's do.
            "nextId": state.next_id.max(1),
            "lastCompaction": state.last_compaction,
            "ledger": super::super::ledger::render(&state.ledger, None),
        });
        for (k, v) in savings_own(state) {
            own[k] = v;
        }
        own
    }

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
            let last_request = Some(1_790_000_001_000);
            state.ledger =
                crate::state::Ledger { banked: 1234.5, warm: 9, last_request, offered: true, ..Default::default() };
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
        state.record("call_i", PruneRecord { action: Action::MaskInputs, ..rec(Strategy::Masking, 7, true) });
        let last_request = Some(1_790_000_001_000);
        state.ledger =
            crate::state::Ledger { banked: -12.5, warm: 3, last_request, offered: false, ..Default::default() };
        // The bug: a new sidecar started the costs so far and the lists sent from nothing, so
        // its first request decided otherwise than one process would (`tests/it/replay.rs`).
        (state.ledger.baseline, state.ledger.unpruned, state.ledger.added) =
            (52_492.000_000_000_01, Some(14_070), 1.25);
        state.ledger.lists = crate::state::ListsSent { shown: Some(11), answered: 2, unanswered: 1, calls_at_nudge: 9 };
        let back = parse(&render(&state, "2026-11-22T00:00:00.000Z")).unwrap();
        assert_eq!(back.ledger, state.ledger);
        assert_eq!(back.pruned["call_m"], state.pruned["call_m"]);
        assert_eq!(back.pruned["call_i"], state.pruned["call_i"]);
        assert_eq!(back.stats.by_strategy[&Strategy::Masking].tokens, 47);
        // A file written before the ledger existed starts a fresh one, of a session whose
        // requests carried the agent tools from the start.
        let fresh = crate::state::Ledger { offered: true, ..crate::state::Ledger::default() };
        assert_eq!(parse(br#"{"dcp": {}}"#).unwrap().ledger, fresh);
    }

    #[test]
    fn rendering_a_state_file_twice_gives_the_same_bytes() {
        // Found by the `state_file` fuzz target on the fixtures' 0.3 layout: `Map::remove` swapped
        // the last key into the removed one's place, so every save reordered the file.
        const WHEN: &str = "2026-01-01T00:00:00.000Z";
        for file in
            std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/data/storage/plugin/dcp"))
                .unwrap()
        {
            let bytes = std::fs::read(file.unwrap().path()).unwrap();
            let Ok(state) = parse(&bytes) else {
                continue;
            };
            let once = render(&state, WHEN);
            let twice = render(&parse(&once).unwrap(), WHEN);
            assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once).unwrap());
        }
    }

    #[test]
    fn an_unknown_float_field_survives_saves_exactly() {
        // Found by the `state_file` fuzz target: without serde_json's `float_roundtrip`, a float
        // kept from an unknown field lost its last digit on every save.
        const WHEN: &str = "2026-01-01T00:00:00.000Z";
        let state = parse(br#"{"theirs": 2.2222222001722586e28}"#).unwrap();
        let once = render(&state, WHEN);
        let twice = render(&parse(&once).unwrap(), WHEN);
        assert_eq!(String::from_utf8(twice).unwrap(), String::from_utf8(once.clone()).unwrap());
        assert!(String::from_utf8(once).unwrap().contains("2.2222222001722586e+28"));
    }

    /// What a newer dcp added to the `dcp` section is kept apart from what this version
    /// writes: a key written from the state but missing from `OWN_KEYS` would be kept too,
    /// and written twice.
    #[test]
    fn every_key_of_the_dcp_section_render_writes_is_one_it_owns() {
        let mut state = SessionState::default();
        state.record("c", rec(Strategy::Sweep, 3, true));
        state.savings.requests = 1;
        state.trial = Some(crate::state::trial::Trial { arm: crate::state::trial::Arm::Unpruned, prompts: 1 });
        state.savings.last_appended = 5;
        let model = crate::state::savings::Model { provider: "p".into(), id: "m".into(), ..Default::default() };
        state.savings.report(1, crate::state::savings::Usage { input: 3, ..Default::default() }, Some(&model));
        let written: Value = serde_json::from_slice(&render(&state, "t")).unwrap();
        let keys: Vec<&String> = written["dcp"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), super::OWN_KEYS.len(), "{keys:?}");
        assert!(keys.iter().all(|k| super::OWN_KEYS.contains(&k.as_str())), "{keys:?}");
        let theirs = parse(br#"{"dcp": {"plans": [1], "nextId": 4}}"#).unwrap();
        let written: Value = serde_json::from_slice(&render(&theirs, "t")).unwrap();
        assert_eq!((&written["dcp"]["plans"], &written["dcp"]["nextId"]), (&json!([1]), &json!(4)));
    }
}
