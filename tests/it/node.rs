//! The compact values sessions are held as (`dcp::session::Node`) against `serde_json::Value`,
//! which they replaced: random JSON texts and mutations of them parse alike (or fail with the
//! same error) and print byte for byte alike; generated sessions round-trip; and slimming a
//! part as a node gives what slimming it as a `Value` gave (the code before nodes, kept here
//! as the oracle). A tool part's facts, which the index keeps instead of reading the part
//! again, give the view the part gives.

use dcp::session::{slim, CallFacts, Message, Node, ToolCall};
use dcp::tokens::{EstimatorChoice, Field, TokenCounter};
use dcp_testkit::gen::Rng;
use serde_json::{Map, Value};

/// Characters a random string is made of: the edges of inline storage (14 bytes for a key,
/// 22 for a value) are in the lengths,
/// escapes and multi-byte characters in the text.
const PIECES: &[&str] =
    &["a", "Z", "0", " ", "é", "日本", "😀", "\\\"", "\\\\", "\\n", "\\u0000", "\\ud83d\\ude00", "/"];

fn string(rng: &mut Rng) -> String {
    let n = *rng.pick(&[0u64, 1, 5, 13, 14, 15, 21, 22, 23, 24, 40]).unwrap_or(&3);
    let mut out = String::from("\"");
    for _ in 0..n {
        out.push_str(rng.pick(PIECES).unwrap_or(&"a"));
    }
    out.push('"');
    out
}

fn number(rng: &mut Rng) -> String {
    match rng.below(7) {
        0 => rng.next_u64().to_string(),
        1 => (rng.next_u64() as i64).to_string(),
        2 => format!("{}", rng.below(1000)),
        3 => format!("-{}.{}e{}", rng.below(100), rng.below(1000), rng.below(40)),
        4 => f64::from_bits(rng.next_u64()).to_string().replace("inf", "1e999").replace("NaN", "0"),
        5 => format!("{}E-{}", rng.below(10), rng.below(400)),
        _ => "-0".into(),
    }
}

/// A random JSON text of nesting at most `depth`; objects may repeat a key.
fn text(rng: &mut Rng, depth: u32) -> String {
    match rng.below(if depth == 0 { 4 } else { 6 }) {
        0 => (*rng.pick(&["null", "true", "false"]).unwrap_or(&"null")).to_string(),
        1 => number(rng),
        2 | 3 => string(rng),
        4 => {
            let items: Vec<String> = (0..rng.below(5)).map(|_| text(rng, depth - 1)).collect();
            format!("[{}]", items.join(","))
        }
        _ => {
            let mut keys: Vec<String> = Vec::new();
            let mut fields = Vec::new();
            let most = if rng.percent(10) { 40 } else { 6 };
            for _ in 0..rng.below(most) {
                let key = match keys.is_empty() || rng.percent(80) {
                    true => string(rng),
                    false => rng.pick(&keys).cloned().unwrap_or_default(),
                };
                keys.push(key.clone());
                fields.push(format!("{key}:{}", text(rng, depth - 1)));
            }
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// `text` with a few bytes flipped, dropped or doubled.
fn mutate(rng: &mut Rng, text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..rng.range(1, 3) {
        if bytes.is_empty() {
            break;
        }
        let at = rng.below(bytes.len() as u64) as usize;
        match rng.below(3) {
            0 => bytes[at] = *rng.pick(b"{}[]\",:0\\e-").unwrap_or(&b'x'),
            1 => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, bytes[at]),
        }
    }
    bytes
}

/// Parses `text` both ways and checks that they agree; returns whether it was JSON.
fn agree(text: &[u8]) -> bool {
    let value = serde_json::from_slice::<Value>(text);
    let node = serde_json::from_slice::<Node>(text);
    let shown = String::from_utf8_lossy(text);
    match (value, node) {
        (Ok(value), Ok(node)) => {
            assert_eq!(serde_json::to_string(&node).unwrap(), serde_json::to_string(&value).unwrap(), "{shown}");
            assert_eq!(node.to_string(), value.to_string(), "{shown}");
            assert_eq!(serde_json::to_string_pretty(&node).unwrap(), serde_json::to_string_pretty(&value).unwrap());
            assert_eq!(node, value, "{shown}");
            assert_eq!(node.to_value().to_string(), value.to_string(), "{shown}");
            assert_eq!(Node::from(value.clone()).to_string(), value.to_string(), "{shown}");
            true
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "{shown}");
            false
        }
        (a, b) => panic!("{shown}: {a:?} against {b:?}"),
    }
}

#[test]
fn random_texts_and_their_mutations_parse_and_print_as_values_do() {
    let mut rng = Rng::new(17);
    let (mut valid, mut mutants) = (0, 0);
    for _ in 0..4000 {
        let text = text(&mut rng, 4);
        valid += usize::from(agree(text.as_bytes()));
        for _ in 0..3 {
            mutants += usize::from(agree(&mutate(&mut rng, &text)));
        }
    }
    // Most texts are JSON (a number out of range is not), and some of their mutants are.
    assert!(valid > 3000 && mutants > 1000, "{valid} texts and {mutants} mutants were JSON");
}

#[test]
fn generated_sessions_round_trip_byte_for_byte() {
    for seed in 1..4 {
        let spec = dcp_testkit::gen::SessionSpec { messages: 300, steps: 5, seed };
        let session = dcp_testkit::gen::session(&spec);
        for message in session.messages.iter().chain(session.steps.iter().flatten()) {
            let text = serde_json::to_string(message).unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&value).unwrap(), text);
            let again: Message = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&again).unwrap(), text);
        }
    }
}

/// Every reading of the tool call view `c`, printed.
fn readings(c: &ToolCall<'_>) -> String {
    let head = (c.message, c.part, c.part_id, c.call_id, c.tool, c.status, c.compacted, c.turn);
    format!("{:?}", (head, c.key_argument(), c.file_path(), c.input().to_string(), c.output(), c.error()))
}

#[test]
fn a_tool_part_s_facts_give_the_view_the_part_gives() {
    let odd = serde_json::json!([
        {"type": "tool", "id": "prt_1", "callID": "c1", "tool": "read", "state": {"status": "error", "error": "gone",
            "input": {"path": "/a", "pattern": "x"}, "time": {"compacted": 5}}},
        {"type": "tool", "callID": "c2", "state": {"status": "odd", "input": {"filePath": "/b", "command": "ls"}}},
        {"type": "tool", "callID": "c3", "tool": "bash", "state": "no object"},
    ]);
    let odd = Message::from_values(serde_json::json!({"role": "assistant"}), odd.as_array().unwrap().clone());
    let mut calls = 0;
    for seed in 1..4 {
        let spec = dcp_testkit::gen::SessionSpec { messages: 300, steps: 5, seed };
        let session = dcp_testkit::gen::session(&spec);
        for (mi, message) in session.messages.iter().chain(session.steps.iter().flatten()).chain([&odd]).enumerate() {
            let facts = CallFacts::of(message);
            let views: Vec<ToolCall<'_>> =
                message.parts.iter().enumerate().filter_map(|(pi, p)| ToolCall::from_part(mi, pi, p, 3)).collect();
            assert_eq!(facts.len(), views.len());
            for (facts, view) in facts.iter().zip(&views) {
                let again = ToolCall::from_facts(mi, facts, &message.parts[facts.part], 3);
                assert_eq!(readings(&again), readings(view));
                calls += 1;
            }
        }
    }
    assert!(calls > 300, "{calls} calls");
}

#[test]
fn a_part_slims_as_it_did_as_a_value() {
    let mut rng = Rng::new(5);
    let spec = dcp_testkit::gen::SessionSpec { messages: 400, steps: 0, seed: 3 };
    let session = dcp_testkit::gen::session(&spec);
    let mut parts: Vec<Value> = session.messages.iter().flat_map(|m| &m.parts).map(Node::to_value).collect();
    // Odd shapes too: a state that is no object, inputs of big strings under every key.
    let big = "x".repeat(300);
    parts.push(serde_json::json!({"id": "p1", "type": "tool", "tool": "write", "state": "odd"}));
    parts.push(serde_json::json!({"id": "p2", "type": "tool", "tool": "write", "state": {"status": "completed",
        "input": {"filePath": big, "content": big, "n": null}, "output": big, "time": {"start": 1}}}));
    parts.push(serde_json::json!({"id": "p3", "type": "tool", "tool": "x", "state": {"status": "error",
        "input": {"command": big, "other": big, "list": [big]}, "error": big, "time": {"compacted": 5}}}));
    parts.push(serde_json::json!({"type": "step-start", "id": 7}));
    parts.push(serde_json::json!({"id": "p4", "type": "text", "text": big, "time": {}, "metadata": {}, "x": 1}));
    for part in parts {
        let mut node = Node::from(part.clone());
        let dropped = slim::slim_part(&mut node, &mut TokenCounter::new(EstimatorChoice::Auto));
        let mut value = part.clone();
        let expected = old::slim_part(&mut value, &mut TokenCounter::new(EstimatorChoice::Auto));
        assert_eq!((node.to_string(), dropped), (value.to_string(), expected), "{part}");
        old::make_opaque(&mut value);
        slim::make_opaque(&mut node);
        assert_eq!(node.to_string(), value.to_string());
        if rng.percent(30) {
            // Slimming again changes nothing.
            let again = node.clone();
            slim::slim_part(&mut node, &mut TokenCounter::new(EstimatorChoice::Auto));
            assert_eq!(node, again);
        }
    }
    for message in &session.messages {
        let (mut node, mut value) = (message.info.clone(), message.info.to_value());
        slim::slim_info(&mut node);
        old::slim_info(&mut value);
        assert_eq!(node.to_string(), value.to_string());
    }
}

/// Slimming as dcp did it on `serde_json::Value`s before `Node` (src/session/slim.rs at
/// 55833aa, the maps' rebuilding left out): the oracle of the test above.
mod old {
    use super::*;

    const OPAQUE: &[&str] = &["step-start", "step-finish", "patch", "snapshot"];
    const KEPT_INPUTS: &[&str] = &["filePath", "command", "pattern", "path", "url", "query", "description", "prompt"];

    pub fn slim_info(info: &mut Value) {
        let Some(map) = info.as_object_mut() else { return };
        let summary = map.get("summary") == Some(&Value::Bool(true));
        // Since issue 37 a model step keeps what the provider reported it billed.
        let step = map.get("role").and_then(Value::as_str) == Some("assistant");
        map.retain(|k, v| match k.as_str() {
            "id" | "sessionID" | "role" | "agent" | "model" => true,
            "summary" | "parentID" | "finish" => summary,
            "tokens" | "cost" | "modelID" | "providerID" => step,
            "time" => {
                if let Value::Object(time) = v {
                    time.retain(|k, _| k == "created");
                }
                true
            }
            _ => false,
        });
    }

    pub fn make_opaque(part: &mut Value) {
        let opaque = part.get("type").and_then(Value::as_str).is_some_and(|t| OPAQUE.contains(&t));
        if let Some(id) = part.get_mut("id").filter(|_| opaque).map(Value::take) {
            if id.is_string() {
                *part = id;
            }
        }
    }

    fn strip_part(part: &mut Value) {
        let Some(map) = part.as_object_mut() else { return };
        map.shift_remove("sessionID");
        map.shift_remove("messageID");
        match map.get("type").and_then(Value::as_str) {
            Some(t) if OPAQUE.contains(&t) => map.retain(|k, _| k == "id" || k == "type"),
            Some("text" | "reasoning") => {
                map.shift_remove("time");
                map.shift_remove("metadata");
            }
            Some("tool") => {
                if let Some(Value::Object(state)) = map.get_mut("state") {
                    strip_state(state);
                }
            }
            _ => {}
        }
    }

    fn strip_state(state: &mut Map<String, Value>) {
        state.retain(|k, _| matches!(k.as_str(), "status" | "input" | "output" | "error" | "time"));
        if let Some(Value::Object(time)) = state.get_mut("time") {
            time.retain(|k, _| k == "compacted");
            if time.is_empty() {
                state.shift_remove("time");
            }
        }
    }

    pub fn slim_part(part: &mut Value, counter: &mut TokenCounter) -> usize {
        strip_part(part);
        let Some(map) = part.as_object_mut() else { return 0 };
        if map.get("type").and_then(Value::as_str) != Some("tool") {
            return 0;
        }
        let id = map.get("id").and_then(Value::as_str).unwrap_or("").to_string();
        let tool = map.get("tool").and_then(Value::as_str).unwrap_or("").to_string();
        let Some(Value::Object(state)) = map.get_mut("state") else { return 0 };
        let mut dropped = 0;
        if let Some(Value::String(output)) = state.get_mut("output") {
            if slim::is_big(output) {
                let tokens = counter.count_part_with(&id, Field::Output, || output.as_str());
                dropped += output.len();
                *output = slim::make_marker(output, tokens);
            }
        }
        if let Some(input @ Value::Object(_)) = state.get_mut("input") {
            dropped += slim_input(input, &id, &tool, counter);
        }
        dropped
    }

    fn slim_input(input: &mut Value, id: &str, tool: &str, counter: &mut TokenCounter) -> usize {
        let slims = |k: &str, v: &Value| {
            v.as_str().is_some_and(slim::is_big)
                && if tool == "write" { k == "content" } else { !KEPT_INPUTS.contains(&k) }
        };
        let Some(map) = input.as_object() else { return 0 };
        if !map.iter().any(|(k, v)| slims(k, v)) {
            return 0;
        }
        let tokens = counter.count_part(id, Field::Input, &input.to_string());
        let Some(map) = input.as_object_mut() else { return 0 };
        let mut dropped = 0;
        for (k, v) in map.iter_mut() {
            if slims(k, v) {
                if let Value::String(s) = v {
                    dropped += s.len();
                    *s = slim::make_marker(s, tokens);
                }
            }
        }
        dropped
    }
}
