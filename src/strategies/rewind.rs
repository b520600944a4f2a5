//! A rewound history: the prunes and ranges whose reason is no longer in it.
//!
//! A client may cut its history back and go on from an earlier point (Claude Code's rewind,
//! OpenCode's revert and `/undo`), or change it before its end. A prune whose reason is a later
//! call holds only while that call is in the request: an output deduplicated by a newer
//! identical call, a write superseded by a later read of its file, an error purged after
//! turns that are no longer there, an output masked because newer calls pushed it beyond
//! the window, a finished turn's range once the prompt that finished it is gone, a compressed
//! range over messages no longer there. What the agent pruned with its own tools, and what
//! the person swept, stay: their reason is not a call of the history.
//!
//! The calls of the branch the history left are not in it; their prunes have no edit, and
//! they are left as they are.

use std::collections::HashSet;

use super::{dedup, masking, purge_errors, Rules};
use crate::session::{starts_turn, History, Message, ToolCall, ToolStatus};
use crate::state::blocks::{Blocks, Origin};
use crate::state::{SessionState, Strategy};

/// The calls of `history` whose prunes in `state` no longer have their reason in it, in id
/// order.
pub fn stale_prunes(history: &History<'_>, state: &SessionState, rules: &Rules) -> Vec<String> {
    let at: std::collections::HashMap<&str, usize> =
        history.calls.iter().enumerate().map(|(i, c)| (c.call_id, i)).collect();
    let window = masking::window_start(history, rules, masking::Window::OnRewrite);
    let mut out = Vec::new();
    for (id, record) in &state.pruned {
        let Some(&i) = at.get(id.as_str()) else { continue };
        let (call, later) = (&history.calls[i], &history.calls[i + 1..]);
        let holds = match record.strategy {
            Strategy::Deduplication => duplicated(call, later, rules),
            Strategy::SupersedeWrites => later.iter().any(|c| reads(c, call.file_path())),
            Strategy::PurgeErrors => purge_errors::ready_at(call, rules) <= history.current,
            Strategy::Masking => i < window,
            _ => true,
        };
        if !holds {
            out.push(id.clone());
        }
    }
    out
}

/// Whether a later call of `later` repeats `call`, as deduplication compares them.
fn duplicated(call: &ToolCall<'_>, later: &[ToolCall<'_>], rules: &Rules) -> bool {
    let signature = dedup::signature_hash(call.tool, call.input());
    later.iter().any(|c| dedup::eligible(c, rules) && dedup::signature_hash(c.tool, c.input()) == signature)
}

/// Whether `call` is a completed read of file `path`.
fn reads(call: &ToolCall<'_>, path: Option<&str>) -> bool {
    call.tool == "read" && call.status == ToolStatus::Completed && path.is_some() && call.file_path() == path
}

/// The active ranges of `blocks` whose reason is not in `messages`: a range over a message no
/// longer there, a finished turn's range with no turn started after it.
pub fn stale_blocks(messages: &[Message], blocks: &Blocks) -> Vec<u32> {
    let place: std::collections::HashMap<&str, usize> = messages.iter().enumerate().map(|(i, m)| (m.id(), i)).collect();
    let starts: Vec<usize> = (0..messages.len()).filter(|&i| starts_turn(messages, i)).collect();
    let mut out = Vec::new();
    for block in blocks.active() {
        let places: Option<HashSet<usize>> =
            block.effective_messages.iter().map(|m| place.get(m.as_str()).copied()).collect();
        let holds = match places.as_ref().and_then(|p| p.iter().max()) {
            None => false,
            Some(&last) => block.origin != Origin::FinishedTurn || starts.iter().any(|&s| s > last),
        };
        if !holds {
            out.push(block.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Action, PruneRecord};
    use serde_json::json;

    /// A prompt, then one step per `(call id, tool, input)`, each with its own output.
    fn session(calls: &[(&str, &str, serde_json::Value)]) -> Vec<Message> {
        let user = json!({"id": "m0", "role": "user"});
        let mut out = vec![Message::from_values(user, vec![json!({"type": "text", "text": "go"})])];
        for (i, (call, tool, input)) in calls.iter().enumerate() {
            let state = json!({"status": "completed", "input": input, "output": format!("{call} ").repeat(400)});
            let part = json!({"type": "tool", "callID": call, "tool": tool, "state": state});
            out.push(Message::from_values(json!({"id": format!("m{}", i + 1), "role": "assistant"}), vec![part]));
        }
        out
    }

    fn pruned(strategy: Strategy, ids: &[&str]) -> SessionState {
        let mut state = SessionState::default();
        for id in ids {
            let record =
                PruneRecord { strategy, action: Action::Output, tokens: 10, tool: "read".into(), applied: true };
            state.record(id, record);
        }
        state
    }

    #[test]
    fn a_prune_holds_only_while_the_later_call_that_is_its_reason_is_in_the_history() {
        let rules = Rules::new(crate::config::Config::default()).unwrap();
        let read = |p: &str| json!({"filePath": p});
        let mut calls = vec![("r0", "read", read("/p/main.rs"))];
        calls.extend((1..9).map(|i| {
            (["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"][i - 1], "grep", json!({"pattern": format!("p{i}")}))
        }));
        calls.push(("r9", "read", read("/p/main.rs")));
        let whole = session(&calls);
        let dedup = pruned(Strategy::Deduplication, &["r0"]);
        assert!(stale_prunes(&History::new(&whole), &dedup, &rules).is_empty(), "r9 repeats r0");
        let rewound = &whole[..2];
        assert_eq!(stale_prunes(&History::new(rewound), &dedup, &rules), ["r0"], "r9 is gone");
        let masked = pruned(Strategy::Masking, &["r0", "g1"]);
        assert!(stale_prunes(&History::new(&whole), &masked, &rules).is_empty());
        assert_eq!(stale_prunes(&History::new(rewound), &masked, &rules), ["r0"], "r0 is the newest output again");
        let write = [("w0", "write", json!({"filePath": "/p/a.rs", "content": "x"})), ("r1", "read", read("/p/a.rs"))];
        let superseded = pruned(Strategy::SupersedeWrites, &["w0"]);
        assert!(stale_prunes(&History::new(&session(&write)), &superseded, &rules).is_empty());
        assert_eq!(stale_prunes(&History::new(&session(&write[..1])), &superseded, &rules), ["w0"]);
        let discarded = pruned(Strategy::Discard, &["r0"]);
        assert!(stale_prunes(&History::new(rewound), &discarded, &rules).is_empty(), "the agent's own prune stays");
    }
}
