//! The sidecar's mirror of each session's history, so requests need not re-send it.
//!
//! A `transform` request lists every message, but a message whose info is unchanged may omit
//! `info`, and a part already sent and unchanged may be sent as `{"ref": "<part id>"}`. The
//! mirror holds the previous request's messages and resolves those references by moving the
//! values it holds, so a request costs what is new plus a list of ids. A reference the mirror
//! cannot resolve (after a sidecar restart) is a `RESYNC` error: the plugin then sends
//! everything in full.

use std::collections::HashMap;

use serde_json::Value;

use super::protocol::{code, RpcError};
use crate::session::Message;

#[derive(Debug, Default)]
pub struct Mirror {
    messages: Vec<Message>,
    infos: HashMap<String, usize>,
    parts: HashMap<String, (usize, usize)>,
}

fn resync(what: &str) -> RpcError {
    RpcError::new(
        code::RESYNC,
        format!("{what} was sent by reference but is not in the sidecar's mirror; send the full history"),
    )
}

impl Mirror {
    /// The messages of the last resolved request.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Resolves a request's wire messages against the previous request, and keeps the
    /// result as the new mirror.
    pub fn resolve(&mut self, wire: Vec<Value>) -> Result<&[Message], RpcError> {
        let mut old = std::mem::take(&mut self.messages);
        let old_infos = std::mem::take(&mut self.infos);
        let old_parts = std::mem::take(&mut self.parts);
        let mut out = Vec::with_capacity(wire.len());
        for (mi, item) in wire.into_iter().enumerate() {
            let Value::Object(mut item) = item else {
                return Err(RpcError::params(format!("transform: messages[{mi}] is not an object")));
            };
            let info = match item.remove("info") {
                Some(info @ Value::Object(_)) => info,
                Some(other) => {
                    return Err(RpcError::params(format!(
                        "transform: messages[{mi}].info is not an object: {}",
                        crate::format::excerpt(&other)
                    )))
                }
                None => {
                    let id = item.get("id").and_then(Value::as_str).ok_or_else(|| {
                        RpcError::params(format!("transform: messages[{mi}] has neither info nor id"))
                    })?;
                    let at = *old_infos.get(id).ok_or_else(|| resync(&format!("message {id}")))?;
                    match std::mem::take(&mut old[at].info) {
                        Value::Null => return Err(resync(&format!("message {id}"))),
                        info => info,
                    }
                }
            };
            let parts = match item.remove("parts") {
                Some(Value::Array(parts)) => parts,
                None => Vec::new(),
                Some(other) => {
                    return Err(RpcError::params(format!(
                        "transform: messages[{mi}].parts is not a list: {}",
                        crate::format::excerpt(&other)
                    )))
                }
            };
            let mut resolved = Vec::with_capacity(parts.len());
            for (pi, part) in parts.into_iter().enumerate() {
                let reference = match &part {
                    Value::Object(o) if o.len() == 1 => o.get("ref").and_then(Value::as_str).map(str::to_string),
                    Value::Object(_) => None,
                    other => {
                        return Err(RpcError::params(format!(
                            "transform: messages[{mi}].parts[{pi}] is not an object: {}",
                            crate::format::excerpt(other)
                        )))
                    }
                };
                let Some(id) = reference else {
                    resolved.push(part);
                    continue;
                };
                let &(m, p) = old_parts.get(&id).ok_or_else(|| resync(&format!("part {id}")))?;
                match std::mem::take(&mut old[m].parts[p]) {
                    Value::Null => return Err(resync(&format!("part {id}"))),
                    value => resolved.push(value),
                }
            }
            out.push(Message { info, parts: resolved });
        }
        for (mi, m) in out.iter().enumerate() {
            self.infos.insert(m.id().to_string(), mi);
            for (pi, p) in m.parts.iter().enumerate() {
                if let Some(id) = p.get("id").and_then(Value::as_str) {
                    self.parts.insert(id.to_string(), (mi, pi));
                }
            }
        }
        self.messages = out;
        Ok(&self.messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_resolve_against_the_previous_request() {
        let mut m = Mirror::default();
        let first = vec![
            json!({"info": {"id": "msg_1", "role": "user"}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}),
        ];
        m.resolve(first).unwrap();
        let second = vec![
            json!({"id": "msg_1", "parts": [{"ref": "prt_1"}]}),
            json!({"info": {"id": "msg_2", "role": "assistant"}, "parts": [{"id": "prt_2", "type": "text", "text": "yo"}]}),
        ];
        let got = m.resolve(second).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].info["role"], "user");
        assert_eq!(got[0].parts[0]["text"], "hi");
        // A reference the mirror never saw asks for a resync.
        let err = m.resolve(vec![json!({"id": "msg_1", "parts": [{"ref": "prt_9"}]})]).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
        let err = Mirror::default().resolve(vec![json!({"id": "msg_1", "parts": []})]).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
    }
}
