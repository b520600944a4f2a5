//! The body of a speculative request: the pieces the speculation queues, in turn, with the
//! declared length's last byte kept back until the speculation closes it without an error.
//! However much was sent ahead, a request the engine's answer aborts never reaches the
//! upstream complete.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::proxy::forward::BoxError;

/// The speculative request's body: what the channel is given, in turn; an error aborts it.
/// Its declared length's last byte waits until the sender closes without an error, whatever
/// was queued before: a speculation that sent every byte ahead (a body that repeats the last
/// one, a retry) and is then aborted must not reach the upstream complete, which would run
/// the request twice.
pub(super) struct Channel {
    rx: mpsc::UnboundedReceiver<Result<Bytes, BoxError>>,
    /// The declared length less the byte kept back, less what went out.
    room: usize,
    held: Option<Bytes>,
}

impl Channel {
    pub(super) fn new(rx: mpsc::UnboundedReceiver<Result<Bytes, BoxError>>, length: usize) -> Channel {
        Channel { rx, room: length.saturating_sub(1), held: None }
    }

    /// `piece`'s part that fits the room; what does not is kept for the close.
    fn admit(&mut self, mut piece: Bytes) -> Bytes {
        if piece.len() <= self.room {
            self.room -= piece.len();
            return piece;
        }
        let over = piece.split_off(self.room);
        self.room = 0;
        self.held = Some(match self.held.take() {
            Some(held) => [held, over].concat().into(),
            None => over,
        });
        piece
    }
}

impl hyper::body::Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            return match self.rx.poll_recv(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Err(e))) => {
                    self.held = None;
                    Poll::Ready(Some(Err(e)))
                }
                Poll::Ready(Some(Ok(piece))) => {
                    let piece = self.admit(piece);
                    if piece.is_empty() {
                        continue;
                    }
                    Poll::Ready(Some(Ok(Frame::data(piece))))
                }
                Poll::Ready(None) => Poll::Ready(self.held.take().map(|held| Ok(Frame::data(held)))),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn collect(pieces: &[&'static [u8]], end: Option<&str>, length: usize) -> (Vec<u8>, bool) {
        let (tx, rx) = mpsc::unbounded_channel();
        for piece in pieces {
            tx.send(Ok(Bytes::from_static(piece))).unwrap();
        }
        if let Some(error) = end {
            tx.send(Err(error.into())).unwrap();
        }
        drop(tx);
        let mut body = Channel::new(rx, length);
        let (mut got, mut failed) = (Vec::new(), false);
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => got.extend_from_slice(frame.data_ref().unwrap()),
                Err(_) => failed = true,
            }
        }
        (got, failed)
    }

    #[tokio::test]
    async fn an_aborted_speculation_that_queued_its_whole_body_leaves_the_upstream_one_byte_short() {
        let (got, failed) = collect(&[b"{\"a\":", b"[1,2]}"], Some("aborted"), 11).await;
        assert!(failed);
        assert_eq!(got, b"{\"a\":[1,2]".to_vec(), "the last byte never went");
    }

    #[tokio::test]
    async fn a_speculation_closed_without_an_error_sends_every_byte_in_order() {
        let (got, failed) = collect(&[b"{\"a\":", b"[1,2]", b"}"], None, 11).await;
        assert!(!failed);
        assert_eq!(got, b"{\"a\":[1,2]}".to_vec());
    }
}
