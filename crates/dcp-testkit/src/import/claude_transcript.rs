//! Claude Code's own transcripts (`~/.claude/projects/<dir>/<session>.jsonl`).
//!
//! Every line carries a `timestamp`, so the session keeps its real clock: the person's
//! prompts, their pauses, the model's and the tools' times. User lines with text are prompts
//! (consecutive ones join one user message; shell escapes, command output and task
//! notifications are text the model reads too); user lines with `tool_result` blocks answer
//! the calls; assistant lines sharing `message.id` make one step. Bookkeeping lines
//! (summaries, snapshots, progress, `isMeta`) are left out. A compaction (`compact_boundary`
//! and the summary after it) becomes OpenCode's: a user message with a `compaction` part and
//! an assistant `summary` message, after which only the summary and what follows are sent. Subagents: Claude Code 2.1 writes
//! each to its own file (`agent-<agentId>.jsonl`, named in the Task call's result); given the
//! folder holding them, each becomes a child session. Older versions interleave subagent lines
//! (`isSidechain`) in the main file; those are left out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::claude_tools::{claude_call, result_text, usage_tokens};
use super::model::{Call, Clock, Session, Span, Step, Trigger, Turn};
use super::source::{json_lines, parse_time, read_text, str_at, ImportError, Record};
use super::SourceMeta;

/// Which lines of a transcript belong to the session being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// The main conversation: sidechain lines are another agent's.
    Main,
    /// A subagent's own file (every line is a sidechain line), this deep under the main one.
    Subagent(usize),
}

/// How deep subagent files are followed: a file that names itself (or a cycle) stops here.
const MAX_DEPTH: usize = 4;

/// What a transcript line is, for the parser.
enum Line<'a> {
    Prompt(String, i64),
    Assistant(&'a Value, i64),
    /// A `compact_boundary`: the history before it is replaced by the summary that follows.
    Compaction(Trigger, i64),
    /// The summary of a compaction (`isCompactSummary`).
    Summary(String, i64),
    Other,
}

/// A tool's answer: output, error flag, when it came back, and the subagent it started.
#[derive(Clone, Default)]
struct Answer {
    output: String,
    error: bool,
    time: i64,
    agent: Option<String>,
}

/// What the parser of one transcript shares.
struct Context<'a> {
    answers: HashMap<String, Answer>,
    root: String,
    meta: &'a SourceMeta,
    name: String,
    model: String,
    chain: Chain,
}

fn classify<'a>(v: &'a Value, chain: Chain, file: &Path, line: usize) -> Result<Line<'a>, ImportError> {
    let kind = str_at(v, "type");
    if kind == "system" && v["subtype"] == "compact_boundary" {
        let trigger = if v["compactMetadata"]["trigger"] == "manual" { Trigger::Manual } else { Trigger::Auto };
        return Ok(parse_time(str_at(v, "timestamp")).map_or(Line::Other, |ts| Line::Compaction(trigger, ts)));
    }
    let foreign = chain == Chain::Main && v["isSidechain"] == true;
    if !matches!(kind, "user" | "assistant") || foreign || v["isMeta"] == true {
        return Ok(Line::Other);
    }
    let Some(ts) = parse_time(str_at(v, "timestamp")) else {
        return Err(ImportError::new(file, Some(line), "a user or assistant line without a valid `timestamp`"));
    };
    let content = &v["message"]["content"];
    if kind == "assistant" {
        return Ok(Line::Assistant(&v["message"], ts));
    }
    if v["isCompactSummary"] == true {
        let text = content.as_str().map(str::to_string).unwrap_or_else(|| result_text(Some(content)));
        return Ok(Line::Summary(text, ts));
    }
    if let Some(s) = content.as_str() {
        return Ok(Line::Prompt(s.to_string(), ts));
    }
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or(&[]);
    if blocks.iter().any(|b| b["type"] == "tool_result") {
        return Ok(Line::Other);
    }
    let text: Vec<&str> = blocks.iter().filter(|b| b["type"] == "text").map(|b| str_at(b, "text")).collect();
    Ok(if text.is_empty() { Line::Other } else { Line::Prompt(text.join("\n"), ts) })
}

/// The answers of every `tool_result` block, by call id.
fn answers(records: &[Record]) -> HashMap<String, Answer> {
    let mut out = HashMap::new();
    for r in records.iter().filter(|r| r.value["type"] == "user") {
        let v = &r.value;
        let time = parse_time(str_at(v, "timestamp")).unwrap_or(0);
        let agent = v["toolUseResult"].get("agentId").and_then(Value::as_str).map(str::to_string);
        for b in v["message"]["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
            let answer = Answer {
                output: result_text(b.get("content")),
                error: b["is_error"] == true,
                time,
                agent: agent.clone(),
            };
            out.insert(str_at(b, "tool_use_id").to_string(), answer);
        }
    }
    out
}

/// Parses a Claude Code transcript into a session with its recorded clock.
/// A subagent's own file (every line a sidechain line) reads as that subagent's session.
pub fn parse(records: &[Record], meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let main = records
        .iter()
        .any(|r| matches!(str_at(&r.value, "type"), "user" | "assistant") && r.value["isSidechain"] != true);
    let chain = if main { Chain::Main } else { Chain::Subagent(0) };
    let mut session = parse_chain(records, meta, file, chain, &meta.name)?;
    session.title = meta.title.clone();
    Ok(session)
}

fn parse_chain(
    records: &[Record],
    meta: &SourceMeta,
    file: &Path,
    chain: Chain,
    name: &str,
) -> Result<Session, ImportError> {
    let lines = records.iter().map(|r| classify(&r.value, chain, file, r.line)).collect::<Result<Vec<_>, _>>()?;
    let first = records.iter().find(|r| matches!(str_at(&r.value, "type"), "user" | "assistant"));
    let Some(first) = first else {
        return Err(ImportError::new(file, None, "no user or assistant lines: not a Claude Code transcript"));
    };
    let model = lines.iter().find_map(|l| match l {
        Line::Assistant(m, _) => m.get("model").and_then(Value::as_str).filter(|s| !s.starts_with('<')),
        _ => None,
    });
    let cx = Context {
        answers: answers(records),
        root: meta.directory.clone().unwrap_or_else(|| str_at(&first.value, "cwd").to_string()),
        meta,
        name: name.to_string(),
        model: model.unwrap_or("claude").to_string(),
        chain,
    };
    let turns = gather_turns(&cx, &lines)?;
    if turns.is_empty() {
        return Err(ImportError::new(file, None, "no user prompt found: not a Claude Code transcript"));
    }
    let version = str_at(&first.value, "version");
    let title = if chain == Chain::Main { meta.title.clone() } else { format!("{name} (subagent)") };
    Ok(Session {
        name: name.to_string(),
        title,
        directory: cx.root.clone(),
        provider: "anthropic".into(),
        model: cx.model.clone(),
        harness: format!("Claude Code {version}").trim().to_string(),
        start_ms: turns[0].time_ms.unwrap_or(meta.end_ms),
        turns,
        duration_ms: None,
        clock: Clock::Recorded,
        totals: None,
    })
}

/// A step being gathered: its message id, parts, and when its calls were made.
struct Open<'a> {
    id: String,
    messages: Vec<&'a Value>,
    span: Span,
    call_times: HashMap<String, i64>,
}

fn gather_turns(cx: &Context<'_>, lines: &[Line<'_>]) -> Result<Vec<Turn>, ImportError> {
    let mut turns: Vec<Turn> = Vec::new();
    let mut open: Option<Open<'_>> = None;
    for line in lines {
        match line {
            Line::Prompt(text, ts) => {
                close(cx, &mut open, &mut turns)?;
                match turns.last_mut() {
                    Some(t) if t.steps.is_empty() && t.compaction.is_none() => {
                        t.prompt = format!("{}\n\n{text}", t.prompt)
                    }
                    _ => turns.push(Turn { prompt: text.clone(), time_ms: Some(*ts), ..Turn::default() }),
                }
            }
            Line::Compaction(trigger, ts) => {
                close(cx, &mut open, &mut turns)?;
                turns.push(Turn { time_ms: Some(*ts), compaction: Some(*trigger), ..Turn::default() });
            }
            Line::Summary(text, ts) => {
                close(cx, &mut open, &mut turns)?;
                match turns.last_mut() {
                    Some(t) if t.compaction.is_some() && t.steps.is_empty() => {
                        t.steps.push(Step {
                            text: text.clone(),
                            time: Some(Span { start: *ts, end: *ts }),
                            ..Step::default()
                        });
                    }
                    _ => turns.push(Turn { prompt: text.clone(), time_ms: Some(*ts), ..Turn::default() }),
                }
            }
            Line::Assistant(m, ts) => {
                let id = str_at(m, "id");
                if open.as_ref().is_some_and(|o| o.id != id) {
                    close(cx, &mut open, &mut turns)?;
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
            Line::Other => {}
        }
    }
    close(cx, &mut open, &mut turns)?;
    Ok(turns)
}

fn close(cx: &Context<'_>, open: &mut Option<Open<'_>>, turns: &mut [Turn]) -> Result<(), ImportError> {
    let (Some(o), Some(turn)) = (open.take(), turns.last_mut()) else { return Ok(()) };
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
                "tool_use" => step.calls.push(call_of(cx, &o, b)?),
                _ => {}
            }
        }
    }
    step.text = text.join("\n\n");
    step.reasoning = reasoning.join("\n\n");
    turn.steps.push(step);
    Ok(())
}

fn call_of(cx: &Context<'_>, o: &Open<'_>, block: &Value) -> Result<Call, ImportError> {
    let id = str_at(block, "id");
    let answer = cx.answers.get(id).cloned().unwrap_or(Answer { time: o.span.end, ..Answer::default() });
    let start = o.call_times.get(id).copied().unwrap_or(o.span.end);
    let mut call = claude_call(block, &answer.output, answer.error, &cx.root);
    call.time = Some(Span { start, end: answer.time.max(start) });
    let depth = match cx.chain {
        Chain::Main => 0,
        Chain::Subagent(d) => d + 1,
    };
    let file = subagent_file(cx.meta, answer.agent.as_deref()).filter(|_| depth < MAX_DEPTH);
    if let (Some(agent), Some(file)) = (&answer.agent, file) {
        let records = json_lines(&read_text(&file)?, &file)?;
        let child =
            parse_chain(&records, cx.meta, &file, Chain::Subagent(depth), &format!("{}/agent-{agent}", cx.name))?;
        call.child = Some(Box::new(child));
    }
    Ok(call)
}

/// The file of subagent `agent` in the session's subagent folder, if there is one.
fn subagent_file(meta: &SourceMeta, agent: Option<&str>) -> Option<PathBuf> {
    let dir = meta.subagents.as_ref()?;
    let agent = agent?;
    ["jsonl.gz", "jsonl"].iter().map(|ext| dir.join(format!("agent-{agent}.{ext}"))).find(|p| p.is_file())
}
