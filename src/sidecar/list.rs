//! The `<prunable-tools>` list: the synthetic message `transform` appends after the history
//! of a session offered dcp's head, with a nudge when one is due. It goes only when what it
//! names anew pays for it (`crate::policy::list_pays`), and, once the agent has left a list
//! unanswered, only while the session stays within a bound of no pruning with it paid for
//! (`crate::policy::list_affordable`, by the meter's figures).

use super::protocol::{Created, Synthetic, SyntheticInfo, SyntheticPart};
use super::request::RequestContext;
use crate::policy;
use crate::session::{Message, Node, Role};
use crate::strategies::prunable;
use crate::texts;

/// The synthetic message appended after the history of a session offered dcp's head: the
/// prunable list and any nudge. `recorded`: the calls recorded since the last request, which
/// the list drops.
pub(super) fn tail_message(cx: &mut RequestContext, recorded: &[String]) -> Vec<Synthetic> {
    let (rules, messages, session) = (cx.rules, cx.mirror.messages(), &mut *cx.session);
    let tools = &rules.config().tools;
    if !tools.discard.enabled && !tools.extract.enabled {
        return Vec::new();
    }
    let listing = prunable::Listing { project: cx.project, min_tokens: tools.settings.min_tokens.into() };
    let index = &mut session.history.index;
    let Some(list) = index.prunable(messages, recorded, cx.slot.state_for_strategies().0, rules, &listing) else {
        return Vec::new();
    };
    let mut text = list.to_string();
    // The list is written uncached with every request that carries it: it goes only when the
    // calls it names that the last list sent did not would gain more, discarded, than the
    // list itself costs, and more again for each list the agent left unanswered
    // (`policy::list_pays`). What an earlier list named, the agent has seen (and can name
    // by call id). `minTokens` 0 asks for every output on every request, whatever it is worth.
    let (fresh, last) = index.listed_after(session.lists.shown);
    let answered = session.caches.agent_prunes.count(cx.slot, cx.views);
    if answered > session.lists.answered {
        (session.lists.answered, session.lists.unanswered) = (answered, 0);
    }
    let small_too = tools.settings.min_tokens == 0;
    let (list, unanswered) = (text.len().div_ceil(4) as u64, session.lists.unanswered);
    if !small_too && !policy::list_pays(cx.facts.rates, fresh, list, unanswered) {
        return Vec::new();
    }
    // An agent that left a list unanswered gets another only within the session's budget.
    let savings = &cx.slot.state().savings;
    let spent = policy::Spent { without: savings.cost_without, saved: savings.cost_saved };
    let tokens = cx.slot.tokens.count(&text);
    if !small_too && !policy::list_affordable(cx.facts.rates, tokens, unanswered, spent) {
        return Vec::new();
    }
    session.lists.shown = last;
    session.lists.unanswered = session.lists.unanswered.saturating_add(1);
    let calls = index.calls();
    if session.lists.calls_at_nudge > calls {
        session.lists.calls_at_nudge = 0;
    }
    let settings = &tools.settings;
    if settings.nudge_enabled
        && settings.nudge_frequency > 0
        && calls - session.lists.calls_at_nudge >= settings.nudge_frequency as usize
    {
        session.lists.calls_at_nudge = calls;
        let (listed, tokens) = index.listed();
        text.push('\n');
        text.push_str(&texts::nudge(listed, tokens));
    }
    vec![synthetic_message(cx.sid, messages, text)]
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
