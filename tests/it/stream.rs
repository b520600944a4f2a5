//! A long request line read as a stream (`dcp::sidecar::stream`) against the same line read
//! whole (`protocol::decode`, then each message slimmed): random valid lines and mutations of
//! them get the same request, or an error of the same code for the same id.

use dcp::sidecar::protocol::{self, Request};
use dcp::sidecar::stream::{read_rest, slim_message, Streamed};
use dcp::tokens::{EstimatorChoice, TokenCounter};
use dcp_testkit::gen::Rng;
use serde_json::{json, Value};

/// What a line came to, as far as the two reads must agree.
#[derive(Debug, PartialEq)]
enum Outcome {
    Request(Request),
    Error(i64, Option<Value>),
    NotUtf8(usize),
    Blank,
}

fn outcome(streamed: Streamed) -> Outcome {
    match streamed {
        Streamed::Request(r) => match *r {
            Ok(request) => Outcome::Request(request),
            Err((id, e)) => Outcome::Error(e.code, id),
        },
        Streamed::NotUtf8(at) => Outcome::NotUtf8(at),
        Streamed::Blank => Outcome::Blank,
        Streamed::TooLong(n) => panic!("a line of {n} bytes is under the limit"),
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

/// `line` streamed from its `head`th byte, through a reader buffer of `capacity` bytes.
fn streamed(line: &[u8], head: usize, capacity: usize) -> Outcome {
    let mut rest = std::io::BufReader::with_capacity(capacity, &line[head..]);
    outcome(read_rest(line[..head].to_vec(), &mut rest, usize::MAX).unwrap())
}

/// A transform line: generated messages with odd ones among them, in params between other
/// keys. Some lists get odd separators in their message list.
fn line(rng: &mut Rng) -> String {
    let spec = dcp_testkit::gen::SessionSpec { messages: rng.range(1, 8) as usize, steps: 0, seed: rng.next_u64() };
    let session = dcp_testkit::gen::session(&spec);
    let mut messages: Vec<String> = session.messages.iter().map(|m| serde_json::to_string(m).unwrap()).collect();
    let odd = ["7", r#""odd \"[,]\"""#, r#"[1,{"a":[]}]"#, "null", "{}", "-1.5e-3"];
    for _ in 0..rng.below(3) {
        let at = rng.below(messages.len() as u64 + 1) as usize;
        messages.insert(at, rng.pick(&odd).unwrap().to_string());
    }
    if rng.percent(5) {
        // Nested as deep as serde_json reads a line, give or take one.
        let depth = rng.range(123, 127) as usize;
        messages.push(format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
    }
    let separators = [",", ",", ",", ", ", " ,\t", ",,", "", " ", "]"];
    let mut list = String::from(if rng.percent(5) { "[," } else { "[" });
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            list.push_str(if rng.percent(10) { rng.pick(&separators).unwrap() } else { "," });
        }
        list.push_str(m);
    }
    list.push_str(if rng.percent(5) { ",]" } else { "]" });
    let mut params = serde_json::Map::new();
    params.insert("sessionID".into(), json!("ses_gen"));
    if rng.percent(50) {
        params.insert("base".into(), json!(0));
    }
    params.insert("messages".into(), json!("@messages@"));
    if rng.percent(50) {
        params.insert("now".into(), json!(1_790_000_000_000i64));
    }
    let mut line = json!({"jsonrpc": "2.0", "id": rng.below(100), "method": "transform", "params": params});
    if rng.percent(30) {
        line.as_object_mut().unwrap().shift_remove("id");
    }
    let mut line = line.to_string().replace("\"@messages@\"", &list);
    // A later `messages` in params, or a later `params`: the last one counts.
    let later = [r#","messages":[1,{"a":2}]}"#, r#","mess\u0061ges":5}"#, r#"},"params":{"messages":[3]"#];
    if rng.percent(15) {
        line.truncate(line.len() - 2);
        line.push_str(rng.pick(&later).unwrap());
        line.push('}');
    }
    line
}

/// Snippets a mutation inserts: separators, keys that repeat `params` and `messages`, bytes
/// that are not UTF-8.
const SNIPPETS: &[&[u8]] = &[
    b",",
    b"]",
    b"[",
    b"{",
    b"}",
    b"\"",
    b"\\",
    b" ",
    b":",
    b"x",
    b"1",
    b"\xff",
    b"\xc3",
    b"\t",
    b",\"messages\":[1]",
    b",\"params\":{\"messages\":[]}",
    b"\"messages\":",
    b",\"mess\\u0061ges\":[{}]",
    b"[[[[",
];

/// Mutates `line` once: a byte deleted, a snippet inserted, or a span repeated, mostly where
/// the structure is.
fn mutate(line: &mut Vec<u8>, rng: &mut Rng) {
    let structural: Vec<usize> =
        line.iter().enumerate().filter(|(_, b)| b"[]{},:\"".contains(b)).map(|(i, _)| i).collect();
    let at = match rng.percent(70) {
        true => *rng.pick(&structural).unwrap_or(&0),
        false => rng.below(line.len() as u64) as usize,
    };
    match rng.below(3) {
        0 if !line.is_empty() => {
            line.remove(at.min(line.len() - 1));
        }
        1 => {
            let snippet = rng.pick(SNIPPETS).unwrap();
            line.splice(at..at, snippet.iter().copied());
        }
        _ => {
            let end = (at + rng.range(1, 40) as usize).min(line.len());
            let span = line[at..end].to_vec();
            line.splice(at..at, span);
        }
    }
}

#[test]
fn a_streamed_line_gets_what_the_line_read_whole_gets() {
    let mut rng = Rng::new(17);
    let (mut requests, mut errors) = (0, 0);
    for case in 0..300 {
        let mut line = line(&mut rng).into_bytes();
        let mutations = if case % 2 == 0 { 0 } else { rng.range(1, 3) };
        for _ in 0..mutations {
            mutate(&mut line, &mut rng);
        }
        let expected = whole(&line);
        match &expected {
            Outcome::Request(_) => requests += 1,
            _ => errors += 1,
        }
        for _ in 0..2 {
            let head = rng.below(line.len() as u64 + 1) as usize;
            let capacity = rng.range(1, 64) as usize;
            let got = streamed(&line, head, capacity);
            assert!(
                got == expected,
                "case {case}, head {head}: {got:?} != {expected:?}\n{}",
                String::from_utf8_lossy(&line)
            );
        }
    }
    // Both kinds of answers were compared, so the comparison means something.
    assert!(requests >= 75 && errors >= 75, "{requests} requests, {errors} errors");
}
