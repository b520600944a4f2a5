//! What a rewrite removes ([`approx_saving`]: a call's field edits against its fields, in the
//! unit of the mirror's sizes), and those sizes kept between requests for the calls the policy
//! weighs again and again (the masking candidates, the waiting prunes), held while the message
//! a call sits in is unchanged: sizing each one anew (its placeholder, its field edits) on every
//! request would cost what waits on every request; a prune put in force is counted by the size
//! it was weighed at. An entry is dropped when its message leaves the mirror's kept prefix (an
//! edit, a compaction, a resync) or its prune's action changes.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::mirror::Mirror;
use crate::state::Action;

/// What the rewrite of the part at `at` by `action` removes, in the unit of the mirror's sizes
/// (characters / 4), which the policy weighs it against: a prune's recorded tokens are the
/// tokenizer's, and for dense text (code, CSV) they run well above characters / 4, so a rewrite
/// would look cheaper than it is.
pub(super) fn approx_saving(mirror: &Mirror, at: (usize, usize), action: &Action) -> u64 {
    let Some(part) = mirror.messages().get(at.0).and_then(|m| m.parts.get(at.1)) else { return 0 };
    let (mut before, mut after) = (0usize, 0usize);
    // Sized as the placeholder without a handle: a few characters longer than with one.
    for edit in crate::strategies::field_edits(part, action, None) {
        let old = edit.path.iter().try_fold(part, |v, key| v.get(key.as_str()));
        before += old.map_or(0, |v| chars(v.as_str()));
        after += chars(edit.value.as_str());
    }
    (before.saturating_sub(after) as u64).div_ceil(4)
}

/// Bytes of a field as the mirror counts it: a string's length (or that of the string a slim
/// marker stands for), 8 for anything else.
fn chars(v: Option<&str>) -> usize {
    v.map_or(8, crate::session::slim::bytes)
}

/// Where a part is: its message and its place in it.
type Part = (usize, usize);

/// One call's rewrite size, and what it was computed from.
#[derive(Debug)]
struct Entry {
    at: (usize, usize),
    action: Action,
    tokens: u64,
}

/// The rewrite sizes of a session's prunes, valid for the mirror's generation `seen`.
#[derive(Debug, Default)]
pub(super) struct SavingCache {
    seen: u64,
    /// By call id, shared with the index's and the prunes' view's where they hold it.
    entries: HashMap<Arc<str>, Entry>,
    /// No entry sits in a message from this one on: a resolve that kept them all drops none,
    /// without looking at each.
    past: usize,
}

impl SavingCache {
    /// Drops what the mirror's last resolve changed: the entries past its kept prefix, or
    /// all of them when resolves were missed.
    fn sync(&mut self, mirror: &Mirror) {
        if mirror.generation() == self.seen {
            return;
        }
        let kept = mirror.kept();
        if mirror.generation() != self.seen + 1 {
            self.entries.clear();
        } else if kept < self.past {
            self.entries.retain(|_, e| e.at.0 < kept);
        }
        self.past = self.past.min(kept);
        self.seen = mirror.generation();
    }

    /// [`approx_saving`] of call `id` at `at` by `action`, from the
    /// cache when the part is unchanged since it was computed.
    pub fn approx_saving(&mut self, mirror: &Mirror, id: &str, at: (usize, usize), action: &Action) -> u64 {
        self.sized(mirror, id, || Arc::from(id), (at, action))
    }

    /// [`SavingCache::approx_saving`] of call `id`, an id the index holds: a new entry shares
    /// it rather than copying the string.
    pub fn approx_saving_shared(&mut self, mirror: &Mirror, id: &Arc<str>, at: (usize, usize), action: &Action) -> u64 {
        self.sized(mirror, id, || Arc::clone(id), (at, action))
    }

    /// The size of the rewrite `how` (where, by what) of call `id`; `key` makes the key of a
    /// new entry.
    fn sized(&mut self, mirror: &Mirror, id: &str, key: impl FnOnce() -> Arc<str>, how: (Part, &Action)) -> u64 {
        let (at, action) = how;
        self.sync(mirror);
        if let Some(e) = self.entries.get(id).filter(|e| e.at == at && e.action == *action) {
            return e.tokens;
        }
        let tokens = approx_saving(mirror, at, action);
        self.entries.insert(key(), Entry { at, action: action.clone(), tokens });
        self.past = self.past.max(at.0 + 1);
        tokens
    }

    /// The call ids the cache holds sizes for.
    #[cfg(test)]
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entries.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Message, Node};
    use crate::tokens::{EstimatorChoice, TokenCounter};
    use dcp_testkit::gen::{self, SessionSpec};

    /// The test kit's messages are its own build of the crate's type: they cross as JSON.
    fn ours(messages: &impl serde::Serialize) -> Vec<Message> {
        serde_json::from_value(serde_json::to_value(messages).unwrap()).unwrap()
    }

    fn wire(messages: &[Message]) -> Vec<Node> {
        messages.iter().map(|m| Node::from(serde_json::to_value(m).unwrap())).collect()
    }

    /// The actions a prune can take on a tool part, picked by position so each step sizes
    /// every kind.
    fn action_for(mi: usize, pi: usize) -> Action {
        match (mi + pi) % 4 {
            0 => Action::Mask,
            1 => Action::Output,
            2 => Action::MaskInputs,
            _ => Action::Distill { distillation: format!("what message {mi} found") },
        }
    }

    /// Sizes every tool part of the mirror both ways; returns how many sized above zero.
    fn compare(cache: &mut SavingCache, mirror: &Mirror, step: usize) -> usize {
        let mut nonzero = 0;
        for (mi, message) in mirror.messages().iter().enumerate() {
            for (pi, part) in message.parts.iter().enumerate() {
                let Some(id) = part.get("callID").and_then(Node::as_str) else { continue };
                let action = action_for(mi, pi);
                let expected = approx_saving(mirror, (mi, pi), &action);
                assert_eq!(cache.approx_saving(mirror, id, (mi, pi), &action), expected, "step {step}: {id}");
                nonzero += usize::from(expected > 0);
            }
        }
        nonzero
    }

    /// Makes the output of the last tool part of `message` longer, as an edit would.
    fn edit(message: &mut Message) {
        let Some(part) = message.parts.iter_mut().rev().find(|p| p.get("callID").is_some()) else { return };
        let mut value = serde_json::to_value(&*part).unwrap();
        if let Some(output) = value.pointer_mut("/state/output") {
            *output = serde_json::Value::String(format!("{}{}", output.as_str().unwrap_or(""), "edited ".repeat(400)));
        }
        *part = Node::from(value);
    }

    #[test]
    fn cached_sizes_equal_sizes_from_scratch_over_a_session_with_edits_resyncs_and_slimming() {
        let session = gen::session(&SessionSpec { messages: 120, steps: 45, seed: 7 });
        let mut counter = TokenCounter::new(EstimatorChoice::Auto);
        let (mut mirror, mut cache) = (Mirror::default(), SavingCache::default());
        let mut messages = ours(&session.messages);
        mirror.resolve(0, wire(&messages)).unwrap();
        let mut nonzero = compare(&mut cache, &mirror, 0);
        for (step, new) in session.steps.iter().enumerate().map(|(i, s)| (i + 1, s)) {
            let sent = messages.len();
            messages.extend(ours(new));
            // Every fifth step edits an old message; every seventh resolves twice, as a request
            // the cache never saw; every ninth resends the whole history.
            let base = match step {
                s if s % 5 == 0 => {
                    let at = sent - 3;
                    edit(&mut messages[at]);
                    at
                }
                s if s % 9 == 0 => 0,
                _ => sent,
            };
            if step % 7 == 0 {
                mirror.resolve(base, wire(&messages[base..])).unwrap();
            }
            mirror.resolve(base.min(mirror.messages().len()), wire(&messages[base..])).unwrap();
            // What the sidecar's count ahead does to new messages between requests.
            for mi in sent..messages.len() {
                for pi in 0..messages[mi].parts.len() {
                    mirror.slim_part(mi, pi, &mut counter);
                }
            }
            nonzero += compare(&mut cache, &mirror, step);
        }
        assert!(nonzero > 1000, "the sizes compared were mostly zero: {nonzero}");
    }
}
