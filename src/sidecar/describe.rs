//! `describe`: what the agent tools' descriptions say, so that they name only ids the model
//! can see in the request.
//!
//! `compress` takes a range's ends by tool call id, and by the id tags that ride at the end of
//! messages (`<m12>`, once the history reaches `tools.compress.tagsFrom`) and of compressed
//! ranges (`<b3>`). Its description names a kind of tag only once the session's requests carry
//! one ([`Tags`]). OpenCode resolves a request's tools before its messages are transformed, so
//! the plugin asks `describe` from its `tool.definition` hook, and what it answers rests on the
//! session's last request.
//!
//! A description sits at the head of every request, before the whole cached prompt: changing
//! it re-bills all of it. So it changes only when that is free, on a request after the
//! provider's cache went cold (or the session's first in this process), or when it would
//! otherwise name something the request lacks ([`described`]). A kind of tag that appears in a
//! warm run is used unnamed until the next cold request: the description never says what is
//! not there, at the price of saying late what is.

/// The kinds of id tag a session's request carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tags {
    /// `<mN>` at the end of messages.
    pub messages: bool,
    /// `<bN>` at the end of a compressed range's message.
    pub ranges: bool,
}

impl Tags {
    /// The tags of a request of `messages` messages, those from `tagged` on carrying their
    /// `<mN>` (`super::ranges::tags`), with the ranges in force of `blocks`.
    pub(super) fn present(tagged: Option<usize>, messages: usize, blocks: &crate::state::blocks::Blocks) -> Tags {
        Tags { messages: tagged.is_some_and(|first| first < messages), ranges: blocks.active().any(|b| b.applied) }
    }
}

/// The tags the description of a session names from now on: `current` (none: not described
/// yet in this process) while the cache is warm, unless it names a kind `present` lacks; what
/// is `present` when the cache is `cold`, for then the whole prompt is written anyway.
pub fn described(current: Option<Tags>, present: Tags, cold: bool) -> Tags {
    match current {
        Some(c) if !cold && !(c.messages && !present.messages) && !(c.ranges && !present.ranges) => c,
        _ => present,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Tags = Tags { messages: false, ranges: false };
    const M: Tags = Tags { messages: true, ranges: false };
    const MB: Tags = Tags { messages: true, ranges: true };

    #[test]
    fn a_tag_that_appears_in_a_warm_run_is_named_only_once_the_cache_is_cold() {
        assert_eq!(described(Some(NONE), M, false), NONE, "warm: the head stays as it was");
        assert_eq!(described(Some(NONE), M, true), M, "cold: the head is written anyway");
        assert_eq!(described(None, M, false), M, "first described in this process");
    }

    #[test]
    fn a_description_that_names_a_tag_the_request_lacks_changes_at_once() {
        assert_eq!(described(Some(MB), M, false), M, "the ranges' tags went (a range undone)");
        assert_eq!(described(Some(M), MB, false), M, "a range's tag that came stays unnamed while warm");
    }
}
