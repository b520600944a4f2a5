//! What a request holds, as [`Piece`]s counted in o200k tokens.
//!
//! A message becomes the pieces a provider reads, in its order: the text, reasoning and tool
//! inputs of the message in part order, then the tool results (OpenAI- and Anthropic-style
//! APIs both put the results after the calls). A tool result is the output, the error, or
//! OpenCode's `[Old tool result content cleared]` for an output it cleared. Ignored text,
//! step markers, patches and snapshots are not sent. Counts are cached by piece, so each
//! piece of a session is tokenized once per replay, whatever the number of requests.

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};
use serde_json::Value;

use super::cost::Piece;
use crate::measure::OPENCODE_CLEARED;
use crate::session::node::NULL;
use crate::session::{str_field, Message, Node};
use crate::tokens::TokenCounter;

use crate::measure::{FRAME_CALL, FRAME_RESULT, FRAME_TEXT};

/// What OpenCode sends for a tool call that never finished.
const INTERRUPTED: &str = "[Tool execution was interrupted]";

pub use crate::sidecar::protocol::Edit;

/// Which piece of a part.
#[derive(Hash)]
enum Kind {
    Text,
    Input,
    Result,
    Fixed,
}

/// Counts pieces, each once.
#[derive(Debug)]
pub struct Pieces {
    counter: TokenCounter,
    counts: FxHashMap<u64, u64>,
}

fn id_of(kind: Kind, key: &str, extra: &[&str]) -> u64 {
    let mut h = FxHasher::default();
    kind.hash(&mut h);
    key.hash(&mut h);
    extra.hash(&mut h);
    h.finish()
}

impl Pieces {
    pub fn new(counter: TokenCounter) -> Pieces {
        Pieces { counter, counts: FxHashMap::default() }
    }

    pub fn estimator(&self) -> crate::tokens::Estimator {
        self.counter.estimator()
    }

    /// Tokens of `text`, uncached.
    pub fn count(&self, text: &str) -> u64 {
        self.counter.count(text)
    }

    fn piece(&mut self, id: u64, frame: u64, text: impl FnOnce() -> String) -> Piece {
        let counter = &self.counter;
        let tokens = *self.counts.entry(id).or_insert_with(|| counter.count(&text()));
        Piece { id, tokens: tokens + frame }
    }

    /// A piece that stands for a fixed number of tokens (the system prompt and tools).
    pub fn fixed(&mut self, name: &str, tokens: u64) -> Piece {
        Piece { id: id_of(Kind::Fixed, name, &[&tokens.to_string()]), tokens }
    }

    /// Appends the pieces of `message`, whose parts `edits` change.
    pub fn message(&mut self, message: &Message, edits: &[&Edit], out: &mut Vec<Piece>) {
        let mut results = Vec::new();
        for (i, part) in message.parts.iter().enumerate() {
            let mine: Vec<&Edit> = edits.iter().copied().filter(|e| e.p == i).collect();
            if mine.is_empty() {
                self.part(part, Salt::default(), out, &mut results);
                continue;
            }
            let mut edited = part.clone();
            for e in &mine {
                e.apply(&mut edited);
            }
            let salt = Salt::of(&mine);
            self.part(&edited, salt, out, &mut results);
        }
        out.extend(results);
    }

    /// The pieces of one part: text and inputs into `out`, the result into `results`.
    fn part(&mut self, part: &Node, salt: Salt, out: &mut Vec<Piece>, results: &mut Vec<Piece>) {
        match str_field(part, "type") {
            Some("text") if part.get("ignored").and_then(Node::as_bool) != Some(true) => {
                let text = str_field(part, "text").unwrap_or("");
                out.push(self.piece(id_of(Kind::Text, text, &[]), FRAME_TEXT, || text.to_string()));
            }
            Some("reasoning") => {
                let text = str_field(part, "text").unwrap_or("");
                out.push(self.piece(id_of(Kind::Text, text, &[]), FRAME_TEXT, || text.to_string()));
            }
            Some("tool") => {
                let state = part.get("state").unwrap_or(&NULL);
                let id = str_field(part, "id").or_else(|| str_field(part, "callID")).unwrap_or("");
                let input = state.get("input").unwrap_or(&NULL);
                out.push(self.piece(id_of(Kind::Input, id, &[&salt.input]), FRAME_CALL, || input.to_string()));
                let result = tool_result(state);
                let cleared = if result == OPENCODE_CLEARED { "cleared" } else { "" };
                let result_id = id_of(Kind::Result, id, &[cleared, &salt.result]);
                results.push(self.piece(result_id, FRAME_RESULT, || result.to_string()));
            }
            _ => {}
        }
    }
}

/// What tells an edited piece from the original: the edits of the part's input, and the
/// others (of its result).
#[derive(Default)]
struct Salt {
    input: String,
    result: String,
}

impl Salt {
    fn of(edits: &[&Edit]) -> Salt {
        let mut salt = Salt::default();
        for e in edits {
            let to = if e.path.get(1).is_some_and(|s| s == "input") { &mut salt.input } else { &mut salt.result };
            let value = e.value.as_ref().map(Value::to_string).unwrap_or_default();
            to.push_str(&format!("{:?}={value}+{};", e.path, e.append.as_deref().unwrap_or("")));
        }
        salt
    }
}

/// What the model reads as a tool call's result.
pub(super) fn tool_result(state: &Node) -> &str {
    let compacted = state.get("time").and_then(|t| t.get("compacted")).is_some_and(|c| !c.is_null());
    match str_field(state, "status") {
        Some("completed") if compacted => OPENCODE_CLEARED,
        Some("completed") => str_field(state, "output").unwrap_or(""),
        Some("error") => str_field(state, "error").unwrap_or(""),
        _ => INTERRUPTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::EstimatorChoice;
    use serde_json::json;

    fn read(output: &str) -> Node {
        Node::from(json!({"id": "prt_1", "type": "tool", "callID": "c1", "tool": "read",
               "state": {"status": "completed", "input": {"filePath": "/a.py"}, "output": output, "time": {}}}))
    }

    #[test]
    fn a_message_is_its_inputs_then_its_results_and_an_edit_makes_new_pieces() {
        let mut pieces = Pieces::new(TokenCounter::new(EstimatorChoice::CharsDiv4));
        let text = Node::from(json!({"id": "prt_0", "type": "text", "text": "let me look"}));
        let ignored = Node::from(json!({"id": "prt_2", "type": "text", "text": "not sent", "ignored": true}));
        let m = Message {
            info: Node::from(json!({"role": "assistant"})),
            parts: vec![read(&"x".repeat(400)), text, ignored],
        };
        let mut plain = Vec::new();
        pieces.message(&m, &[], &mut plain);
        let tokens: Vec<u64> = plain.iter().map(|p| p.tokens).collect();
        // The input `{"filePath":"/a.py"}`, the text, then the output, each with its framing.
        assert_eq!(tokens, vec![5 + FRAME_CALL, 3 + FRAME_TEXT, 100 + FRAME_RESULT]);
        let edit = Edit {
            m: 0,
            p: 0,
            path: vec!["state".into(), "output".into()],
            value: Some(json!("[pruned]")),
            append: None,
        };
        let mut edited = Vec::new();
        pieces.message(&m, &[&edit], &mut edited);
        assert_eq!(edited[2].tokens, 2 + FRAME_RESULT);
        assert_ne!(edited[2].id, plain[2].id);
        // Edited again with the same value: the same pieces.
        let mut again = Vec::new();
        pieces.message(&m, &[&edit], &mut again);
        assert_eq!(again, edited);
    }

    #[test]
    fn an_edit_whose_path_is_missing_changes_nothing() {
        let mut part = read("out");
        let before = part.clone();
        Edit { m: 0, p: 0, path: vec!["state".into(), "nope".into(), "x".into()], value: Some(json!(1)), append: None }
            .apply(&mut part);
        assert_eq!(part, before);
    }
}
