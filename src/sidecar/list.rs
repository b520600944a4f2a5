//! The `<prunable-tools>` list at the tail of a request: which calls the agent may discard or
//! extract, by small ids, and a nudge when many outputs piled up. It is written uncached with
//! every request that carries it, so it goes only when what it names anew (beyond the last
//! list sent) is worth more than the list itself (`crate::policy::list_pays`); the agent can
//! name any call by its tool call id without it.

use super::protocol::{Created, Synthetic, SyntheticInfo, SyntheticPart};
use super::Session;
use crate::policy;
use crate::session::{Message, Node, Role};
use crate::state::store::Slot;
use crate::strategies::{prunable, Rules};
use crate::texts;

/// The synthetic message appended after the history: the prunable list and any nudge.
pub(super) fn tail_message(
    rules: &Rules,
    project: Option<&str>,
    session: &mut Session,
    slot: &mut Slot,
    sid: &str,
    messages: &[Message],
    offered: bool,
) -> Vec<Synthetic> {
    let recorded = slot.take_recorded();
    let tools = &rules.config().tools;
    if !offered || (!tools.discard.enabled && !tools.extract.enabled) {
        return Vec::new();
    }
    let listing = prunable::Listing { project, min_tokens: tools.settings.min_tokens.into() };
    let index = &mut session.index;
    let Some(list) = index.prunable(messages, &recorded, &mut slot.state, rules, &listing) else {
        return Vec::new();
    };
    let mut text = list.to_string();
    // The list is written uncached with every request that carries it: it goes only when the
    // calls it names that the last list sent did not would save more on each request, pruned,
    // than the list itself costs. What an earlier list named, the agent has seen (and can name
    // by call id). `minTokens` 0 asks for every output on every request, whatever it is worth.
    let (fresh, last) = index.listed_after(session.list_shown);
    let small_too = tools.settings.min_tokens == 0;
    if !small_too && !policy::list_pays(fresh, text.len().div_ceil(4) as u64) {
        return Vec::new();
    }
    session.list_shown = last;
    let calls = index.calls();
    if session.calls_at_nudge > calls {
        session.calls_at_nudge = 0;
    }
    let settings = &tools.settings;
    if settings.nudge_enabled
        && settings.nudge_frequency > 0
        && calls - session.calls_at_nudge >= settings.nudge_frequency as usize
    {
        session.calls_at_nudge = calls;
        let (listed, tokens) = index.listed();
        text.push('\n');
        text.push_str(&texts::nudge(listed, tokens));
    }
    vec![synthetic_message(sid, messages, text)]
}

/// The user message that carries `text` after the history, with the agent and model of the
/// last user message.
fn synthetic_message(sid: &str, messages: &[Message], text: String) -> Synthetic {
    const MESSAGE_ID: &str = "msg_dcp_prunable_tools";
    let last_user = messages.iter().rev().find(|m| m.role() == Role::User);
    let field = |key: &str| last_user.and_then(|m| m.info.get(key)).map(Node::to_value);
    let info = SyntheticInfo {
        id: MESSAGE_ID,
        session_id: sid.to_string(),
        role: "user",
        time: Created { created: messages.last().map_or(0, Message::time_created) },
        agent: field("agent"),
        model: field("model"),
    };
    let part = SyntheticPart {
        id: "prt_dcp_prunable_tools",
        session_id: sid.to_string(),
        message_id: MESSAGE_ID,
        kind: "text",
        text,
        synthetic: true,
    };
    Synthetic { info, parts: vec![part] }
}
