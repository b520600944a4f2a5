//! Where each compressed range stands in a session's mirror of its history ([`SpanCache`]):
//! found by reading every message id, so kept between requests and found again only when the
//! ranges changed or a message it read changed, or came back after a revert. A part of the
//! live session (`super::super::live`), which [`super`] and the savings read.

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashSet, FxHasher};

use crate::sidecar::in_force::Views;
use crate::sidecar::mirror::Mirror;
use crate::state::blocks::{Block, Blocks};
use crate::strategies::compress::{self, Span};

/// The spans of a session's active ranges in its mirror's history, as
/// [`compress::spans`] finds them, kept between requests.
#[derive(Debug, Default)]
pub(in crate::sidecar) struct SpanCache {
    basis: Option<SpanBasis>,
    /// The spans of every active range, in history order.
    spans: Vec<Span>,
    /// The hashes of the ids of the messages the active ranges name: a new message that is
    /// one of them (a revert undone) moves a span.
    members: FxHashSet<u64>,
}

/// What the spans were found from: the ranges, and the mirror's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpanBasis {
    ranges: u64,
    generation: u64,
    messages: usize,
}

impl SpanCache {
    /// The spans of the active ranges of `blocks` that `include` accepts, in `mirror`'s
    /// history (`resets`: the slot's, which a merge of another process's ranges moves), in
    /// history order: [`compress::spans`], found again only when the ranges changed, a message
    /// read before changed, or a new message is one a range names. With [`Views::Rebuilt`],
    /// found again every time.
    pub fn spans(
        &mut self,
        mirror: &Mirror,
        (blocks, resets): (&Blocks, u64),
        views: Views,
        include: impl Fn(&Block) -> bool,
    ) -> Vec<Span> {
        let ranges = fingerprint(blocks, resets);
        let messages = mirror.messages();
        let kept = self.basis.filter(|b| views == Views::Kept && b.ranges == ranges).is_some_and(|b| {
            b.generation == mirror.generation()
                || (b.generation + 1 == mirror.generation()
                    && mirror.kept() >= b.messages
                    && !messages[b.messages.min(messages.len())..].iter().any(|m| self.members.contains(&hash(m.id()))))
        });
        if !kept {
            if self.basis.is_none_or(|b| b.ranges != ranges) {
                let named = blocks.active().flat_map(|b| &b.effective_messages);
                self.members = named.map(|id| hash(id)).collect();
            }
            self.spans = compress::spans(messages, blocks, |_| true);
        }
        self.basis = Some(SpanBasis { ranges, generation: mirror.generation(), messages: messages.len() });
        self.spans.iter().filter(|s| blocks.by_id.get(&s.block).is_some_and(&include)).copied().collect()
    }
}

fn hash(text: &str) -> u64 {
    let mut h = FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

/// What tells one set of ranges from another without reading the messages they name: each
/// range's id, state and the number, first and last of its messages (a range's messages are
/// set when it is made; a merge that could change them moves `resets`).
fn fingerprint(blocks: &Blocks, resets: u64) -> u64 {
    let mut h = FxHasher::default();
    (resets, blocks.by_id.len()).hash(&mut h);
    for b in blocks.by_id.values() {
        let ends = (b.effective_messages.first(), b.effective_messages.last());
        (b.id, b.active, b.applied, b.effective_messages.len(), ends).hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Node;
    use dcp_testkit::gen::{self, SessionSpec};

    /// The test kit's messages are its own build of the crate's type: they cross as JSON.
    fn wire(messages: &impl serde::Serialize) -> Vec<Node> {
        let values: Vec<serde_json::Value> = serde_json::from_value(serde_json::to_value(messages).unwrap()).unwrap();
        values.into_iter().map(Node::from).collect()
    }

    /// A range over the messages with ids `ids`, applied or waiting.
    fn range(id: u32, ids: &[String], applied: bool) -> Block {
        Block { id, active: true, applied, effective_messages: ids.to_vec(), ..Block::default() }
    }

    #[test]
    fn the_spans_kept_between_requests_are_those_found_from_every_message() {
        let session = gen::session(&SessionSpec { messages: 200, steps: 40, seed: 3 });
        let history = wire(&session.messages);
        let steps: Vec<Vec<Node>> = session.steps.iter().map(wire).collect();
        let ids: Vec<String> = history
            .iter()
            .chain(steps.iter().flatten())
            .map(|m| m["info"]["id"].as_str().unwrap().to_string())
            .collect();
        let (mut mirror, mut cache, mut blocks) = (Mirror::default(), SpanCache::default(), Blocks::default());
        blocks.insert(range(1, &ids[10..30], true), []);
        blocks.insert(range(2, &ids[40..45], false), []);
        // Ranges that name messages still to come, and one that a revert cuts and its undoing
        // brings back.
        blocks.insert(range(3, &ids[195..215], true), []);
        blocks.insert(range(4, &ids[220..226], false), []);
        let mut sent = history.clone();
        mirror.resolve(0, history).unwrap();
        let (mut checked, mut reverted) = (0, Vec::new());
        for (i, step) in steps.iter().enumerate() {
            // Every sixth request reverts the last two messages, and the next one undoes it.
            let base = match i % 6 {
                5 => sent.len() - 2,
                4 => sent.len() - 3,
                _ => sent.len(),
            };
            sent.append(&mut reverted);
            sent.extend(step.iter().cloned());
            if i % 6 == 5 {
                reverted = sent.split_off(sent.len() - 2);
            }
            if i == 12 {
                blocks.insert(range(5, &ids[100..120], false), []);
            }
            if i == 20 {
                blocks.by_id.get_mut(&2).unwrap().applied = true;
            }
            if i == 30 {
                blocks.decompress(1);
            }
            let resolved_base = base.min(sent.len());
            mirror.resolve(resolved_base, sent[resolved_base..].to_vec()).unwrap();
            for include in [(|_: &Block| true) as fn(&Block) -> bool, |b| b.applied, |b| !b.applied] {
                let kept = cache.spans(&mirror, (&blocks, 0), Views::Kept, include);
                assert_eq!(kept, compress::spans(mirror.messages(), &blocks, include), "request {i}");
                checked += kept.len();
            }
        }
        assert!(checked > 200, "the ranges had spans to compare ({checked})");
    }
}
