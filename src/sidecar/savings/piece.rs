//! Where, inside the first message a rewrite changed, the cached prefix still reaches: the
//! provider reads a message as pieces, as `dcp replay` counts it (`crate::replay::pieces`):
//! the texts, reasonings and tool inputs in part order, then the tool results. A rewrite
//! changes some pieces; those in front of the first changed one are sent as they were, and
//! stay read from the cache. The meter counts a message's tokens whole, so this gives the
//! tokens of those leading pieces, as the meter counts them (each part with its edits, the
//! frame of each piece, a text's appended tags with it).

use serde_json::json;

use super::{edited_part_tokens, part_tokens};
use crate::measure::{is_ignored, FRAME_CALL};
use crate::session::{str_field, Message, Node};
use crate::sidecar::protocol::Edit;
use crate::tokens::TokenCounter;

/// One piece of a message: part `p`'s text (or reasoning), its tool input, or its tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Text(usize),
    Input(usize),
    Result(usize),
}

impl Piece {
    fn part(self) -> usize {
        match self {
            Piece::Text(p) | Piece::Input(p) | Piece::Result(p) => p,
        }
    }

    /// Whether `edit` changes this piece: an edit of a tool's input changes the input, any
    /// other edit of a tool part its result, any edit of a text part its text.
    fn edited_by(self, edit: &Edit) -> bool {
        let input = edit.path.get(1).is_some_and(|s| s == "input");
        edit.p == self.part()
            && match self {
                Piece::Text(_) => true,
                Piece::Input(_) => input,
                Piece::Result(_) => !input,
            }
    }
}

/// The pieces of `message`, in the order the provider reads them.
fn pieces(message: &Message) -> Vec<Piece> {
    let mut front = Vec::new();
    let mut results = Vec::new();
    for (p, part) in message.parts.iter().enumerate() {
        match str_field(part, "type") {
            Some("text") if !is_ignored(part) => front.push(Piece::Text(p)),
            Some("reasoning") => front.push(Piece::Text(p)),
            Some("tool") => {
                front.push(Piece::Input(p));
                results.push(Piece::Result(p));
            }
            _ => {}
        }
    }
    front.extend(results);
    front
}

/// Tokens of the pieces of `message` in front of the first one whose edits differ between
/// `before` (what the last request sent) and `now`; 0 when none differs (the change is then
/// not one of this message's edits, and the message counts as changed from its start).
pub(super) fn unchanged_in_front(message: &Message, before: &[Edit], now: &[Edit], counter: &mut TokenCounter) -> u64 {
    let of =
        |piece: Piece, edits: &[Edit]| -> Vec<Edit> { edits.iter().filter(|e| piece.edited_by(e)).cloned().collect() };
    let all = pieces(message);
    let Some(first) = all.iter().position(|&piece| of(piece, before) != of(piece, now)) else {
        return 0;
    };
    all[..first].iter().map(|&piece| piece_tokens(message, piece, &of(piece, now), counter)).sum()
}

/// One piece's tokens as sent, with its `edits`.
fn piece_tokens(message: &Message, piece: Piece, edits: &[Edit], counter: &mut TokenCounter) -> u64 {
    let Some(part) = message.parts.get(piece.part()) else { return 0 };
    let appended: u64 = edits.iter().filter_map(|e| e.append.as_deref()).map(|a| counter.count(a)).sum();
    let mut edited = part.clone();
    edits.iter().filter(|e| e.value.is_some()).for_each(|e| e.apply(&mut edited));
    let whole = match edits.iter().any(|e| e.value.is_some()) {
        true => edited_part_tokens(&edited, counter),
        false => part_tokens(part, counter),
    };
    let input = || input_tokens(&edited, counter);
    appended
        + match piece {
            Piece::Text(_) => whole,
            Piece::Input(_) => input(),
            Piece::Result(_) => whole.saturating_sub(input()),
        }
}

/// A tool part's input piece: its input in its frame (a tool that has not run is sent its
/// input alone).
fn input_tokens(part: &Node, counter: &TokenCounter) -> u64 {
    let mut running = part.clone();
    let status =
        Edit { m: 0, p: 0, path: vec!["state".into(), "status".into()], value: Some(json!("running")), append: None };
    status.apply(&mut running);
    let message = Message { info: crate::session::node::NULL.clone(), parts: vec![running] };
    crate::measure::measure(std::slice::from_ref(&message), counter).total + FRAME_CALL
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::EstimatorChoice;

    fn read(id: &str, path: &str, output: &str) -> Node {
        Node::from(json!({"id": id, "type": "tool", "callID": id, "tool": "read",
            "state": {"status": "completed", "input": {"filePath": path}, "output": output, "time": {}}}))
    }

    fn edit(p: usize, field: &str, value: &str) -> Edit {
        Edit { m: 0, p, path: vec!["state".into(), field.into()], value: Some(json!(value)), append: None }
    }

    /// A text (3 tokens by characters / 4), two reads (inputs of 5 tokens, outputs of 100).
    fn message() -> Message {
        let text = Node::from(json!({"id": "prt_0", "type": "text", "text": "let me look"}));
        let parts = vec![text, read("c1", "/a.py", &"x".repeat(400)), read("c2", "/b.py", &"y".repeat(400))];
        Message { info: Node::from(json!({"role": "assistant"})), parts }
    }

    #[test]
    fn a_pruned_output_leaves_the_texts_inputs_and_results_in_front_of_it_cached() {
        let mut counter = TokenCounter::new(EstimatorChoice::CharsDiv4);
        let m = message();
        // The text, both inputs and the first result come before the second result.
        let pruned = [edit(2, "output", "[pruned]")];
        let front = (3 + crate::measure::FRAME_TEXT) + 2 * (5 + FRAME_CALL) + (100 + crate::measure::FRAME_RESULT);
        assert_eq!(unchanged_in_front(&m, &[], &pruned, &mut counter), front);
        // A first output pruned before: its pruned result is in front, as sent.
        let both = [edit(1, "output", "[pruned]"), edit(2, "output", "[pruned]")];
        let front = (3 + crate::measure::FRAME_TEXT) + 2 * (5 + FRAME_CALL) + (2 + crate::measure::FRAME_RESULT);
        assert_eq!(unchanged_in_front(&m, &both[..1], &both, &mut counter), front);
    }

    #[test]
    fn an_edited_input_leaves_only_what_comes_before_it_and_no_change_leaves_nothing() {
        let mut counter = TokenCounter::new(EstimatorChoice::CharsDiv4);
        let m = message();
        let input = Edit {
            m: 0,
            p: 1,
            path: vec!["state".into(), "input".into(), "filePath".into()],
            value: Some(json!("/z")),
            append: None,
        };
        assert_eq!(unchanged_in_front(&m, &[], &[input], &mut counter), 3 + crate::measure::FRAME_TEXT);
        let same = [edit(2, "output", "[pruned]")];
        assert_eq!(unchanged_in_front(&m, &same, &same, &mut counter), 0);
    }
}
