//! Codex CLI's own session files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
//!
//! Every line has a `timestamp`, a `type` and a `payload`, so the session keeps its real
//! clock, the person's pauses included. `session_meta` names the working directory and the CLI
//! version, `turn_context` the model. The person's messages (`event_msg` `user_message`) open
//! turns; the model's `response_item`s (`reasoning`, an assistant `message`, calls) up to the
//! next tool output make one step, and the `token_count` that follows is that step's usage.
//! Calls are paired with their outputs by `call_id`; the outputs stay verbatim, as the model
//! read them. Shell commands (`exec_command`, `shell`, `local_shell_call`) map as every shell
//! command does (`shell`); `apply_patch` becomes an `edit` (a `write` when it only adds files)
//! with the patch as input; `update_plan` becomes `todowrite`; other tools keep their names. A
//! `compacted` line becomes OpenCode's compaction with its summary. Developer and
//! environment messages are the harness's own and are left out.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use super::model::{Call, Clock, Session, Span, Step, Tokens, Trigger, Turn};
use super::shell::{absolute, relative, shell_call, unwrap_bash_lc, ShellRun};
use super::source::{parse_time, str_at, ImportError, Record};
use super::SourceMeta;

/// A tool's answer: what the model read back and when.
#[derive(Clone, Default)]
struct Answer {
    output: String,
    time: i64,
    exit: Option<i64>,
}

/// What the parser of one rollout shares.
struct Context {
    answers: HashMap<String, Answer>,
    root: String,
}

/// A step being gathered: the model's items since the last tool output.
#[derive(Default)]
struct Open {
    step: Step,
    /// A tool output came back after this step's calls: the next model item starts a new step.
    answered: bool,
}

/// Parses a Codex rollout into a session with its recorded clock.
pub fn parse(records: &[Record], meta: &SourceMeta, file: &Path) -> Result<Session, ImportError> {
    let head = records.iter().find(|r| r.value["type"] == "session_meta");
    let Some(head) = head else {
        return Err(ImportError::new(file, None, "no `session_meta` line: not a Codex rollout"));
    };
    let payload = &head.value["payload"];
    let cx = Context {
        answers: answers(records),
        root: meta.directory.clone().unwrap_or_else(|| str_at(payload, "cwd").to_string()),
    };
    let events = records.iter().any(|r| r.value["payload"]["type"] == "user_message");
    let mut turns: Vec<Turn> = Vec::new();
    let mut open: Option<Open> = None;
    for r in records {
        let Some(ts) = parse_time(str_at(&r.value, "timestamp")) else {
            return Err(ImportError::new(file, Some(r.line), "a line without a valid `timestamp`"));
        };
        read_line(&cx, &r.value, ts, events, (&mut turns, &mut open));
    }
    close(&mut open, &mut turns);
    if turns.is_empty() {
        return Err(ImportError::new(file, None, "no user message found: not a Codex rollout"));
    }
    let model = records.iter().find_map(|r| {
        (r.value["type"] == "turn_context").then(|| str_at(&r.value["payload"], "model")).filter(|m| !m.is_empty())
    });
    Ok(Session {
        name: meta.name.clone(),
        title: meta.title.clone(),
        directory: cx.root,
        provider: "openai".into(),
        model: meta.model.clone().or(model.map(str::to_string)).unwrap_or_else(|| "gpt-5-codex".into()),
        harness: format!("Codex CLI {}", str_at(payload, "cli_version")).trim().to_string(),
        start_ms: turns[0].time_ms.unwrap_or(meta.end_ms),
        turns,
        duration_ms: None,
        clock: Clock::Recorded,
        totals: None,
    })
}

/// Every call's answer, by `call_id`: the output the model read, when, and the exit code.
fn answers(records: &[Record]) -> HashMap<String, Answer> {
    let mut out: HashMap<String, Answer> = HashMap::new();
    let mut exits: HashMap<String, i64> = HashMap::new();
    for r in records {
        let p = &r.value["payload"];
        let time = parse_time(str_at(&r.value, "timestamp")).unwrap_or(0);
        match (str_at(&r.value, "type"), str_at(p, "type")) {
            ("response_item", "function_call_output" | "custom_tool_call_output") => {
                let (output, exit) = output_of(&p["output"]);
                out.insert(str_at(p, "call_id").to_string(), Answer { output, time, exit });
            }
            ("event_msg", "exec_command_end") => {
                exits.extend(p["exit_code"].as_i64().map(|c| (str_at(p, "call_id").to_string(), c)));
            }
            _ => {}
        }
    }
    for (id, code) in exits {
        if let Some(a) = out.get_mut(&id) {
            a.exit = a.exit.or(Some(code));
        }
    }
    out
}

/// The text of a call's output and its exit code when it says one. Older versions wrap the
/// output as a JSON string `{"output": …, "metadata": {"exit_code": …}}`; newer ones give the
/// text, or a list of content items.
fn output_of(v: &Value) -> (String, Option<i64>) {
    if let Some(items) = v.as_array() {
        let text: Vec<&str> = items.iter().map(|i| str_at(i, "text")).filter(|t| !t.is_empty()).collect();
        return (text.join("\n"), None);
    }
    let s = v.as_str().unwrap_or_default();
    match serde_json::from_str::<Value>(s) {
        Ok(inner) if inner.get("output").is_some_and(Value::is_string) => {
            (str_at(&inner, "output").to_string(), inner["metadata"]["exit_code"].as_i64())
        }
        _ => (s.to_string(), exit_in_header(s)),
    }
}

/// `Process exited with code N` in the header `exec_command` outputs carry.
fn exit_in_header(s: &str) -> Option<i64> {
    let head = &s[..super::shell::floor_boundary(s, 400)];
    let rest = head.split("Process exited with code ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

fn read_line(cx: &Context, v: &Value, ts: i64, events: bool, (turns, open): (&mut Vec<Turn>, &mut Option<Open>)) {
    let p = &v["payload"];
    match (str_at(v, "type"), str_at(p, "type")) {
        ("event_msg", "user_message") if events => prompt(str_at(p, "message"), ts, turns, open),
        ("response_item", "message") if !events && p["role"] == "user" => {
            let text = content_text(&p["content"]);
            if !text.starts_with('<') && !text.starts_with("# AGENTS.md") {
                prompt(&text, ts, turns, open);
            }
        }
        ("compacted", _) => {
            close(open, turns);
            let summary = Step {
                text: str_at(p, "message").to_string(),
                time: Some(Span { start: ts, end: ts }),
                ..Step::default()
            };
            turns.push(Turn {
                time_ms: Some(ts),
                compaction: Some(Trigger::Auto),
                steps: vec![summary],
                ..Turn::default()
            });
        }
        ("event_msg", "token_count") => {
            if let (Some(o), Some(usage)) = (open.as_mut(), p["info"].get("last_token_usage")) {
                o.step.tokens = tokens_of(usage);
            }
        }
        ("response_item", "function_call_output" | "custom_tool_call_output") => {
            if let Some(o) = open.as_mut() {
                o.answered = true;
            }
        }
        (
            "response_item",
            kind @ ("reasoning" | "message" | "function_call" | "custom_tool_call" | "local_shell_call"),
        ) => {
            if kind == "message" && p["role"] != "assistant" || turns.is_empty() {
                return;
            }
            if open.as_ref().is_some_and(|o| o.answered) {
                close(open, turns);
            }
            let o = open.get_or_insert_with(|| Open {
                step: Step { time: Some(Span { start: ts, end: ts }), ..Step::default() },
                answered: false,
            });
            o.step.time = o.step.time.map(|s| Span { start: s.start, end: s.end.max(ts) });
            model_item(cx, &mut o.step, p, ts);
        }
        _ => {}
    }
}

/// A person's message: a new turn, or more of the last one if nothing answered it yet.
fn prompt(text: &str, ts: i64, turns: &mut Vec<Turn>, open: &mut Option<Open>) {
    close(open, turns);
    match turns.last_mut() {
        Some(t) if t.steps.is_empty() && t.compaction.is_none() => t.prompt = format!("{}\n\n{text}", t.prompt),
        _ => turns.push(Turn { prompt: text.to_string(), time_ms: Some(ts), ..Turn::default() }),
    }
}

fn close(open: &mut Option<Open>, turns: &mut [Turn]) {
    if let (Some(o), Some(turn)) = (open.take(), turns.last_mut()) {
        turn.steps.push(o.step);
    }
}

/// Adds a model item (reasoning, text or a call) to `step`.
fn model_item(cx: &Context, step: &mut Step, p: &Value, ts: i64) {
    let join = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { format!("{a}\n\n{b}") };
    match str_at(p, "type") {
        "reasoning" => {
            let summary: Vec<&str> = p["summary"].as_array().into_iter().flatten().map(|s| str_at(s, "text")).collect();
            step.reasoning = join(&step.reasoning, &summary.join("\n\n"));
        }
        "message" => step.text = join(&step.text, &content_text(&p["content"])),
        _ => {
            let id = str_at(p, "call_id");
            let answer = cx.answers.get(id).cloned().unwrap_or(Answer { time: ts, ..Answer::default() });
            let mut call = call_of(cx, p, &answer);
            call.time = Some(Span { start: ts, end: answer.time.max(ts) });
            step.calls.push(call);
        }
    }
}

/// The text of a message's content items.
fn content_text(content: &Value) -> String {
    let text: Vec<&str> = content.as_array().into_iter().flatten().map(|c| str_at(c, "text")).collect();
    text.join("\n")
}

/// Usage as the Responses API counts it: cached input is part of the input, reasoning part of
/// the output.
fn tokens_of(u: &Value) -> Tokens {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Tokens {
        input: n("input_tokens").saturating_sub(n("cached_input_tokens")),
        output: n("output_tokens").saturating_sub(n("reasoning_output_tokens")),
        reasoning: n("reasoning_output_tokens"),
        cache_read: n("cached_input_tokens"),
        cache_write: 0,
        cache_write_1h: 0,
    }
}

/// The OpenCode call a recorded Codex call becomes.
fn call_of(cx: &Context, p: &Value, answer: &Answer) -> Call {
    let (name, args) = match str_at(p, "type") {
        "custom_tool_call" => (str_at(p, "name"), json!({"input": p["input"]})),
        "local_shell_call" => {
            ("shell", json!({"command": p["action"]["command"], "workdir": p["action"]["working_directory"]}))
        }
        _ => {
            let raw = str_at(p, "arguments");
            (str_at(p, "name"), serde_json::from_str(raw).unwrap_or_else(|_| json!({"input": raw})))
        }
    };
    let dur_ms = 300;
    match name {
        "exec_command" | "shell" | "container.exec" => {
            let command = command_of(&args);
            let cwd = args["workdir"].as_str().filter(|w| !w.is_empty()).unwrap_or(&cx.root).to_string();
            let run = ShellRun {
                command: &command,
                output: &answer.output,
                cwd: &cwd,
                root: &cx.root,
                exit: answer.exit,
                dur_ms,
            };
            shell_call(&run)
        }
        "apply_patch" => patch_call(cx, args["input"].as_str().unwrap_or_default(), &answer.output),
        "update_plan" => plan_call(&args, &answer.output),
        _ => Call::completed(name, args, &answer.output).with_title(name),
    }
}

/// The command line of a shell call: a string, or an argv (`bash -lc X` is `X`).
fn command_of(args: &Value) -> String {
    if let Some(s) = args.get("cmd").or(args.get("command")).and_then(Value::as_str) {
        return s.to_string();
    }
    let argv: Vec<&str> = args["command"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    match argv.as_slice() {
        [shell, flag, inner] if flag.starts_with('-') && flag.ends_with('c') && shell.ends_with("sh") => {
            inner.to_string()
        }
        _ => unwrap_bash_lc(&argv.join(" ")),
    }
}

/// An `apply_patch` call: the files its patch names, the patch as input.
fn patch_call(cx: &Context, patch: &str, output: &str) -> Call {
    let mut files: Vec<(&str, &str)> = Vec::new();
    for line in patch.lines() {
        for (mark, kind) in
            [("*** Add File: ", "add"), ("*** Update File: ", "update"), ("*** Delete File: ", "delete")]
        {
            if let Some(path) = line.strip_prefix(mark) {
                files.push((path.trim(), kind));
            }
        }
    }
    let first = files.first().map(|(p, _)| absolute(p, &cx.root)).unwrap_or_default();
    let mut input = json!({"filePath": first, "patchText": patch});
    if files.len() > 1 {
        input["files"] = files.iter().map(|(p, _)| json!(absolute(p, &cx.root))).collect();
    }
    let tool = if !files.is_empty() && files.iter().all(|(_, k)| *k == "add") { "write" } else { "edit" };
    Call::completed(tool, input, output).with_title(&relative(&first, &cx.root))
}

/// An `update_plan` call as OpenCode's `todowrite`.
fn plan_call(args: &Value, output: &str) -> Call {
    let todos: Vec<Value> = args["plan"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| json!({"content": t["step"], "status": t["status"]}))
        .collect();
    let open = todos.iter().filter(|t| t["status"] != "completed").count();
    Call::completed("todowrite", json!({"todos": todos}), output)
        .with_title(&format!("{open} todos"))
        .with_meta("todos", Value::Array(todos))
}
