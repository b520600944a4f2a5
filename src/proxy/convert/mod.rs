//! The proxy's mapping between each API's request and dcp's session model, both ways.
//!
//! A request's conversation becomes OpenCode-shaped messages (`{info, parts}`, see
//! `crate::session`): a tool call and its result become one `tool` part, as OpenCode keeps
//! them, so the engine's strategies read a Claude Code or Codex history as they read an
//! OpenCode one. Tool names are lower-cased and the usual snake-case input keys renamed
//! (`file_path` to `filePath`), which is the vocabulary the strategies know. Each tool part
//! remembers where its output and input sit in the request's JSON ([`Target`]), so that the
//! engine's edits (`{m, p, path, value}`) are written back in place, and nothing else of the
//! request changes. A result that carries a cache marker the client set (Anthropic
//! `cache_control`) or anything but text is never rewritten: the marker must stay where it is.
//!
//! A turn starts with a person's prompt (`crate::session::starts_turn`), so the user text a
//! client adds of its own is marked `synthetic`, as OpenCode marks its own: a reminder block
//! (Claude Code's `<system-reminder>`), Codex's context messages (`<environment_context>`,
//! `<user_instructions>`, `# AGENTS.md instructions`, `<turn_aborted>`). A message the person
//! sends while the agent works reaches the model inside a tool result in Claude Code (a
//! reminder appended to it, "The user sent a new message while you were working"): that
//! result is never rewritten, or the person's words would go with its output. The shapes are
//! the real clients' (`tests/data/clients/`).

mod anthropic;
mod chat;
mod responses;

use std::collections::HashMap;

use serde_json::{json, Map, Value};

/// The APIs the proxy rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages, `/v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `/v1/chat/completions`.
    Chat,
    /// OpenAI Responses, `/v1/responses`.
    Responses,
}

impl Api {
    /// The API a request path is for (any prefix before the API's own path is allowed).
    pub fn of_path(path: &str) -> Option<Api> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/messages") {
            Some(Api::Anthropic)
        } else if path.ends_with("/chat/completions") {
            Some(Api::Chat)
        } else if path.ends_with("/responses") {
            Some(Api::Responses)
        } else {
            None
        }
    }

    /// The key of the request's conversation list.
    pub fn list_key(self) -> &'static str {
        match self {
            Api::Anthropic | Api::Chat => "messages",
            Api::Responses => "input",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::Chat | Api::Responses => "openai",
        }
    }
}

/// One step into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(&'static str),
    Index(usize),
}

/// How a call's input is held in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputForm {
    /// A JSON object (Anthropic `tool_use.input`).
    Object,
    /// A string of JSON (OpenAI `arguments`).
    JsonText,
}

/// Where a tool part's fields are in the request.
#[derive(Debug, Clone, Default)]
struct Target {
    output: Option<Vec<Seg>>,
    input: Option<(Vec<Seg>, InputForm)>,
    /// The result holds a cache marker or non-text content: its output is left alone.
    locked: bool,
}

/// The engine's edits, as the sidecar answers them (PROTOCOL.md, `transform`). The proxy's
/// engine offers no agent tools, so they carry no `append` (message id tags).
pub use crate::sidecar::protocol::Edit;

/// A request mapped onto the session model: its messages, and where each tool part's
/// fields are in the request.
#[derive(Debug, Default)]
pub struct Mapped {
    pub messages: Vec<Value>,
    targets: HashMap<(usize, usize), Target>,
}

/// Maps a request's body onto the session model; `None` when it holds no conversation.
pub fn map(api: Api, body: &Value, sid: &str) -> Option<Mapped> {
    let items = body.get(api.list_key())?.as_array()?;
    let mut b = Builder::new(sid);
    for (i, item) in items.iter().enumerate() {
        b.fold(api, i, item);
    }
    Some(b.done())
}

impl Mapped {
    /// Writes the engine's edits into `body`; returns how many fields changed.
    pub fn apply(&self, body: &mut Value, edits: &[Edit]) -> usize {
        let mut apply = |edit: &Edit| {
            self.targets.get(&(edit.m, edit.p)).is_some_and(|target| apply_edit(target, edit, body, None))
        };
        edits.iter().filter(|edit| apply(edit)).count()
    }

    pub fn calls(&self) -> usize {
        self.targets.len()
    }
}

/// Writes `edit` into `body`: the whole request, or (`item` set) the list's item of that
/// index, which the target's path then starts inside of.
fn apply_edit(target: &Target, edit: &Edit, body: &mut Value, item: Option<usize>) -> bool {
    let Some(value) = &edit.value else { return false };
    let inside = |at: &[Seg]| -> Option<Vec<Seg>> {
        match item {
            None => Some(at.to_vec()),
            Some(i) if at.get(1) == Some(&Seg::Index(i)) => Some(at[2..].to_vec()),
            Some(_) => None,
        }
    };
    let path: Vec<&str> = edit.path.iter().map(String::as_str).collect();
    match path.as_slice() {
        ["state", "output"] | ["state", "error"] if !target.locked => {
            target.output.as_deref().and_then(inside).is_some_and(|at| set(body, &at, value.clone()))
        }
        ["state", "input", key] => target
            .input
            .as_ref()
            .and_then(|(at, form)| Some((inside(at)?, *form)))
            .is_some_and(|at| set_input(body, &at, key, value)),
        _ => false,
    }
}

fn at_mut<'a>(body: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(body, |v, seg| match seg {
        Seg::Key(k) => v.get_mut(*k),
        Seg::Index(i) => v.get_mut(*i),
    })
}

fn set(body: &mut Value, path: &[Seg], value: Value) -> bool {
    match at_mut(body, path) {
        Some(slot) => {
            *slot = value;
            true
        }
        None => false,
    }
}

/// Sets input field `key` (the engine's name for it) of a call, under the client's own name.
fn set_input(body: &mut Value, (path, form): &(Vec<Seg>, InputForm), key: &str, value: &Value) -> bool {
    let Some(slot) = at_mut(body, path) else { return false };
    let set_key = |input: &mut Map<String, Value>| {
        let name = [key.to_string(), client_key(key)].into_iter().find(|k| input.contains_key(k));
        name.map(|k| input.insert(k, value.clone())).is_some()
    };
    match form {
        InputForm::Object => slot.as_object_mut().is_some_and(set_key),
        InputForm::JsonText => {
            let Some(mut input) = slot.as_str().and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok()) else {
                return false;
            };
            if !set_key(&mut input) {
                return false;
            }
            *slot = Value::String(Value::Object(input).to_string());
            true
        }
    }
}

/// The input keys whose snake-case spelling clients use, and the engine's name for them.
const KEYS: &[(&str, &str)] = &[("file_path", "filePath"), ("old_string", "oldString"), ("new_string", "newString")];

fn engine_key(key: &str) -> &str {
    KEYS.iter().find(|(client, _)| *client == key).map_or(key, |(_, engine)| engine)
}

fn client_key(key: &str) -> String {
    KEYS.iter().find(|(_, engine)| *engine == key).map_or(key, |(client, _)| client).to_string()
}

/// A call's input in the engine's vocabulary.
fn engine_input(input: Option<&Value>) -> Value {
    match input {
        Some(Value::Object(o)) => {
            Value::Object(o.iter().map(|(k, v)| (engine_key(k).to_string(), v.clone())).collect())
        }
        Some(other) => json!({ "input": other }),
        None => json!({}),
    }
}

/// The text of a result's content: a string, or the text blocks of a list, joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            items.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Whether a result's content is anything but text, or carries a cache marker.
fn locked(content: &Value) -> bool {
    match content {
        Value::Array(items) => items.iter().any(|b| {
            b.get("cache_control").is_some()
                || !matches!(b.get("type").and_then(Value::as_str), Some("text" | "input_text" | "output_text"))
        }),
        Value::String(_) | Value::Null => false,
        _ => true,
    }
}

/// The reminder blocks and context messages clients add to a conversation of their own, as
/// the opening and closing of the whole text; the opening alone where the text's end varies.
const REMINDERS: &[(&str, &str)] = &[
    ("<system-reminder>", "</system-reminder>"),
    ("<environment_context>", "</environment_context>"),
    ("<user_instructions>", "</user_instructions>"),
    ("<turn_aborted>", "</turn_aborted>"),
    ("# AGENTS.md instructions for ", ""),
];

/// Whether a user text is a client's own reminder or context, not what a person typed.
fn client_reminder(text: &str) -> bool {
    let text = text.trim();
    REMINDERS.iter().any(|(open, close)| text.starts_with(open) && text.ends_with(close))
}

/// Whether a result's text carries a message the person sent while the agent worked, as
/// Claude Code appends one to the next tool result.
fn carries_a_message(text: &str) -> bool {
    text.contains("<system-reminder>") && text.contains(" while you were working:")
}

/// Whether a result only says to look at an earlier one (Claude Code answers a second read
/// of an unchanged file so).
fn points_back(text: &str) -> bool {
    text.len() < 400 && text.to_ascii_lowercase().contains("unchanged since")
}

/// Builds the session model's messages from a request's list, one item after another: a
/// left fold, so a builder that has read a conversation's first items reads its next ones
/// as a builder that reads them all at once would.
#[derive(Debug, Clone)]
pub struct Builder {
    sid: String,
    messages: Vec<Value>,
    targets: HashMap<(usize, usize), Target>,
    /// Where each call id's part is.
    calls: HashMap<String, (usize, usize)>,
    /// Whether the last message was started by the model.
    in_assistant: bool,
    /// The first message made or changed since [`Builder::mark_sent`].
    dirty_from: usize,
}

impl Builder {
    pub fn new(sid: &str) -> Builder {
        Builder {
            sid: sid.to_string(),
            messages: Vec::new(),
            targets: HashMap::new(),
            calls: HashMap::new(),
            in_assistant: false,
            dirty_from: 0,
        }
    }

    /// Reads item `i` of the request's list.
    pub fn fold(&mut self, api: Api, i: usize, item: &Value) {
        match api {
            Api::Anthropic => anthropic::item(self, i, item),
            Api::Chat => chat::item(self, i, item),
            Api::Responses => responses::item(self, i, item),
        }
    }

    fn done(self) -> Mapped {
        Mapped { messages: self.messages, targets: self.targets }
    }

    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// The first message made or changed since the engine was last sent them.
    pub fn dirty_from(&self) -> usize {
        self.dirty_from
    }

    /// Notes that the engine holds every message as it is now.
    pub fn mark_sent(&mut self) {
        self.dirty_from = self.messages.len();
    }

    /// Where a tool part's fields are in the request.
    fn touched(&self, m: usize, p: usize) -> Option<&Target> {
        self.targets.get(&(m, p))
    }

    /// The list item `edit` writes into, if it writes anywhere.
    pub fn item_of(&self, edit: &Edit) -> Option<usize> {
        let target = self.touched(edit.m, edit.p)?;
        let at = match edit.path.get(1).map(String::as_str) {
            Some("input") => &target.input.as_ref()?.0,
            _ => target.output.as_ref()?,
        };
        match at.get(1) {
            Some(Seg::Index(i)) => Some(*i),
            _ => None,
        }
    }

    /// Writes `edit` into `item`, item `i` of the list; whether a field changed.
    pub fn apply_to_item(&self, i: usize, item: &mut Value, edit: &Edit) -> bool {
        let Some(target) = self.touched(edit.m, edit.p) else { return false };
        apply_edit(target, edit, item, Some(i))
    }

    fn start(&mut self, role: &str) {
        self.dirty_from = self.dirty_from.min(self.messages.len());
        let id = format!("msg_{:06}", self.messages.len());
        let info = json!({ "id": id, "sessionID": &self.sid, "role": role, "time": { "created": 0 } });
        self.messages.push(json!({ "info": info, "parts": [] }));
        self.in_assistant = role == "assistant";
    }

    /// Starts a new assistant message: the model's next response.
    fn assistant(&mut self) {
        self.start("assistant");
    }

    /// Ends the model's response: the next model item starts a new assistant message.
    fn end_assistant(&mut self) {
        self.in_assistant = false;
    }

    /// The model's item: in the current assistant message, or a new one.
    fn model_item(&mut self) {
        if !self.in_assistant {
            self.assistant();
        }
    }

    fn push_part(&mut self, mut part: Value) -> (usize, usize) {
        let m = self.messages.len() - 1;
        self.dirty_from = self.dirty_from.min(m);
        let parts = self.messages[m]["parts"].as_array_mut().expect("a message built here has parts");
        let p = parts.len();
        part["id"] = Value::String(format!("prt_{m:06}_{p:03}"));
        parts.push(part);
        (m, p)
    }

    /// A user's text: a user message of its own, unless the last one is the user's too.
    fn user_text(&mut self, text: &str) {
        let last_is_user = !self.in_assistant && !self.messages.is_empty() && {
            let last = &self.messages[self.messages.len() - 1];
            last["info"]["role"] == "user"
        };
        if !last_is_user {
            self.start("user");
        }
        let mut part = json!({ "type": "text", "text": text });
        if client_reminder(text) {
            part["synthetic"] = Value::Bool(true);
        }
        self.push_part(part);
    }

    fn model_text(&mut self, text: &str) {
        self.model_item();
        self.push_part(json!({ "type": "text", "text": text }));
    }

    /// A tool call the model made; its result comes with [`Builder::result`].
    fn call(&mut self, call_id: &str, name: &str, input: Option<&Value>, at: Option<(Vec<Seg>, InputForm)>) {
        self.model_item();
        let state = json!({ "status": "pending", "input": engine_input(input) });
        let part = json!({ "type": "tool", "callID": call_id, "tool": name.to_lowercase(), "state": state });
        let pos = self.push_part(part);
        self.calls.insert(call_id.to_string(), pos);
        self.targets.insert(pos, Target { input: at, ..Target::default() });
    }

    /// The result of call `call_id`, whose content is at `at`.
    fn result(&mut self, call_id: &str, content: &Value, is_error: bool, at: Vec<Seg>) {
        self.end_assistant();
        let Some(&(m, p)) = self.calls.get(call_id) else { return };
        self.dirty_from = self.dirty_from.min(m);
        let text = content_text(content);
        let carries = carries_a_message(&text);
        let state = &mut self.messages[m]["parts"][p]["state"];
        // A result that only points back at an earlier one is no output of its own: were it
        // the newest of identical calls, deduplication would prune the output it points at.
        if is_error || points_back(&text) {
            state["status"] = json!("error");
            state["error"] = Value::String(text);
        } else {
            state["status"] = json!("completed");
            state["output"] = Value::String(text);
        }
        if let Some(target) = self.targets.get_mut(&(m, p)) {
            target.output = Some(at);
            target.locked = locked(content) || carries;
        }
    }
}

#[cfg(test)]
mod tests;
