//! A compact JSON value: what a session's messages are held as.
//!
//! A long session's history is held for as long as the sidecar runs, and
//! `serde_json::Value` with `preserve_order` spends about 80 bytes a value, 112 an object
//! field and an allocation per key, which makes a long history most of the sidecar's memory.
//! A [`Node`] is 24 bytes: a string of up to
//! 22 bytes is held inline (keys, types, statuses, tool names), a longer one as a boxed
//! string, a list as a boxed slice of nodes and an object as a boxed slice of its fields in
//! order ([`Object`]), each field 40 bytes with its key inline when short. A parsed object
//! costs one allocation and no room for growth.
//!
//! A node reads like a `Value` (`get`, `as_str`, `as_i64`, indexing that gives `null` for
//! what is missing, [`Node::kind`] to match on), serialises byte for byte as the same `Value`
//! would ([`wire`]), parses as `Value` parses (a repeated key keeps its first place and its
//! last value), and compares as `Value` compares (an object's fields in any order).
//! Conversions to and from `Value` are exact.

mod object;
mod wire;

#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::{Number, Value};

pub use object::{Key, Object};

/// The longest string held inline.
const INLINE: usize = 22;

/// A string of up to [`INLINE`] bytes, held in place.
#[derive(Clone, Copy)]
struct Short {
    len: u8,
    bytes: [u8; INLINE],
}

impl Short {
    fn new(text: &str) -> Option<Short> {
        let len = u8::try_from(text.len()).ok().filter(|n| usize::from(*n) <= INLINE)?;
        let mut bytes = [0u8; INLINE];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Some(Short { len, bytes })
    }

    fn as_str(&self) -> &str {
        // The bytes were copied from a `str` whole, so they are UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// A JSON value, compact (see the module's header).
#[derive(Clone)]
pub struct Node(Repr);

#[derive(Clone)]
enum Repr {
    Null,
    Bool(bool),
    Number(Number),
    Short(Short),
    Long(Box<str>),
    Array(Box<[Node]>),
    Object(Object),
}

/// What a node is, borrowed, to match on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind<'a> {
    Null,
    Bool(bool),
    Number(&'a Number),
    String(&'a str),
    Array(&'a [Node]),
    Object(&'a Object),
}

/// `null`, for a reader that needs a node for what is missing.
pub static NULL: Node = Node(Repr::Null);

impl Default for Node {
    fn default() -> Node {
        Node(Repr::Null)
    }
}

impl Node {
    /// A string node.
    pub fn string(text: &str) -> Node {
        Node(Short::new(text).map_or_else(|| Repr::Long(text.into()), Repr::Short))
    }

    /// A string node that takes `text`'s buffer when it is not held inline.
    pub fn from_string(text: String) -> Node {
        Node(Short::new(&text).map_or_else(|| Repr::Long(text.into_boxed_str()), Repr::Short))
    }

    /// A list node.
    pub fn array(items: Vec<Node>) -> Node {
        Node(Repr::Array(items.into_boxed_slice()))
    }

    /// An object node.
    pub fn object(object: Object) -> Node {
        Node(Repr::Object(object))
    }

    /// What the node is, to match on.
    pub fn kind(&self) -> Kind<'_> {
        match &self.0 {
            Repr::Null => Kind::Null,
            Repr::Bool(b) => Kind::Bool(*b),
            Repr::Number(n) => Kind::Number(n),
            Repr::Short(s) => Kind::String(s.as_str()),
            Repr::Long(s) => Kind::String(s),
            Repr::Array(items) => Kind::Array(items),
            Repr::Object(map) => Kind::Object(map),
        }
    }

    /// The field `key` of an object; `None` for a missing field or a node of another kind.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_object().and_then(|map| map.get(key))
    }

    /// The field `key` of an object, to change.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.as_object_mut().and_then(|map| map.get_mut(key))
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            Repr::Short(s) => Some(s.as_str()),
            Repr::Long(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self.0 {
            Repr::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_number(&self) -> Option<&Number> {
        match &self.0 {
            Repr::Number(n) => Some(n),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        self.as_number().and_then(Number::as_i64)
    }

    pub fn as_u64(&self) -> Option<u64> {
        self.as_number().and_then(Number::as_u64)
    }

    pub fn as_f64(&self) -> Option<f64> {
        self.as_number().and_then(Number::as_f64)
    }

    pub fn as_array(&self) -> Option<&[Node]> {
        match &self.0 {
            Repr::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match &self.0 {
            Repr::Object(map) => Some(map),
            _ => None,
        }
    }

    pub fn as_object_mut(&mut self) -> Option<&mut Object> {
        match &mut self.0 {
            Repr::Object(map) => Some(map),
            _ => None,
        }
    }

    /// The items of a list, to change (a list keeps its length).
    pub fn as_array_mut(&mut self) -> Option<&mut [Node]> {
        match &mut self.0 {
            Repr::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn is_i64(&self) -> bool {
        self.as_number().is_some_and(Number::is_i64)
    }

    pub fn is_u64(&self) -> bool {
        self.as_number().is_some_and(Number::is_u64)
    }

    /// The node at JSON pointer `pointer` (RFC 6901), as `Value::pointer` finds it.
    pub fn pointer(&self, pointer: &str) -> Option<&Node> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).try_fold(self, |node, token| {
            match node.kind() {
                Kind::Object(map) => map.get(&token),
                Kind::Array(items) => index(&token).and_then(|i| items.get(i)),
                _ => None,
            }
        })
    }

    pub fn is_null(&self) -> bool {
        matches!(self.0, Repr::Null)
    }

    pub fn is_string(&self) -> bool {
        matches!(self.0, Repr::Short(_) | Repr::Long(_))
    }

    pub fn is_object(&self) -> bool {
        matches!(self.0, Repr::Object(_))
    }

    pub fn is_array(&self) -> bool {
        matches!(self.0, Repr::Array(_))
    }

    /// The items of a list, moved out; nothing for a node of another kind.
    pub fn into_array(self) -> Vec<Node> {
        match self.0 {
            Repr::Array(items) => items.into_vec(),
            _ => Vec::new(),
        }
    }

    /// Takes the node out, leaving `null`.
    pub fn take(&mut self) -> Node {
        std::mem::take(self)
    }

    /// The same value as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::Null => Value::Null,
            Repr::Bool(b) => Value::Bool(*b),
            Repr::Number(n) => Value::Number(n.clone()),
            Repr::Short(s) => Value::String(s.as_str().to_string()),
            Repr::Long(s) => Value::String(s.to_string()),
            Repr::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Repr::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.to_string(), v.to_value())).collect()),
        }
    }

    /// The bytes of the strings the node holds (keys included), for tests and measurements.
    pub fn string_bytes(&self) -> usize {
        match self.kind() {
            Kind::String(s) => s.len(),
            Kind::Array(items) => items.iter().map(Node::string_bytes).sum(),
            Kind::Object(map) => map.iter().map(|(k, v)| k.len() + v.string_bytes()).sum(),
            _ => 0,
        }
    }
}

/// A pointer's token as a list index: digits, without a leading zero (as serde_json reads it).
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

impl From<Value> for Node {
    fn from(value: Value) -> Node {
        match value {
            Value::Null => Node(Repr::Null),
            Value::Bool(b) => Node(Repr::Bool(b)),
            Value::Number(n) => Node(Repr::Number(n)),
            Value::String(s) => Node::from_string(s),
            Value::Array(items) => Node::array(items.into_iter().map(Node::from).collect()),
            Value::Object(map) => {
                Node::object(Object::from_fields(map.into_iter().map(|(k, v)| (Key::new(&k), Node::from(v))).collect()))
            }
        }
    }
}

impl From<&Value> for Node {
    fn from(value: &Value) -> Node {
        Node::from(value.clone())
    }
}

impl From<Node> for Value {
    fn from(node: Node) -> Value {
        node.to_value()
    }
}

impl From<&str> for Node {
    fn from(text: &str) -> Node {
        Node::string(text)
    }
}

impl From<String> for Node {
    fn from(text: String) -> Node {
        Node::from_string(text)
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node(Repr::Bool(b))
    }
}

impl From<i64> for Node {
    fn from(n: i64) -> Node {
        Node(Repr::Number(n.into()))
    }
}

impl From<u64> for Node {
    fn from(n: u64) -> Node {
        Node(Repr::Number(n.into()))
    }
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.kind() == other.kind()
    }
}

impl PartialEq<Value> for Node {
    fn eq(&self, other: &Value) -> bool {
        match (self.kind(), other) {
            (Kind::Null, Value::Null) => true,
            (Kind::Bool(a), Value::Bool(b)) => a == *b,
            (Kind::Number(a), Value::Number(b)) => a == b,
            (Kind::String(a), Value::String(b)) => a == b,
            (Kind::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y),
            (Kind::Object(a), Value::Object(b)) => {
                a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| v == w))
            }
            _ => false,
        }
    }
}

impl PartialEq<Node> for Value {
    fn eq(&self, other: &Node) -> bool {
        other == self
    }
}

impl PartialEq<str> for Node {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == Some(other)
    }
}

impl PartialEq<&str> for Node {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

impl PartialEq<bool> for Node {
    fn eq(&self, other: &bool) -> bool {
        self.as_bool() == Some(*other)
    }
}

impl PartialEq<i64> for Node {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl std::ops::Index<&str> for Node {
    type Output = Node;

    /// The field `key`, or `null` when there is none (as `Value` indexes).
    fn index(&self, key: &str) -> &Node {
        self.get(key).unwrap_or(&NULL)
    }
}

impl std::ops::Index<usize> for Node {
    type Output = Node;

    /// Item `i` of a list, or `null` when there is none (as `Value` indexes).
    fn index(&self, i: usize) -> &Node {
        self.as_array().and_then(|items| items.get(i)).unwrap_or(&NULL)
    }
}

/// The node as compact JSON, as `Value` displays.
impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
