//! Speculative forwarding: a request whose body continues its conversation's last one is
//! sent upstream while it arrives and while the engine runs, not after.
//!
//! As the client's bytes arrive and match the last client body, the bytes the last upstream
//! body had for them go upstream (the client's bytes, with last time's rewritten items in
//! their place: slices of that body's frames when it went whole, else copied from the last
//! client body and its items), then the client's new bytes: the bet is that the
//! engine answers with the same edits as last time, and the request's `Content-Length` is
//! the body's length under them. The body's last bytes wait for the engine. When the body
//! it gives has that length and starts with every byte already sent, the rest is sent and
//! the request completes, byte for byte the body the unpipelined path sends; otherwise the
//! request is aborted (its connection dropped short of the declared length, or before its
//! head when it was still connecting, so the upstream never sees it complete) and the whole
//! body goes on a new one. A body that
//! continues no known one, has no `Content-Length`, or any error takes the unpipelined
//! path.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING};
use hyper::http::request::Parts;
use hyper::{Request, Response};
use tokio::sync::mpsc;

use super::buffers::Buffers;
use super::client_body::ClientBody;
use super::conversation::Layout;
use super::convert::Api;
use super::forward::{self, Body, BoxError, Outgoing, Upstream};
use super::rest;
use super::Shared;
use channel::Channel;

mod channel;

/// How many bytes of a body's start choose the conversation it continues.
const CHOOSE_AFTER: usize = 4096;
/// How many of the client's last bytes wait for the engine, besides the final chunk.
const HELD_BACK: usize = 16;

/// Serves a request for `api` whose body is still arriving: speculatively when it continues
/// a known conversation, else as [`super::handle`] does.
pub async fn handle(
    shared: &Arc<Shared>,
    api: Api,
    upstream: &Upstream,
    parts: Parts,
    body: ClientBody,
) -> Response<Body> {
    let entered = std::time::Instant::now();
    let mut advancing = std::time::Duration::ZERO;
    let mut arrived = Arrived::new(body, &parts, &shared.conversations.spare);
    let chosen = match choose(shared, api, &parts, &mut arrived).await {
        Ok(chosen) => chosen,
        Err(e) => return unread(&e),
    };
    let mut speculation = chosen.and_then(|layout| Speculation::start(shared, upstream, &parts, layout));
    loop {
        if let Some(s) = speculation.as_mut() {
            let t = std::time::Instant::now();
            let advanced = s.advance(&arrived);
            advancing += t.elapsed();
            if advanced.is_err() {
                if let Some(s) = speculation.take() {
                    s.abort(shared).await;
                }
            }
        }
        arrived.release(speculation.as_ref().map_or(usize::MAX, Speculation::needs_from));
        match arrived.next().await {
            Ok(Some(())) => {}
            Ok(None) => break,
            Err(e) => return unread(&e),
        }
    }
    let ended = std::time::Instant::now();
    let received = ended - entered;
    let frames = arrived.count;
    let whole = arrived.whole();
    let joined = ended.elapsed();
    let checked = speculation.as_ref().and_then(Speculation::checked);
    let (outgoing, ticket) = super::Whole { shared, api, parts: &parts, bytes: whole, checked }.outgoing().await;
    let end = BodyEnd { ended, joined, received, frames, advancing };
    let outgoing = match speculation {
        Some(s) => match s.finish(shared, upstream, outgoing, end).await {
            Finished::Answered(answer) => return super::settled(ticket, answer, api, upstream),
            Finished::Aborted(outgoing) => outgoing,
        },
        None => outgoing,
    };
    super::settled(ticket, forward::forward(&shared.client, upstream, parts, outgoing).await, api, upstream)
}

fn unread(e: &BoxError) -> Response<Body> {
    super::unread(e)
}

/// The last layout the body continues: the only one whose known part its first bytes
/// match (read until one is left); `None` for a compressed body or none.
async fn choose(
    shared: &Shared,
    api: Api,
    parts: &Parts,
    arrived: &mut Arrived,
) -> Result<Option<Arc<Layout>>, BoxError> {
    let encoding = parts.headers.get(CONTENT_ENCODING).and_then(|v| v.to_str().ok());
    if encoding.is_some_and(|e| !e.eq_ignore_ascii_case("identity")) {
        return Ok(None);
    }
    while arrived.len < CHOOSE_AFTER && arrived.next().await?.is_some() {}
    let start: Vec<u8> = arrived.slices(0, arrived.len.min(CHOOSE_AFTER)).concat();
    let mut candidates = shared.conversations.layouts_starting(api, &start);
    let mut checked = start.len();
    while candidates.len() > 1 && arrived.next().await?.is_some() {
        let upto = arrived.len;
        candidates.retain(|l| {
            let end = l.head.end().unwrap_or(0).min(upto);
            checked >= end || arrived.equals(checked, &l.head.body[checked..end])
        });
        checked = upto;
    }
    Ok(if candidates.len() == 1 { candidates.pop() } else { None })
}

/// The client's body as it arrives, in frames with their offsets, and joined as it comes
/// (so that the whole body is at hand when its last frame is, not copied after it). A frame
/// is let go once nothing more is read or sent from it, so that the server's read buffer is
/// reused for the frames to come rather than allocated anew.
struct Arrived {
    body: ClientBody,
    frames: std::collections::VecDeque<(usize, Bytes)>,
    /// How many frames arrived.
    count: usize,
    joined: BytesMut,
    len: usize,
    ended: bool,
}

impl Arrived {
    /// The body to come, its buffer (a spare one where one fits) sized for the length the
    /// request declares, up to the most the engine reads.
    fn new(body: ClientBody, parts: &Parts, spare: &Buffers) -> Arrived {
        let declared = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let joined = spare.take(declared.unwrap_or(0).min(super::MAX_BODY));
        Arrived { body, frames: std::collections::VecDeque::new(), count: 0, joined, len: 0, ended: false }
    }

    /// Reads the next data frame; `None` at the end.
    async fn next(&mut self) -> Result<Option<()>, BoxError> {
        while !self.ended {
            let Some(frame) = self.body.frame().await else {
                self.ended = true;
                break;
            };
            if let Ok(data) = frame?.into_data() {
                if !data.is_empty() {
                    self.joined.extend_from_slice(&data);
                    self.frames.push_back((self.len, data.clone()));
                    self.count += 1;
                    self.len += data.len();
                    return Ok(Some(()));
                }
            }
        }
        Ok(None)
    }

    /// Lets go of the frames that end at or before `upto`: no byte before it is read again.
    fn release(&mut self, upto: usize) {
        while self.frames.front().is_some_and(|(at, d)| at + d.len() <= upto) {
            self.frames.pop_front();
        }
    }

    /// Whether the bytes from `from` on (in frames not let go) are `known`: compared in
    /// place, frame by frame.
    fn equals(&self, from: usize, known: &[u8]) -> bool {
        let to = from + known.len();
        let mut at = from;
        for (start, data) in self.frames.iter().filter(|(s, d)| s + d.len() > from && *s < to) {
            if *start > at {
                return false;
            }
            let piece = &data[at - start..(to - start).min(data.len())];
            if known[at - from..at - from + piece.len()] != *piece {
                return false;
            }
            at += piece.len();
        }
        at == to
    }

    /// Bytes `from..to`, as slices of the frames (those not let go).
    fn slices(&self, from: usize, to: usize) -> Vec<Bytes> {
        let overlapping = self.frames.iter().filter(|(at, d)| at + d.len() > from && *at < to);
        overlapping.map(|(at, d)| d.slice(from.saturating_sub(*at)..(to - at).min(d.len()))).collect()
    }

    /// The whole body, once it has arrived.
    fn whole(&mut self) -> Bytes {
        std::mem::take(&mut self.joined).freeze()
    }
}

/// The speculative request: what it sent, and its answer to come.
struct Speculation {
    layout: Arc<Layout>,
    /// The next of the layout's rewritten items to send.
    item: usize,
    /// The end of the last body's known part.
    end: usize,
    /// The upstream body's length, as the request declares it.
    length: usize,
    /// Client bytes checked against the last body's known part.
    matched: usize,
    /// Client bytes whose upstream bytes are sent.
    produced: usize,
    /// Upstream bytes of the known part sent.
    upstream_at: usize,
    sent: Vec<Bytes>,
    /// Small pieces to go out in one frame.
    joiner: forward::Joiner,
    tx: mpsc::UnboundedSender<Result<Bytes, BoxError>>,
    answer: tokio::task::JoinHandle<Result<Response<Incoming>, hyper_util::client::legacy::Error>>,
}

/// When the client's body ended, and how long joining its frames took: the speculative
/// request's debug line times what follows the body's end from them.
struct BodyEnd {
    ended: std::time::Instant,
    joined: std::time::Duration,
    received: std::time::Duration,
    frames: usize,
    advancing: std::time::Duration,
}

/// A speculative request's outcome: the upstream's answer, or the body to send anew.
enum Finished {
    Answered(Response<Body>),
    Aborted(Outgoing),
}

/// The client's bytes do not continue the chosen body, or the request is gone.
struct Broken;

impl Speculation {
    /// Opens the request upstream, its headers the client's but the length.
    fn start(shared: &Shared, upstream: &Upstream, parts: &Parts, layout: Arc<Layout>) -> Option<Speculation> {
        let end = layout.head.end()?;
        let client_length: usize = parts.headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()?;
        let length = layout.length_of(client_length)?;
        let mut request = Request::builder().method(parts.method.clone()).uri(parts.uri.clone()).version(parts.version);
        *request.headers_mut()? = parts.headers.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let (mut head, body) = request.body(Channel::new(rx, length).boxed_unsync()).ok()?.into_parts();
        forward::aim(upstream, &mut head).ok()?;
        head.headers.remove(TRANSFER_ENCODING);
        head.headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        let answer = tokio::spawn(shared.client.request(Request::from_parts(head, body)));
        shared.conversations.speculated.fetch_add(1, Ordering::Relaxed);
        if layout.sent().is_some() {
            shared.conversations.from_sent.fetch_add(1, Ordering::Relaxed);
        }
        Some(Speculation {
            layout,
            item: 0,
            end,
            length,
            matched: 0,
            produced: 0,
            upstream_at: 0,
            sent: Vec::new(),
            joiner: forward::Joiner::default(),
            tx,
            answer,
        })
    }

    /// The last body, when the client's has every byte of its known part (compared as
    /// they arrived).
    fn checked(&self) -> Option<Arc<super::raw::Head>> {
        (self.matched == self.end).then(|| Arc::clone(&self.layout.head))
    }

    /// From where on the client's bytes are still to be checked (up to the known part's
    /// end) or sent.
    fn needs_from(&self) -> usize {
        let checking = if self.matched < self.end { self.matched } else { usize::MAX };
        checking.min(self.produced)
    }

    /// Checks the bytes arrived past those checked, and sends what they settle.
    fn advance(&mut self, arrived: &Arrived) -> Result<(), Broken> {
        self.settle(arrived).and_then(|()| self.flush())
    }

    /// Queues the pieces the bytes arrived settle.
    fn settle(&mut self, arrived: &Arrived) -> Result<(), Broken> {
        let upto = arrived.len.min(self.end);
        if upto > self.matched {
            if !arrived.equals(self.matched, &self.layout.head.body[self.matched..upto]) {
                return Err(Broken);
            }
            self.matched = upto;
        }
        if !self.settle_known()? {
            return Ok(());
        }
        let to = arrived.len.saturating_sub(HELD_BACK);
        if to > self.produced {
            for piece in arrived.slices(self.produced, to) {
                self.send(piece)?;
            }
            self.produced = to;
        }
        Ok(())
    }

    /// Queues the last upstream body's bytes for the client's bytes checked: the client's
    /// stretches and the rewritten items they complete, in turn; whether the whole known
    /// part is queued. Where the last upstream body was kept whole, its bytes go as slices
    /// of its frames, and an item is only stepped over.
    fn settle_known(&mut self) -> Result<bool, Broken> {
        let layout = Arc::clone(&self.layout);
        let (spans, sent, from) = (&layout.head.raw.spans, layout.sent(), self.upstream_at);
        loop {
            let next = layout.items.get(self.item).map(|(i, new)| (spans[*i], new));
            let copied = next.map_or(self.end, |((start, _), _)| start).min(self.matched);
            if copied > self.produced {
                if sent.is_none() {
                    self.put(&layout.head.body, self.produced..copied)?;
                }
                self.upstream_at += copied - self.produced;
                self.produced = copied;
            }
            let Some(((_, stop), new)) = next.filter(|((_, stop), _)| *stop <= self.matched) else { break };
            if sent.is_none() {
                self.put(new, 0..new.len())?;
            }
            (self.upstream_at, self.produced, self.item) = (self.upstream_at + new.len(), stop, self.item + 1);
        }
        if let Some(sent) = sent {
            for piece in sent.slices(from, self.upstream_at) {
                self.send(piece)?;
            }
        }
        Ok(self.item == layout.items.len() && self.produced == self.end)
    }

    /// Queues `piece`: a big one goes as it is, small ones are joined into one frame (see
    /// [`forward::Joiner`]).
    fn send(&mut self, piece: Bytes) -> Result<(), Broken> {
        let whole = 0..piece.len();
        self.put(&piece, whole)
    }

    /// Queues `source[range]` as [`Speculation::send`] does, a small piece copied from where
    /// it lies: no reference to `source` is taken for it.
    fn put(&mut self, source: &Bytes, range: Range<usize>) -> Result<(), Broken> {
        for frame in self.joiner.put(source, range) {
            self.frame(frame)?;
        }
        Ok(())
    }

    /// Sends the small pieces queued.
    fn flush(&mut self) -> Result<(), Broken> {
        match self.joiner.flush() {
            Some(joined) => self.frame(joined),
            None => Ok(()),
        }
    }

    fn frame(&mut self, piece: Bytes) -> Result<(), Broken> {
        if piece.is_empty() {
            return Ok(());
        }
        self.tx.send(Ok(piece.clone())).map_err(|_| Broken)?;
        self.sent.push(piece);
        Ok(())
    }

    /// Sends the rest of `outgoing` when it starts with what was sent, and hands back the
    /// answer; else aborts the request.
    async fn finish(mut self, shared: &Shared, upstream: &Upstream, outgoing: Outgoing, tail: BodyEnd) -> Finished {
        let pruned = tail.ended.elapsed();
        let ahead: usize = self.sent.iter().map(Bytes::len).sum();
        let sent_ahead = rest::Ahead { layout: &self.layout, produced: self.produced, sent: &self.sent };
        let (total, rest, new) = match &outgoing {
            Outgoing::Laid(new) => (new.length_of(new.head.body.len()), rest::rest(new, &sent_ahead), Some(new)),
            Outgoing::Bytes(bytes) => (Some(bytes.len()), rest::after(std::slice::from_ref(bytes), &self.sent), None),
            Outgoing::Stream(_) => (None, None, None),
        };
        let Some(rest) = rest.filter(|_| total == Some(self.length)) else {
            tracing::debug!(ahead, "speculation aborted");
            self.abort(shared).await;
            return Finished::Aborted(outgoing);
        };
        let compared = tail.ended.elapsed() - pruned;
        let sent: Result<(), Broken> = rest.into_iter().try_for_each(|piece| self.send(piece));
        let sent = sent.and_then(|()| self.flush());
        drop(self.tx);
        if let Some(new) = new.filter(|_| sent.is_ok()) {
            // The body went whole, as the new layout gives it: the next request sends its
            // known part from it. Kept while the upstream reads.
            new.record(&self.sent, self.layout.sent().map(|last| (last, self.upstream_at)));
        }
        let answer = self.answer.await;
        let answered = tail.ended.elapsed();
        let (joined, received, frames, advancing) = (tail.joined, tail.received, tail.frames, tail.advancing);
        tracing::debug!(
            ahead,
            total = self.length,
            ?joined,
            ?pruned,
            ?compared,
            ?answered,
            ?received,
            frames,
            ?advancing,
            "speculation kept"
        );
        match answer {
            Ok(Ok(answer)) => Finished::Answered(answer.map(forward::boxed_incoming)),
            Ok(Err(e)) => Finished::Answered(forward::unanswered(upstream, &e)),
            Err(e) => Finished::Answered(forward::unanswered(upstream, &e)),
        }
    }

    /// Drops the request before its body completes, and waits until it is gone.
    async fn abort(self, shared: &Shared) {
        shared.conversations.aborted.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Err("dcp proxy: the speculative body is abandoned".into()));
        drop(self.tx);
        self.answer.abort();
        let _ = self.answer.await;
    }
}
