//! The usage of each API's answers, streamed and whole, as the APIs send them; cut short,
//! garbled and oversized answers; and the bytes the client gets, unchanged.

use super::*;

/// Anthropic Messages, streamed: usage in `message_start` and `message_delta`.
const ANTHROPIC_EVENTS: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":30000,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, usage: {\\\"output_tokens\\\": 999}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":57}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

/// Anthropic Messages, whole.
const ANTHROPIC_WHOLE: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":30000,"output_tokens":57}}"#;

/// Chat Completions, streamed with `stream_options.include_usage`: the usage in a last chunk
/// of no choices.
const CHAT_CHUNKS: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\r\n\r\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\r\n\r\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\r\n\r\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9000,\"completion_tokens\":40,\"total_tokens\":9040,\"prompt_tokens_details\":{\"cached_tokens\":8192},\"completion_tokens_details\":{\"reasoning_tokens\":16}}}\r\n\r\n\
data: [DONE]\r\n\r\n";

const CHAT_WHOLE: &str = r#"{"id":"c1","object":"chat.completion","model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9000,"completion_tokens":40,"total_tokens":9040,"prompt_tokens_details":{"cached_tokens":8192},"completion_tokens_details":{"reasoning_tokens":16}}}"#;

/// DeepSeek's Chat Completions: cache hits in `prompt_cache_hit_tokens`.
const DEEPSEEK_WHOLE: &str = r#"{"id":"d1","object":"chat.completion","model":"deepseek-chat","choices":[],"usage":{"prompt_tokens":9000,"completion_tokens":40,"total_tokens":9040,"prompt_cache_hit_tokens":6400,"prompt_cache_miss_tokens":2600}}"#;

/// Responses, streamed: the usage in `response.completed`.
const RESPONSES_EVENTS: &str = "event: response.created\n\
data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5-codex\",\"output\":[],\"usage\":null}}\n\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"gpt-5-codex\",\"output\":[],\"usage\":{\"input_tokens\":9000,\"input_tokens_details\":{\"cached_tokens\":8192},\"output_tokens\":40,\"output_tokens_details\":{\"reasoning_tokens\":16},\"total_tokens\":9040}}}\n\n";

const RESPONSES_WHOLE: &str = r#"{"id":"resp_1","object":"response","status":"completed","model":"gpt-5-codex","output":[],"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":8192},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":16},"total_tokens":9040}}"#;

fn anthropic_usage() -> Usage {
    Usage { input: 12, cache_write: 2048, cache_read: 30000, output: 57, ..Usage::default() }
}

/// What an OpenAI answer above bills: 8,192 of the 9,000 prompt tokens read from the cache, 16
/// of the 40 completion tokens reasoning.
fn openai_usage() -> Usage {
    Usage { input: 808, cache_read: 8192, output: 24, reasoning: 16, ..Usage::default() }
}

fn scan(api: Api, streamed: bool, body: &[u8], chunk: usize) -> (Option<(Usage, Option<String>)>, bool) {
    let mut scanner = UsageScanner::new(api, streamed, (!streamed).then_some(body.len() as u64));
    body.chunks(chunk.max(1)).for_each(|c| scanner.feed(c));
    let done = scanner.done();
    (scanner.finish(), done)
}

fn cases() -> Vec<(Api, bool, &'static str, Usage, &'static str)> {
    vec![
        (Api::Anthropic, true, ANTHROPIC_EVENTS, anthropic_usage(), "claude-sonnet-4-5"),
        (Api::Anthropic, false, ANTHROPIC_WHOLE, anthropic_usage(), "claude-sonnet-4-5"),
        (Api::Chat, true, CHAT_CHUNKS, openai_usage(), "gpt-4.1"),
        (Api::Chat, false, CHAT_WHOLE, openai_usage(), "gpt-4.1"),
        (Api::Responses, true, RESPONSES_EVENTS, openai_usage(), "gpt-5-codex"),
        (Api::Responses, false, RESPONSES_WHOLE, openai_usage(), "gpt-5-codex"),
    ]
}

#[test]
fn each_api_s_usage_is_read_streamed_and_whole_however_the_bytes_are_cut() {
    for (api, streamed, body, usage, model) in cases() {
        for chunk in [1, 2, 7, 64, 4096] {
            let (got, done) = scan(api, streamed, body.as_bytes(), chunk);
            assert_eq!(got, Some((usage, Some(model.to_string()))), "{api:?} streamed {streamed}, chunks of {chunk}");
            assert!(done, "{api:?} streamed {streamed}: the usage is whole before the answer ends");
        }
    }
    let deepseek = Usage { input: 2600, cache_read: 6400, output: 40, ..Usage::default() };
    assert_eq!(scan(Api::Chat, false, DEEPSEEK_WHOLE.as_bytes(), 9).0, Some((deepseek, Some("deepseek-chat".into()))));
}

#[test]
fn an_answer_cut_short_anywhere_or_garbled_reads_without_a_panic() {
    for (api, streamed, body, usage, _) in cases() {
        for end in 0..body.len() {
            let (got, _) = scan(api, streamed, &body.as_bytes()[..end], 5);
            // What a cut answer gives is at most what the whole one does, never more.
            if let Some((got, _)) = got {
                assert!(got.prompt() <= usage.prompt() && got.output <= usage.output, "{api:?} cut at {end}: {got:?}");
            }
        }
    }
    let garbled: Vec<&[u8]> = vec![
        b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"many\"}}\n\n",
        b"data: {not json\n\ndata: \xff\xfe\n\n",
        b"\x00\x01\x02\n\n\n",
        b"data: {\"usage\": [1, 2]}\n\n",
        b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":-4}}}\n",
    ];
    for bytes in garbled {
        for api in [Api::Anthropic, Api::Chat, Api::Responses] {
            for streamed in [true, false] {
                let (got, _) = scan(api, streamed, bytes, 3);
                assert!(got.is_none_or(|(u, _)| !u.is_empty()), "{api:?} {bytes:?}");
            }
        }
    }
}

#[test]
fn an_event_longer_than_the_bound_is_skipped_and_the_rest_still_read() {
    let big =
        format!("data: {{\"type\":\"content_block_delta\",\"delta\":{{\"text\":\"{}\"}}}}\n\n", "x".repeat(MAX_HELD));
    let body = format!("{big}{ANTHROPIC_EVENTS}");
    let mut scanner = UsageScanner::new(Api::Anthropic, true, None);
    for c in body.as_bytes().chunks(1 << 16) {
        scanner.feed(c);
        assert!(scanner.held.capacity() <= MAX_HELD + (1 << 16), "held {}", scanner.held.capacity());
    }
    assert_eq!(scanner.finish().map(|(u, _)| u), Some(anthropic_usage()));
    // A whole answer past the bound is not read.
    let whole = format!("{{\"pad\":\"{}\",\"usage\":{{\"input_tokens\":5}}}}", "x".repeat(MAX_HELD));
    assert_eq!(scan(Api::Anthropic, false, whole.as_bytes(), 1 << 16).0, None);
}

/// Runs `tap` over an answer of `frames` and returns what the client got and what was
/// reported (and how often).
fn tapped(frames: Vec<&'static str>, kind: &str, status: u16) -> (Vec<u8>, Vec<(Usage, Option<String>)>) {
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stream = body_of(frames);
    let answer = Response::builder().status(status).header("content-type", kind).body(stream).unwrap();
    let sink = std::sync::Arc::clone(&reports);
    let answer = tap(answer, Api::Anthropic, move |u, m| sink.lock().unwrap().push((u, m)));
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let got = runtime.block_on(answer.into_body().collect()).unwrap().to_bytes().to_vec();
    let reported = reports.lock().unwrap().clone();
    (got, reported)
}

/// A body of `frames`, each its own data frame.
fn body_of(frames: Vec<&'static str>) -> Body {
    struct Frames(std::collections::VecDeque<&'static str>);
    impl hyper::body::Body for Frames {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.0.pop_front().map(|f| Ok(Frame::data(Bytes::from(f)))))
        }
    }
    Frames(frames.into()).boxed_unsync()
}

#[test]
fn the_client_gets_every_byte_as_sent_and_the_usage_is_reported_once() {
    let cut = ANTHROPIC_EVENTS.len() / 2;
    let (first, second) = ANTHROPIC_EVENTS.split_at(cut);
    let (got, reported) = tapped(vec![first, second], "text/event-stream; charset=utf-8", 200);
    assert_eq!(got, ANTHROPIC_EVENTS.as_bytes());
    assert_eq!(reported, vec![(anthropic_usage(), Some("claude-sonnet-4-5".to_string()))]);
    // An error answer is handed back untouched and reports nothing.
    let (got, reported) = tapped(vec![r#"{"type":"error","usage":{"input_tokens":3}}"#], "application/json", 529);
    assert_eq!(got, br#"{"type":"error","usage":{"input_tokens":3}}"#);
    assert!(reported.is_empty());
    // Neither does a stream cut before any usage.
    let (got, reported) = tapped(vec!["event: ping\ndata: {\"type\": \"ping\"}\n\n"], "text/event-stream", 200);
    assert_eq!(got, b"event: ping\ndata: {\"type\": \"ping\"}\n\n");
    assert!(reported.is_empty());
}
