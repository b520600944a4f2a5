//! Claude Code `--output-format stream-json` logs (`claude -p`, the Agent SDK).
//!
//! One JSON event a line: `system/init` (cwd, model, version), `assistant` messages (a model
//! message is split over several lines sharing `message.id`), `user` lines carrying
//! `tool_result` blocks, and a final `result` with the run's `duration_ms`. Lines with a
//! `parent_tool_use_id` belong to the subagent that Task call started: they become a child
//! session. The log has no per-step clock, so times are estimated: the run's duration is
//! spread over the steps in proportion to their size. A `system/compact_boundary` (Claude Code
//! compacted the conversation) and the summary the next user line carries become OpenCode's
//! compaction: later requests carry the summary, not what it replaced. Each assistant line
//! keeps the usage it reports, the 1-hour cache writes apart; the `result` line's
//! `total_cost_usd` is the run's cost.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::claude_tools::{claude_call, result_text, usage_tokens};
use super::model::{Clock, Session, Step, Tokens, Totals, Trigger, Turn};
use super::source::{str_at, ImportError, Record};
use super::SourceMeta;

struct Context<'a> {
    root: String,
    model: String,
    results: HashMap<String, (String, bool)>,
    chains: HashMap<Option<String>, Vec<&'a Value>>,
    name: String,
}

/// Parses a stream-json log into a session.
pub fn parse(records: &[Record], meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let init = records.iter().map(|r| &r.value).find(|v| v["type"] == "system" && v["subtype"] == "init");
    let Some(init) = init else {
        return Err(ImportError::new(file, None, "no `system`/`init` event: not a Claude Code stream-json log"));
    };
    let result = records.iter().map(|r| &r.value).find(|v| v["type"] == "result");
    let mut cx = Context {
        root: meta.directory.clone().unwrap_or_else(|| str_at(init, "cwd").to_string()),
        model: str_at(init, "model").to_string(),
        results: HashMap::new(),
        chains: HashMap::new(),
        name: meta.name.clone(),
    };
    for r in records {
        let v = &r.value;
        if v["type"] == "user" {
            for b in v["message"]["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_result" {
                    let out = result_text(b.get("content"));
                    cx.results.insert(str_at(b, "tool_use_id").to_string(), (out, b["is_error"] == true));
                }
            }
        }
        let parent = v.get("parent_tool_use_id").and_then(Value::as_str).map(str::to_string);
        cx.chains.entry(parent).or_default().push(v);
    }
    let prompt = meta.prompt.clone().unwrap_or_default();
    let turns = main_turns(&cx, prompt);
    let duration = result.and_then(|r| r["duration_ms"].as_i64()).filter(|d| *d > 0);
    let cost = result.and_then(|r| r["total_cost_usd"].as_f64()).filter(|c| *c > 0.0);
    // Each assistant line carries the usage as streamed when the message started: its input
    // and cache counts are whole, its output is not (1 to 25 tokens). The `result` line has the
    // run's output.
    let output = result.and_then(|r| r["usage"]["output_tokens"].as_u64()).unwrap_or(0);
    let version = str_at(init, "claude_code_version");
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: cx.root.clone(),
        provider: "anthropic".into(),
        model: cx.model.clone(),
        harness: format!("Claude Code {version}").trim().to_string(),
        turns,
        start_ms: meta.end_ms - duration.unwrap_or(0) - 60_000,
        duration_ms: duration,
        clock: Clock::Estimated,
        totals: Some(Totals { tokens: Tokens { output, ..Tokens::default() }, cost: cost.unwrap_or(0.0) }),
    })
}

/// The main agent's turns: the prompt's, then one per compaction, opened by its summary.
fn main_turns(cx: &Context<'_>, prompt: String) -> Vec<Turn> {
    let mut turns = vec![Turn { prompt, ..Turn::default() }];
    let mut lines: Vec<&Value> = Vec::new();
    let mut summary_next = false;
    for v in cx.chains.get(&None).into_iter().flatten().copied() {
        if v["type"] == "system" && v["subtype"] == "compact_boundary" {
            close_turn(cx, &mut turns, &mut lines);
            let manual = v["compact_metadata"]["trigger"] == "manual";
            turns.push(Turn {
                compaction: Some(if manual { Trigger::Manual } else { Trigger::Auto }),
                ..Turn::default()
            });
            summary_next = true;
        } else if summary_next && v["type"] == "user" {
            let text = summary_text(&v["message"]["content"]);
            if let (Some(text), Some(turn)) = (text, turns.last_mut()) {
                turn.steps.push(Step { text, ..Step::default() });
                summary_next = false;
            }
        } else {
            lines.push(v);
        }
    }
    close_turn(cx, &mut turns, &mut lines);
    turns
}

/// Adds the steps of `lines` to the last turn.
fn close_turn<'a>(cx: &Context<'a>, turns: &mut [Turn], lines: &mut Vec<&'a Value>) {
    if let Some(turn) = turns.last_mut() {
        turn.steps.extend(steps_of(cx, lines));
    }
    lines.clear();
}

/// The text of a user line that carries a compaction's summary: text, not tool results.
fn summary_text(content: &Value) -> Option<String> {
    if let Some(s) = content.as_str() {
        return Some(s.to_string());
    }
    let blocks = content.as_array()?;
    if blocks.iter().any(|b| b["type"] == "tool_result") {
        return None;
    }
    let text: Vec<&str> = blocks.iter().filter(|b| b["type"] == "text").map(|b| str_at(b, "text")).collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// The steps of the chain under `parent` (a subagent), its own subagents as children.
fn build(cx: &Context<'_>, parent: &str) -> Vec<Step> {
    let lines: Vec<&Value> = cx.chains.get(&Some(parent.to_string())).into_iter().flatten().copied().collect();
    steps_of(cx, &lines)
}

/// The steps of `lines`: assistant lines grouped by message id, in order.
fn steps_of(cx: &Context<'_>, lines: &[&Value]) -> Vec<Step> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_id: HashMap<&str, Vec<&Value>> = HashMap::new();
    for v in lines.iter().copied() {
        if v["type"] != "assistant" || !v["message"].is_object() {
            continue;
        }
        let id = str_at(&v["message"], "id");
        if !by_id.contains_key(id) {
            order.push(id);
        }
        by_id.entry(id).or_default().push(&v["message"]);
    }
    order.iter().map(|id| step_of(cx, &by_id[id])).collect()
}

fn step_of(cx: &Context<'_>, parts: &[&Value]) -> Step {
    let mut step = Step::default();
    let (mut text, mut reasoning) = (Vec::new(), Vec::new());
    for m in parts {
        if m.get("usage").is_some_and(|u| !u.is_null()) {
            step.tokens = usage_tokens(m.get("usage"));
        }
        for b in m["content"].as_array().into_iter().flatten() {
            match str_at(b, "type") {
                "text" => text.push(str_at(b, "text").to_string()),
                "thinking" => reasoning.push(str_at(b, "thinking").to_string()),
                "tool_use" => {
                    let id = str_at(b, "id");
                    let (out, err) = cx.results.get(id).cloned().unwrap_or_default();
                    let mut call = claude_call(b, &out, err, &cx.root);
                    if call.tool == "task" {
                        call.child = subagent(cx, b, id);
                    }
                    step.calls.push(call);
                }
                _ => {}
            }
        }
    }
    step.text = text.join("\n\n");
    step.reasoning = reasoning.join("\n\n");
    step
}

fn subagent(cx: &Context<'_>, block: &Value, id: &str) -> Option<Box<Session>> {
    if !cx.chains.contains_key(&Some(id.to_string())) {
        return None;
    }
    let input = &block["input"];
    let kind = input.get("subagent_type").and_then(Value::as_str).unwrap_or("general");
    let description = input.get("description").and_then(Value::as_str).unwrap_or("subagent");
    Some(Box::new(Session {
        name: format!("{}/{id}", cx.name),
        title: format!("{description} (@{kind} subagent)"),
        directory: cx.root.clone(),
        provider: "anthropic".into(),
        model: cx.model.clone(),
        harness: "Claude Code subagent".into(),
        turns: vec![Turn {
            prompt: str_at(input, "prompt").to_string(),
            time_ms: None,
            steps: build(cx, id),
            compaction: None,
        }],
        start_ms: 0,
        duration_ms: None,
        clock: Clock::Estimated,
        totals: None,
    }))
}
