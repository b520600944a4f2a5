//! What the upstream's answer says it billed (its `usage`), read as the answer goes to the
//! client, and recorded for the conversation beside what dcp counted
//! (`crate::sidecar::usage`).
//!
//! Each API says it in its own fields: Anthropic Messages in `usage` (`input_tokens`,
//! `cache_read_input_tokens`, `cache_creation_input_tokens`, `output_tokens`), streamed in
//! `message_start` and `message_delta`; Chat Completions in `usage` (`prompt_tokens` with
//! `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`;
//! `completion_tokens` with `completion_tokens_details.reasoning_tokens`), streamed in the last
//! chunk when the request asked for it (`stream_options.include_usage`); Responses in
//! `response.usage` (`input_tokens` with `input_tokens_details.cached_tokens`, `output_tokens`
//! with `output_tokens_details.reasoning_tokens`), streamed in `response.completed`. The
//! OpenAI APIs count cached and reasoning tokens inside the prompt and completion tokens: they
//! are taken out of `input` and `output`, so that the kinds add up to what was billed.
//!
//! [`tap`] hands the client every frame of the answer as the upstream sent it, when it sent it:
//! the [`UsageScanner`] reads copies. It holds at most one event line, or a whole JSON answer, of
//! [`MAX_HELD`] bytes; a longer one is skipped, never buffered. What is not JSON, a truncated
//! stream, an answer without usage: nothing is recorded, and nothing else happens. The usage
//! is recorded as soon as the frame that completes it is read, before the client has it, so a
//! client's next request cannot come before it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::Response;
use serde_json::Value;

use super::convert::Api;
use super::forward::{Body, BoxError};
use crate::state::savings::Usage;

/// The most the scanner holds at once: one event line, or a whole JSON answer.
pub const MAX_HELD: usize = 4 << 20;

/// Reads an answer's usage from its bytes, as they come.
#[derive(Debug)]
pub struct UsageScanner {
    api: Api,
    streamed: bool,
    held: Vec<u8>,
    /// A line (or answer) past [`MAX_HELD`] is being skipped.
    skipping: bool,
    usage: Option<Usage>,
    /// The model the answer names.
    model: Option<String>,
    /// The usage is whole (the event that completes it was read).
    done: bool,
    /// The bytes of a whole JSON answer, when `Content-Length` said.
    expected: Option<u64>,
    seen: u64,
}

impl UsageScanner {
    /// A scanner of an answer for `api`: server-sent events when `streamed`, else one JSON
    /// value, of `expected` bytes when known.
    pub fn new(api: Api, streamed: bool, expected: Option<u64>) -> UsageScanner {
        let held = Vec::new();
        UsageScanner { api, streamed, held, skipping: false, usage: None, model: None, done: false, expected, seen: 0 }
    }

    /// Reads `bytes`, the next of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        if self.done {
            return;
        }
        if !self.streamed {
            self.hold(bytes);
            if self.expected.is_some_and(|n| self.seen >= n) {
                self.whole();
            }
            return;
        }
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            self.hold(&rest[..at]);
            let line = std::mem::take(&mut self.held);
            if !std::mem::take(&mut self.skipping) {
                self.line(&line);
            }
            self.held = line;
            self.held.clear();
            rest = &rest[at + 1..];
        }
        self.hold(rest);
    }

    /// The answer ended: the usage read, if its answer said one, and the model it named.
    pub fn finish(mut self) -> Option<(Usage, Option<String>)> {
        if !self.streamed && !self.done {
            self.whole();
        }
        if self.streamed && !self.done && !self.skipping && !self.held.is_empty() {
            let line = std::mem::take(&mut self.held);
            self.line(&line);
        }
        let model = self.model;
        self.usage.filter(|u| !u.is_empty()).map(|u| (u, model))
    }

    /// Whether the usage is whole: the rest of the answer can say nothing more of it.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Holds `bytes`, unless that would pass [`MAX_HELD`]: then what is held is dropped and
    /// the rest of the line (or answer) skipped.
    fn hold(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.held.len() + bytes.len() > MAX_HELD {
            self.held = Vec::new();
            self.skipping = true;
            return;
        }
        self.held.extend_from_slice(bytes);
    }

    /// A whole JSON answer.
    fn whole(&mut self) {
        if self.skipping {
            return;
        }
        if let Ok(value) = serde_json::from_slice::<Value>(&self.held) {
            self.note_model(value.get("model").or_else(|| value.pointer("/response/model")));
            let usage = match self.api {
                Api::Responses if value.get("usage").is_none() => value.pointer("/response/usage").cloned(),
                _ => value.get("usage").cloned(),
            };
            if let Some(usage) = usage.filter(Value::is_object) {
                self.merge(&usage);
            }
        }
        self.held = Vec::new();
        self.done = true;
    }

    /// One line of a server-sent event stream: its `data:` JSON, if it holds usage.
    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.trim_ascii();
        if data.is_empty() {
            return;
        }
        if data == b"[DONE]" {
            self.done = self.usage.is_some();
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else { return };
        let kind = event["type"].as_str().unwrap_or("");
        let named =
            event.get("model").or_else(|| event.pointer("/message/model")).or_else(|| event.pointer("/response/model"));
        self.note_model(named);
        match self.api {
            Api::Anthropic => match kind {
                "message_start" => self.merge_at(&event, "/message/usage"),
                "message_delta" => {
                    self.merge_at(&event, "/usage");
                    self.done = self.usage.is_some();
                }
                _ => {}
            },
            Api::Chat => {
                if event.get("usage").is_some_and(Value::is_object) {
                    self.merge_at(&event, "/usage");
                    // OpenAI's usage chunk comes last, with no choices; a server that counts
                    // in every chunk is read to its end.
                    self.done = event["choices"].as_array().is_some_and(Vec::is_empty);
                }
            }
            Api::Responses => {
                if matches!(kind, "response.completed" | "response.incomplete" | "response.failed" | "response.done") {
                    self.merge_at(&event, "/response/usage");
                    self.done = self.usage.is_some();
                }
            }
        }
    }

    /// Keeps the model an answer names (a short printable name only).
    fn note_model(&mut self, named: Option<&Value>) {
        let name = named.and_then(Value::as_str).filter(|m| m.len() <= 200 && !m.chars().any(char::is_control));
        if let Some(name) = name.filter(|_| self.model.is_none()) {
            self.model = Some(name.to_string());
        }
    }

    fn merge_at(&mut self, event: &Value, pointer: &str) {
        if let Some(usage) = event.pointer(pointer).filter(|u| u.is_object()) {
            self.merge(usage);
        }
    }

    /// Takes in what `usage` (the API's object) says: a field it holds replaces the one read
    /// before (a later event's counts are the whole answer's).
    fn merge(&mut self, usage: &Value) {
        let n = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
        let mut u = self.usage.unwrap_or_default();
        match self.api {
            Api::Anthropic => {
                u.input = n("/input_tokens").unwrap_or(u.input);
                u.cache_read = n("/cache_read_input_tokens").unwrap_or(u.cache_read);
                u.cache_write = n("/cache_creation_input_tokens").unwrap_or(u.cache_write);
                u.output = n("/output_tokens").unwrap_or(u.output);
            }
            Api::Chat | Api::Responses => {
                let chat = self.api == Api::Chat;
                let (prompt, completion) = if chat { ("prompt", "completion") } else { ("input", "output") };
                let cached =
                    n(&format!("/{prompt}_tokens_details/cached_tokens")).or_else(|| n("/prompt_cache_hit_tokens"));
                let reasoning = n(&format!("/{completion}_tokens_details/reasoning_tokens")).unwrap_or(0);
                let (prompt, completion) = (n(&format!("/{prompt}_tokens")), n(&format!("/{completion}_tokens")));
                let cached = cached.unwrap_or(0).min(prompt.unwrap_or(0));
                u.input = prompt.map_or(u.input, |p| p - cached);
                u.cache_read = prompt.map_or(u.cache_read, |_| cached);
                u.reasoning = completion.map_or(u.reasoning, |c| reasoning.min(c));
                u.output = completion.map_or(u.output, |c| c - reasoning.min(c));
            }
        }
        self.usage = Some(u);
    }
}

/// An answer body that hands every frame on unchanged, reading a copy with a [`UsageScanner`], and
/// calls `report` once with the usage and the model, as soon as it is whole (or when the
/// answer ends).
struct Tapped<F: FnOnce(Usage, Option<String>)> {
    inner: Body,
    scanner: Option<UsageScanner>,
    report: Option<F>,
}

impl<F: FnOnce(Usage, Option<String>)> Tapped<F> {
    fn settle(&mut self) {
        let (Some(scanner), Some(report)) = (self.scanner.take(), self.report.take()) else { return };
        if let Some((usage, model)) = scanner.finish() {
            report(usage, model);
        }
    }
}

impl<F: FnOnce(Usage, Option<String>) + Unpin> hyper::body::Body for Tapped<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(scanner)) = (frame.data_ref(), self.scanner.as_mut()) {
                    scanner.feed(data);
                    if scanner.done() {
                        self.settle();
                    }
                }
            }
            Poll::Ready(_) => self.settle(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(Usage, Option<String>)> Drop for Tapped<F> {
    fn drop(&mut self) {
        // A client that went away before the end: what was read is all there is.
        self.settle();
    }
}

/// `answer` with its body read for the usage it says, which goes to `report` with the model it
/// names: a successful answer of one of the APIs, streamed or one JSON value. Anything else is
/// handed back as it was.
pub fn tap(
    answer: Response<Body>,
    api: Api,
    report: impl FnOnce(Usage, Option<String>) + Send + Unpin + 'static,
) -> Response<Body> {
    if !answer.status().is_success() {
        return answer;
    }
    let header = |name: hyper::header::HeaderName| answer.headers().get(name).and_then(|v| v.to_str().ok());
    let kind = header(hyper::header::CONTENT_TYPE).unwrap_or("").to_ascii_lowercase();
    let streamed = kind.starts_with("text/event-stream");
    if !streamed && !kind.contains("json") {
        return answer;
    }
    let expected = header(hyper::header::CONTENT_LENGTH).and_then(|v| v.parse().ok());
    let scanner = Some(UsageScanner::new(api, streamed, expected));
    answer.map(|inner| Tapped { inner, scanner, report: Some(report) }.boxed_unsync())
}

/// `answer` tapped for its usage ([`tap`]), reported to `billing` (the conversation of a
/// request the engine read) with the model it names, served by `upstream`'s host.
pub fn record(
    answer: Response<Body>,
    api: Api,
    billing: Option<super::engine::Billing>,
    upstream: &super::forward::Upstream,
) -> Response<Body> {
    let Some(billing) = billing else { return answer };
    let uri: Option<hyper::Uri> = upstream.to_string().parse().ok();
    let provider = uri.as_ref().and_then(hyper::Uri::host).unwrap_or("").to_string();
    tap(answer, api, move |usage, model| {
        let model = model.map(|id| crate::state::savings::Model { provider, id, ..Default::default() });
        billing.report(usage, model);
    })
}
