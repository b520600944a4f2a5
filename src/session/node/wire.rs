//! A [`Node`] to and from JSON text, through serde, exactly as `serde_json::Value` goes.
//!
//! Serialising walks the node as `Value`'s own `Serialize` walks a value (numbers through
//! `Number`, objects as maps in order), so the text is the same byte for byte. Parsing takes
//! what serde_json's parser hands a `Value`: integers that fit `u64` or `i64` as such, other
//! numbers as `f64` (a non-finite one as `null`), and a repeated key in its first place with
//! its last value.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

use super::{Key, Kind, Node, Object, Repr};

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.kind() {
            Kind::Null => serializer.serialize_unit(),
            Kind::Bool(b) => serializer.serialize_bool(b),
            Kind::Number(n) => n.serialize(serializer),
            Kind::String(s) => serializer.serialize_str(s),
            Kind::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Kind::Object(map) => map.serialize(serializer),
        }
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
        Ok(Node(Repr::Bool(b)))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Node, E> {
        Ok(Node(Repr::Number(n.into())))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Node, E> {
        Ok(Node(Repr::Number(n.into())))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Node, E> {
        Ok(Number::from_f64(n).map_or(Node(Repr::Null), |n| Node(Repr::Number(n))))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Node, E> {
        Ok(Node::string(s))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Node, E> {
        Ok(Node::from_string(s))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node(Repr::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Deserialize::deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node(Repr::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(key) = map.next_key::<KeySeed>()? {
            fields.push((key.0, map.next_value::<Node>()?));
        }
        Ok(Node::object(Object::from_fields(fields)))
    }
}

/// A key, read without an owned `String` when the parser can lend it.
struct KeySeed(Key);

impl<'de> Deserialize<'de> for KeySeed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeySeed, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = KeySeed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<KeySeed, E> {
        Ok(KeySeed(Key::new(s)))
    }
}
