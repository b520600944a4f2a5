//! A client's request body, as every handler reads it: once the proxy waits for its next
//! bytes, they must come within the read timeout (`--read-timeout`), else reading it fails
//! with [`Stalled`] and its connection is closed. The wait is timed from when the proxy asks
//! and finds nothing, not from the last bytes: a reader held back by a slow upstream does not
//! make the client look slow. Without it, a client that sends a head and a little of its body holds
//! its connection, and a descriptor, for as long as it likes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};

/// A boxed error, as the bodies the proxy forwards carry.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client's request body, whose next bytes must come within the read timeout of being
/// waited for.
pub struct ClientBody {
    body: Incoming,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// Whether the proxy is waiting for the client (`sleep` then runs from when it began).
    waiting: bool,
}

/// A client's body stopped before its end for longer than the read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client sent nothing of the request's body for {0:?}")]
pub struct Stalled(pub Duration);

impl ClientBody {
    pub fn new(body: Incoming, timeout: Duration) -> ClientBody {
        ClientBody { body, timeout, sleep: Box::pin(tokio::time::sleep(timeout)), waiting: false }
    }
}

impl hyper::body::Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                Poll::Ready(frame.map(|f| f.map_err(|e| Box::new(e) as BoxError)))
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    this.sleep.as_mut().reset(tokio::time::Instant::now() + this.timeout);
                }
                match this.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled(this.timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
