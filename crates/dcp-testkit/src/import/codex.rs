//! OpenAI Codex CLI `codex exec --json` event logs.
//!
//! Events a line: `item.completed` of `command_execution` (a shell command, its aggregated
//! output and exit code), `file_change` (edits and new files), `reasoning` and
//! `agent_message`; `todo_list` updates. Each command is one step (a reasoning item before it
//! joins that step); the agent's messages make the last step. The log has no clock: each
//! step gets a model time from its size, each command a run time from its output size. Usage
//! is recorded only per turn (`turn.completed`: `input_tokens`, cached ones included as
//! OpenAI counts them, `cached_input_tokens`, `output_tokens`): the steps carry none, and the
//! run's totals go on the session's row.

use std::path::Path;

use serde_json::{json, Value};

use super::model::{chars, dumps_len, Call, Clock, Session, Step, Tokens, Totals, Turn};
use super::shell::{relative, shell_call, unwrap_bash_lc, ShellRun};
use super::source::{str_at, ImportError, Record};
use super::SourceMeta;

/// Parses a `codex exec --json` log into a session.
pub fn parse(records: &[Record], meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    if !records.iter().any(|r| str_at(&r.value, "type").starts_with("item.") || r.value["type"] == "thread.started") {
        return Err(ImportError::new(file, None, "no `item.*` events: not a Codex `exec --json` log"));
    }
    let root = meta.directory.clone().unwrap_or_else(|| "/workspace".to_string());
    let prompt = meta.prompt.clone().unwrap_or_default();
    let mut steps: Vec<Step> = Vec::new();
    let mut final_text = String::new();
    let mut run = Tokens::default();
    for r in records {
        let (event, item) = (str_at(&r.value, "type"), &r.value["item"]);
        if event == "turn.completed" {
            run = add_usage(run, &r.value["usage"]);
            continue;
        }
        let call = match (event, str_at(item, "type")) {
            ("item.completed", "command_execution") => command(item, &root),
            ("item.completed", "file_change") => file_change(item, &root),
            ("item.started" | "item.updated", "todo_list") => todo_list(item),
            ("item.completed", "agent_message") => {
                final_text = format!("{final_text}\n\n{}", str_at(item, "text")).trim().to_string();
                continue;
            }
            ("item.completed", "reasoning") => {
                steps.push(Step { reasoning: str_at(item, "text").to_string(), ..Step::default() });
                continue;
            }
            _ => continue,
        };
        attach(&mut steps, call);
    }
    if !final_text.is_empty() {
        let model_ms = Some(4000 + chars(&final_text) as i64 * 8);
        steps.push(Step { text: final_text, model_ms, ..Step::default() });
    }
    let total: i64 =
        steps.iter().map(|s| s.model_ms.unwrap_or(3000) + s.calls.iter().map(|c| c.dur_ms).sum::<i64>()).sum();
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: root,
        provider: "openai".into(),
        model: meta.model.clone().unwrap_or_else(|| "gpt-5-codex".into()),
        harness: "Codex CLI exec --json".into(),
        turns: vec![Turn { prompt, time_ms: None, steps, compaction: None }],
        start_ms: meta.end_ms - total - 60_000,
        duration_ms: None,
        clock: Clock::Estimated,
        totals: (run != Tokens::default()).then_some(Totals { tokens: run, cost: 0.0 }),
    })
}

/// `run` with a turn's usage added, in OpenCode's terms (uncached input apart).
fn add_usage(run: Tokens, usage: &Value) -> Tokens {
    let n = |k: &str| usage[k].as_u64().unwrap_or(0);
    let cached = n("cached_input_tokens");
    Tokens {
        input: run.input + n("input_tokens").saturating_sub(cached),
        cache_read: run.cache_read + cached,
        output: run.output + n("output_tokens"),
        ..run
    }
}

/// Adds `call` as a step (or to the reasoning step before it).
fn attach(steps: &mut Vec<Step>, call: Call) {
    let model_ms = Some(3000 + dumps_len(&call.input) as i64 * 8);
    match steps.last_mut() {
        Some(s) if s.calls.is_empty() && s.model_ms.is_none() => {
            s.calls.push(call);
            s.model_ms = model_ms;
        }
        _ => steps.push(Step { calls: vec![call], model_ms, ..Step::default() }),
    }
}

fn command(item: &Value, root: &str) -> Call {
    let cmd = unwrap_bash_lc(str_at(item, "command"));
    let out = str_at(item, "aggregated_output");
    let run = ShellRun {
        command: &cmd,
        output: out,
        cwd: root,
        root,
        exit: item["exit_code"].as_i64(),
        dur_ms: 400 + chars(out) as i64 / 50,
    };
    shell_call(&run)
}

fn file_change(item: &Value, root: &str) -> Call {
    let changes = item["changes"].as_array().cloned().unwrap_or_default();
    let path = changes.first().map(|c| str_at(c, "path").to_string()).unwrap_or_default();
    let mut input = json!({"filePath": path});
    if changes.len() > 1 {
        input["files"] = changes.iter().map(|c| json!(str_at(c, "path"))).collect();
    }
    let tool = if changes.first().is_some_and(|c| c["kind"] == "add") { "write" } else { "edit" };
    Call::completed(tool, input, "").with_title(&relative(&path, root)).with_meta("changes", Value::Array(changes))
}

fn todo_list(item: &Value) -> Call {
    let todos: Vec<Value> = item["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| json!({"content": t["text"], "status": if t["completed"] == true { "completed" } else { "pending" }}))
        .collect();
    let open = todos.iter().filter(|t| t["status"] != "completed").count();
    let text = serde_json::to_string_pretty(&todos).unwrap_or_default();
    Call::completed("todowrite", json!({"todos": todos}), &text)
        .with_title(&format!("{open} todos"))
        .with_meta("todos", Value::Array(todos))
}
