//! Misses: steps that needed text dcp had hidden from the request that produced them.
//!
//! The rule. The step produced by request `r` (its assistant message) quotes text: the
//! string values of its tool inputs (an edit's `oldString`, a command, a pattern, a written
//! file; dcp's own tools excluded) and its text parts. Request `r` sent some texts as they
//! are (visible) and some changed by dcp (hidden: the original of an output, input or text
//! that an edit replaced, and every text of a compressed range). The step is a miss when
//! one of its quotes shares a [`WINDOW`]-character window, after [`normalise`], with a
//! hidden text of request `r` and that window appears in no visible text of request `r`:
//! the model copied what it was no longer shown, so it would have had to fetch it again.
//! Every such step is a miss, charged in full, however often the same hidden text was
//! quoted before: the rule issue 23 defines, and the headline figures. OpenCode's own
//! clearing of old outputs is the host's doing, not dcp's, and hides nothing here. A run
//! without edits has no misses.
//!
//! The re-read model is a second view beside the rule ([`Checked::reread`]): a hidden text
//! is fetched once, so from the step that missed it on it is back in the agent's context,
//! later steps that quote it again are no misses (a window of a fetched text counts as
//! visible), and every later request carries it, read from the cache ([`Misses::carried`]).
//! A different hidden text is still a miss there.
//!
//! How it stays fast. Every quote of the session is cut into windows once, up front, in an
//! [`QuoteIndex`] the runs (modes) of the session share. Each distinct text the requests carry is
//! normalised and scanned once per session, when first met, with a rolling hash; only windows
//! that some quote holds are kept, as postings (window → texts). A request is then checked by
//! looking up its step's windows, not by scanning its history.

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use serde::Serialize;
use std::hash::{Hash, Hasher};

use super::pieces::{tool_result, Edit, Pieces};
use super::steps::{Step, AGENT_TOOLS};
use crate::session::node::NULL;
use crate::session::{str_field, Message, Node, Role};
use crate::strategies::windows::{normalise, windows};

pub use crate::strategies::windows::WINDOW;

/// One step that quoted hidden text: what it would cost to get that text back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Miss {
    /// The ids of the parts whose hidden text the step quoted.
    pub quoted: Vec<String>,
    /// Tokens of those hidden texts: what running the calls again brings back.
    pub hidden_tokens: u64,
}

/// What one step's check finds, under the rule and the re-read model of the module header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checked {
    /// The miss under the rule: every hidden text the step quoted, fetched before or not.
    pub miss: Option<Miss>,
    /// The miss under the re-read model: only hidden texts no earlier miss fetched.
    pub reread: Option<Miss>,
}

type TextId = u32;

/// The texts of one part in one request: sent as they are, or hidden by dcp's edits.
#[derive(Debug, Clone, Default)]
struct PartTexts {
    visible: Vec<TextId>,
    hidden: Vec<TextId>,
}

/// A part as one request sent it: which message, which part, how many of the message's
/// outputs OpenCode had cleared, and a hash of dcp's edits of it.
type PartKey = (usize, usize, usize, u64);

/// What the runs of one session share: the windows of every step's quotes, and every text
/// the requests carried, scanned once for them.
#[derive(Default)]
pub struct QuoteIndex {
    /// By assistant message id: the windows its quotes hold.
    quotes: FxHashMap<String, Vec<u64>>,
    /// Every window some quote holds, and a bit per window hash (low bits) to rule most
    /// windows out before the set is asked.
    wanted: FxHashSet<u64>,
    bits: Vec<u64>,
    /// By window: the texts that hold it.
    postings: FxHashMap<u64, Vec<TextId>>,
    /// By (hash, length) of a text: its id.
    ids: FxHashMap<(u64, usize), TextId>,
    /// By id: the text, and its tokens once counted.
    texts: Vec<(Box<str>, Option<u64>)>,
}

/// Bits of [`QuoteIndex::bits`]: 2^20, 128 KB.
const BITS: u64 = 1 << 20;

/// Finds the misses of one run, request by request (see the module header).
pub struct Misses<'a> {
    index: &'a mut QuoteIndex,
    parts: FxHashMap<PartKey, PartTexts>,
    /// The hidden texts an earlier miss fetched again, and their tokens.
    restored: FxHashSet<TextId>,
    restored_tokens: u64,
}

fn hash_of(text: &str) -> u64 {
    let mut h = FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

/// The string values of a tool input, depth first.
fn strings<'a>(node: &'a Node, out: &mut Vec<&'a str>) {
    if let Some(s) = node.as_str() {
        out.push(s);
    } else if let Some(items) = node.as_array() {
        items.iter().for_each(|n| strings(n, out));
    } else if let Some(object) = node.as_object() {
        object.values().for_each(|n| strings(n, out));
    }
}

/// What a part sends, as two groups compared apart: its inputs (or text) and its result.
fn fields(part: &Node) -> [Vec<&str>; 2] {
    match str_field(part, "type") {
        Some("text") if part.get("ignored").and_then(Node::as_bool) != Some(true) => {
            [vec![str_field(part, "text").unwrap_or("")], Vec::new()]
        }
        Some("reasoning") => [vec![str_field(part, "text").unwrap_or("")], Vec::new()],
        Some("tool") => {
            let state = part.get("state").unwrap_or(&NULL);
            let mut inputs = Vec::new();
            strings(state.get("input").unwrap_or(&NULL), &mut inputs);
            [inputs, vec![tool_result(state)]]
        }
        _ => [Vec::new(), Vec::new()],
    }
}

/// What the step of assistant message `m` quotes.
fn quotes(m: &Message) -> Vec<&str> {
    let mut out = Vec::new();
    for part in &m.parts {
        match str_field(part, "type") {
            Some("text") => out.extend(str_field(part, "text")),
            Some("tool") if !str_field(part, "tool").is_some_and(|t| AGENT_TOOLS.contains(&t)) => {
                strings(part.get("state").and_then(|s| s.get("input")).unwrap_or(&NULL), &mut out);
            }
            _ => {}
        }
    }
    out
}

impl QuoteIndex {
    /// Cuts the quotes of every step of `messages` into windows.
    pub fn new(messages: &[Message]) -> QuoteIndex {
        let mut index = QuoteIndex { bits: vec![0; (BITS / 64) as usize], ..QuoteIndex::default() };
        for message in messages.iter().filter(|m| m.role() == Role::Assistant) {
            let mut mine = FxHashSet::default();
            for q in quotes(message) {
                windows(&normalise(q), |h| {
                    mine.insert(h);
                });
            }
            for h in &mine {
                index.wanted.insert(*h);
                index.bits[((h % BITS) / 64) as usize] |= 1 << (h % 64);
            }
            if !mine.is_empty() {
                index.quotes.insert(message.id().to_string(), mine.into_iter().collect());
            }
        }
        index
    }

    /// The id of `text`, indexed the first time it is met.
    fn intern(&mut self, text: &str) -> TextId {
        let key = (hash_of(text), text.len());
        if let Some(id) = self.ids.get(&key) {
            return *id;
        }
        let id = self.texts.len() as TextId;
        self.texts.push((text.into(), None));
        self.ids.insert(key, id);
        let (bits, wanted, postings) = (&self.bits, &self.wanted, &mut self.postings);
        windows(&normalise(text), |h| {
            if bits[((h % BITS) / 64) as usize] & (1 << (h % 64)) != 0 && wanted.contains(&h) {
                let list = postings.entry(h).or_default();
                if list.last() != Some(&id) {
                    list.push(id);
                }
            }
        });
        id
    }

    fn tokens(&mut self, t: TextId, pieces: &Pieces) -> u64 {
        let (text, tokens) = &mut self.texts[t as usize];
        *tokens.get_or_insert_with(|| pieces.count(text))
    }
}

impl<'a> Misses<'a> {
    pub fn new(index: &'a mut QuoteIndex) -> Misses<'a> {
        Misses { index, parts: FxHashMap::default(), restored: FxHashSet::default(), restored_tokens: 0 }
    }

    /// Tokens of the hidden texts earlier misses fetched again: what every later request
    /// carries in its context, read from the cache.
    pub fn carried(&self) -> u64 {
        self.restored_tokens
    }

    /// The texts of `part` (message `i`, part `p` of the request, at OpenCode's clearing
    /// `version`) once `edits` are applied.
    fn part(&mut self, key: PartKey, part: &Node, edits: &[&Edit]) -> PartTexts {
        if let Some(known) = self.parts.get(&key) {
            return known.clone();
        }
        let mut texts = PartTexts::default();
        if edits.is_empty() {
            for t in fields(part).into_iter().flatten() {
                texts.visible.push(self.index.intern(t));
            }
        } else {
            // An edit that only appends (a message id tag) hides nothing: the text is still there.
            let (mut replaced, mut sent) = (part.clone(), part.clone());
            edits.iter().filter(|e| e.value.is_some()).for_each(|e| e.apply(&mut replaced));
            edits.iter().for_each(|e| e.apply(&mut sent));
            let (before, after, shown) = (fields(part), fields(&replaced), fields(&sent));
            for g in 0..2 {
                if before[g] != after[g] {
                    before[g].iter().for_each(|t| texts.hidden.push(self.index.intern(t)));
                }
                shown[g].iter().for_each(|t| texts.visible.push(self.index.intern(t)));
            }
        }
        self.parts.insert(key, texts.clone());
        texts
    }

    /// Whether the step produced by `step`'s request is a miss, and what it quoted, under the
    /// rule and under the re-read model; for the latter, the hidden texts it newly missed
    /// count as fetched from then on.
    pub fn check(&mut self, step: &Step<'_>, pieces: &Pieces) -> Checked {
        if step.edits.is_empty() && step.replace.is_empty() {
            return Checked::default();
        }
        let id = step.timeline.messages()[step.request.message].id();
        let Some(wanted) = self.index.quotes.get(id).cloned() else { return Checked::default() };
        let sent = self.sent(step);
        let (mut all, mut new): (Vec<(TextId, String)>, Vec<(TextId, String)>) = (Vec::new(), Vec::new());
        for w in &wanted {
            let Some(posts) = self.index.postings.get(w) else { continue };
            if posts.iter().any(|t| sent.visible.contains(t)) {
                continue;
            }
            let fetched = posts.iter().any(|t| self.restored.contains(t));
            for t in posts {
                let Some(owner) = sent.hidden.get(t) else { continue };
                if !all.iter().any(|(id, _)| id == t) {
                    all.push((*t, owner.clone()));
                }
                if !fetched && !new.iter().any(|(id, _)| id == t) {
                    new.push((*t, owner.clone()));
                }
            }
        }
        let miss = self.miss(&all, pieces);
        let reread = self.miss(&new, pieces);
        for (t, _) in new {
            self.restored_tokens += self.index.tokens(t, pieces);
            self.restored.insert(t);
        }
        Checked { miss, reread }
    }

    /// The miss of the hidden texts `hit`, with the id of the part each came from.
    fn miss(&mut self, hit: &[(TextId, String)], pieces: &Pieces) -> Option<Miss> {
        if hit.is_empty() {
            return None;
        }
        let mut quoted: Vec<String> = Vec::new();
        let mut hidden_tokens = 0;
        for (t, owner) in hit {
            hidden_tokens += self.index.tokens(*t, pieces);
            if !quoted.contains(owner) {
                quoted.push(owner.clone());
            }
        }
        Some(Miss { quoted, hidden_tokens })
    }

    /// What `step`'s request sent: its visible texts, and its hidden ones with the id of
    /// the part each came from.
    fn sent(&mut self, step: &Step<'_>) -> Sent {
        let mut sent = Sent::default();
        let by_message = super::steps::edits_by_message(step.edits);
        let (timeline, time) = (step.timeline, step.request.time);
        for (m, i) in timeline.range(step.request).enumerate() {
            let message = timeline.message_at(i, time);
            let version = timeline.version(i, time);
            let whole = super::steps::replaced(step, m);
            if let Some(Some(summary)) = whole {
                self.visible_message(summary, &mut sent);
            }
            let mine = by_message.get(&m).map(Vec::as_slice).unwrap_or(&[]);
            for (p, part) in message.parts.iter().enumerate() {
                let edits: Vec<&Edit> = mine.iter().copied().filter(|e| e.p == p).collect();
                let key = (i, p, version, edits_hash(&edits));
                let texts = self.part(key, part, &edits);
                let owner = || str_field(part, "id").unwrap_or("").to_string();
                // A compressed range hides every text of its messages.
                let (visible, hidden) = match whole {
                    Some(_) => (Vec::new(), texts.visible.iter().chain(&texts.hidden).copied().collect()),
                    None => (texts.visible, texts.hidden),
                };
                sent.visible.extend(visible);
                for t in hidden {
                    sent.hidden.entry(t).or_insert_with(owner);
                }
            }
        }
        for m in step.append {
            self.visible_message(m, &mut sent);
        }
        sent
    }

    fn visible_message(&mut self, message: &Message, sent: &mut Sent) {
        for part in &message.parts {
            for t in fields(part).into_iter().flatten() {
                let id = self.index.intern(t);
                sent.visible.insert(id);
            }
        }
    }
}

/// What one request sent, by text id.
#[derive(Default)]
struct Sent {
    visible: FxHashSet<TextId>,
    hidden: FxHashMap<TextId, String>,
}

fn edits_hash(edits: &[&Edit]) -> u64 {
    if edits.is_empty() {
        return 0;
    }
    let mut h = FxHasher::default();
    for e in edits {
        e.path.hash(&mut h);
        e.value.as_ref().map(|v| v.to_string()).hash(&mut h);
        e.append.hash(&mut h);
    }
    h.finish() | 1
}
