//! The sidecar's wire format: newline-delimited JSON-RPC 2.0 on stdin/stdout.
//!
//! One request or notification per line, one response per request, in order. PROTOCOL.md
//! is the reference; this module decodes lines into [`Request`]s, holds each method's params
//! and answer as types, and encodes responses. Every malformed line gets an error response
//! that says what was wrong (or, without an id to answer, a warning); none stops the sidecar.

use std::path::PathBuf;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Value};

use crate::session::Node;

/// The protocol version this sidecar speaks.
pub const PROTOCOL_VERSION: u64 = 2;

/// Lines longer than this are refused (and skipped) rather than buffered.
pub const MAX_LINE_BYTES: usize = 256 * 1024 * 1024;

/// JSON-RPC error codes, with dcp's own above -32000.
pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    /// A part or message was sent by reference, but the sidecar does not hold it (it was
    /// restarted): send the full history again.
    pub const RESYNC: i64 = -32001;
    pub const LINE_TOO_LONG: i64 = -32002;
}

/// A decoded request. `id` is `None` for a notification, which gets no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Option<Value>,
    pub method: String,
    /// The params, but for a list of messages, which is moved to `messages`.
    pub params: Value,
    /// A transform's `params.messages` when it is a list, as the compact values the mirror
    /// keeps; `params` then holds an empty list in its place.
    pub messages: Option<Vec<Node>>,
}

/// An error to send back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(code::INVALID_PARAMS, message)
    }
}

#[derive(Deserialize)]
struct RawRequest {
    jsonrpc: Option<String>,
    #[serde(default)]
    id: Option<Value>,
    method: Option<Value>,
    #[serde(default)]
    params: Value,
}

/// Decodes one line. On error, returns the id to answer (if one could be read) with the error.
pub fn decode(line: &str) -> Result<Request, (Option<Value>, RpcError)> {
    let value: Value = serde_json::from_str(line).map_err(|e| (None, not_json(e)))?;
    decode_value(value)
}

/// The error for a line that is not JSON.
pub fn not_json(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::PARSE, format!("line is not a JSON-RPC object: {e}"))
}

/// Decodes the JSON value of a line (see [`decode`]).
pub fn decode_value(value: Value) -> Result<Request, (Option<Value>, RpcError)> {
    // Checked before decoding: serde would read the request from a list, field by position.
    if !value.is_object() {
        let kind = match value {
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            _ => "null",
        };
        return Err((
            None,
            RpcError::new(code::INVALID_REQUEST, format!("a request must be a JSON object, not {kind}")),
        ));
    }
    let raw = RawRequest::deserialize(value)
        .map_err(|e| (None, RpcError::new(code::INVALID_REQUEST, format!("not a valid request: {e}"))))?;
    let id = raw.id.filter(|v| !v.is_null());
    if let Some(v) = &raw.jsonrpc {
        if v != "2.0" {
            return Err((id, RpcError::new(code::INVALID_REQUEST, format!("unsupported jsonrpc version {v:?}"))));
        }
    }
    let method = match raw.method {
        Some(Value::String(m)) => m,
        Some(other) => {
            return Err((id, RpcError::new(code::INVALID_REQUEST, format!("method must be a string, not {other}"))))
        }
        None => return Err((id, RpcError::new(code::INVALID_REQUEST, "missing method"))),
    };
    let mut params = raw.params;
    // Only a transform carries a history; another method's params stay as they came.
    let messages = match params.get_mut("messages").filter(|_| method == "transform") {
        Some(Value::Array(messages)) => Some(std::mem::take(messages).into_iter().map(Node::from).collect()),
        _ => None,
    };
    Ok(Request { id, method, params, messages })
}

/// Reads the params of a request as `T`, naming what is wrong when they do not fit.
pub fn params<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::params(format!("{method}: invalid params: {e}")))
}

/// A success response line.
pub fn ok(id: &Value, result: &MethodAnswer) -> String {
    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a MethodAnswer,
    }
    match serde_json::to_string(&Response { jsonrpc: "2.0", id, result }) {
        Ok(line) => line,
        Err(e) => err(Some(id), &RpcError::new(code::INTERNAL, format!("cannot encode the answer: {e}"))),
    }
}

/// An error response line.
pub fn err(id: Option<&Value>, e: &RpcError) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}}).to_string()
}

/// `initialize`: the protocol the plugin speaks and the project it runs in.
#[derive(Deserialize)]
pub struct InitializeParams {
    #[serde(default)]
    pub protocol: Option<u64>,
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// The plugin's own version, to tell a plugin and a binary of different versions apart.
    #[serde(default, rename = "pluginVersion")]
    pub plugin_version: Option<String>,
}

/// `transform`: one model request's history, in wire form.
#[derive(Deserialize)]
pub struct TransformParams {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    #[serde(rename = "parentID", default)]
    pub parent_id: Option<Option<String>>,
    #[serde(rename = "contextLimit", default)]
    pub context_limit: Option<u64>,
    /// Milliseconds since the epoch; the sidecar's clock when absent.
    #[serde(default)]
    pub now: Option<i64>,
    /// The history is a copy about to be summarised by a compaction, not a model request.
    #[serde(default)]
    pub compaction: bool,
    /// How many leading messages are the previous request's, unchanged: not re-sent.
    #[serde(default)]
    pub base: usize,
    /// The `seq` of the last answer whose edits the plugin holds.
    #[serde(default)]
    pub have: Option<u64>,
    /// The session's model, as OpenCode's model data gives it (the plugin's `usage` has the
    /// same): its price sheet's source.
    #[serde(default)]
    pub model: Option<super::model::ModelWire>,
    /// The sheet an in-process caller read off the request (`dcp proxy`).
    #[serde(skip)]
    pub sheet: Option<crate::prices::Sheet>,
    pub messages: Vec<Node>,
}

/// `system`: the session whose system prompt is being built, if known.
#[derive(Deserialize)]
pub struct SessionParams {
    #[serde(rename = "sessionID", default)]
    pub session_id: Option<String>,
}

/// `turn`: a user message is being created in a session.
#[derive(Deserialize)]
pub struct TurnParams {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    #[serde(rename = "parentID", default)]
    pub parent_id: Option<Option<String>>,
    /// Milliseconds since the epoch; the sidecar's clock when absent.
    #[serde(default)]
    pub now: Option<i64>,
}

/// `tool`: an agent tool call.
#[derive(Deserialize)]
pub struct ToolParams {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub name: String,
    #[serde(default)]
    pub args: Value,
    /// The tool call and the assistant message that made it, when the host says.
    #[serde(rename = "callID", default)]
    pub call_id: Option<String>,
    #[serde(rename = "messageID", default)]
    pub message_id: Option<String>,
}

/// `command`: a `/dcp` command and its arguments.
#[derive(Deserialize)]
pub struct CommandParams {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    #[serde(default)]
    pub arguments: String,
}

/// What a request is answered with.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum MethodAnswer {
    Initialized(Initialized),
    Transformed(Transformed),
    System(System),
    Turn(TurnAnswer),
    Tool(ToolOutput),
    Command(CommandOutput),
    Described(Described),
    /// `{}`: for `event` and `shutdown`.
    Empty(Empty),
}

/// `{}`.
#[derive(Debug, Default, Serialize)]
pub struct Empty {}

/// The answer to `initialize`: what this sidecar offers.
#[derive(Debug, Serialize)]
pub struct Initialized {
    pub protocol: u64,
    pub version: &'static str,
    pub enabled: bool,
    pub estimator: &'static str,
    pub tools: ToolsOffered,
    pub commands: bool,
    pub descriptions: Descriptions,
    /// The agent tools' arguments, as the plugin registers them ([`crate::texts::tool_args`]).
    pub args: serde_json::Value,
    /// The arguments each agent tool requires, for the definition OpenCode sends
    /// ([`crate::texts::tool_required`]); the others are optional.
    pub required: serde_json::Value,
}

/// Which agent tools the plugin should register.
#[derive(Debug, Serialize)]
pub struct ToolsOffered {
    pub discard: bool,
    pub extract: bool,
    pub compress: bool,
    pub restore: bool,
}

/// The descriptions of the agent tools and of `/dcp`.
#[derive(Debug, Serialize)]
pub struct Descriptions {
    pub discard: &'static str,
    pub extract: &'static str,
    pub compress: &'static str,
    pub restore: &'static str,
    pub command: &'static str,
}

/// The answer to `transform`: the edits to apply, the messages to append, and a notification
/// to show once the turn ends.
#[derive(Debug, Clone)]
pub struct Transformed {
    /// The number of this answer's edits, for the plugin's next `have`; `None` when the
    /// answer's edits are not to be kept (a skipped session, a compaction).
    pub seq: Option<u64>,
    pub edits: EditsAnswer,
    /// Compressed ranges: whole messages replaced by one summary message, after the edits.
    pub replace: Vec<Replace>,
    pub append: Vec<Synthetic>,
    pub notify: Option<String>,
    /// Pending rewrites this answer applied, and why (informational: the plugin ignores it;
    /// `dcp replay` reports it).
    pub applied: Option<AppliedRewrites>,
}

/// Why an answer applied pending rewrites, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AppliedRewrites {
    pub reason: crate::policy::Trigger,
    pub calls: usize,
    /// Compressed ranges applied.
    pub ranges: usize,
}

impl Transformed {
    /// An answer that changes nothing and that the plugin does not keep.
    pub fn unchanged() -> Transformed {
        Transformed {
            seq: None,
            edits: EditsAnswer::Full(Vec::new()),
            replace: Vec::new(),
            append: Vec::new(),
            notify: None,
            applied: None,
        }
    }
}

impl Serialize for Transformed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        if let Some(seq) = self.seq {
            map.serialize_entry("seq", &seq)?;
        }
        match &self.edits {
            EditsAnswer::Same => map.serialize_entry("sameEdits", &true)?,
            EditsAnswer::Add(edits) => map.serialize_entry("addEdits", edits)?,
            EditsAnswer::Keep { before, add } => {
                map.serialize_entry("keepEditsBefore", before)?;
                map.serialize_entry("addEdits", add)?;
            }
            EditsAnswer::Full(edits) => map.serialize_entry("edits", edits)?,
        }
        if !self.replace.is_empty() {
            map.serialize_entry("replace", &self.replace)?;
        }
        map.serialize_entry("append", &self.append)?;
        map.serialize_entry("notify", &self.notify)?;
        if let Some(applied) = &self.applied {
            map.serialize_entry("applied", applied)?;
        }
        map.end()
    }
}

/// What an answer says about edits, relative to the last answer the plugin holds.
#[derive(Debug, Clone)]
pub enum EditsAnswer {
    /// The plugin's edits still hold (`sameEdits: true`).
    Same,
    /// The plugin's edits, plus these (`addEdits`).
    Add(Vec<Edit>),
    /// The plugin's edits of the messages before `before`, plus these (`keepEditsBefore` and
    /// `addEdits`): OpenCode changed the messages from `before` on, and their edits come anew.
    Keep { before: usize, add: Vec<Edit> },
    /// Every edit in force (`edits`).
    Full(Vec<Edit>),
}

/// One field change inside part `p` of message `m`: the string at `path` becomes `value`, or
/// gets `append` at its end (a message id tag). Appends are applied after every `value` edit
/// of the answer, kept ones included, so that a later prune of the same field keeps its tag.
/// It is the one edit type: the sidecar answers with it, `dcp replay` and the proxy apply it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edit {
    pub m: usize,
    pub p: usize,
    pub path: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<String>,
}

impl Edit {
    /// Applies the edit to `part`, as the plugin does: a missing step of the path is a no-op.
    pub fn apply(&self, part: &mut Node) {
        let Some((last, steps)) = self.path.split_last() else { return };
        let mut target = part;
        for step in steps {
            match target.get_mut(step.as_str()) {
                Some(next) => target = next,
                None => return,
            }
        }
        let Some(map) = target.as_object_mut() else { return };
        match (&self.value, &self.append) {
            (Some(value), _) => map.insert(last, Node::from(value)),
            (None, Some(tail)) => {
                if let Some(slot) = map.get_mut(last.as_str()) {
                    if let Some(text) = slot.as_str() {
                        *slot = Node::from_string(format!("{text}{tail}"));
                    }
                }
            }
            (None, None) => {}
        }
    }
}

/// A compressed range: messages `from..=to` of the history become `message`.
#[derive(Debug, Clone, Serialize)]
pub struct Replace {
    pub from: usize,
    pub to: usize,
    pub message: Value,
}

/// A message the sidecar appends after the history (the prunable list and nudges).
#[derive(Debug, Clone, Serialize)]
pub struct Synthetic {
    pub info: SyntheticInfo,
    pub parts: Vec<SyntheticPart>,
}

/// The info of a [`Synthetic`] message: a user message, with the agent and model of the
/// last real one.
#[derive(Debug, Clone, Serialize)]
pub struct SyntheticInfo {
    pub id: &'static str,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub role: &'static str,
    pub time: Created,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
}

/// `{created}`, in milliseconds since the epoch.
#[derive(Debug, Clone, Serialize)]
pub struct Created {
    pub created: i64,
}

/// The one text part of a [`Synthetic`] message.
#[derive(Debug, Clone, Serialize)]
pub struct SyntheticPart {
    pub id: &'static str,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    #[serde(rename = "messageID")]
    pub message_id: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    pub synthetic: bool,
}

/// The answer to `system`: lines to add to the system prompt.
#[derive(Debug, Serialize)]
pub struct System {
    pub system: Vec<String>,
}

/// The answer to `turn`: whether the turn's requests carry dcp's agent tools.
#[derive(Debug, Serialize)]
pub struct TurnAnswer {
    pub offer: bool,
}

/// The answer to `describe`: `compress`'s description for the session's next request.
#[derive(Debug, Serialize)]
pub struct Described {
    pub compress: &'static str,
}

/// The answer to `tool`: what the agent reads.
#[derive(Debug, Serialize)]
pub struct ToolOutput {
    pub output: String,
    pub title: String,
}

/// The answer to `command`: what the user reads.
#[derive(Debug, Serialize)]
pub struct CommandOutput {
    pub text: String,
}

/// The time now (ms since the epoch), for a request that names none (`now`).
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
