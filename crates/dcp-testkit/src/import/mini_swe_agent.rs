//! mini-swe-agent trajectories (`<instance>.traj.json`, `trajectory_format` `mini-swe-agent-1`
//! or `mini-swe-agent-1.1`).
//!
//! One JSON document: `info` (the run's configuration, model and version) and `messages`, the
//! conversation as the model was sent it: the system prompt, the task, then each assistant
//! message and the shell's answer. Format 1 writes the command as the one fenced `bash` block
//! of the assistant's text and answers with a user message; format 1.1 calls a `bash` function
//! and is answered by `tool` messages. Every command goes through the shell mapping, its answer
//! verbatim as the model read it (`<returncode>` and `<output>` included). A user message that
//! answers no command (the harness's complaint about a malformed reply) opens a new turn, as it
//! reaches the model as a prompt. The clock is recorded: format 1.1 stamps every message
//! (`extra.timestamp`), format 1 only the provider's `created` second of each response, so a
//! step then ends where the next request starts.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use super::model::{Call, Clock, Session, Span, Step, Tokens, Turn};
use super::shell::{shell_call, ShellRun};
use super::source::{str_at, ImportError};
use super::SourceMeta;

const ROOT: &str = "/testbed";

/// What the parser of one trajectory shares.
struct Context<'a> {
    messages: &'a [Value],
    root: String,
    /// Tool answers by call id (format 1.1).
    answers: HashMap<&'a str, &'a Value>,
}

/// Parses a mini-swe-agent trajectory into a session with its recorded clock.
pub fn parse(text: &str, meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| ImportError::new(file, Some(e.line()), format!("not JSON ({e})")))?;
    let Some(messages) = doc["messages"].as_array() else {
        return Err(ImportError::new(file, None, "no `messages` array: not a mini-swe-agent trajectory"));
    };
    let config = &doc["info"]["config"];
    let root = meta.directory.clone().unwrap_or_else(|| match str_at(&config["environment"], "cwd") {
        "" => ROOT.to_string(),
        cwd => cwd.to_string(),
    });
    let answers = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str).map(|id| (id, m)))
        .collect();
    let cx = Context { messages, root, answers };
    let turns = turns(&cx);
    let steps: Vec<&Step> = turns.iter().flat_map(|t| t.steps.iter()).collect();
    if steps.is_empty() {
        return Err(ImportError::new(file, None, "no assistant messages in `messages`"));
    }
    let start_ms = turns.first().and_then(|t| t.time_ms).unwrap_or(meta.end_ms);
    let name = str_at(&config["model"], "model_name");
    let mut parts = name.rsplit('/');
    let model = parts.next().unwrap_or("").to_string();
    let provider = parts.next().filter(|p| !p.is_empty()).unwrap_or("openai").to_string();
    let version = str_at(&doc["info"], "mini_version");
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: cx.root.clone(),
        provider,
        model: meta.model.clone().unwrap_or(model),
        harness: format!("mini-swe-agent {version}").trim().to_string(),
        turns,
        start_ms,
        duration_ms: None,
        clock: Clock::Recorded,
        totals: None,
    })
}

/// The turns: the task and the steps that answer it, and a new turn at every user message that
/// answers no command.
fn turns(cx: &Context<'_>) -> Vec<Turn> {
    let ms = cx.messages;
    let mut turns: Vec<Turn> = Vec::new();
    let mut i = 0;
    while i < ms.len() {
        let m = &ms[i];
        match m["role"].as_str().unwrap_or("") {
            "user" => {
                let time_ms = (i + 1..ms.len()).find(|&k| ms[k]["role"] == "assistant").map(|k| request_ms(cx, k));
                turns.push(Turn { prompt: text_of(&m["content"]), time_ms, ..Turn::default() });
                i += 1;
            }
            "assistant" => {
                let (step, next) = step(cx, i);
                if turns.is_empty() {
                    turns.push(Turn { time_ms: Some(request_ms(cx, i)), ..Turn::default() });
                }
                if let Some(turn) = turns.last_mut() {
                    turn.steps.push(step);
                }
                i = next;
            }
            _ => i += 1,
        }
    }
    turns.retain(|t| !t.steps.is_empty());
    turns
}

/// The step of the assistant message at `i` and the index of the first message after its answers.
fn step(cx: &Context<'_>, i: usize) -> (Step, usize) {
    let ms = cx.messages;
    let m = &ms[i];
    let done = response_ms(m).unwrap_or_else(|| request_ms(cx, i));
    let mut calls = Vec::new();
    let mut next = i + 1;
    let mut text = text_of(&m["content"]);
    if let Some(tool_calls) = m["tool_calls"].as_array().filter(|t| !t.is_empty()) {
        for tc in tool_calls {
            let args: Value = serde_json::from_str(str_at(&tc["function"], "arguments")).unwrap_or(json!({}));
            let answer = cx.answers.get(str_at(tc, "id")).copied();
            let output = answer.map(|a| text_of(&a["content"])).unwrap_or_default();
            let exit = answer.and_then(|a| a["extra"]["returncode"].as_i64());
            let end = answer.and_then(|a| stamp_ms(&a["extra"]["timestamp"])).unwrap_or(done + 1);
            calls.push(command_call(cx, (str_at(&args, "command"), &output, exit), Span { start: done, end }));
        }
        while ms.get(next).is_some_and(|t| t["role"] == "tool") {
            next += 1;
        }
    } else if let Some((command, rest)) = fenced_bash(&text) {
        let answer = ms.get(next).filter(|t| t["role"] == "user").map(|t| text_of(&t["content"]));
        next += usize::from(answer.is_some());
        let end = (next..ms.len()).find(|&k| ms[k]["role"] == "assistant").map_or(done + 1, |k| request_ms(cx, k) - 4);
        let output = answer.unwrap_or_default();
        let exit = returncode(&output);
        calls.push(command_call(cx, (&command, &output, exit), Span { start: done, end }));
        text = rest;
    }
    let end = calls.iter().map(|c| c.time.map_or(done, |s| s.end)).max().unwrap_or(done + 1);
    let tokens = tokens_of(&m["extra"]["response"]["usage"]);
    let reasoning = str_at(m, "reasoning_content").to_string();
    // The money the request cost: format 1.1 keeps it beside the response (`extra.cost`,
    // litellm's figure), an OpenRouter response in its usage (`usage.cost`).
    let cost = m["extra"]["cost"].as_f64().or_else(|| m["extra"]["response"]["usage"]["cost"].as_f64()).unwrap_or(0.0);
    let time = Some(Span { start: done, end });
    let step = Step { text, reasoning, calls, tokens, model_ms: None, time, cost };
    (step, next)
}

/// A shell command of the agent as an OpenCode call, with its recorded span.
fn command_call(cx: &Context<'_>, (command, output, exit): (&str, &str, Option<i64>), span: Span) -> Call {
    let run = ShellRun { command, output, cwd: &cx.root, root: &cx.root, exit, dur_ms: span.end - span.start };
    let mut call = shell_call(&run);
    call.time = Some(span);
    call
}

/// When the request of the assistant message at `i` was sent: the provider's `created` second,
/// or (format 1.1) the time of the answer before it when that is later.
fn request_ms(cx: &Context<'_>, i: usize) -> i64 {
    let m = &cx.messages[i];
    let created = m["extra"]["response"]["created"].as_i64().map(|s| s * 1000);
    let before = cx.messages[..i].iter().rev().find_map(|p| stamp_ms(&p["extra"]["timestamp"]));
    match (created, before, response_ms(m)) {
        (Some(c), Some(b), _) => c.max(b + 1),
        (Some(c), None, _) => c,
        (None, Some(b), _) => b + 1,
        (None, None, done) => done.unwrap_or(0) - 1,
    }
}

/// When the model's answer at `m` was recorded (format 1.1).
fn response_ms(m: &Value) -> Option<i64> {
    stamp_ms(&m["extra"]["timestamp"])
}

/// A Unix time in seconds (fractional) as milliseconds.
fn stamp_ms(v: &Value) -> Option<i64> {
    v.as_f64().map(|s| (s * 1000.0) as i64)
}

/// The command of the one fenced `bash` block of a format 1 reply, and the text around it.
fn fenced_bash(text: &str) -> Option<(String, String)> {
    let open = text.find("```bash")?;
    let body_start = open + text[open..].find('\n')? + 1;
    let close = body_start + text[body_start..].find("```")?;
    let command = text[body_start..close].trim_end_matches('\n').to_string();
    let rest = format!("{}{}", &text[..open], &text[close + 3..]).trim().to_string();
    Some((command, rest))
}

/// The exit status of an answer that opens with `<returncode>N</returncode>`.
fn returncode(output: &str) -> Option<i64> {
    let rest = output.trim_start().strip_prefix("<returncode>")?;
    rest[..rest.find("</returncode>")?].trim().parse().ok()
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().map(|b| str_at(b, "text")).collect(),
        _ => String::new(),
    }
}

/// An OpenAI-style usage block as the importer's token counts.
fn tokens_of(u: &Value) -> Tokens {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let cached = n(&u["prompt_tokens_details"]["cached_tokens"]);
    let reasoning = n(&u["completion_tokens_details"]["reasoning_tokens"]);
    Tokens {
        input: n(&u["prompt_tokens"]).saturating_sub(cached),
        output: n(&u["completion_tokens"]).saturating_sub(reasoning),
        reasoning,
        cache_read: cached,
        cache_write: 0,
        cache_write_1h: 0,
    }
}
