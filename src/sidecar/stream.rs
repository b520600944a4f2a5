//! Reading request lines from the plugin: a line of at most [`LineLimits::max`] bytes, read
//! whole when short, and as a stream when long: message by message, never whole.
//!
//! A first `transform` carries the whole history: 16 MB at 2,000 messages, 150 MB at 20,000.
//! Read whole and parsed whole, it costs the line plus its value tree (over three times the
//! JSON) before the mirror can slim a single part. So a line longer than
//! [`LineLimits::stream_from`] is scanned as it arrives ([`scanner`]): the elements of
//! `params.messages` are cut out one at a time, parsed and slimmed ([`slim_message`]), and the
//! answer is the one the line read whole would get. A line over the size limit or not in
//! UTF-8 is reported as such and skipped; reading goes on.

mod scanner;
mod slimmers;
mod utf8;

use std::io::BufRead;

use serde_json::Value;

use self::scanner::LineScanner;
pub use self::scanner::Streamed;
pub use self::slimmers::slim_message;
use self::slimmers::Workers;
use super::protocol::{Request, RpcError, MAX_LINE_BYTES};

/// How long a request line may be, and from what length it is read as a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineLimits {
    /// Longer lines are refused (and skipped).
    pub max: usize,
    /// Longer lines are read as a stream.
    pub stream_from: usize,
}

impl Default for LineLimits {
    fn default() -> LineLimits {
        LineLimits { max: MAX_LINE_BYTES, stream_from: 1 << 20 }
    }
}

/// One line of the input, as read.
pub(super) enum Line {
    Text(String),
    /// A long line, read as a stream.
    Parsed(Box<Result<Request, (Option<Value>, RpcError)>>),
    /// The first bytes of a line longer than [`LineLimits::stream_from`], to be read as a stream.
    Head(Vec<u8>),
    TooLong(usize),
    /// Not UTF-8: the offset of the first invalid byte.
    NotUtf8(usize),
    /// A long line of white space.
    Blank,
    Eof,
}

/// What the reader holds of the current line: its bytes up to the newline, and whether the
/// newline (not part of `bytes`) ends them. The caller consumes what it used.
struct Chunk<'a> {
    bytes: &'a [u8],
    newline: bool,
}

/// The next bytes of the current line, or `None` at the end of the input. Reading goes on
/// after an interrupted read.
fn next_chunk<R: BufRead>(reader: &mut R) -> std::io::Result<Option<Chunk<'_>>> {
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

fn text_line(buf: Vec<u8>) -> Line {
    match String::from_utf8(buf) {
        Ok(text) => Line::Text(text),
        Err(e) => Line::NotUtf8(e.utf8_error().valid_up_to()),
    }
}

/// Reads one line: a line of at most `max` bytes, or the first bytes of a line longer than
/// `stream_from` ([`Line::Head`]). A line over `max` is consumed and reported.
fn read_line<R: BufRead>(reader: &mut R, max: usize, stream_from: usize) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let mut skipped = 0usize;
    loop {
        let Some(Chunk { bytes, newline: found }) = next_chunk(reader)? else {
            return Ok(match (buf.is_empty(), skipped) {
                (true, 0) => Line::Eof,
                (_, 0) => text_line(buf),
                (_, n) => Line::TooLong(n),
            });
        };
        let n = bytes.len() + usize::from(found);
        if !found && skipped == 0 && buf.len() + n > stream_from && buf.len() + n <= max {
            buf.extend_from_slice(bytes);
            reader.consume(n);
            return Ok(Line::Head(buf));
        }
        if skipped > 0 || buf.len() + n > max {
            skipped += buf.len() + n;
            buf.clear();
        } else {
            // The line keeps its newline, as `BufRead::read_line` would.
            buf.extend_from_slice(bytes);
            if found {
                buf.push(b'\n');
            }
        }
        reader.consume(n);
        if found {
            return Ok(if skipped > 0 { Line::TooLong(skipped) } else { text_line(buf) });
        }
    }
}

/// Reads the next line whole, or as a stream when it is longer than `limits.stream_from`.
pub(super) fn read_request_line<R: BufRead>(reader: &mut R, limits: LineLimits) -> std::io::Result<Line> {
    match read_line(reader, limits.max, limits.stream_from)? {
        Line::Head(head) => read_rest(head, reader, limits.max).map(|s| match s {
            Streamed::Request(r) => Line::Parsed(r),
            Streamed::TooLong(n) => Line::TooLong(n),
            Streamed::NotUtf8(at) => Line::NotUtf8(at),
            Streamed::Blank => Line::Blank,
        }),
        other => Ok(other),
    }
}

/// Reads the rest of a long line whose first bytes are `head`, as a stream, refusing it
/// past `max` bytes. The line ends at its newline, or at the end of the input.
pub fn read_rest<R: BufRead>(head: Vec<u8>, reader: &mut R, max: usize) -> std::io::Result<Streamed> {
    read_rest_on(head, reader, max, Workers::for_this_machine())
}

/// [`read_rest`], its messages parsed and slimmed by `workers`.
fn read_rest_on<R: BufRead>(head: Vec<u8>, reader: &mut R, max: usize, workers: Workers) -> std::io::Result<Streamed> {
    let mut scanner = LineScanner::new(workers);
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
mod tests;
