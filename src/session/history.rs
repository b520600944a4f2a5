//! History order and compaction filtering, as OpenCode applies them before a model request.
//!
//! OpenCode's ids embed a 48-bit clock that wrapped on 2026-08-14, so newer ids sort before
//! older ones: history is ordered by `time_created`, then by id. After a compaction only the
//! newest summary and what follows it reach the model; the CLI uses [`visible_history`] to see
//! the same messages the plugin would be handed.

use super::{str_field, Message, Node, Role};

/// The suffix of `messages` (already in history order) that OpenCode sends to the model: from
/// the user message that asked for the newest completed compaction, onwards. A compaction part
/// with `tail_start_id` also keeps the messages from that id up to the compaction request.
pub fn visible_history(messages: Vec<Message>) -> Vec<Message> {
    let start = visible_start(&messages);
    messages.into_iter().skip(start).collect()
}

/// Where [`visible_history`] starts in `messages`: 0 when no compaction completed.
pub fn visible_start(messages: &[Message]) -> usize {
    let Some(summary) =
        messages.iter().rposition(|m| m.is_compaction_summary() && m.info.get("finish").is_some_and(|f| !f.is_null()))
    else {
        return 0;
    };
    let parent = str_field(&messages[summary].info, "parentID").unwrap_or("");
    let Some(request) = messages[..summary].iter().rposition(|m| m.role() == Role::User && m.id() == parent) else {
        return 0;
    };
    let tail_start = messages[request].parts.iter().find_map(|p| {
        (str_field(p, "type") == Some("compaction")).then(|| p.get("tail_start_id").and_then(Node::as_str)).flatten()
    });
    tail_start.and_then(|id| messages[..request].iter().position(|m| m.id() == id)).unwrap_or(request)
}
