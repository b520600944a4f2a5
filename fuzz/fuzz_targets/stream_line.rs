//! Streamed lines: the input's first line (up to its `\n`) is read as `dcp serve` reads a long
//! request line, as a stream (`sidecar::stream::read_rest`), and as it reads a short one
//! (`protocol::decode`, then each message slimmed with `stream::slim_message`). The two must
//! agree: the same request, or an error of the same code for the same id, the same offset of
//! the first byte that is not UTF-8, or no request for a blank line. The first input byte
//! chooses where the stream starts and how small its reader's buffer is, so any line is
//! streamed, whatever its length.

#![no_main]

use dcp::sidecar::protocol::{self, Request};
use dcp::sidecar::stream::{read_rest, slim_message, Streamed};
use dcp::tokens::{EstimatorChoice, TokenCounter};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// What a line came to, as far as the two reads must agree.
#[derive(Debug, PartialEq)]
enum Outcome {
    Request(Request),
    Error(i64, Option<Value>),
    NotUtf8(usize),
    Blank,
    TooLong,
}

fn outcome(streamed: Streamed) -> Outcome {
    match streamed {
        Streamed::Request(r) => match *r {
            Ok(request) => Outcome::Request(request),
            Err((id, e)) => Outcome::Error(e.code, id),
        },
        Streamed::NotUtf8(at) => Outcome::NotUtf8(at),
        Streamed::Blank => Outcome::Blank,
        Streamed::TooLong(_) => Outcome::TooLong,
    }
}

/// `line` read whole, as the sidecar reads a short line, its messages slimmed.
fn whole(line: &[u8]) -> Outcome {
    let line = match std::str::from_utf8(line) {
        Ok(line) if line.trim().is_empty() => return Outcome::Blank,
        Ok(line) => line,
        Err(e) => return Outcome::NotUtf8(e.valid_up_to()),
    };
    let mut request = protocol::decode(line);
    if let Ok(Some(messages)) = request.as_mut().map(|r| r.messages.as_mut()) {
        for m in messages {
            slim_message(m, &mut TokenCounter::new(EstimatorChoice::Auto));
        }
    }
    outcome(Streamed::Request(Box::new(request)))
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else { return };
    let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
    let head = usize::from(choice >> 3).min(line.len());
    let capacity = usize::from(choice & 7) + 1;
    let mut reader = std::io::BufReader::with_capacity(capacity, &line[head..]);
    let streamed = outcome(read_rest(line[..head].to_vec(), &mut reader, usize::MAX).expect("a slice reads"));
    assert_eq!(streamed, whole(line), "{}", String::from_utf8_lossy(line));
});
