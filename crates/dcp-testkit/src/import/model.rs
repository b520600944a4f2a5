//! The importer's intermediate form of a recorded agent session.
//!
//! Every source format parses into a [`Session`]: turns (one user prompt and the model steps
//! that answer it), steps (one model request each: text, reasoning, tool calls, tokens) and
//! calls already mapped onto OpenCode's tools. The writer turns it into OpenCode rows. Times
//! are either recorded by the source ([`Clock::Recorded`]) or left for the writer to estimate.

use serde_json::{Map, Value};

/// Where a session's times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The source carries a clock per message; the writer keeps it.
    Recorded,
    /// The source has no per-step clock; the writer spreads `duration_ms` (or a model of
    /// each step's length) over the steps.
    Estimated,
}

/// One recorded session, ready for the writer.
#[derive(Debug, Clone)]
pub struct Session {
    pub name: String,
    pub title: String,
    pub directory: String,
    pub provider: String,
    pub model: String,
    pub harness: String,
    pub turns: Vec<Turn>,
    /// When the session starts, in Unix milliseconds.
    pub start_ms: i64,
    /// The run's total wall time, when the source says it (estimated clocks only).
    pub duration_ms: Option<i64>,
    pub clock: Clock,
    /// What the log records for the whole run only (see [`Totals`]).
    pub totals: Option<Totals>,
}

/// The usage a log records for the whole run: token totals where its steps carry none
/// (`codex exec --json`'s `turn.completed`, SWE-agent's `model_stats`), and the money the
/// harness says the run cost (Claude Code's `result`). The writer puts it on the session's row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub tokens: Tokens,
    pub cost: f64,
}

impl Session {
    /// The model steps of every turn, in order.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.turns.iter().flat_map(|t| t.steps.iter())
    }
}

/// A user prompt and the steps that answer it, or a compaction: its first step is then the
/// summary that replaces the history before it.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub prompt: String,
    /// When the person sent it (recorded clocks).
    pub time_ms: Option<i64>,
    pub steps: Vec<Step>,
    pub compaction: Option<Trigger>,
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The context overflowed.
    Auto,
    /// The person asked (`/compact`).
    Manual,
}

/// A span of recorded time, in Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: i64,
    pub end: i64,
}

/// One model request: what the model wrote and the tools it called.
#[derive(Debug, Clone, Default)]
pub struct Step {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<Call>,
    pub tokens: Tokens,
    /// The model's own time, when known or modelled (estimated clocks).
    pub model_ms: Option<i64>,
    /// When the model's output was recorded: first and last record of the step.
    pub time: Option<Span>,
    /// The money the request cost, where the log records it (mini-swe-agent), else 0.
    pub cost: f64,
}

/// Token counts of one step, as the provider reported them, in OpenCode's terms: `input` is
/// the uncached input (an OpenAI-style `prompt_tokens` less its cached part), `cache_read` and
/// `cache_write` apart, `cache_write_1h` the part of the writes that went to Anthropic's
/// 1-hour cache. All zero where the log records no usage for the step: the importer never
/// makes one up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cache_write_1h: u64,
}

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Completed(String),
    Error(String),
}

/// One tool call, mapped onto an OpenCode tool.
#[derive(Debug, Clone)]
pub struct Call {
    pub tool: String,
    pub input: Value,
    pub outcome: Outcome,
    pub title: String,
    pub metadata: Map<String, Value>,
    /// The tool's run time (estimated clocks).
    pub dur_ms: i64,
    /// When the call was made and when its result came back (recorded clocks).
    pub time: Option<Span>,
    /// A subagent's session, written as a child session.
    pub child: Option<Box<Session>>,
}

impl Call {
    /// A completed call of `tool` with `input` that returned `output`.
    pub fn completed(tool: &str, input: Value, output: &str) -> Self {
        Call {
            tool: tool.to_string(),
            input,
            outcome: Outcome::Completed(output.to_string()),
            title: String::new(),
            metadata: Map::new(),
            dur_ms: 300,
            time: None,
            child: None,
        }
    }

    /// A failed call of `tool` with `input`, failing with `error`.
    pub fn failed(tool: &str, input: Value, error: &str) -> Self {
        Call { outcome: Outcome::Error(error.to_string()), ..Call::completed(tool, input, "") }
    }

    pub fn with_title(mut self, title: &str) -> Self {
        self.title = title.to_string();
        self
    }

    pub fn with_meta(mut self, key: &str, value: Value) -> Self {
        self.metadata.insert(key.to_string(), value);
        self
    }

    pub fn with_duration(mut self, ms: i64) -> Self {
        self.dur_ms = ms.max(5);
        self
    }

    /// The text the model saw back: the output or the error.
    pub fn result_text(&self) -> &str {
        match &self.outcome {
            Outcome::Completed(s) | Outcome::Error(s) => s,
        }
    }
}

/// A token estimate of `chars` characters of text (four to a token).
pub fn est_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// The length in characters of `s` (as the estimates count text).
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The length of `v` written as Python's `json.dumps` writes it (`", "` and `": "` between
/// items, non-ASCII escaped): the size the estimated clocks are modelled on, so that they match
/// the shared real sessions' converter.
pub fn dumps_len(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(b) => {
            if *b {
                4
            } else {
                5
            }
        }
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => dumps_str_len(s),
        Value::Array(a) => 2 + a.iter().map(dumps_len).sum::<usize>() + 2 * a.len().saturating_sub(1),
        Value::Object(o) => {
            2 + o.iter().map(|(k, v)| dumps_str_len(k) + 2 + dumps_len(v)).sum::<usize>()
                + 2 * o.len().saturating_sub(1)
        }
    }
}

fn dumps_str_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c if c.is_ascii() => 1,
            c if (c as u32) > 0xFFFF => 12,
            _ => 6,
        })
        .sum::<usize>()
}
