//! What a speculative request still has to send once the engine has answered: the part of
//! the final body after the bytes sent ahead, when the final body starts with them.
//!
//! The bytes sent ahead are the client's bytes up to an offset, with the last body's
//! rewritten items in their places. When the final body's layout is known (the items the
//! engine's edits rewrite, [`Layout`]), it starts with them exactly when it rewrites the same
//! items, to the same bytes, before that offset: a comparison of the rewritten items, not of
//! the megabytes around them, and only the pieces past the bytes sent are made ([`rest`]).
//! Without a layout, the bytes are compared ([`after`]).

use bytes::Bytes;

use super::conversation::{same_memory, Layout};

/// What a speculative request sent: under which layout, how many client bytes it covers,
/// and the bytes themselves.
pub struct Ahead<'a> {
    pub layout: &'a Layout,
    pub produced: usize,
    pub sent: &'a [Bytes],
}

/// What follows the bytes sent ahead in the body `new` lays out, when it starts with them:
/// only the pieces past them are made.
pub fn rest(new: &Layout, ahead: &Ahead<'_>) -> Option<Vec<Bytes>> {
    let quick = same_items(ahead, new).then(|| new.pieces_from(ahead.sent.iter().map(Bytes::len).sum())).flatten();
    debug_assert!(
        quick.is_none() || quick.as_ref().map(|r| r.concat()) == after(&new.pieces(), ahead.sent).map(|r| r.concat()),
        "the layouts agree only where the bytes do"
    );
    quick
}

/// Whether `new` rewrites, before the client offset sent ahead, the items the bytes sent
/// ahead have rewritten (the same items, spans and bytes), and no other.
fn same_items(ahead: &Ahead<'_>, new: &Layout) -> bool {
    let (old_spans, new_spans) = (&ahead.layout.head.raw.spans, &new.head.raw.spans);
    let sent = ahead.layout.items.iter().filter(|(i, _)| old_spans[*i].1 <= ahead.produced);
    let due = new.items.iter().filter(|(i, _)| new_spans.get(*i).is_some_and(|s| s.0 < ahead.produced));
    let sent = sent.map(|(i, item)| (*i, old_spans[*i], Same(item)));
    sent.eq(due.map(|(i, item)| (*i, new_spans[*i], Same(item))))
}

/// An item's bytes, equal to another's when they are the same bytes in memory (an item the
/// engine's unchanged edits left as written) or hold the same bytes.
#[derive(Debug)]
struct Same<'a>(&'a Bytes);

impl PartialEq for Same<'_> {
    fn eq(&self, other: &Self) -> bool {
        same_memory(self.0, other.0) || self.0 == other.0
    }
}

/// What follows `sent` in `body` (both in pieces), when `body` starts with it.
pub fn after(body: &[Bytes], sent: &[Bytes]) -> Option<Vec<Bytes>> {
    let (mut piece, mut at) = (0, 0);
    for s in sent {
        let mut s = &s[..];
        while !s.is_empty() {
            let current = body.get(piece)?;
            let n = s.len().min(current.len() - at);
            if current[at..at + n] != s[..n] {
                return None;
            }
            s = &s[n..];
            at += n;
            if at == current.len() {
                (piece, at) = (piece + 1, 0);
            }
        }
    }
    let mut rest: Vec<Bytes> = body.get(piece).map(|p| p.slice(at..)).into_iter().collect();
    rest.extend(body.iter().skip(piece + 1).cloned());
    Some(rest)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::proxy::convert::Api;
    use crate::proxy::raw::{Head, Raw};

    fn pieces(parts: &[&'static str]) -> Vec<Bytes> {
        parts.iter().map(|p| Bytes::from_static(p.as_bytes())).collect()
    }

    #[test]
    fn the_rest_of_a_body_is_what_follows_the_bytes_sent_however_both_are_cut() {
        let body = pieces(&["{\"a\": ", "[1, 2]", ", \"b\": 3}"]);
        let rest = after(&body, &pieces(&["{\"a\"", ": [1", ","])).unwrap();
        assert_eq!(rest.concat(), b" 2], \"b\": 3}");
        assert_eq!(after(&body, &body).unwrap().concat(), b"");
    }

    #[test]
    fn a_body_that_differs_in_one_byte_sent_or_is_shorter_than_what_was_sent_has_no_rest() {
        let body = pieces(&["{\"a\": ", "[1, 2]", ", \"b\": 3}"]);
        assert!(after(&body, &pieces(&["{\"a\": [1, 3]"])).is_none(), "same length, one byte differs");
        assert!(after(&body, &pieces(&["{\"a\": [1, 2], \"b\": 3}  "])).is_none(), "more sent than the body has");
    }

    /// A three-item body, and its layout with `items` rewritten to `new {i}`.
    fn layout(items: &[usize]) -> Layout {
        let body = Bytes::from_static(br#"{"messages": [{"a": 0}, {"a": 1}, {"a": 2}], "z": 1}"#);
        let raw = Raw::read(Api::Chat, &body).unwrap().unwrap();
        let items = items.iter().map(|&i| (i, Bytes::from(format!("{{\"new\": {i}}}")))).collect();
        Layout::new(Arc::new(Head { api: Api::Chat, body, raw }), Arc::new(items))
    }

    #[test]
    fn a_body_that_rewrites_the_items_sent_ahead_alike_has_the_rest_the_bytes_give_and_any_other_none() {
        let old = layout(&[1]);
        let produced = old.head.raw.spans[1].1;
        let sent = old.pieces().concat();
        let sent = [Bytes::from(sent[..sent.len() - (old.head.body.len() - produced)].to_vec())];
        let ahead = Ahead { layout: &old, produced, sent: &sent };
        for (items, kept) in
            [(vec![1], true), (vec![1, 2], true), (vec![0, 1], false), (vec![], false), (vec![2], false)]
        {
            let new = layout(&items);
            let body = new.pieces();
            let quick = rest(&new, &ahead).map(|r| r.concat());
            assert_eq!(quick.is_some(), kept, "{items:?}");
            assert_eq!(quick, after(&body, &sent).map(|r| r.concat()), "{items:?}: as the bytes say");
        }
        let mut other = layout(&[1]);
        Arc::make_mut(&mut other.items)[0].1 = Bytes::from_static(br#"{"new": 9}"#);
        assert!(rest(&other, &ahead).is_none(), "the item's bytes differ");
    }
}
