//! The scanner of a long request line: it cuts the elements of `params.messages` out of the
//! bytes as they arrive, has each parsed and slimmed (`slim_message`, their big strings
//! counted, on worker threads: [`Slimmers`]), and parses the rest of the line (its
//! *skeleton*: id, method, the other params) at the end with the messages put back in.
//!
//! The answer is the one the line read whole would get ([`protocol::decode`], then
//! `slim_message` on each message): the same request, or an error of the same code. The
//! scanner tracks strings and nesting, and checks what stands between the messages (one `,`,
//! JSON whitespace); the parser finds every other JSON error, in a message or in the
//! skeleton, and its position is given in the line. As a whole read, the last `params` and
//! the last `messages` key count, a line that is not UTF-8 is refused before anything else
//! (at its first invalid byte), and a line of white space gets no answer.

use serde::de::IgnoredAny;
use serde_json::Value;

use super::slimmers::{at_column, Slimmers, Workers};
use super::utf8;
use crate::sidecar::protocol::{self, Request, RpcError};

/// What a streamed line came to.
#[derive(Debug, PartialEq)]
pub enum Streamed {
    Request(Box<Result<Request, (Option<Value>, RpcError)>>),
    TooLong(usize),
    /// Not UTF-8: the offset of the first invalid byte.
    NotUtf8(usize),
    /// Only white space: no request.
    Blank,
}

/// Where the bytes being scanned go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dest {
    Skeleton,
    /// Between two messages: separators.
    Drop,
    Message,
}

/// What may come next between the messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sep {
    /// After the `[`: a message or the `]`.
    First,
    /// After a message: a `,` or the `]`.
    Message,
    /// After a `,`: a message.
    Comma,
}

/// What a key names, as far as the scanner cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Params,
    Messages,
    Other,
}

impl Key {
    /// The key whose string (quotes left out) is `raw`; escapes are decoded.
    fn of(raw: &[u8]) -> Key {
        let decoded;
        let name = if raw.contains(&b'\\') {
            let quoted = [b"\"", raw, b"\""].concat();
            decoded = serde_json::from_slice::<String>(&quoted).unwrap_or_default();
            decoded.as_bytes()
        } else {
            raw
        };
        match name {
            b"params" => Key::Params,
            b"messages" => Key::Messages,
            _ => Key::Other,
        }
    }
}

/// The longest key read: `"messages"` with every character escaped is 48 bytes.
const KEY_BYTES: usize = 64;

/// The nesting at which serde_json's parser gives up (`recursion limit exceeded`).
const MAX_DEPTH: usize = 128;

struct Frame {
    object: bool,
    expect_key: bool,
    key: Key,
}

/// The scanner's state over one line.
pub(super) struct LineScanner {
    stack: Vec<Frame>,
    in_string: bool,
    escaped: bool,
    /// The bytes of the key being read, when a string is in key position at the first two
    /// levels (where `params` and `messages` are).
    key: Option<Vec<u8>>,
    /// The depth of `params.messages` while inside it.
    target: Option<usize>,
    /// Whether the last `params.messages` of the line so far is the list streamed.
    found: bool,
    /// Whether a list was streamed at all (then the skeleton is not the line).
    cut: bool,
    sep: Sep,
    /// A message that is not an object or a list: its end is a delimiter, or its closing quote.
    scalar: bool,
    dest: Dest,
    skeleton: Vec<u8>,
    message: Vec<u8>,
    /// The line offset where the current message starts, the bytes left out of the skeleton
    /// so far, and where they were left out: (skeleton offset, bytes left out before it).
    message_at: usize,
    removed: usize,
    cuts: Vec<(usize, usize)>,
    offset: usize,
    /// The messages of the list being streamed, parsed and slimmed as they end.
    messages: Slimmers,
    /// The first error the scan found, and its line offset; scanning stops there.
    error: Option<(usize, RpcError)>,
    utf8: utf8::Utf8,
}

impl LineScanner {
    /// A scanner whose messages are parsed and slimmed by `workers`.
    pub(super) fn new(workers: Workers) -> LineScanner {
        LineScanner {
            stack: Vec::new(),
            in_string: false,
            escaped: false,
            key: None,
            target: None,
            found: false,
            cut: false,
            sep: Sep::First,
            scalar: false,
            dest: Dest::Skeleton,
            skeleton: Vec::new(),
            message: Vec::new(),
            message_at: 0,
            removed: 0,
            cuts: Vec::new(),
            offset: 0,
            messages: Slimmers::new(workers),
            error: None,
            utf8: utf8::Utf8::default(),
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        match self.dest {
            Dest::Skeleton => self.skeleton.extend_from_slice(bytes),
            Dest::Message => self.message.extend_from_slice(bytes),
            Dest::Drop => {}
        }
        if self.dest != Dest::Skeleton {
            self.removed += bytes.len();
        }
    }

    /// Records a syntax error at line offset `at`, in serde's words; scanning stops.
    fn fail(&mut self, at: usize, what: &str) {
        let e = protocol::not_json(format!("{what} at line 1 column {}", at + 1));
        self.error.get_or_insert((at, e));
    }

    /// Scans `chunk` (no newline in it), sending each run of bytes where it belongs.
    pub(super) fn scan(&mut self, chunk: &[u8]) {
        self.utf8.feed(chunk);
        let mut mark = 0;
        let mut i = 0;
        while i < chunk.len() && self.error.is_none() {
            if self.in_string {
                i = self.scan_string(chunk, i, &mut mark);
                continue;
            }
            let b = chunk[i];
            if self.scalar && matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\r') {
                self.emit(&chunk[mark..i]);
                mark = i;
                self.end_message();
            }
            if self.target == Some(self.stack.len()) && self.dest == Dest::Drop && self.separator(chunk, i, &mut mark) {
                i += 1;
                continue;
            }
            self.punctuation(chunk, i, &mut mark);
            i += 1;
        }
        if self.error.is_none() {
            self.emit(&chunk[mark..]);
        }
        self.offset += chunk.len();
    }

    /// Handles the byte at `i` between two messages of `params.messages`; returns whether it
    /// was a separator (or an error), `false` when a message starts there.
    fn separator(&mut self, chunk: &[u8], i: usize, mark: &mut usize) -> bool {
        let at = self.offset + i;
        match (chunk[i], self.sep) {
            (b' ' | b'\t' | b'\r', _) => {}
            (b',', Sep::Message) => self.sep = Sep::Comma,
            (b',', _) => self.fail(at, "expected value"),
            (b']', Sep::Comma) => self.fail(at, "trailing comma"),
            (b']', _) => {
                // The end of `params.messages`.
                self.emit(&chunk[*mark..i]);
                *mark = i;
                self.target = None;
                self.dest = Dest::Skeleton;
                self.cuts.push((self.skeleton.len(), self.removed));
                self.stack.pop();
            }
            (_, Sep::Message) => self.fail(at, "expected `,` or `]`"),
            (b, _) => {
                // A message starts.
                self.emit(&chunk[*mark..i]);
                *mark = i;
                self.dest = Dest::Message;
                self.message_at = at;
                self.scalar = !matches!(b, b'{' | b'[');
                return false;
            }
        }
        true
    }

    /// Handles the byte at `i` outside strings and separators: strings open, containers open
    /// and close, keys end; `params.messages` starts here and its messages end here.
    fn punctuation(&mut self, chunk: &[u8], i: usize, mark: &mut usize) {
        let b = chunk[i];
        match b {
            b'"' => {
                self.in_string = true;
                if self.stack.len() <= 2 && self.stack.last().is_some_and(|f| f.object && f.expect_key) {
                    self.key = Some(Vec::new());
                }
            }
            b'{' | b'[' => {
                let opens_target = b == b'['
                    && self.stack.len() == 2
                    && self.stack[0].key == Key::Params
                    && self.stack[1].object
                    && self.stack[1].key == Key::Messages;
                self.stack.push(Frame { object: b == b'{', expect_key: b == b'{', key: Key::Other });
                if self.stack.len() >= MAX_DEPTH {
                    // As the whole line's parse would: the messages are nested in it.
                    self.fail(self.offset + i, "recursion limit exceeded");
                } else if opens_target {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.target = Some(self.stack.len());
                    (self.found, self.cut, self.sep) = (true, true, Sep::First);
                    // A scan alone would have stopped at an error in the earlier list.
                    self.error = self.messages.restart();
                    self.dest = Dest::Drop;
                }
            }
            b'}' | b']' => {
                self.stack.pop();
                if self.dest == Dest::Message && !self.scalar && self.target == Some(self.stack.len()) {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.end_message();
                }
            }
            b':' | b',' => {
                if let Some(f) = self.stack.last_mut().filter(|f| f.object) {
                    f.expect_key = b == b',';
                }
            }
            _ => {}
        }
    }

    /// Scans inside a string from `i`; returns where scanning goes on.
    fn scan_string(&mut self, chunk: &[u8], mut i: usize, mark: &mut usize) -> usize {
        while i < chunk.len() {
            let b = chunk[i];
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(key) = self.key.take() {
                    self.end_key(&key);
                }
                if self.scalar && self.dest == Dest::Message {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.end_message();
                }
                return i + 1;
            } else if self.key.is_none() {
                // Skip ahead to the next quote or backslash.
                match chunk[i..].iter().position(|c| *c == b'"' || *c == b'\\') {
                    Some(n) => {
                        i += n;
                        continue;
                    }
                    None => return chunk.len(),
                }
            }
            if let Some(key) = self.key.as_mut().filter(|k| k.len() <= KEY_BYTES) {
                key.push(b);
            }
            i += 1;
        }
        i
    }

    /// A key of the first two levels was read: a later `params`, or `messages` in it, stands
    /// for the list streamed before (as the last key counts in a whole read).
    fn end_key(&mut self, raw: &[u8]) {
        let kind = if raw.len() > KEY_BYTES { Key::Other } else { Key::of(raw) };
        let depth = self.stack.len();
        let in_params = depth == 2 && self.stack[0].key == Key::Params;
        if (depth == 1 && kind == Key::Params) || (in_params && kind == Key::Messages) {
            self.found = false;
        }
        if let Some(f) = self.stack.last_mut() {
            f.key = kind;
        }
    }

    /// Hands the message just read to be parsed and slimmed. An error in it is found when
    /// the line ends; scanning goes on meanwhile, and the first error of the line wins.
    fn end_message(&mut self) {
        self.scalar = false;
        self.dest = Dest::Drop;
        self.sep = Sep::Message;
        let bytes = std::mem::take(&mut self.message);
        self.messages.push(self.message_at, bytes);
    }

    /// The line offset of skeleton offset `at`.
    fn line_offset(&self, at: usize) -> usize {
        at + self.cuts.iter().rev().find(|(cut, _)| *cut <= at).map_or(0, |(_, removed)| *removed)
    }

    /// The request, once the whole line was scanned.
    pub(super) fn finish(mut self) -> Streamed {
        if let Some(at) = self.utf8.finish() {
            return Streamed::NotUtf8(at);
        }
        if self.error.is_none() && self.dest == Dest::Message && self.scalar {
            self.end_message();
        }
        // A message's error stands before any the scan found after that message.
        let messages = match self.messages.take() {
            Ok(messages) => messages,
            Err((at, e)) => {
                if self.error.as_ref().is_none_or(|(scanned, _)| at < *scanned) {
                    self.error = Some((at, e));
                }
                Vec::new()
            }
        };
        // Cut at ASCII bytes, the skeleton of a UTF-8 line is UTF-8; but a scan stopped by an
        // error may have left the skeleton in the middle of a character.
        let skeleton = match std::str::from_utf8(&self.skeleton) {
            Ok(skeleton) => skeleton,
            Err(e) => std::str::from_utf8(&self.skeleton[..e.valid_up_to()]).unwrap_or_default(),
        };
        if !self.cut && skeleton.trim().is_empty() {
            return Streamed::Blank;
        }
        // The first error of the line: one the scan found, unless the skeleton has one before.
        if let Some((at, e)) = self.error.take() {
            let earlier = serde_json::from_str::<IgnoredAny>(skeleton).err().filter(|e| !e.is_eof()).and_then(|e| {
                let at_line = self.line_offset(e.column().saturating_sub(1));
                (at_line < at).then(|| protocol::not_json(at_column(&e, at_line + 1)))
            });
            return Streamed::Request(Box::new(Err((None, earlier.unwrap_or(e)))));
        }
        let value = serde_json::from_str::<Value>(skeleton).map_err(|e| {
            // The end of the skeleton is the end of the line.
            let column = if e.is_eof() { self.offset } else { self.line_offset(e.column().saturating_sub(1)) + 1 };
            (None, protocol::not_json(at_column(&e, column)))
        });
        let request = value.and_then(protocol::decode_value).map(|mut request| {
            // The skeleton's list is empty: the messages were cut out of it.
            if self.found && request.messages.is_some() {
                request.messages = Some(messages);
            }
            request
        });
        Streamed::Request(Box::new(request))
    }
}
