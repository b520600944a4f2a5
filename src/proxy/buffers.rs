//! Spare body buffers: the buffers of the bodies a conversation no longer keeps, reused for
//! the bodies to come.
//!
//! A proxied body is joined into one buffer as it arrives, and a conversation keeps its last
//! body until the next one replaces it, so each request of a long conversation would join
//! its body into a fresh allocation of several megabytes, which the system hands out as
//! untouched pages (one page fault per 4 KiB on the request path) and takes back when the
//! body before it is dropped. A replaced body's buffer is kept here instead, and a body to
//! come takes the first one nothing else refers to any more (the pieces sent upstream, a
//! speculative request's layout) that is big enough. A buffer is given room to grow, so
//! that a conversation's next bodies, a little longer each time, still fit it. At most
//! [`KEPT`] buffers are kept, and only big ones: a small allocation is cheap. A body past
//! [`KEPT_MAX`] is not kept at all, nor is its conversation, and once it is gone the
//! memory the allocator holds free is handed back to the system ([`hand_back`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};

/// Bodies over this size are pruned but not kept, by the proxy or its engine: the memory
/// they took goes back to the system once they are sent ([`hand_back`]), and their next
/// request is read whole. A 2,000-message conversation's body is about 7 MB.
pub const KEPT_MAX: usize = 16 << 20;
/// How many replaced bodies are kept for reuse.
const KEPT: usize = 2;
/// Bodies smaller than this are not kept.
const SMALLEST: usize = 256 << 10;

/// The replaced bodies, newest last, and how many times one was reused.
#[derive(Default)]
pub struct Buffers(Mutex<Vec<Bytes>>, AtomicUsize);

impl Buffers {
    /// An empty buffer for a body of `len` bytes: a kept one nothing else refers to, when one
    /// is big enough, else a new one with room to grow.
    pub fn take(&self, len: usize) -> BytesMut {
        if len >= SMALLEST {
            let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for i in 0..kept.len() {
                match kept.remove(i).try_into_mut() {
                    Ok(mut buffer) if buffer.capacity() >= len => {
                        buffer.clear();
                        self.1.fetch_add(1, Ordering::Relaxed);
                        return buffer;
                    }
                    Ok(small) => kept.insert(i, small.freeze()),
                    Err(shared) => kept.insert(i, shared),
                }
            }
        }
        BytesMut::with_capacity(len.saturating_add(len / 8))
    }

    /// How many bodies were joined into a replaced body's buffer.
    pub fn reused(&self) -> usize {
        self.1.load(Ordering::Relaxed)
    }

    /// Keeps `body`, which a conversation no longer holds, for a body to come.
    pub fn retire(&self, body: &Bytes) {
        if body.len() < SMALLEST || body.len() > KEPT_MAX {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push(body.clone());
    }
}

/// Hands the memory the allocator holds free back to the system: glibc's keeps what a big
/// body and its parsed history freed, for allocations to come, which after a conversation
/// too big to keep would be tens of megabytes resident for nothing.
pub fn hand_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize) -> Bytes {
        let mut buffer = Buffers::default().take(len);
        buffer.resize(len, b'x');
        buffer.freeze()
    }

    #[test]
    fn a_replaced_body_nothing_else_holds_is_reused_for_a_longer_one_that_fits_its_room() {
        let buffers = Buffers::default();
        let first = body(1 << 20);
        let at = first.as_ptr();
        buffers.retire(&first);
        let slice = first.slice(10..20);
        drop(first);
        assert_ne!(buffers.take(1 << 20).as_ptr(), at, "a piece sent upstream still refers to it");
        drop(slice);
        let reused = buffers.take((1 << 20) + 1000);
        assert_eq!(reused.as_ptr(), at, "nothing refers to it any more");
        assert!(reused.is_empty());
        assert_ne!(buffers.take(1 << 20).as_ptr(), at, "a buffer is handed out once");
    }

    #[test]
    fn a_body_longer_than_a_kept_buffer_or_a_small_one_gets_a_new_buffer() {
        let buffers = Buffers::default();
        let first = body(1 << 20);
        let at = first.as_ptr();
        buffers.retire(&first);
        drop(first);
        assert_ne!(buffers.take(2 << 20).as_ptr(), at, "too small for the body");
        let small = body(100);
        buffers.retire(&small);
        assert_eq!(buffers.0.lock().unwrap().len(), 1, "small bodies are not kept");
        assert_eq!(buffers.take(1 << 20).as_ptr(), at, "the big one is still there");
    }
}
