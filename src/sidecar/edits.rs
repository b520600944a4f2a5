//! The edits of an answer: what the plugin (or the proxy's engine) holds of a session's
//! edits, and what an answer sends of them. The plugin keeps the edits of the last answer it
//! got; an answer that follows it sends only the edits of the prunes put in force since (read
//! from the slot's changes, [`crate::state::store::Slot::changes`]), or none, and any other
//! sends every edit in force. When OpenCode sent again messages the plugin's edits point at
//! (on every request: the message being written), the plugin keeps the edits of the messages
//! before them and theirs are sent anew, so that an answer costs what changed, not the
//! history. The message id tags ([`ranges`]) are sent once per message.

use rustc_hash::FxHashSet as HashSet;

pub(super) mod sent;

use self::sent::{EditsBasis, ResentEdits};
use super::in_force::Views;
use super::protocol::{Edit, EditsAnswer};
use super::ranges;
use super::request::RequestContext;
use crate::session::Message;
use crate::state::{PruneRecord, SessionState};
use crate::strategies;
use crate::texts::restore::Via;

/// The edits of this answer, and its number. The plugin keeps the edits of the last answer
/// it got. If it has those of the last answer sent and no prune was dropped since, only new
/// edits are sent, or none; when OpenCode changed messages those edits point at (it re-sends
/// the message being written), the plugin keeps those of the messages before and the changed
/// messages' edits come anew ([`EditsAnswer::Keep`]). With `tags` (the first message to tag,
/// [`ranges::tags`]), every message from it on gets its id tag, once.
pub(super) fn answer_edits(cx: &mut RequestContext, tags: Option<usize>) -> (u64, EditsAnswer) {
    let (session, slot, mirror, have) = (&mut *cx.session, &*cx.slot, cx.mirror, cx.facts.have);
    let messages = mirror.messages();
    let basis =
        EditsBasis { revision: slot.revision(), resets: slot.resets(), messages: messages.len(), via: cx.restore };
    let sent = &mut session.edits;
    // The messages from `kept` on changed since the edits the plugin holds were sent.
    let kept = mirror.kept();
    // A plugin of protocol 1 cannot keep part of its edits: it is sent them whole.
    let keeps = |b: &EditsBasis| cx.resent == ResentEdits::KeepBefore || kept >= b.messages;
    let follows = have == Some(sent.seq)
        && sent.basis.is_some_and(|b| b.resets == basis.resets && b.via == basis.via && keeps(&b));
    let cut = sent.basis.filter(|b| follows && kept < b.messages).map(|_| kept);
    session.about.present = super::describe::Tags::present(tags, messages.len(), &slot.state().blocks);
    let sent_tags = if follows { sent.tags.min(cut.unwrap_or(messages.len())) } else { 0 };
    let tags_from = tags.map_or(messages.len(), |first| sent_tags.max(first));
    let new_tags = tags_from < messages.len();
    if follows && cut.is_none() && !new_tags && sent.basis.is_some_and(|b| b.revision == basis.revision) {
        return (sent.seq, EditsAnswer::Same);
    }
    let index = &session.history.index;
    if !follows {
        sent.calls.clear();
    }
    // The calls of the changed messages have their edits found again.
    let changed_calls = cut.map(|from| index.call_ids_from(from)).unwrap_or_default();
    changed_calls.iter().for_each(|id| _ = sent.calls.remove(id.as_str()));
    let position = |id: &str| index.position(id);
    // Following the last answer, only what was put in force since can add edits.
    let pruned = &slot.state().pruned;
    let since = (follows && cx.views == Views::Kept).then(|| slot.changes_since(sent.changes)).flatten();
    let handles = Handles { state: slot.state(), via: cx.restore };
    let mut edits = match since {
        Some(changes) => {
            let ids = changes.iter().chain(&changed_calls);
            let changed = ids.filter_map(|id| pruned.get_key_value(id.as_str()));
            edits_for(messages, position, changed, handles, &mut sent.calls)
        }
        None => edits_for(messages, position, pruned.iter(), handles, &mut sent.calls),
    };
    sent.changes = slot.changes_mark();
    if tags.is_some() {
        edits.extend(ranges::tag_edits(messages, tags_from));
        sent.tags = messages.len();
    }
    sent.seq += 1;
    sent.basis = Some(basis);
    let answer = match (follows, cut) {
        (false, _) => EditsAnswer::Full(edits),
        (true, None) => EditsAnswer::Add(edits),
        (true, Some(before)) => EditsAnswer::Keep { before, add: edits },
    };
    (sent.seq, answer)
}

/// Where the placeholders of a session's edits take their handles from: the agent-facing ids
/// of `state`, and how the agent restores (none: no handles).
#[derive(Clone, Copy)]
pub(super) struct Handles<'a> {
    pub state: &'a SessionState,
    pub via: Option<Via>,
}

/// The edits that bring `messages` to what the model should see, for every applied prune of
/// `prunes` whose call is not in `sent` yet; `sent` gains them. With an empty `sent` and every
/// prune, every prune in force. `position` finds a call's message and part. Edits come in
/// history order.
pub(super) fn edits_for<'a>(
    messages: &[Message],
    position: impl Fn(&str) -> Option<(usize, usize)>,
    prunes: impl Iterator<Item = (&'a String, &'a PruneRecord)>,
    handles: Handles<'_>,
    sent: &mut HashSet<String>,
) -> Vec<Edit> {
    let mut new: Vec<((usize, usize), &str, &PruneRecord)> = Vec::new();
    for (id, record) in prunes.filter(|(_, r)| r.applied) {
        if sent.contains(id.as_str()) {
            continue;
        }
        // A prune of a call not in the history has no edit; it is not looked for again.
        sent.insert(id.clone());
        if let Some(at) = position(id) {
            new.push((at, id, record));
        }
    }
    new.sort_unstable_by_key(|(at, _, _)| *at);
    let mut edits = Vec::new();
    for ((m, p), id, record) in new {
        let Some(part) = messages.get(m).and_then(|msg| msg.parts.get(p)) else { continue };
        let handle = strategies::handle_of(handles.state, id, handles.via);
        for e in strategies::field_edits(part, &record.action, handle) {
            edits.push(Edit { m, p, path: e.path, value: Some(e.value), append: None });
        }
    }
    edits
}
