//! What range compression adds to a transform: the message id tags the agent names ranges
//! by, the summaries that replace applied ranges, and the ranges still waiting for the policy.
//!
//! The tags are edits that append to a field, sent once per message like any other edit (the
//! plugin keeps them), so a long history costs one tag edit per new message. The summaries
//! are sent in full with every answer: there are few, and they are short.

use super::protocol::{Edit, Replace};
use crate::policy;
use crate::session::Message;
use crate::state::blocks::Blocks;
use crate::strategies::compress;

/// The tag edits of `messages[from..]`.
pub(super) fn tag_edits(messages: &[Message], from: usize) -> Vec<Edit> {
    compress::tag_sites(messages, from)
        .into_iter()
        .map(|site| Edit { m: site.message, p: site.part, path: site.path, value: None, append: Some(site.text) })
        .collect()
}

/// The applied ranges: each replaces its messages with its summary.
pub(super) fn replacements(sid: &str, messages: &[Message], blocks: &Blocks) -> Vec<Replace> {
    compress::spans(messages, blocks, |b| b.applied)
        .into_iter()
        .map(|span| {
            let block = &blocks.by_id[&span.block];
            let message = compress::summary_message(sid, block, &messages[span.from]);
            Replace { from: span.from, to: span.to, message }
        })
        .collect()
}

/// The ranges waiting for the policy, with where each starts and what it costs and saves:
/// applying one rewrites the history from its first message on.
pub(super) fn pending(messages: &[Message], blocks: &Blocks, tails: &[u64]) -> Vec<(usize, u32, policy::Pending)> {
    compress::spans(messages, blocks, |b| !b.applied)
        .into_iter()
        .map(|span| {
            let tokens = blocks.by_id[&span.block].net_tokens();
            (span.from, span.block, policy::Pending { tokens, tail: tails[span.from], ..Default::default() })
        })
        .collect()
}
