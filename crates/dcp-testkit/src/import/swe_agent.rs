//! SWE-agent 1.x trajectories (`.traj`, function calling).
//!
//! One JSON document: `history` (the messages sent to the model: system, the task, each
//! assistant message with its `tool_calls`, each `tool` answer), `trajectory` (per action the
//! execution time) and `replay_config` (model and API base). The editor's `view`, `create`,
//! `str_replace` and `insert` become `read`, `write` and `edit`; `bash` goes through the
//! shell mapping; `submit` stays a command. Tool answers are matched by position (some models
//! reuse call ids). There is no per-step clock: times are estimated from sizes and the
//! recorded execution times. Usage is recorded only for the run (`info.model_stats`:
//! `tokens_sent`, `tokens_received`, `instance_cost`), and only by runs that called a paid API:
//! the steps carry none, and the run's totals go on the session's row.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use super::model::{chars, dumps_len, Call, Clock, Session, Step, Tokens, Totals, Turn};
use super::shell::{bash_call, relative, shell_call, ShellRun, META_MAX};
use super::source::{str_at, ImportError};
use super::SourceMeta;

const ROOT: &str = "/testbed";
const EDITOR_ERRORS: [&str; 7] = [
    "No replacement was performed",
    "Invalid `view_range`",
    "The path ",
    "The parent directory ",
    "File already exists at",
    "Invalid `insert_line`",
    "No edit history found",
];

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().map(|b| str_at(b, "text")).collect(),
        _ => String::new(),
    }
}

/// Parses a SWE-agent trajectory into a session.
pub fn parse(text: &str, meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| ImportError::new(file, Some(e.line()), format!("not JSON ({e})")))?;
    let Some(history) = doc["history"].as_array() else {
        return Err(ImportError::new(file, None, "no `history` array: not a SWE-agent trajectory"));
    };
    let config: Value = doc["replay_config"].as_str().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Value::Null);
    let model_cfg = &config["agent"]["model"];
    let model = str_at(model_cfg, "name").rsplit('/').next().unwrap_or("").to_string();
    let provider = if str_at(model_cfg, "api_base").contains("anthropic") || model.contains("claude") {
        "anthropic"
    } else {
        "openai"
    };
    let mut exec_ms: HashMap<String, Vec<i64>> = HashMap::new();
    for s in doc["trajectory"].as_array().into_iter().flatten() {
        let ms = (1000.0 * s["execution_time"].as_f64().unwrap_or(0.2)) as i64;
        exec_ms.entry(str_at(s, "action").to_string()).or_default().push(ms);
    }
    let prompt = history.iter().find(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
    let mut steps = Vec::new();
    for (i, m) in history.iter().enumerate().filter(|(_, m)| m["role"] == "assistant") {
        let dur = exec_ms.get(str_at(m, "action")).and_then(|v| v.first().copied()).unwrap_or(300);
        let calls = step_calls(m, &history[i + 1..], dur);
        let text = text_of(&m["content"]);
        let out_chars = chars(&text) + calls.iter().map(|c| dumps_len(&c.input)).sum::<usize>();
        steps.push(Step { text, calls, model_ms: Some(2500 + out_chars as i64 * 8), ..Step::default() });
    }
    if steps.is_empty() {
        return Err(ImportError::new(file, None, "no assistant messages in `history`"));
    }
    let total: i64 =
        steps.iter().map(|s| s.model_ms.unwrap_or(0) + s.calls.iter().map(|c| c.dur_ms).sum::<i64>()).sum();
    let version = str_at(&doc["info"], "swe_agent_version");
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: meta.directory.clone().unwrap_or_else(|| ROOT.into()),
        provider: provider.into(),
        model: meta.model.clone().unwrap_or(model),
        harness: format!("SWE-agent {version}").trim().to_string(),
        turns: vec![Turn { prompt, time_ms: None, steps, compaction: None }],
        start_ms: meta.end_ms - total - 62_000,
        duration_ms: None,
        clock: Clock::Estimated,
        totals: run_totals(&doc["info"]["model_stats"]),
    })
}

/// The run's usage from `model_stats`, when it called a paid API (the demonstrations and
/// replays record zeros).
fn run_totals(stats: &Value) -> Option<Totals> {
    let n = |k: &str| stats[k].as_u64().unwrap_or(0);
    let tokens = Tokens { input: n("tokens_sent"), output: n("tokens_received"), ..Tokens::default() };
    let cost = stats["instance_cost"].as_f64().unwrap_or(0.0);
    (tokens.input > 0).then_some(Totals { tokens, cost })
}

/// The calls of assistant message `m`: its function calls (1.x), or its one text action
/// (0.x, answered by the next user message).
fn step_calls(m: &Value, rest: &[Value], dur: i64) -> Vec<Call> {
    let action = str_at(m, "action").trim();
    let Some(tool_calls) = m["tool_calls"].as_array().filter(|t| !t.is_empty()) else {
        if action.is_empty() {
            return Vec::new();
        }
        let out = rest
            .iter()
            .take_while(|t| t["role"] != "assistant")
            .find(|t| t["role"] == "user")
            .map(|t| text_of(&t["content"]));
        return vec![swe_call("bash", &json!({"command": action}), &out.unwrap_or_default(), dur)];
    };
    let answers = tool_answers(rest);
    tool_calls
        .iter()
        .map(|tc| {
            let out = answers.get(str_at(tc, "id")).cloned().unwrap_or_default();
            let mut args: Value = serde_json::from_str(str_at(&tc["function"], "arguments")).unwrap_or(json!({}));
            let name = str_at(&tc["function"], "name");
            if !matches!(name, "str_replace_editor" | "bash") {
                args = json!({"command": if tool_calls.len() == 1 && !action.is_empty() { action.to_string() } else { name.to_string() }});
                return swe_call("bash", &args, &out, dur);
            }
            swe_call(name, &args, &out, dur)
        })
        .collect()
}

/// The answers of the `tool` messages that follow an assistant message, by call id.
fn tool_answers(rest: &[Value]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for t in rest.iter().take_while(|t| t["role"] == "tool") {
        let text = text_of(&t["content"]);
        let text = text.strip_prefix("OBSERVATION:\n").unwrap_or(&text).to_string();
        for id in t["tool_call_ids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            out.entry(id.to_string()).or_insert_with(|| text.clone());
        }
        if let Some(id) = t.get("tool_call_id").and_then(Value::as_str) {
            out.entry(id.to_string()).or_insert_with(|| text.clone());
        }
    }
    out
}

fn swe_call(function: &str, a: &Value, out: &str, dur: i64) -> Call {
    match function {
        "str_replace_editor" => editor_call(a, out).with_duration(dur),
        "bash" => {
            let run =
                ShellRun { command: str_at(a, "command"), output: out, cwd: ROOT, root: ROOT, exit: None, dur_ms: dur };
            shell_call(&run)
        }
        other => bash_call(other, out, None, None).with_duration(dur),
    }
}

fn editor_call(a: &Value, out: &str) -> Call {
    let path = str_at(a, "path");
    let first = out.lines().next().unwrap_or("");
    let about_path = first.starts_with("The path ") || first.starts_with("The parent directory ");
    let failed =
        EDITOR_ERRORS.iter().any(|e| first.starts_with(e)) && (!about_path || first.contains("does not exist"));
    let (tool, input) = match str_at(a, "command") {
        "view" => {
            let mut input = json!({"filePath": path});
            if let Some([from, to]) = a["view_range"].as_array().map(Vec::as_slice) {
                input["offset"] = from.clone();
                if let (Some(f), Some(t)) = (from.as_i64(), to.as_i64()) {
                    if t != -1 {
                        input["limit"] = json!(t - f + 1);
                    }
                }
            }
            ("read", input)
        }
        "create" => ("write", json!({"filePath": path, "content": str_at(a, "file_text")})),
        "str_replace" => {
            ("edit", json!({"filePath": path, "oldString": str_at(a, "old_str"), "newString": str_at(a, "new_str")}))
        }
        "insert" => {
            ("edit", json!({"filePath": path, "insertLine": a["insert_line"], "newString": str_at(a, "new_str")}))
        }
        other => {
            let command = format!("str_replace_editor {other} {path}").trim().to_string();
            let cut = super::shell::floor_boundary(out, META_MAX);
            return Call::completed("bash", json!({"command": command}), out)
                .with_title(&command)
                .with_meta("output", json!(&out[..cut]))
                .with_meta("truncated", json!(false));
        }
    };
    if failed {
        return Call::failed(tool, input, out);
    }
    let call = Call::completed(tool, input, out).with_title(&relative(path, ROOT)).with_meta("truncated", json!(false));
    match tool {
        "read" => call.with_meta("preview", json!(out.lines().take(20).collect::<Vec<_>>().join("\n"))),
        _ => call.with_meta("diagnostics", json!({})),
    }
}
