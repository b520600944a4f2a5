//! The prompt cache of a caching provider, for the fake upstreams: each answer's usage says
//! what a provider that caches exact prompt prefixes for a while would have billed, in each
//! API's fields, so that what dcp records of the usage and what it says it saved can be held
//! to what was "billed".
//!
//! A prompt is the pieces the provider reads, in order (the system prompt, the tools, each
//! message or content block), each counted in o200k tokens plus a few for its frame. The
//! longest run of leading pieces equal to those of a prompt the cache holds is read from the
//! cache; the rest is written to it, and the prompt is kept for `ttl` after its last use.
//! Piece by piece, as `dcp replay` bills (`src/replay/cost.rs`); real providers cache in blocks
//! of tokens, which this leaves out.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use dcp::tokens::{EstimatorChoice, TokenCounter};

/// Tokens each piece costs besides its text: the role and the API's framing.
const FRAME: u64 = 4;

/// What one request was billed, in tokens: every prompt token, those read from the cache,
/// those written to it, and the last piece's when it was not cached (what an Anthropic-style
/// API bills as plain input, after the client's last cache breakpoint).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    pub prompt: u64,
    pub cached: u64,
    pub written: u64,
    pub last: u64,
}

impl Billed {
    /// An OpenAI Chat Completions `usage` with `output` completion tokens.
    pub fn chat(&self, output: u64) -> serde_json::Value {
        serde_json::json!({"prompt_tokens": self.prompt, "completion_tokens": output,
            "total_tokens": self.prompt + output, "prompt_tokens_details": {"cached_tokens": self.cached}})
    }

    /// An Anthropic Messages `usage`: what was read, written, and the plain input after it.
    pub fn anthropic(&self, output: u64) -> serde_json::Value {
        serde_json::json!({"input_tokens": self.last, "cache_read_input_tokens": self.cached,
            "cache_creation_input_tokens": self.written - self.last, "output_tokens": output})
    }

    /// An OpenAI Responses `usage`.
    pub fn responses(&self, output: u64) -> serde_json::Value {
        serde_json::json!({"input_tokens": self.prompt, "input_tokens_details": {"cached_tokens": self.cached},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt + output})
    }
}

/// The cache: the prompts it holds (each piece's digest and tokens) and when each was last used.
pub struct PromptCache {
    ttl: Duration,
    held: Vec<(Vec<(u64, u64)>, Instant)>,
    counter: TokenCounter,
}

impl PromptCache {
    pub fn new(ttl: Duration) -> PromptCache {
        PromptCache { ttl, held: Vec::new(), counter: TokenCounter::new(EstimatorChoice::Auto) }
    }

    /// Bills the prompt made of `pieces`, and keeps it.
    pub fn bill(&mut self, pieces: &[String]) -> Billed {
        let now = Instant::now();
        self.held.retain(|(_, used)| now.duration_since(*used) <= self.ttl);
        let prompt: Vec<(u64, u64)> = pieces.iter().map(|p| (digest(p), self.counter.count(p) + FRAME)).collect();
        let shared = |held: &[(u64, u64)]| held.iter().zip(&prompt).take_while(|(a, b)| a.0 == b.0).count();
        let best = self.held.iter_mut().max_by_key(|(held, _)| shared(held));
        let n = best.map_or(0, |(held, used)| {
            let n = shared(held);
            if n > 0 {
                *used = now;
            }
            n
        });
        let total: u64 = prompt.iter().map(|p| p.1).sum();
        let cached: u64 = prompt[..n].iter().map(|p| p.1).sum();
        let last = if n < prompt.len() { prompt.last().map_or(0, |p| p.1) } else { 0 };
        self.held.push((prompt, now));
        Billed { prompt: total, cached, written: total - cached, last }
    }
}

fn digest(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The pieces of an OpenAI Chat Completions request: its tools, then each message (its role,
/// its text and its tool calls).
pub fn chat_pieces(body: &serde_json::Value) -> Vec<String> {
    let mut pieces = vec![body["tools"].to_string()];
    for m in body["messages"].as_array().into_iter().flatten() {
        let text = super::fake_llm::content_text(&m["content"]);
        pieces.push(format!("{}\n{text}\n{}", m["role"].as_str().unwrap_or(""), m["tool_calls"]));
    }
    pieces
}

/// The pieces of an Anthropic Messages request: its system prompt, its tools, then each
/// content block of each message.
pub fn anthropic_pieces(body: &serde_json::Value) -> Vec<String> {
    let mut pieces = vec![body["system"].to_string(), body["tools"].to_string()];
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            serde_json::Value::Array(blocks) => pieces.extend(blocks.iter().map(block_text)),
            other => pieces.push(super::fake_llm::content_text(other)),
        }
    }
    pieces
}

/// A content block as the model reads it: its text, or its JSON without the client's cache
/// markers (which move from request to request and are no content).
fn block_text(block: &serde_json::Value) -> String {
    let mut block = block.clone();
    if let Some(o) = block.as_object_mut() {
        o.remove("cache_control");
    }
    block["text"].as_str().map_or_else(|| block.to_string(), str::to_string)
}

/// The pieces of an OpenAI Responses request: its instructions, its tools, then each input
/// item.
pub fn responses_pieces(body: &serde_json::Value) -> Vec<String> {
    let mut pieces = vec![body["instructions"].to_string(), body["tools"].to_string()];
    pieces.extend(body["input"].as_array().into_iter().flatten().map(|i| i.to_string()));
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_that_repeats_the_last_one_reads_it_from_the_cache_until_the_ttl() {
        let mut cache = PromptCache::new(Duration::from_millis(200));
        let p = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let first = cache.bill(&p(&["system prompt", "hello"]));
        assert_eq!((first.cached, first.written), (0, first.prompt));
        let next = cache.bill(&p(&["system prompt", "hello", "more"]));
        assert_eq!(next.cached, first.prompt);
        assert_eq!(next.written, next.prompt - first.prompt);
        // A changed piece: what follows it is written again.
        let changed = cache.bill(&p(&["system prompt", "HELLO", "more"]));
        assert!(changed.cached > 0 && changed.cached < first.prompt);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(cache.bill(&p(&["system prompt", "hello", "more"])).cached, 0, "expired");
    }
}
