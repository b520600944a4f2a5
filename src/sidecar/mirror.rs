//! The sidecar's mirror of each session's history, so requests need not re-send it.
//!
//! A `transform` request says how many leading messages are unchanged since the previous
//! request (`base`) and sends only the rest. Of those, a message whose info is unchanged may
//! omit `info`, and a part already sent and unchanged may be sent as `{"ref": "<part id>"}`.
//! The mirror holds the previous request's messages, keeps the first `base` as they are and
//! resolves the references by moving the values it holds, so a request costs what changed,
//! not the length of the session. A base or reference the mirror cannot resolve (after a
//! sidecar restart) is a `RESYNC` error: the plugin then sends everything in full.

use rustc_hash::FxHashMap as HashMap;

use super::protocol::{code, RpcError};
use crate::session::{slim, str_field, Kind, Message, Node, Object};

/// The previous request's messages, and what was read from each of them once: its
/// approximate size (and the sum of those before it) and whether it is a compaction summary.
/// The side tables are aligned with `messages`; entries of the unchanged prefix are reused.
/// (The tool calls are the [`super::index::Index`]'s business.)
#[derive(Debug, Default)]
pub struct Mirror {
    messages: Vec<Message>,
    /// How many leading messages the last request kept from the one before.
    kept: usize,
    sizes: Vec<u64>,
    /// The sizes of the messages before each one, and of them all at the end: `sizes.len() + 1`
    /// sums, so that the size of any tail of the history is one subtraction.
    before: Vec<u64>,
    /// The newest compaction summary's `time.created` up to each message, or 0.
    compactions: Vec<i64>,
    /// How many resolves (and clears) the mirror has been through: what was read from it at
    /// generation `g` holds at `g + 1` for the first [`Mirror::kept`] messages only.
    generation: u64,
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

    /// How many leading messages of the last resolved request are the previous request's,
    /// unchanged.
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// How many resolves (and clears) the mirror has been through (see [`Mirror::kept`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The approximate tokens of each message of the last resolved request.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// The approximate tokens of the whole history of the last resolved request.
    pub fn total(&self) -> u64 {
        self.before.last().copied().unwrap_or(0)
    }

    /// The approximate tokens of the history from message `from` on (0 past its end): what a
    /// rewrite from there re-bills.
    pub fn tail(&self, from: usize) -> u64 {
        self.total() - self.before.get(from).copied().unwrap_or(self.total())
    }

    /// The `time.created` of the newest compaction summary of the last request, or 0.
    pub fn newest_compaction(&self) -> i64 {
        self.compactions.last().copied().unwrap_or(0)
    }

    /// Slims part `pi` of message `mi` (see [`slim::slim_part`]), counting its big strings
    /// with `counter`. Nothing that reads the mirror needs their text once counted. Returns
    /// the bytes of text dropped.
    pub fn slim_part(&mut self, mi: usize, pi: usize, counter: &mut crate::tokens::TokenCounter) -> usize {
        self.messages.get_mut(mi).and_then(|m| m.parts.get_mut(pi)).map_or(0, |part| slim::slim_part(part, counter))
    }

    /// The bytes of the strings the mirror holds (keys included), for tests and measurements.
    pub fn string_bytes(&self) -> usize {
        self.messages
            .iter()
            .map(|m| slim::string_bytes(&m.info) + m.parts.iter().map(slim::string_bytes).sum::<usize>())
            .sum()
    }

    fn clear(&mut self) {
        let generation = self.generation + 1;
        *self = Mirror { generation, ..Mirror::default() };
    }

    /// Reads the messages from `from` on, which are new or changed, into the side tables.
    fn index_from(&mut self, from: usize) {
        self.sizes.truncate(from);
        self.before.truncate(from + 1);
        if self.before.is_empty() {
            self.before.push(0);
        }
        self.compactions.truncate(from);
        let mut newest = self.compactions.last().copied().unwrap_or(0);
        for m in &mut self.messages[from..] {
            // Nothing reads a tool's metadata, where OpenCode often keeps a second copy of the
            // output (a read's preview, a command's output), nor the other fields
            // `slim::strip_part` drops: the mirror need not hold them. The big strings wait
            // for `Mirror::slim_part`, which counts them.
            slim::slim_info(&mut m.info);
            for part in &mut m.parts {
                slim::strip_part(part);
                slim::make_opaque(part);
            }
            let m = &*m;
            if m.is_compaction_summary() {
                newest = newest.max(m.time_created());
            }
            let size: u64 = m.parts.iter().map(approx_tokens).sum();
            self.sizes.push(size);
            let before = self.before.last().copied().unwrap_or(0);
            self.before.push(before + size);
            self.compactions.push(newest);
        }
    }

    /// Resolves a request against the previous one, and keeps the result as the new mirror.
    /// The first `base` messages are the previous request's, unchanged; `wire` holds the rest,
    /// whose omitted infos and `ref` parts are taken from the previous request's messages
    /// after `base`. So a request costs what changed, not the length of the session.
    pub fn resolve(&mut self, base: usize, wire: Vec<Node>) -> Result<&[Message], RpcError> {
        if base > self.messages.len() {
            let had = self.messages.len();
            self.clear();
            return Err(RpcError::new(
                code::RESYNC,
                format!("base {base} is past the {had} messages in the sidecar's mirror; send the full history"),
            ));
        }
        let mut old = self.messages.split_off(base);
        match resolve_tail(&mut old, base, wire) {
            Ok(tail) => {
                self.messages.extend(tail);
                self.index_from(base);
                self.kept = base;
                self.generation += 1;
                Ok(&self.messages)
            }
            Err(e) => {
                // The plugin resyncs with the full history.
                self.clear();
                Err(e)
            }
        }
    }
}

/// Approximate tokens of a part as the model sees it: characters / 4 of its text fields.
/// The policy needs sizes on every request, so this avoids the tokenizer.
fn approx_tokens(part: &Node) -> u64 {
    // A slimmed string counts as the original it stands for.
    let mut chars = str_field(part, "text").map_or(0, slim::bytes);
    if let Some(state) = part.get("state") {
        chars += str_field(state, "output").map_or(0, slim::bytes);
        chars += str_field(state, "error").map_or(0, slim::bytes);
        if let Some(input) = state.get("input").and_then(Node::as_object) {
            for (k, v) in input {
                chars += k.len() + v.as_str().map_or(8, slim::bytes);
            }
        }
    }
    (chars as u64).div_ceil(4)
}

/// Resolves the wire messages after `base` against `old`, the previous request's messages
/// after `base`, moving the values it reuses out of `old`.
fn resolve_tail(old: &mut [Message], base: usize, wire: Vec<Node>) -> Result<Vec<Message>, RpcError> {
    let mut previous = Previous::new(old);
    let mut out = Vec::with_capacity(wire.len());
    for (i, mut item) in wire.into_iter().enumerate() {
        let mi = base + i;
        let Some(item) = item.as_object_mut() else {
            return Err(RpcError::params(format!("transform: messages[{mi}] is not an object")));
        };
        let info = previous.info(mi, item)?;
        let wire_parts = match item.get_mut("parts").map(Node::take) {
            Some(parts) if parts.is_array() => parts.into_array(),
            None => Vec::new(),
            Some(other) => {
                return Err(RpcError::params(format!(
                    "transform: messages[{mi}].parts is not a list: {}",
                    crate::format::excerpt(&other.to_value())
                )))
            }
        };
        let parts = previous.parts(mi, wire_parts)?;
        out.push(Message { info, parts });
    }
    Ok(out)
}

/// The previous request's messages, by message and part id, for the references to resolve.
struct Previous<'a> {
    old: &'a mut [Message],
    infos: HashMap<String, usize>,
    parts: HashMap<String, (usize, usize)>,
}

impl<'a> Previous<'a> {
    fn new(old: &'a mut [Message]) -> Previous<'a> {
        let mut infos: HashMap<String, usize> = HashMap::default();
        let mut parts: HashMap<String, (usize, usize)> = HashMap::default();
        for (mi, m) in old.iter().enumerate() {
            infos.insert(m.id().to_string(), mi);
            for (pi, p) in m.parts.iter().enumerate() {
                if let Some(id) = slim::part_id(p) {
                    parts.insert(id.to_string(), (mi, pi));
                }
            }
        }
        Previous { old, infos, parts }
    }

    /// The info of wire message `mi`: sent in full, or by its message's id.
    fn info(&mut self, mi: usize, item: &mut Object) -> Result<Node, RpcError> {
        match item.get_mut("info").map(Node::take) {
            Some(info) if info.is_object() => Ok(info),
            Some(other) => Err(RpcError::params(format!(
                "transform: messages[{mi}].info is not an object: {}",
                crate::format::excerpt(&other.to_value())
            ))),
            None => {
                let id = item
                    .get("id")
                    .and_then(Node::as_str)
                    .ok_or_else(|| RpcError::params(format!("transform: messages[{mi}] has neither info nor id")))?;
                let at = *self.infos.get(id).ok_or_else(|| resync(&format!("message {id}")))?;
                match std::mem::take(&mut self.old[at].info) {
                    info if info.is_null() => Err(resync(&format!("message {id}"))),
                    info => Ok(info),
                }
            }
        }
    }

    /// The parts of wire message `mi`: each sent in full, or as `{"ref": id}`.
    fn parts(&mut self, mi: usize, wire_parts: Vec<Node>) -> Result<Vec<Node>, RpcError> {
        let mut resolved = Vec::with_capacity(wire_parts.len());
        for (pi, part) in wire_parts.into_iter().enumerate() {
            let reference = match part.kind() {
                Kind::Object(o) if o.len() == 1 => o.get("ref").and_then(Node::as_str).map(str::to_string),
                Kind::Object(_) => None,
                _ => {
                    return Err(RpcError::params(format!(
                        "transform: messages[{mi}].parts[{pi}] is not an object: {}",
                        crate::format::excerpt(&part.to_value())
                    )))
                }
            };
            let Some(id) = reference else {
                resolved.push(part);
                continue;
            };
            let &(m, p) = self.parts.get(&id).ok_or_else(|| resync(&format!("part {id}")))?;
            match std::mem::take(&mut self.old[m].parts[p]) {
                value if value.is_null() => return Err(resync(&format!("part {id}"))),
                value => resolved.push(value),
            }
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn wire(values: Vec<Value>) -> Vec<Node> {
        values.into_iter().map(Node::from).collect()
    }

    #[test]
    fn references_resolve_against_the_previous_request() {
        let mut m = Mirror::default();
        let first = vec![
            json!({"info": {"id": "msg_1", "role": "user"}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}),
        ];
        m.resolve(0, wire(first)).unwrap();
        let second = vec![
            json!({"id": "msg_1", "parts": [{"ref": "prt_1"}]}),
            json!({"info": {"id": "msg_2", "role": "assistant"}, "parts": [{"id": "prt_2", "type": "text", "text": "yo"}]}),
        ];
        let got = m.resolve(0, wire(second)).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].info["role"], "user");
        assert_eq!(got[0].parts[0]["text"], "hi");
        // A reference the mirror never saw asks for a resync.
        let err = m.resolve(0, wire(vec![json!({"id": "msg_1", "parts": [{"ref": "prt_9"}]})])).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
        let err = Mirror::default().resolve(0, wire(vec![json!({"id": "msg_1", "parts": []})])).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
    }

    #[test]
    fn a_base_keeps_the_unchanged_prefix_and_resolves_the_rest() {
        let mut m = Mirror::default();
        let first = vec![
            json!({"info": {"id": "msg_1", "role": "user"}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}),
            json!({"info": {"id": "msg_2", "role": "assistant"}, "parts": [{"id": "prt_2", "type": "text", "text": "yo"}]}),
        ];
        m.resolve(0, wire(first)).unwrap();
        // msg_1 is unchanged; msg_2 is re-sent by reference, and msg_3 is new.
        let second = vec![
            json!({"id": "msg_2", "parts": [{"ref": "prt_2"}]}),
            json!({"info": {"id": "msg_3", "role": "user"}, "parts": [{"id": "prt_3", "type": "text", "text": "go"}]}),
        ];
        let got = m.resolve(1, wire(second)).unwrap();
        let ids: Vec<&str> = got.iter().map(Message::id).collect();
        assert_eq!(ids, ["msg_1", "msg_2", "msg_3"]);
        assert_eq!(got[1].parts[0]["text"], "yo");
        // Only what follows the base can be referenced, and the base cannot pass the mirror.
        let err = m.resolve(2, wire(vec![json!({"id": "msg_1", "parts": []})])).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
        let err = m.resolve(9, Vec::new()).unwrap_err();
        assert_eq!(err.code, code::RESYNC);
    }
}
