//! What the last request of a conversation sent upstream ([`Layout`]): its client body, the
//! items written anew in it, and, once it has gone whole, the upstream body in the frames it
//! went as ([`Sent`]).
//!
//! A request that continues the body sends ahead, while its own body arrives, the bytes the
//! last upstream body had for the part they share. Where that body is kept whole, those
//! bytes are slices of its frames, found by the client offset they cover: no rewritten item
//! is copied or looked at again but to step over its span.

use std::sync::Arc;

use bytes::Bytes;

use crate::proxy::raw::Head;

/// What the last request of a conversation sent upstream: its client body and the items
/// written anew in it (the rest of the upstream body is the client's bytes), and, once it
/// has gone whole, the upstream body itself in the frames it went as.
pub struct Layout {
    pub head: Arc<Head>,
    pub items: Items,
    sent: std::sync::OnceLock<Sent>,
}

/// How many frames a recorded body takes from the last one before it is copied whole again:
/// each request adds one (its new bytes), and the known part goes ahead frame by frame.
pub const MOST_FRAMES: usize = 64;

/// Rewritten items in list order: each one's index and new bytes.
pub type Items = Arc<Vec<(usize, Bytes)>>;

/// An upstream body in frames, with the offset each frame ends at.
pub struct Sent {
    pub frames: Vec<Bytes>,
    pub ends: Vec<usize>,
}

impl Sent {
    /// The frames' bytes `from..to`, as slices of them (none copied).
    pub fn slices(&self, from: usize, to: usize) -> impl Iterator<Item = Bytes> + '_ {
        let first = self.ends.partition_point(|&end| end <= from);
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let spans = starts.zip(&self.frames).skip(first).take_while(move |(start, _)| *start < to);
        spans.map(move |(start, frame)| frame.slice(from.max(start) - start..(to - start).min(frame.len())))
    }
}

impl Layout {
    pub fn new(head: Arc<Head>, items: Items) -> Layout {
        Layout { head, items, sent: std::sync::OnceLock::new() }
    }

    /// The upstream body: the client's bytes with the items in place, in pieces that share
    /// their buffers.
    pub fn pieces(&self) -> Vec<Bytes> {
        pieces(&self.head.body, &self.head.raw.spans, &self.items)
    }

    /// The upstream body in pieces ([`Layout::pieces`]) when the layout rewrites an item;
    /// `None` when it rewrites none: the client's own bytes then go upstream as they came.
    pub fn rewritten(&self) -> Option<Vec<Bytes>> {
        (!self.items.is_empty()).then(|| self.pieces())
    }

    /// The upstream body past its first `n` bytes, in pieces as [`Layout::pieces`] gives
    /// them; `None` when it is shorter. The items before are only stepped over.
    pub fn pieces_from(&self, n: usize) -> Option<Vec<Bytes>> {
        let (body, spans) = (&self.head.body, &self.head.raw.spans);
        let (mut at, mut copied, mut out) = (0, 0, Vec::new());
        let mut take = |piece: &Bytes, range: std::ops::Range<usize>, at: usize| {
            let len = range.len();
            if len > 0 && at + len > n {
                out.push(piece.slice(range.start + n.saturating_sub(at)..range.end));
            }
            at + len
        };
        for (i, new) in self.items.iter() {
            let (start, stop) = spans[*i];
            at = take(body, copied..start, at);
            at = take(new, 0..new.len(), at);
            copied = stop;
        }
        at = take(body, copied..body.len(), at);
        (at >= n).then_some(out)
    }

    /// The length of the client body of `client_length` bytes under the layout's edits.
    pub fn length_of(&self, client_length: usize) -> Option<usize> {
        let mut length = client_length;
        for (i, new) in self.items.iter() {
            let (start, stop) = self.head.raw.spans[*i];
            length = (length + new.len()).checked_sub(stop - start)?;
        }
        Some(length)
    }

    /// Keeps the upstream body this layout gave, sent whole as `frames`, when they are as
    /// long as it is (the caller has checked them against the layout) and it rewrites an
    /// item (else the client's body is the upstream body). The body keeps only bytes of its
    /// own, never a slice of a client body or of a read buffer, which would then stay
    /// allocated for as long as the conversation lasts: the first `known` bytes of the
    /// frames are those of `last`, when given (slices of its frames, until it has
    /// [`MOST_FRAMES`]), and the rest is copied.
    pub fn record(&self, frames: &[Bytes], last: Option<(&Sent, usize)>) {
        let length: usize = frames.iter().map(Bytes::len).sum();
        if self.items.is_empty() || Some(length) != self.length_of(self.head.body.len()) {
            return;
        }
        let last = last.filter(|(sent, known)| sent.frames.len() < MOST_FRAMES && *known <= length);
        let (mut kept, known): (Vec<Bytes>, usize) = match last {
            Some((sent, known)) => (sent.slices(0, known).filter(|s| !s.is_empty()).collect(), known),
            None => (Vec::new(), 0),
        };
        let mut copied = bytes::BytesMut::with_capacity(length - known);
        let mut at = 0;
        for frame in frames {
            let from = known.saturating_sub(at).min(frame.len());
            copied.extend_from_slice(&frame[from..]);
            at += frame.len();
        }
        kept.extend((!copied.is_empty()).then(|| copied.freeze()));
        let ends = kept.iter().scan(0, |end, frame| {
            *end += frame.len();
            Some(*end)
        });
        let ends = ends.collect();
        debug_assert!(kept.concat() == frames.concat(), "the body kept is the body sent");
        let _ = self.sent.set(Sent { frames: kept, ends });
    }

    /// The upstream body this layout gave, when it was recorded.
    pub fn sent(&self) -> Option<&Sent> {
        self.sent.get()
    }
}

/// `body` with `items` (in list order) in place of the items of those `spans`.
pub fn pieces(body: &Bytes, spans: &[(usize, usize)], items: &[(usize, Bytes)]) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(2 * items.len() + 1);
    let mut copied = 0;
    for (i, new) in items {
        let (start, end) = spans[*i];
        out.push(body.slice(copied..start));
        out.push(new.clone());
        copied = end;
    }
    out.push(body.slice(copied..));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::convert::Api;
    use crate::proxy::raw::Raw;

    /// A three-item body with its second item rewritten.
    fn laid() -> Layout {
        let body = Bytes::from_static(br#"{"messages": [{"a": 0}, {"a": 1}, {"a": 2}], "z": 1}"#);
        let raw = Raw::read(Api::Chat, &body).unwrap().unwrap();
        let items = vec![(1, Bytes::from_static(br#"{"new": 1}"#))];
        Layout::new(Arc::new(Head { api: Api::Chat, body, raw }), Arc::new(items))
    }

    #[test]
    fn the_upstream_body_past_any_offset_is_the_whole_body_cut_there_and_past_its_end_none() {
        let layout = laid();
        let whole = layout.pieces().concat();
        assert_eq!(Some(whole.len()), layout.length_of(layout.head.body.len()));
        for n in 0..=whole.len() {
            let rest = layout.pieces_from(n).unwrap_or_else(|| panic!("{n}: the body is longer"));
            assert_eq!(rest.concat(), whole[n..], "{n}");
            assert!(rest.iter().all(|p| !p.is_empty()), "{n}: no empty piece");
        }
        assert!(layout.pieces_from(whole.len() + 1).is_none());
    }

    #[test]
    fn a_recorded_body_owns_its_bytes_gives_any_span_of_them_and_one_of_another_length_is_not_kept() {
        let layout = laid();
        let whole = Bytes::from(layout.pieces().concat());
        layout.record(&[whole.slice(..5)], None);
        assert!(layout.sent().is_none(), "too short for the layout");
        let frames = [whole.slice(..7), whole.slice(7..8), whole.slice(8..30), whole.slice(30..)];
        let last = laid();
        last.record(&frames, None);
        let last = last.sent().expect("as long as the layout's body");
        assert!(last.frames.iter().all(|f| !whole.as_ptr_range().contains(&f.as_ptr())), "copied");
        layout.record(&frames, Some((last, 20)));
        let sent = layout.sent().expect("as long as the layout's body");
        assert_eq!(sent.frames.len(), 2, "the last body's slices, then the rest copied");
        assert_eq!(sent.frames[0].as_ptr(), last.frames[0].as_ptr(), "the known part is the last body's");
        for from in 0..=whole.len() {
            for to in from..=whole.len() {
                let slices: Vec<Bytes> = sent.slices(from, to).collect();
                assert_eq!(slices.concat(), whole[from..to], "{from}..{to}");
            }
        }
    }
}
