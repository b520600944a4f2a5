//! The stream against a whole read of the same line: the same request, the same error.

use serde_json::json;

use super::slimmers::Workers;
use super::*;
use crate::session::slim;
use crate::sidecar::protocol::{self, code};
use crate::tokens::{EstimatorChoice, TokenCounter};

/// `line` read as a stream: its first `head` bytes, then the rest through a buffer of 7.
fn stream(line: &str, head: usize, max: usize) -> Streamed {
    stream_on(line, head, max, Workers::for_this_machine())
}

/// [`stream`], its messages parsed and slimmed by `workers`.
fn stream_on(line: &str, head: usize, max: usize, workers: Workers) -> Streamed {
    let bytes = line.as_bytes();
    let mut rest = std::io::BufReader::with_capacity(7, &bytes[head..]);
    read_rest_on(bytes[..head].to_vec(), &mut rest, max, workers).unwrap()
}

/// What the messages of a line can be parsed and slimmed by: the scanner's thread, one
/// worker, and more workers than messages at times.
const WORKERS: [Workers; 3] = [Workers::Inline, Workers::Threads(1), Workers::Threads(3)];

/// `line` read whole, as the sidecar reads a short line, its messages slimmed as the stream
/// slims them.
fn whole(line: &[u8]) -> Streamed {
    let line = match std::str::from_utf8(line) {
        Ok(line) if line.trim().is_empty() => return Streamed::Blank,
        Ok(line) => line,
        Err(e) => return Streamed::NotUtf8(e.valid_up_to()),
    };
    let mut request = protocol::decode(line);
    if let Ok(Some(messages)) = request.as_mut().map(|r| r.messages.as_mut()) {
        for m in messages {
            let counter = &mut TokenCounter::new(EstimatorChoice::Auto);
            slim_message(m, counter);
        }
    }
    Streamed::Request(Box::new(request))
}

/// Checks that every split of `line` streams to what a whole read gives, however many
/// threads parse and slim its messages.
fn same_as_whole(line: &str) {
    let expected = whole(line.as_bytes());
    for workers in WORKERS {
        for head in [0, 1, line.len() / 2, line.len()] {
            assert_eq!(stream_on(line, head, 1 << 20, workers), expected, "{workers:?}: {line}");
        }
    }
}

fn transform(messages: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":3,"method":"transform","params":{{"sessionID":"s","messages":{messages}}}}}"#)
}

#[test]
fn a_streamed_request_is_the_request_read_whole_with_its_parts_slimmed() {
    let output = "line of output\n".repeat(100);
    let params = json!({"sessionID": "ses_a", "base": 0, "messages": [
        {"info": {"id": "msg_1", "role": "user", "tokens": {"input": 1}}, "parts": [
            {"id": "prt_1", "type": "text", "text": "say \"hi\" [{,}]", "sessionID": "ses_a"}]},
        {"id": "msg_2", "parts": [{"ref": "prt_2"}, {"id": "prt_3", "type": "tool", "tool": "bash",
            "callID": "c1", "state": {"status": "completed", "input": {"command": "ls"}, "output": output}}]},
        7, "odd", [1], "é", -0.5e3, null
    ], "now": 5});
    let line = json!({"jsonrpc": "2.0", "id": 3, "method": "transform", "params": params}).to_string();
    same_as_whole(&line);
    let Streamed::Request(got) = stream(&line, 40, 1 << 20) else { panic!("not a request") };
    let got = got.unwrap();
    let messages = got.messages.unwrap();
    let out = messages[1]["parts"][1]["state"]["output"].as_str().unwrap();
    assert_eq!(slim::bytes(out), output.len());
    assert!(out.len() < 100);
}

#[test]
fn a_line_over_the_limit_is_skipped_whole() {
    let line = format!("{{\"id\":1,\"method\":\"transform\",\"params\":{{\"messages\":[{}]}}}}\n", "1,".repeat(50));
    assert!(matches!(stream(&line, 10, 60), Streamed::TooLong(n) if n == line.len()));
}

#[test]
fn a_malformed_message_gets_the_error_of_a_whole_read_with_its_index() {
    let bad = transform(r#"[{"a":1},{"info":{]}]"#);
    let Streamed::Request(whole) = whole(bad.as_bytes()) else { panic!("not a request") };
    let Err((None, e)) = *whole else { panic!("no error") };
    let got = stream(&bad, 5, 1000);
    let expected = RpcError::new(code::PARSE, format!("{} (in params.messages[1])", e.message));
    assert_eq!(got, Streamed::Request(Box::new(Err((None, expected)))));
}

/// Review item 4: `[A,,B]`, `[,A]`, `[A,]` and `[A B]` were accepted as message lists.
#[test]
fn what_stands_between_messages_is_checked_as_a_whole_read_checks_it() {
    for messages in ["[1,,2]", "[,1]", "[1,]", "[{} {}]", "[{}{}]", "[\"a\"\"b\"]", "[1}", "[ 1 , 2 ]", "[]", "[ ]"] {
        same_as_whole(&transform(messages));
    }
}

/// Review item 4: the stream kept the first `messages` list, a whole read the last one.
#[test]
fn the_last_params_and_the_last_messages_count_as_in_a_whole_read() {
    let lines = [
        transform(r#"[1],"messages":[2]"#),
        transform(r#"[1],"messages":5"#),
        transform(r#"[1],"mess\u0061ges":[2,3]"#),
        r#"{"id":1,"method":"transform","params":{"messages":[1]},"params":{"messages":[2]}}"#.to_string(),
        r#"{"id":1,"method":"transform","params":{"messages":[1]},"params":{"sessionID":"s"}}"#.to_string(),
        r#"{"id":1,"method":"transform","params":{"messages":[1]},"params":7}"#.to_string(),
        r#"{"id":1,"method":"transform","params":[{"messages":[1]}]}"#.to_string(),
    ];
    for line in &lines {
        same_as_whole(line);
    }
}

/// Review item 4: errors in the skeleton were placed in the skeleton, not in the line.
#[test]
fn an_error_outside_the_messages_is_placed_in_the_line() {
    let after = format!("{}x", transform(r#"[{"a":"long enough to move the column"}]"#));
    let before = r#"{"id":1 "params":{"messages":[1,2]}}"#;
    let both = r#"{"id":1 "params":{"messages":[1,,2]}}"#;
    let open = r#"{"id":1,"params":{"messages":[{"a":1},2"#;
    for line in [after.as_str(), before, both, open] {
        same_as_whole(line);
    }
}

#[test]
fn a_line_not_in_utf8_is_refused_at_its_first_invalid_byte() {
    let valid = transform(r#"[{"a":"é"},"b"]"#);
    for at in [5, valid.find("é").unwrap() + 1, valid.find("b\"").unwrap(), valid.len() - 1] {
        let mut line = valid.as_bytes().to_vec();
        line[at] = 0xff;
        // In the middle of `é`, the character is invalid from its first byte.
        let first = if valid.as_bytes()[at - 1] == 0xc3 { at - 1 } else { at };
        assert_eq!(whole(&line), Streamed::NotUtf8(first));
        for head in [0, at, line.len()] {
            let mut rest = std::io::BufReader::with_capacity(3, &line[head..]);
            let got = read_rest(line[..head].to_vec(), &mut rest, 1000).unwrap();
            assert_eq!(got, Streamed::NotUtf8(first), "{at}");
        }
    }
}

#[test]
fn deep_messages_and_blank_lines_are_read_as_a_whole_read_reads_them() {
    let deep = |n: usize| transform(&format!("[{}{}]", "[".repeat(n), "]".repeat(n)));
    for n in [120, 124, 125, 126, 130] {
        same_as_whole(&deep(n));
    }
    same_as_whole(" \t \u{3000} ");
}

/// Found by the `stream_line` fuzz target: a scan stopped by an error (here, nesting too deep)
/// in the chunk that held the end of a character of the skeleton left the skeleton cut inside
/// that character, and the line was refused as not UTF-8.
#[test]
fn an_error_after_a_character_split_between_chunks_is_a_parse_error_not_one_of_utf8() {
    let line = format!(r#"{{"id":"é","deep":{}"#, "[".repeat(130));
    let split = line.find('é').unwrap() + 1;
    let mut rest = std::io::BufReader::with_capacity(1000, &line.as_bytes()[split..]);
    let got = read_rest(line.as_bytes()[..split].to_vec(), &mut rest, 1000).unwrap();
    assert_eq!(got, whole(line.as_bytes()));
}

#[test]
fn over_long_lines_are_skipped_and_reading_goes_on() {
    let input = format!("{}\n{{\"ok\":1}}\n", "x".repeat(100));
    let mut reader = std::io::BufReader::with_capacity(16, input.as_bytes());
    assert!(matches!(read_line(&mut reader, 50, 50).unwrap(), Line::TooLong(101)));
    match read_line(&mut reader, 50, 50).unwrap() {
        Line::Text(t) => assert_eq!(t, "{\"ok\":1}\n"),
        _ => panic!("expected the next line"),
    }
    assert!(matches!(read_line(&mut reader, 50, 50).unwrap(), Line::Eof));
}

/// The messages of a long line are parsed and slimmed on several threads: the same messages,
/// counted the same, in the line's order, and the first bad one is the one reported, as when
/// the scanner's thread did it all.
#[test]
fn messages_slimmed_on_several_threads_are_those_slimmed_on_one() {
    let outputs = ["fn main() {}\n", "error: something failed here\n", "é, ü and 中文 text\n"];
    let message = |i: usize| {
        let output = outputs[i % 3].repeat(40 + i % 97);
        json!({"info": {"id": format!("msg_{i}"), "role": "assistant"}, "parts": [
            {"id": format!("prt_{i}"), "type": "tool", "tool": "bash", "callID": format!("c{i}"),
             "state": {"status": "completed", "input": {"command": "x".repeat(i % 700)}, "output": output}}]})
        .to_string()
    };
    let mut messages: Vec<String> = (0..300).map(message).collect();
    same_as_whole(&transform(&format!("[{}]", messages.join(","))));
    // Bad messages: the first of two, the last, and one followed by a scan error. A whole
    // read's error does not say which message it is in.
    let same_error = |line: &str, index: usize| {
        let Streamed::Request(whole) = whole(line.as_bytes()) else { panic!("not a request") };
        let Err((None, e)) = *whole else { panic!("no error") };
        let expected = RpcError::new(code::PARSE, format!("{} (in params.messages[{index}])", e.message));
        for workers in WORKERS {
            for head in [0, line.len() / 3] {
                let got = stream_on(line, head, 1 << 20, workers);
                assert_eq!(got, Streamed::Request(Box::new(Err((None, expected.clone())))), "{workers:?}");
            }
        }
    };
    messages[250] = r#"{"info":{]}"#.to_string();
    messages[40] = r#"{"parts":[1,}"#.to_string();
    same_error(&transform(&format!("[{}]", messages.join(","))), 40);
    messages[40] = message(40);
    same_error(&transform(&format!("[{}]", messages.join(","))), 250);
    messages.truncate(251);
    same_error(&transform(&format!("[{}]", messages.join(","))), 250);
    same_error(&transform(&format!("[{},,1]", messages.join(","))), 250);
    // A bad message in a list a later list stands for.
    same_error(&transform(&format!(r#"[{}],"messages":[1,2]"#, messages.join(","))), 250);
    // A scan error before a bad message is the one reported.
    messages[250] = r#"{"info":{]}"#.to_string();
    messages[100] = "1,,2".to_string();
    same_as_whole(&transform(&format!("[{}]", messages.join(","))));
}
