//! Claude Code's own transcripts (`~/.claude/projects/<dir>/<session>.jsonl`).
//!
//! Every line carries a `timestamp`, so the session keeps its real clock: the person's
//! prompts, their pauses, the model's and the tools' times. User lines with text are prompts
//! (consecutive ones join one user message); user lines with `tool_result` blocks answer the
//! calls; assistant lines sharing `message.id` make one step. Lines of subagents
//! (`isSidechain`) and bookkeeping lines (summaries, snapshots, `isMeta`) are left out.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::claude_tools::{claude_call, result_text, usage_tokens};
use super::model::{Clock, Session, Span, Step, Turn};
use super::source::{parse_time, str_at, ImportError, Record};
use super::SourceMeta;

/// What a transcript line is, for the parser.
enum Line<'a> {
    Prompt(String, i64),
    Results(&'a [Value], i64),
    Assistant(&'a Value, i64),
    Other,
}

fn classify<'a>(v: &'a Value, file: &Path, line: usize) -> Result<Line<'a>, ImportError> {
    let kind = str_at(v, "type");
    if !matches!(kind, "user" | "assistant") || v["isSidechain"] == true || v["isMeta"] == true {
        return Ok(Line::Other);
    }
    let Some(ts) = parse_time(str_at(v, "timestamp")) else {
        return Err(ImportError::new(file, Some(line), "a user or assistant line without a valid `timestamp`"));
    };
    let content = &v["message"]["content"];
    if kind == "assistant" {
        return Ok(Line::Assistant(&v["message"], ts));
    }
    if let Some(s) = content.as_str() {
        return Ok(Line::Prompt(s.to_string(), ts));
    }
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or(&[]);
    if blocks.iter().any(|b| b["type"] == "tool_result") {
        return Ok(Line::Results(blocks, ts));
    }
    let text: Vec<&str> = blocks.iter().filter(|b| b["type"] == "text").map(|b| str_at(b, "text")).collect();
    Ok(if text.is_empty() { Line::Other } else { Line::Prompt(text.join("\n"), ts) })
}

/// A step being gathered: its message id, parts, and the ids of its calls.
struct Open<'a> {
    id: String,
    messages: Vec<&'a Value>,
    span: Span,
    call_times: HashMap<String, i64>,
}

/// Parses a Claude Code transcript into a session with its recorded clock.
pub fn parse(records: &[Record], meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let mut results: HashMap<String, (String, bool, i64)> = HashMap::new();
    let mut lines = Vec::new();
    for r in records {
        let line = classify(&r.value, file, r.line)?;
        if let Line::Results(blocks, ts) = &line {
            for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                let out = result_text(b.get("content"));
                results.insert(str_at(b, "tool_use_id").to_string(), (out, b["is_error"] == true, *ts));
            }
        }
        lines.push(line);
    }
    let first = records.iter().find(|r| matches!(str_at(&r.value, "type"), "user" | "assistant"));
    let Some(first) = first else {
        return Err(ImportError::new(file, None, "no user or assistant lines: not a Claude Code transcript"));
    };
    let root = meta.directory.clone().unwrap_or_else(|| str_at(&first.value, "cwd").to_string());
    let turns = gather_turns(&lines, &results, &root);
    if turns.is_empty() {
        return Err(ImportError::new(file, None, "no user prompt found: not a Claude Code transcript"));
    }
    let model = lines.iter().find_map(|l| match l {
        Line::Assistant(m, _) => m.get("model").and_then(Value::as_str).filter(|s| !s.starts_with('<')),
        _ => None,
    });
    let version = str_at(&first.value, "version");
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: root,
        provider: "anthropic".into(),
        model: model.unwrap_or("claude").to_string(),
        harness: format!("Claude Code {version}").trim().to_string(),
        start_ms: turns[0].time_ms.unwrap_or(meta.end_ms),
        turns,
        duration_ms: None,
        clock: Clock::Recorded,
    })
}

fn gather_turns(lines: &[Line<'_>], results: &HashMap<String, (String, bool, i64)>, root: &str) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    let mut open: Option<Open<'_>> = None;
    for line in lines {
        match line {
            Line::Prompt(text, ts) => {
                close(&mut open, &mut turns, results, root);
                match turns.last_mut() {
                    Some(t) if t.steps.is_empty() => t.prompt = format!("{}\n\n{text}", t.prompt),
                    _ => turns.push(Turn { prompt: text.clone(), time_ms: Some(*ts), steps: Vec::new() }),
                }
            }
            Line::Assistant(m, ts) => {
                let id = str_at(m, "id");
                if open.as_ref().is_some_and(|o| o.id != id) {
                    close(&mut open, &mut turns, results, root);
                }
                if turns.is_empty() {
                    continue;
                }
                let o = open.get_or_insert_with(|| Open {
                    id: id.to_string(),
                    messages: Vec::new(),
                    span: Span { start: *ts, end: *ts },
                    call_times: HashMap::new(),
                });
                o.span.end = o.span.end.max(*ts);
                for b in m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_use") {
                    o.call_times.insert(str_at(b, "id").to_string(), *ts);
                }
                o.messages.push(m);
            }
            Line::Results(..) | Line::Other => {}
        }
    }
    close(&mut open, &mut turns, results, root);
    turns
}

fn close(open: &mut Option<Open<'_>>, turns: &mut [Turn], results: &HashMap<String, (String, bool, i64)>, root: &str) {
    let (Some(o), Some(turn)) = (open.take(), turns.last_mut()) else { return };
    let mut step = Step { time: Some(o.span), ..Step::default() };
    let (mut text, mut reasoning) = (Vec::new(), Vec::new());
    for m in &o.messages {
        if m.get("usage").is_some_and(|u| !u.is_null()) {
            step.tokens = usage_tokens(m.get("usage"));
        }
        for b in m["content"].as_array().into_iter().flatten() {
            match str_at(b, "type") {
                "text" => text.push(str_at(b, "text").to_string()),
                "thinking" => reasoning.push(str_at(b, "thinking").to_string()),
                "tool_use" => {
                    let id = str_at(b, "id");
                    let (out, err, end) = results.get(id).cloned().unwrap_or((String::new(), false, o.span.end));
                    let start = o.call_times.get(id).copied().unwrap_or(o.span.end);
                    let mut call = claude_call(b, &out, err, root);
                    call.time = Some(Span { start, end: end.max(start) });
                    step.calls.push(call);
                }
                _ => {}
            }
        }
    }
    step.text = text.join("\n\n");
    step.reasoning = reasoning.join("\n\n");
    turn.steps.push(step);
}
