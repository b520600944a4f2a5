//! Slim parts: what the sidecar's mirror keeps of a part once its big strings were counted.
//!
//! A long session's tool outputs and write contents are most of its bytes, and nothing decides
//! on their text once it was counted: the strategies compare inputs, measure sizes and count
//! tokens. So [`slim_part`] replaces each big string by a *marker*, a short string that holds
//! a 128-bit digest of the original, its length in bytes and characters and its token count,
//! and drops the fields no strategy reads (ids repeated in every part, timings, snapshots).
//! Two markers are equal exactly when their originals are (short of a digest collision), and
//! the readers below give the same answers for a marker as for its original: [`bytes`],
//! [`chars`], [`count`], [`input_count`] and [`canonical`] (what deduplication compares).
//! The CLI's histories, read from `opencode.db`, are never slimmed.
//!
//! A marker must not be forgeable: tool outputs are untrusted text (a command's output, a file
//! the agent read), and a parsed JSON string can hold any character, a NUL included. So the
//! tag carries a random nonce drawn once per process, and [`marker`] accepts only this
//! process's nonce. Text from OpenCode cannot hold a nonce it never saw (the markers never
//! leave the process), so a string that looks like a marker is counted as the text it is.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

use serde_json::Value;

use super::{Node, Object};

use crate::tokens::{Field, TokenCounter};

/// Strings at least this long are replaced by a marker (a marker is about 70 bytes).
pub const MIN_BYTES: usize = 256;

/// How a marker starts: a NUL, a tag and this process's nonce (see the module's header).
fn tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        // A `RandomState` is seeded from the system's randomness once per thread.
        let nonce = std::collections::hash_map::RandomState::new().build_hasher().finish();
        format!("\u{0}dcp-slim:{nonce:016x}:")
    })
}

/// The input fields kept verbatim: the key argument and the file a call touches (see
/// `ToolCall::key_argument`), which the list, masking's placeholder and the file rules read.
const KEPT_INPUTS: &[&str] = crate::session::KEY_ARGUMENTS;

/// What a marker says of the string it replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<'a> {
    /// The digest and the length in bytes, as hex and decimal: what identifies the original.
    pub identity: &'a str,
    pub bytes: usize,
    pub chars: usize,
    /// An output's tokens; for an input field, the tokens of the whole input's JSON.
    pub tokens: u64,
}

/// The marker `text` is, if it is one.
pub fn marker(text: &str) -> Option<Marker<'_>> {
    let rest = text.strip_prefix(tag())?;
    let mut fields = rest.split(':');
    let (digest, bytes, chars, tokens) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    let identity = &rest[..digest.len() + 1 + bytes.len()];
    Some(Marker { identity, bytes: bytes.parse().ok()?, chars: chars.parse().ok()?, tokens: tokens.parse().ok()? })
}

/// Whether `text` is long enough to be replaced by a marker.
pub fn is_big(text: &str) -> bool {
    text.len() >= MIN_BYTES && !text.starts_with(tag())
}

fn digest(text: &str) -> u128 {
    let mut a = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0xd1b5_4a32_d192_ed03u64.hash(&mut b);
    text.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// The identity of a string: what [`Marker::identity`] holds for it.
fn identity(text: &str) -> String {
    identity_of(digest(text), text)
}

/// The identity of `text`, whose digest is `digest`.
fn identity_of(digest: u128, text: &str) -> String {
    format!("{digest:032x}:{}", text.len())
}

/// Whether `kept`, a string as the mirror keeps it (itself, or its marker), stands for
/// `original`: how a text read back from OpenCode's store is checked against what was sent.
pub fn same(kept: &str, original: &str) -> bool {
    match marker(kept) {
        Some(m) => m.identity == identity(original),
        None => kept == original,
    }
}

/// The marker that stands for `text`, with `tokens` as its count.
pub fn make_marker(text: &str, tokens: u64) -> String {
    marker_of(digest(text), text, tokens)
}

/// [`make_marker`] for a `text` whose digest is `digest`.
fn marker_of(digest: u128, text: &str, tokens: u64) -> String {
    format!("{}{}:{}:{tokens}", tag(), identity_of(digest, text), text.chars().count())
}

/// The length in bytes of the string `text` is or stands for.
pub fn bytes(text: &str) -> usize {
    marker(text).map_or(text.len(), |m| m.bytes)
}

/// The length in characters of the string `text` is or stands for.
pub fn chars(text: &str) -> usize {
    marker(text).map_or_else(|| text.chars().count(), |m| m.chars)
}

/// The tokens of the output or text `text` is or stands for.
pub fn count(text: &str, counter: &TokenCounter) -> u64 {
    marker(text).map_or_else(|| counter.count(text), |m| m.tokens)
}

/// The tokens of a tool input's JSON, as `counter.count(&input.to_string())` counts them before
/// it was slimmed: a slimmed input holds its count in its markers. `None` when the input holds
/// no marker and must be counted.
pub fn input_count(input: &Node) -> Option<u64> {
    input.as_object()?.values().find_map(|v| v.as_str().and_then(marker)).map(|m| m.tokens)
}

/// What deduplication compares of a string: big strings and their markers by identity.
pub fn canonical(text: &str, out: &mut String) {
    match marker(text) {
        Some(m) => push_identity(m.identity, out),
        None if text.len() >= MIN_BYTES => push_identity(&identity(text), out),
        None => out.push_str(&Value::String(text.to_string()).to_string()),
    }
}

fn push_identity(identity: &str, out: &mut String) {
    out.push_str(tag());
    out.push_str(identity);
}

/// Slims a message's info in place: keeps what the session model and the synthetic messages
/// read (id, session, role, agent, model, creation time, whether the step ended in an error,
/// `crate::session::starts_turn`), of a compaction summary its flag, parent and finish, and of
/// a model step what the provider reported it billed (its tokens, cost and model), which the
/// savings keep beside what dcp counted.
pub fn slim_info(info: &mut Node) {
    let Some(map) = info.as_object_mut() else { return };
    let summary = map.get("summary").and_then(Node::as_bool) == Some(true);
    let step = map.get("role").and_then(Node::as_str) == Some("assistant");
    map.retain(|k, v| match k {
        "id" | "sessionID" | "role" | "agent" | "model" => true,
        "error" if !v.is_null() => {
            *v = Node::from(true);
            true
        }
        "summary" | "parentID" | "finish" => summary,
        "tokens" | "cost" | "modelID" | "providerID" => step,
        "time" => {
            if let Some(time) = v.as_object_mut() {
                time.retain(|k, _| k == "created");
            }
            true
        }
        _ => false,
    });
}

/// The parts nothing reads but by their place and id: a step's start and finish, a patch.
const OPAQUE: &[&str] = &["step-start", "step-finish", "patch", "snapshot"];

/// Replaces a part nothing reads (see [`OPAQUE`]) by its id, a string: the mirror keeps it
/// only to resolve a reference to it and to keep the places of the others. Every reader takes
/// a string for a part of no type.
pub fn make_opaque(part: &mut Node) {
    let opaque = part.get("type").and_then(Node::as_str).is_some_and(|t| OPAQUE.contains(&t));
    if let Some(id) = part.get_mut("id").filter(|_| opaque).map(Node::take) {
        if id.is_string() {
            *part = id;
        }
    }
}

/// The id of a part, or of what [`make_opaque`] left of one.
pub fn part_id(part: &Node) -> Option<&str> {
    part.get("id").and_then(Node::as_str).or_else(|| part.as_str())
}

/// What [`strip_part`] keeps of a part, by its type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Opaque,
    Text,
    Tool,
    Other,
}

/// Drops the fields of a part nothing reads after it was indexed: the ids every part repeats,
/// a step's snapshot and usage, a tool call's title, metadata and timings (but whether
/// OpenCode compacted it). Cheap: the mirror does it as a part arrives.
pub fn strip_part(part: &mut Node) {
    let Some(map) = part.as_object_mut() else { return };
    let shape = match map.get("type").and_then(Node::as_str) {
        Some(t) if OPAQUE.contains(&t) => Shape::Opaque,
        Some("text" | "reasoning") => Shape::Text,
        Some("tool") => Shape::Tool,
        _ => Shape::Other,
    };
    map.retain(|k, v| match (shape, k) {
        (_, "sessionID" | "messageID") => false,
        (Shape::Opaque, k) => k == "id" || k == "type",
        (Shape::Text, k) => k != "time" && k != "metadata",
        (Shape::Tool, "state") => {
            if let Some(state) = v.as_object_mut() {
                strip_state(state);
            }
            true
        }
        _ => true,
    });
}

fn strip_state(state: &mut Object) {
    state.retain(|k, v| match k {
        "status" | "input" | "output" | "error" => true,
        "time" => match v.as_object_mut() {
            Some(time) => {
                time.retain(|k, _| k == "compacted");
                !time.is_empty()
            }
            None => true,
        },
        _ => false,
    });
}

/// Slims one part in place: [`strip_part`], then its big strings (a tool's output, its big
/// inputs) become markers, their tokens counted with `counter` (and cached there by part id,
/// as [`crate::strategies::output_tokens`] would, and an output's by its digest too). A part
/// slimmed before is left as it is. Text and reasoning parts keep their text (the compress
/// tags read it). Returns the bytes of the strings replaced (what the caller may hand back to
/// the system).
pub fn slim_part(part: &mut Node, counter: &mut TokenCounter) -> usize {
    strip_part(part);
    let Some(map) = part.as_object_mut() else { return 0 };
    if map.get("type").and_then(Node::as_str) != Some("tool") {
        return 0;
    }
    let id = map.get("id").and_then(Node::as_str).unwrap_or("").to_string();
    let tool = map.get("tool").and_then(Node::as_str).unwrap_or("").to_string();
    let Some(state) = map.get_mut("state").and_then(Node::as_object_mut) else { return 0 };
    let mut dropped = 0;
    if let Some(output) = state.get_mut("output") {
        if let Some(text) = output.as_str().filter(|t| is_big(t)) {
            // The digest the marker holds also finds the count of an output seen before in
            // another part (a file read again, a command run again).
            let digest = digest(text);
            let tokens = counter.count_part_by_digest(&id, Field::Output, digest, text);
            dropped += text.len();
            *output = Node::from_string(marker_of(digest, text, tokens));
        }
    }
    if let Some(input) = state.get_mut("input").filter(|i| i.is_object()) {
        dropped += slim_input(input, &id, &tool, counter);
    }
    dropped
}

/// Replaces an input's big top-level strings, except the ones [`KEPT_INPUTS`] names (and of a
/// `write`, all but `content`), by markers that hold the whole input's tokens. Nested values
/// stay: a purge of an errored call's inputs replaces only the top-level strings, and what is
/// left of them is counted as it is. Returns the bytes replaced.
fn slim_input(input: &mut Node, id: &str, tool: &str, counter: &mut TokenCounter) -> usize {
    let slims = |k: &str, v: &Node| {
        v.as_str().is_some_and(is_big) && if tool == "write" { k == "content" } else { !KEPT_INPUTS.contains(&k) }
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
            if let Some(text) = v.as_str() {
                dropped += text.len();
                *v = Node::from_string(make_marker(text, tokens));
            }
        }
    }
    dropped
}

/// The bytes of the strings `value` holds (keys included): what a slimmed part costs beyond
/// its nodes. For tests and measurements.
pub fn string_bytes(value: &Node) -> usize {
    value.string_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::EstimatorChoice;
    use serde_json::json;

    fn node(value: Value) -> Node {
        Node::from(value)
    }

    #[test]
    fn markers_answer_for_their_originals() {
        let counter = TokenCounter::new(EstimatorChoice::Auto);
        let text = "héllo wörld\n".repeat(40);
        let m = make_marker(&text, counter.count(&text));
        assert!(m.len() < 100, "{m}");
        assert_eq!(
            (bytes(&m), chars(&m), count(&m, &counter)),
            (text.len(), text.chars().count(), counter.count(&text))
        );
        let (mut a, mut b) = (String::new(), String::new());
        canonical(&text, &mut a);
        canonical(&m, &mut b);
        assert_eq!(a, b);
        let mut other = String::new();
        canonical(&format!("{text}!"), &mut other);
        assert_ne!(a, other);
        assert_eq!(marker("plain"), None);
    }

    #[test]
    fn a_slimmed_tool_part_keeps_what_the_strategies_read() {
        let mut counter = TokenCounter::new(EstimatorChoice::Auto);
        let content = "x = 1\n".repeat(100);
        let mut part = node(json!({"id": "prt_1", "sessionID": "ses_1", "messageID": "msg_1", "type": "tool",
            "tool": "write", "callID": "c1", "state": {"status": "completed", "title": "t",
            "input": {"filePath": "/a", "content": content}, "output": "ok", "metadata": {"x": 1},
            "time": {"start": 1, "end": 2}}}));
        let input_tokens = counter.count(&part["state"]["input"].to_string());
        slim_part(&mut part, &mut counter);
        let state = &part["state"];
        assert_eq!(state["input"]["filePath"], "/a");
        assert_eq!(state["output"], "ok");
        assert_eq!(input_count(&state["input"]), Some(input_tokens));
        assert_eq!(bytes(state["input"]["content"].as_str().unwrap()), content.len());
        assert_eq!(part.as_object().unwrap().keys().collect::<Vec<_>>(), ["id", "type", "tool", "callID", "state"]);
        assert_eq!(state.as_object().unwrap().keys().collect::<Vec<_>>(), ["status", "input", "output"]);
        let again = part.clone();
        slim_part(&mut part, &mut counter);
        assert_eq!(part, again);
    }

    /// The count of an output found by its digest, for a part that repeats another's output,
    /// is the count of that part's own text.
    #[test]
    fn an_output_seen_before_in_another_part_is_counted_as_its_own_text_is() {
        let fresh = TokenCounter::new(EstimatorChoice::Auto);
        let mut counter = TokenCounter::new(EstimatorChoice::Auto);
        let texts = ["cargo build\n".repeat(40), "cargo build\n".repeat(40) + "!", "fn main() {}\n".repeat(30)];
        for (i, k) in [0, 1, 0, 2, 1, 0, 2].into_iter().enumerate() {
            let id = if i == 4 { String::new() } else { format!("prt_{i}") };
            let mut part = node(json!({"id": id, "type": "tool", "tool": "bash",
                "state": {"status": "completed", "input": {"command": "x"}, "output": texts[k]}}));
            slim_part(&mut part, &mut counter);
            let kept = part["state"]["output"].as_str().unwrap();
            assert_eq!(marker(kept).map(|m| m.tokens), Some(fresh.count(&texts[k])), "part {i}");
            assert!(same(kept, &texts[k]), "part {i}");
        }
    }

    #[test]
    fn a_string_of_the_marker_form_without_this_process_s_nonce_is_text() {
        let old = format!("\u{0}dcp-slim:{}:1:1:999999", "0".repeat(32));
        assert_eq!(marker(&old), None);
        let real = make_marker(&"x".repeat(300), 7);
        let forged = real.replacen(&tag()[10..26], "0123456789abcdef", 1);
        assert!(marker(&real).is_some() && forged != real && marker(&forged).is_none(), "{forged:?}");
        assert_eq!(bytes(&old), old.len());
    }

    #[test]
    fn a_slimmed_input_keeps_every_key_argument() {
        let mut counter = TokenCounter::new(EstimatorChoice::Auto);
        let big = "a long argument ".repeat(40);
        for key in crate::session::KEY_ARGUMENTS {
            let mut part = node(json!({"id": "prt_1", "type": "tool", "tool": "custom", "callID": "c1",
                "state": {"status": "completed", "input": {*key: big, "other": big}, "output": "ok"}}));
            slim_part(&mut part, &mut counter);
            let call = crate::session::ToolCall::from_part(0, 0, &part, 1).unwrap();
            assert_eq!(call.key_argument(), Some(big.as_str()), "{key}");
            assert!(marker(call.input()["other"].as_str().unwrap()).is_some(), "{key}");
        }
    }

    #[test]
    fn a_step_part_is_kept_as_its_id_and_an_info_as_what_is_read_of_it() {
        let mut step =
            node(json!({"id": "prt_s", "sessionID": "ses_1", "type": "step-finish", "tokens": {"input": 1}}));
        strip_part(&mut step);
        make_opaque(&mut step);
        assert_eq!((step.to_value(), part_id(&step)), (json!("prt_s"), Some("prt_s")));
        let mut tool = node(json!({"id": "prt_t", "type": "tool"}));
        make_opaque(&mut tool);
        assert_eq!(part_id(&tool), Some("prt_t"));
        let mut info = node(json!({"id": "msg_1", "sessionID": "ses_1", "parentID": "msg_0", "role": "assistant",
            "agent": "build", "cost": 1, "time": {"created": 5, "completed": 6}, "finish": "stop"}));
        slim_info(&mut info);
        assert_eq!(
            info,
            json!({"id": "msg_1", "sessionID": "ses_1", "role": "assistant", "agent": "build", "cost": 1,
                "time": {"created": 5}})
        );
        let mut summary =
            node(json!({"id": "msg_2", "parentID": "msg_1", "role": "assistant", "summary": true, "finish": "stop"}));
        let kept = summary.clone();
        slim_info(&mut summary);
        assert_eq!(summary, kept);
        let mut stopped = node(json!({"id": "msg_3", "role": "assistant",
            "error": {"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}}));
        slim_info(&mut stopped);
        assert_eq!(stopped, json!({"id": "msg_3", "role": "assistant", "error": true}), "a stopped step stays one");
    }
}
