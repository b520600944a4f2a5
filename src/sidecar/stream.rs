//! A long request line read as a stream: message by message, never whole.
//!
//! A first `transform` carries the whole history: 16 MB at 2,000 messages, 150 MB at 20,000.
//! Read whole and parsed whole, it costs the line plus its value tree (over three times the
//! JSON) before the mirror can slim a single part. So a line longer than [`STREAM_FROM`] is
//! scanned as it arrives: the elements of `params.messages` are cut out one at a time,
//! parsed and slimmed ([`crate::session::slim`], their big strings counted here, on the
//! reader's thread), and the rest of the line (its *skeleton*: id, method, the other params)
//! is parsed at the end with the messages put back in. The scanner only tracks strings and
//! nesting; JSON errors are found by the parser, in a message or in the skeleton. A line over
//! the size limit or not in UTF-8 gets the same errors as a line read whole.

use std::io::BufRead;

use serde_json::Value;

use super::protocol::{self, code, Request, RpcError};
use crate::session::slim;
use crate::tokens::{EstimatorChoice, TokenCounter};

/// Lines longer than this are read as a stream.
pub const STREAM_FROM: usize = 1 << 20;

/// What a streamed line came to.
pub enum Streamed {
    Request(Box<Result<Request, (Option<Value>, RpcError)>>),
    TooLong(usize),
    /// Not UTF-8: the offset of the first invalid byte.
    NotUtf8(usize),
}

/// Where the bytes being scanned go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dest {
    Skeleton,
    /// Between two messages: separators.
    Drop,
    Message,
}

/// What a key names, as far as the scanner cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Params,
    Messages,
    Other,
}

struct Frame {
    object: bool,
    expect_key: bool,
    key: Key,
}

/// The scanner's state over one line.
struct Scanner {
    stack: Vec<Frame>,
    in_string: bool,
    escaped: bool,
    /// The bytes of the key being read, when a string is in key position.
    key: Option<Vec<u8>>,
    /// The depth of `params.messages` while inside it.
    target: Option<usize>,
    /// Whether `params.messages` was found.
    found: bool,
    /// A message that is not an object or a list: its end is a delimiter, or its closing quote.
    scalar: bool,
    dest: Dest,
    skeleton: Vec<u8>,
    message: Vec<u8>,
    /// The line offset where the current message starts, and the bytes left out of the
    /// skeleton so far (for the offsets of errors).
    message_at: usize,
    removed: usize,
    offset: usize,
    messages: Vec<Value>,
    error: Option<Streamed>,
    counter: TokenCounter,
}

impl Scanner {
    fn new() -> Scanner {
        Scanner {
            stack: Vec::new(),
            in_string: false,
            escaped: false,
            key: None,
            target: None,
            found: false,
            scalar: false,
            dest: Dest::Skeleton,
            skeleton: Vec::new(),
            message: Vec::new(),
            message_at: 0,
            removed: 0,
            offset: 0,
            messages: Vec::new(),
            error: None,
            counter: TokenCounter::new(EstimatorChoice::Auto),
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

    /// Scans `chunk` (no newline in it), sending each run of bytes where it belongs.
    fn scan(&mut self, chunk: &[u8]) {
        let mut mark = 0;
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string {
                i = self.scan_string(chunk, i, &mut mark);
                continue;
            }
            let b = chunk[i];
            if self.scalar && matches!(b, b',' | b']' | b' ' | b'\t' | b'\r') {
                self.emit(&chunk[mark..i]);
                mark = i;
                self.end_message();
            }
            let in_target = self.target == Some(self.stack.len());
            if in_target && self.dest == Dest::Drop && !matches!(b, b',' | b']' | b' ' | b'\t' | b'\r') {
                // A message starts.
                self.emit(&chunk[mark..i]);
                mark = i;
                self.dest = Dest::Message;
                self.message_at = self.offset + i;
                self.scalar = !matches!(b, b'{' | b'[');
            }
            self.punctuation(chunk, i, &mut mark, in_target);
            i += 1;
        }
        self.emit(&chunk[mark..]);
        self.offset += chunk.len();
    }

    /// Handles the byte at `i` outside strings: strings open, containers open and close,
    /// keys end; `params.messages` starts and ends and its messages end here.
    fn punctuation(&mut self, chunk: &[u8], i: usize, mark: &mut usize, in_target: bool) {
        let b = chunk[i];
        match b {
            b'"' => {
                self.in_string = true;
                if self.stack.last().is_some_and(|f| f.object && f.expect_key) {
                    self.key = Some(Vec::new());
                }
            }
            b'{' | b'[' => {
                let opens_target = b == b'['
                    && self.stack.len() == 2
                    && self.stack[0].key == Key::Params
                    && self.stack[1].object
                    && self.stack[1].key == Key::Messages
                    && !self.found;
                self.stack.push(Frame { object: b == b'{', expect_key: b == b'{', key: Key::Other });
                if opens_target {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.target = Some(self.stack.len());
                    self.found = true;
                    self.dest = Dest::Drop;
                }
            }
            b'}' | b']' => {
                if in_target && self.dest == Dest::Drop {
                    // The end of `params.messages`.
                    self.emit(&chunk[*mark..i]);
                    *mark = i;
                    self.target = None;
                    self.dest = Dest::Skeleton;
                }
                self.stack.pop();
                if self.dest == Dest::Message && !self.scalar && self.target == Some(self.stack.len()) {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.end_message();
                }
            }
            b':' => {
                if let Some(f) = self.stack.last_mut().filter(|f| f.object) {
                    f.expect_key = false;
                }
            }
            b',' => {
                if let Some(f) = self.stack.last_mut().filter(|f| f.object) {
                    f.expect_key = true;
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
                    let kind = match key.as_slice() {
                        b"params" => Key::Params,
                        b"messages" => Key::Messages,
                        _ => Key::Other,
                    };
                    if let Some(f) = self.stack.last_mut() {
                        f.key = kind;
                    }
                }
                if self.scalar && self.dest == Dest::Message {
                    self.emit(&chunk[*mark..=i]);
                    *mark = i + 1;
                    self.end_message();
                }
                return i + 1;
            } else if let Some(key) = self.key.as_mut().filter(|k| k.len() < 16) {
                key.push(b);
            } else if self.key.is_none() {
                // Skip ahead to the next quote or backslash.
                let rest = &chunk[i..];
                match rest.iter().position(|c| *c == b'"' || *c == b'\\') {
                    Some(n) => {
                        i += n;
                        continue;
                    }
                    None => return chunk.len(),
                }
            }
            i += 1;
        }
        i
    }

    /// Parses and slims the message just read.
    fn end_message(&mut self) {
        self.scalar = false;
        self.dest = Dest::Drop;
        let bytes = std::mem::take(&mut self.message);
        if self.error.is_some() {
            return;
        }
        if let Err(e) = std::str::from_utf8(&bytes) {
            self.error = Some(Streamed::NotUtf8(self.message_at + e.valid_up_to()));
            return;
        }
        let index = self.messages.len();
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(mut message) => {
                slim_message(&mut message, &mut self.counter);
                self.counter.clear();
                self.messages.push(message);
            }
            Err(e) => {
                let e = RpcError::new(
                    code::PARSE,
                    format!("line is not a JSON-RPC object: {e} (in params.messages[{index}])"),
                );
                self.error = Some(Streamed::Request(Box::new(Err((None, e)))));
            }
        }
    }

    /// The request, once the whole line was scanned.
    fn finish(mut self) -> Streamed {
        if self.dest == Dest::Message && self.scalar {
            self.end_message();
        }
        if let Some(e) = self.error {
            return e;
        }
        let skeleton = match String::from_utf8(self.skeleton) {
            Ok(s) => s,
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                // Past the messages, the skeleton's offsets are short of what was cut out.
                return Streamed::NotUtf8(if self.found { at + self.removed } else { at });
            }
        };
        let request = protocol::decode(&skeleton).map(|mut request| {
            if let Some(slot) = self.found.then(|| request.params.get_mut("messages")).flatten() {
                *slot = Value::Array(self.messages);
            }
            request
        });
        Streamed::Request(Box::new(request))
    }
}

/// Slims a message as the mirror would keep it: its info and every part.
fn slim_message(message: &mut Value, counter: &mut TokenCounter) {
    if let Some(info) = message.get_mut("info") {
        slim::slim_info(info);
    }
    if let Some(Value::Array(parts)) = message.get_mut("parts") {
        for part in parts {
            slim::slim_part(part, counter);
        }
    }
}

/// What the reader holds of the current line: its bytes up to the newline, and whether the
/// newline (not part of `bytes`) ends them. The caller consumes what it used.
pub(super) struct Chunk<'a> {
    pub bytes: &'a [u8],
    pub newline: bool,
}

/// The next bytes of the current line, or `None` at the end of the input. Reading goes on
/// after an interrupted read.
pub(super) fn next_chunk<R: BufRead>(reader: &mut R) -> std::io::Result<Option<Chunk<'_>>> {
    loop {
        match reader.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    // The buffer is filled now, so this returns it without reading (at the end of the input
    // it asks once more and gets nothing again).
    let available = reader.fill_buf()?;
    if available.is_empty() {
        return Ok(None);
    }
    Ok(Some(match available.iter().position(|b| *b == b'\n') {
        Some(i) => Chunk { bytes: &available[..i], newline: true },
        None => Chunk { bytes: available, newline: false },
    }))
}

/// Reads the rest of a long line whose first bytes are `head`, as a stream, refusing it
/// past `max` bytes. The line ends at its newline, or at the end of the input.
pub fn read_rest<R: BufRead>(head: Vec<u8>, reader: &mut R, max: usize) -> std::io::Result<Streamed> {
    let mut scanner = Scanner::new();
    let mut total = head.len();
    scanner.scan(&head);
    drop(head);
    while let Some(Chunk { bytes: chunk, newline: found }) = next_chunk(reader)? {
        let n = chunk.len() + usize::from(found);
        total += n;
        if total > max {
            reader.consume(n);
            return skip_rest(reader, total, found);
        }
        scanner.scan(chunk);
        reader.consume(n);
        if found {
            break;
        }
    }
    Ok(scanner.finish())
}

/// Skips to the end of an over-long line; `total` bytes were read so far.
fn skip_rest<R: BufRead>(reader: &mut R, mut total: usize, mut found: bool) -> std::io::Result<Streamed> {
    while !found {
        let Some(chunk) = next_chunk(reader)? else { break };
        let n = chunk.bytes.len() + usize::from(chunk.newline);
        found = chunk.newline;
        total += n;
        reader.consume(n);
    }
    Ok(Streamed::TooLong(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stream(line: &str, head: usize, max: usize) -> Streamed {
        let bytes = line.as_bytes();
        let mut rest = std::io::BufReader::with_capacity(7, &bytes[head..]);
        read_rest(bytes[..head].to_vec(), &mut rest, max).unwrap()
    }

    #[test]
    fn a_streamed_request_is_the_request_read_whole_with_its_parts_slimmed() {
        let output = "line of output\n".repeat(100);
        let params = json!({"sessionID": "ses_a", "base": 0, "messages": [
            {"info": {"id": "msg_1", "role": "user", "tokens": {"input": 1}}, "parts": [
                {"id": "prt_1", "type": "text", "text": "say \"hi\" [{,}]", "sessionID": "ses_a"}]},
            {"id": "msg_2", "parts": [{"ref": "prt_2"}, {"id": "prt_3", "type": "tool", "tool": "bash",
                "callID": "c1", "state": {"status": "completed", "input": {"command": "ls"}, "output": output}}]},
            7, "odd", [1]
        ], "now": 5});
        let line = json!({"jsonrpc": "2.0", "id": 3, "method": "transform", "params": params}).to_string();
        let mut whole = protocol::decode(&line).unwrap();
        let counter = &mut TokenCounter::new(EstimatorChoice::Auto);
        for m in whole.params["messages"].as_array_mut().unwrap() {
            slim_message(m, counter);
        }
        for head in [1, 40, 200, line.len()] {
            let Streamed::Request(got) = stream(&line, head, 1 << 20) else { panic!("not a request") };
            let got = got.unwrap();
            assert_eq!(got, whole, "head {head}");
        }
        let out = whole.params["messages"][1]["parts"][1]["state"]["output"].as_str().unwrap();
        assert_eq!(slim::bytes(out), output.len());
        assert!(out.len() < 100);
    }

    #[test]
    fn a_streamed_line_over_the_limit_or_malformed_gets_the_errors_of_a_whole_one() {
        let line = format!("{{\"id\":1,\"method\":\"transform\",\"params\":{{\"messages\":[{}]}}}}\n", "1,".repeat(50));
        assert!(matches!(stream(&line, 10, 60), Streamed::TooLong(n) if n == line.len()));
        let bad = "{\"id\":1,\"method\":\"transform\",\"params\":{\"messages\":[{\"info\":{]}}\n";
        let Streamed::Request(got) = stream(bad, 5, 1000) else { panic!("not a request") };
        let (_, e) = got.unwrap_err();
        assert_eq!(e.code, code::PARSE);
        assert!(e.message.contains("params.messages[0]"), "{}", e.message);
        let mut not_utf8 = b"{\"id\":1,\"method\":\"transform\",\"params\":{\"messages\":[{\"a\":\"".to_vec();
        let at = not_utf8.len();
        not_utf8.extend(b"\xff\"}]}}\n");
        let mut rest = std::io::BufReader::new(&not_utf8[4..]);
        let got = read_rest(not_utf8[..4].to_vec(), &mut rest, 1000).unwrap();
        assert!(matches!(got, Streamed::NotUtf8(n) if n == at));
    }
}
