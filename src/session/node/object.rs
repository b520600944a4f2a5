//! A [`super::Node`]'s object: its fields in order, in one boxed slice, keys inline when short.
//!
//! Objects are read far more than changed: a change rebuilds the slice at its new length,
//! which is what keeps a held object free of room for growth.

use std::fmt;

use super::Node;

/// The longest key held inline. Every key of OpenCode's messages fits (`providerID`,
/// `sessionID`, `compacted`), and at this length a key is 16 bytes and a field 40: a long
/// history holds hundreds of thousands of fields, so 8 bytes a field less is megabytes less.
const INLINE_KEY: usize = 14;

/// An object's key: inline up to [`INLINE_KEY`] bytes, else a string behind one pointer.
#[derive(Clone)]
pub struct Key(KeyRepr);

#[derive(Clone)]
enum KeyRepr {
    Short { len: u8, bytes: [u8; INLINE_KEY] },
    Long(Box<Box<str>>),
}

impl Key {
    pub fn new(text: &str) -> Key {
        let Some(len) = u8::try_from(text.len()).ok().filter(|n| usize::from(*n) <= INLINE_KEY) else {
            return Key(KeyRepr::Long(Box::new(text.into())));
        };
        let mut bytes = [0u8; INLINE_KEY];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Key(KeyRepr::Short { len, bytes })
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were copied from a `str` whole, so they are UTF-8.
            KeyRepr::Short { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            KeyRepr::Long(s) => s,
        }
    }
}

impl std::ops::Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// An object's fields, in order, each key once.
#[derive(Clone, Default)]
pub struct Object(Box<[(Key, Node)]>);

impl Object {
    /// The object of `fields`, as [`Object::from_iter`] makes it, in their own allocation when
    /// no key repeats (the common case of a parse).
    pub(super) fn from_fields(fields: Vec<(Key, Node)>) -> Object {
        let distinct = if fields.len() <= 16 {
            fields.iter().enumerate().all(|(i, (k, _))| fields[..i].iter().all(|(o, _)| o.as_str() != k.as_str()))
        } else {
            let mut seen = rustc_hash::FxHashSet::default();
            fields.iter().all(|(k, _)| seen.insert(k.as_str()))
        };
        if distinct {
            Object(fields.into_boxed_slice())
        } else {
            fields.into_iter().collect()
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.0.iter().position(|(k, _)| k.as_str() == key)
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.0.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.0.iter_mut().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The fields in order, their values to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Node)> {
        self.0.iter_mut().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    pub fn values(&self) -> impl Iterator<Item = &Node> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Sets field `key`: in its place when there is one, else last.
    pub fn insert(&mut self, key: &str, value: Node) {
        match self.get_mut(key) {
            Some(slot) => *slot = value,
            None => {
                let mut fields = std::mem::take(&mut self.0).into_vec();
                fields.push((Key::new(key), value));
                self.0 = fields.into_boxed_slice();
            }
        }
    }

    /// Removes field `key`, keeping the others' order.
    pub fn remove(&mut self, key: &str) -> Option<Node> {
        let at = self.position(key)?;
        let mut fields = std::mem::take(&mut self.0).into_vec();
        let (_, value) = fields.remove(at);
        self.0 = fields.into_boxed_slice();
        Some(value)
    }

    /// Keeps the fields `keep` accepts, in order; it may change the values it keeps.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut Node) -> bool) {
        let mut fields = std::mem::take(&mut self.0).into_vec();
        fields.retain_mut(|(k, v)| keep(k.as_str(), v));
        self.0 = fields.into_boxed_slice();
    }
}

impl FromIterator<(Key, Node)> for Object {
    /// The object of `fields`; a repeated key keeps its first place and its last value, as a
    /// parsed `Value` does.
    fn from_iter<I: IntoIterator<Item = (Key, Node)>>(fields: I) -> Object {
        let mut out: Vec<(Key, Node)> = Vec::new();
        let mut seen: Option<rustc_hash::FxHashMap<Box<str>, usize>> = None;
        for (k, v) in fields {
            // Small objects are searched; a large one gets a map of its keys.
            if out.len() >= 16 && seen.is_none() {
                seen = Some(out.iter().enumerate().map(|(i, (k, _))| (Box::from(k.as_str()), i)).collect());
            }
            let at = match &mut seen {
                Some(seen) => match seen.get(k.as_str()) {
                    Some(at) => Some(*at),
                    None => {
                        seen.insert(Box::from(k.as_str()), out.len());
                        None
                    }
                },
                None => out.iter().position(|(old, _)| old.as_str() == k.as_str()),
            };
            match at.and_then(|at| out.get_mut(at)) {
                Some(slot) => slot.1 = v,
                None => out.push((k, v)),
            }
        }
        Object(out.into_boxed_slice())
    }
}

/// Two objects are equal when they hold the same fields, in any order (as `Value`'s are).
impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Object {
    type Item = (&'a str, &'a Node);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (Key, Node)>, fn(&'a (Key, Node)) -> (&'a str, &'a Node)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}
