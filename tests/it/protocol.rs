//! The sidecar's protocol layer under hostile lines: odd session ids, malformed requests,
//! lines that are not JSON, not UTF-8 or too long. Each gets an error that says why, nothing
//! is written, and the sidecar goes on serving.

use serde_json::{json, Value};

use crate::support::{bad_ids, tree, Sandbox, Sidecar};
use dcp::sidecar::protocol;

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes()
}

#[test]
fn odd_session_ids_are_refused_by_the_sidecar_and_nothing_is_written() {
    let s = Sandbox::new();
    let before = tree(s.dir.path());
    let mut sidecar = Sidecar::bare(&s, &[]);
    let messages = json!([{"info": {"id": "msg_1", "role": "user", "time": {"created": 1}}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}]);
    for id in bad_ids() {
        for line in [
            request(1, "transform", json!({"sessionID": id, "messages": messages})),
            request(2, "tool", json!({"sessionID": id, "name": "discard", "args": {"ids": ["1"]}})),
            request(3, "command", json!({"sessionID": id, "arguments": "sweep"})),
            request(4, "command", json!({"sessionID": id, "arguments": "stats"})),
        ] {
            let (code, message) = sidecar.error(&line);
            assert_eq!(code, -32602, "{message}");
            assert!(message.starts_with("invalid session id"), "{message}");
            assert!(message.len() < 400, "{message}");
        }
    }
    sidecar.still_serves();
    sidecar.shutdown();
    assert!(tree(s.dir.path()) == before, "something was written");
}

#[test]
fn malformed_protocol_lines_get_errors_and_the_sidecar_goes_on() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::bare(&s, &[]);
    for (what, line, code, needle) in malformed_lines() {
        if code == 0 {
            let answer = sidecar.send(&line);
            assert!(answer.get("result").is_some(), "{what}: {answer}");
            continue;
        }
        sidecar.refuses(&line, code, needle);
    }
    // A notification with bad params gets no answer, and the next request still works.
    sidecar.write(b"{\"jsonrpc\":\"2.0\",\"method\":\"transform\",\"params\":5}");
    sidecar.still_serves();
    sidecar.shutdown();
}

/// Malformed lines: what each is, its bytes, the error code it gets (0: none, it is served)
/// and what the message must say.
fn malformed_lines() -> Vec<(&'static str, Vec<u8>, i64, &'static str)> {
    let mut lines = malformed_envelopes();
    lines.extend(malformed_params());
    lines
}

/// Lines that are not a request, or a request with a bad method or version.
fn malformed_envelopes() -> Vec<(&'static str, Vec<u8>, i64, &'static str)> {
    vec![
        ("invalid JSON", b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".to_vec(), -32700, "not a JSON-RPC object"),
        ("a bare string", b"\"hello\"".to_vec(), -32600, "must be a JSON object, not a string"),
        ("unknown method", request(2, "frobnicate", json!({})), -32601, "\"frobnicate\""),
        ("missing method", br#"{"jsonrpc":"2.0","id":3}"#.to_vec(), -32600, "missing method"),
        (
            "a method that is a number",
            br#"{"jsonrpc":"2.0","id":4,"method":7}"#.to_vec(),
            -32600,
            "method must be a string",
        ),
        ("a wrong jsonrpc version", br#"{"jsonrpc":"1.0","id":13,"method":"system"}"#.to_vec(), -32600, "\"1.0\""),
    ]
}

/// Requests whose params do not fit their method, then a valid one.
fn malformed_params() -> Vec<(&'static str, Vec<u8>, i64, &'static str)> {
    let ok_message = json!({"info": {"id": "msg_1", "role": "user"}, "parts": []});
    vec![
        ("missing messages", request(5, "transform", json!({"sessionID": "ses_a"})), -32602, "`messages`"),
        ("missing sessionID", request(6, "transform", json!({"messages": []})), -32602, "`sessionID`"),
        (
            "messages not a list",
            request(7, "transform", json!({"sessionID": "ses_a", "messages": 5})),
            -32602,
            "invalid type",
        ),
        (
            "a message that is a string",
            request(8, "transform", json!({"sessionID": "ses_a", "messages": ["x"]})),
            -32602,
            "messages[0] is not an object",
        ),
        (
            "parts not a list",
            request(9, "transform", json!({"sessionID": "ses_a", "messages": [{"info": {"id": "m"}, "parts": {}}]})),
            -32602,
            "messages[0].parts is not a list",
        ),
        (
            "a tool name that is a number",
            request(10, "tool", json!({"sessionID": "ses_a", "name": 3})),
            -32602,
            "invalid type",
        ),
        ("params that are a string", request(11, "command", json!("stats")), -32602, "invalid params"),
        ("an unsupported protocol", request(12, "initialize", json!({"protocol": 99})), -32600, "protocol 99"),
        (
            "deeply nested params",
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"system\",\"params\":{}1{}}}",
                "[".repeat(100_000),
                "]".repeat(100_000)
            )
            .into_bytes(),
            -32700,
            "recursion limit",
        ),
        (
            "an unresolvable reference",
            request(15, "transform", json!({"sessionID": "ses_a", "messages": [{"id": "msg_9", "parts": []}]})),
            -32001,
            "msg_9",
        ),
        (
            "a valid request to check the mirror",
            request(16, "transform", json!({"sessionID": "ses_a", "messages": [ok_message]})),
            0,
            "",
        ),
    ]
}

#[test]
fn a_part_that_is_a_number_is_an_invalid_params_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::bare(&s, &[]);
    let line = request(
        1,
        "transform",
        json!({"sessionID": "ses_a", "messages": [{"info": {"id": "msg_1", "role": "user"}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}, 7]}]}),
    );
    sidecar.refuses(&line, -32602, "messages[0].parts[1] is not an object");
    sidecar.shutdown();
}

#[test]
fn a_json_array_line_is_not_a_request() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::bare(&s, &[]);
    // serde would read a struct from a list by position: this must not run `system`.
    sidecar.refuses(br#"["2.0", 1, "system", {}]"#, -32600, "must be a JSON object, not a list");
    sidecar.refuses(b"[]", -32600, "");
    sidecar.shutdown();
}

#[test]
fn a_line_that_is_not_utf8_is_a_parse_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::bare(&s, &[]);
    // The bytes sit inside a JSON string, where a lossy decoding would hide them.
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"command\",\"params\":{\"sessionID\":\"ses_a\",\"arguments\":\"st\xffats\"}}";
    sidecar.refuses(line, -32700, "UTF-8");
    sidecar.shutdown();
}

#[test]
fn an_oversized_line_is_skipped_and_the_sidecar_goes_on() {
    let s = Sandbox::new();
    // The real limit is 256 MiB; the line loop runs in process here, with a 4,096-byte limit,
    // so this costs nothing.
    let home = s.dir.path().join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::ServeOptions { data_dir: s.data(), env, project: None };
    let mut input = br#"{"jsonrpc":"2.0","id":1,"method":"system","params":{"pad":""#.to_vec();
    input.extend(std::iter::repeat_n(b'x', 10_000));
    input.extend(b"\"}}\n");
    input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"system\",\"params\":{}}\n");
    let mut output = Vec::new();
    let limits = dcp::sidecar::stream::LineLimits { max: 4096, ..Default::default() };
    dcp::sidecar::serve_on(options, std::io::Cursor::new(input), &mut output, limits).unwrap();
    let answers: Vec<Value> =
        output.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert_eq!(answers[0]["error"]["code"], -32002, "{message}");
    assert!(message.contains("4096"), "{message}");
    // The next line is served.
    assert_eq!(answers[1]["id"], 2);
    assert!(answers[1]["result"]["system"].is_array(), "{}", answers[1]);
}

#[test]
fn a_long_malformed_message_is_cut_in_the_error() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::bare(&s, &[]);
    let info = "é".repeat(100_000);
    let line = request(1, "transform", json!({"sessionID": "ses_a", "messages": [{"info": info}]}));
    let message = sidecar.refuses(&line, -32602, "messages[0].info is not an object");
    assert!(message.len() < 200, "{message}");
    sidecar.shutdown();
}

#[test]
fn malformed_lines_get_errors_that_say_why() {
    let (id, e) = protocol::decode("{not json").unwrap_err();
    assert_eq!((id, e.code), (None, protocol::code::PARSE));
    let (id, e) = protocol::decode(r#"{"jsonrpc":"2.0","id":4}"#).unwrap_err();
    assert_eq!((id, e.code, e.message.as_str()), (Some(json!(4)), protocol::code::INVALID_REQUEST, "missing method"));
    let (_, e) = protocol::decode(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).unwrap_err();
    assert!(e.message.contains("1.0"));
    let (_, e) = protocol::decode(r#"{"id":1,"method":7}"#).unwrap_err();
    assert!(e.message.contains("method must be a string"));
    let r = protocol::decode(r#"{"jsonrpc":"2.0","method":"event","params":{"type":"x"}}"#).unwrap();
    assert_eq!(r.id, None);
}
