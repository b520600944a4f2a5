//! The sidecar's wire format: newline-delimited JSON-RPC 2.0 on stdin/stdout.
//!
//! One request or notification per line, one response per request, in order. PROTOCOL.md
//! is the reference; this module decodes lines into [`Request`]s and encodes responses.
//! Every malformed line gets an error response that says what was wrong (or, without an id
//! to answer, a warning); none stops the sidecar.

use serde::Deserialize;
use serde_json::{json, Value};

/// The protocol version this sidecar speaks.
pub const PROTOCOL_VERSION: u64 = 1;

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
    pub params: Value,
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
    let value: Value = serde_json::from_str(line)
        .map_err(|e| (None, RpcError::new(code::PARSE, format!("line is not a JSON-RPC object: {e}"))))?;
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
    Ok(Request { id, method, params: raw.params })
}

/// Reads the params of a request as `T`, naming what is wrong when they do not fit.
pub fn params<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::params(format!("{method}: invalid params: {e}")))
}

/// A success response line.
pub fn ok(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// An error response line.
pub fn err(id: Option<&Value>, e: &RpcError) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_lines_get_errors_that_say_why() {
        let (id, e) = decode("{not json").unwrap_err();
        assert_eq!((id, e.code), (None, code::PARSE));
        let (id, e) = decode(r#"{"jsonrpc":"2.0","id":4}"#).unwrap_err();
        assert_eq!((id, e.code, e.message.as_str()), (Some(json!(4)), code::INVALID_REQUEST, "missing method"));
        let (_, e) = decode(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).unwrap_err();
        assert!(e.message.contains("1.0"));
        let (_, e) = decode(r#"{"id":1,"method":7}"#).unwrap_err();
        assert!(e.message.contains("method must be a string"));
        let r = decode(r#"{"jsonrpc":"2.0","method":"event","params":{"type":"x"}}"#).unwrap();
        assert_eq!(r.id, None);
    }
}
