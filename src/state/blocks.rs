//! Compressed ranges ("blocks"): the agent's summaries that stand in for runs of older
//! messages, as the state file's `prune.messages` records them.
//!
//! The layout is the published DCP 3.x plugin's, so that a session compressed by either
//! plugin reads the same in the other: `blocksById` holds one object per block (its range, the
//! messages and tool calls it covers, its summary text), `byMessageId` the token count and
//! block ids of every covered message, and `activeBlockIds`, `activeByAnchorMessageId`,
//! `nextBlockId` and `nextRunId` derive from them. dcp reads what it understands and keeps
//! every other field, per block and at the top, so a rewrite loses nothing. Two fields are
//! dcp's own: `dcpApplied: false` marks a block the cache-aware policy still holds back
//! (a missing field means applied, as in files the published plugin wrote), and
//! `dcpOrigin: "finished-turn"` one dcp made of a finished turn's calls on its own
//! (`crate::strategies::turns`), which the stats, notices and commands never call the agent's
//! (a missing field means the agent's, but for such a range written before the field was;
//! any other value is a newer dcp's, kept as it is: see [`Origin`]).
//!
//! A block is *active* while its summary replaces its messages. A newer range that covers an
//! active block consumes it: the older block becomes inactive and names the newer one as its
//! parent, and undoing the newer block (`/dcp decompress`) makes the older one active again.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::Strategy;

mod origin;

pub use self::origin::{Origin, TURN_TOPIC};

/// One compressed range.
#[derive(Debug, Clone, Default)]
pub struct Block {
    pub id: u32,
    pub run_id: u32,
    pub active: bool,
    pub deactivated_by_user: bool,
    /// Whether requests carry the summary yet (see `crate::policy`).
    pub applied: bool,
    /// Who made the range: the agent or dcp.
    pub origin: Origin,
    /// Tokens of the covered messages as they were sent, and of the summary message.
    pub compressed_tokens: u64,
    pub summary_tokens: u64,
    pub topic: String,
    /// The range as the agent named it (`m0001`, `b2`).
    pub start_ref: String,
    pub end_ref: String,
    /// The first covered message: where the summary goes.
    pub anchor: String,
    pub compress_message_id: Option<String>,
    pub compress_call_id: Option<String>,
    /// Older blocks this one covered when it was made.
    pub consumed: Vec<u32>,
    /// Newer blocks that covered this one.
    pub parents: Vec<u32>,
    /// Messages and tool calls covered by this block and not through an older block.
    pub direct_messages: Vec<String>,
    pub direct_tools: Vec<String>,
    /// Every message and tool call the block covers, in history order.
    pub effective_messages: Vec<String>,
    pub effective_tools: Vec<String>,
    pub created_at: i64,
    /// The text of the message that replaces the range, as the model sees it.
    pub summary: String,
    /// The block as read, so fields dcp does not know survive a rewrite (empty for a new one).
    pub raw: Map<String, Value>,
}

impl Block {
    /// The block's agent-facing id, `b<id>`.
    pub fn name(&self) -> String {
        format!("b{}", self.id)
    }

    /// Tokens the block takes out of each request: what it covers minus its summary.
    pub fn net_tokens(&self) -> u64 {
        self.compressed_tokens.saturating_sub(self.summary_tokens)
    }
}

/// Two blocks are equal when they write the same state-file entry.
impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        block_value(self) == block_value(other)
    }
}

/// Two sets of blocks are equal when they write the same `prune.messages`.
impl PartialEq for Blocks {
    fn eq(&self, other: &Blocks) -> bool {
        self.to_value() == other.to_value()
    }
}

/// Every block of a session, and what `prune.messages` holds besides.
#[derive(Debug, Clone, Default)]
pub struct Blocks {
    pub by_id: BTreeMap<u32, Block>,
    /// Tokens of each covered message, by message id (`byMessageId.*.tokenCount`).
    pub message_tokens: BTreeMap<String, u64>,
    pub next_block_id: u32,
    pub next_run_id: u32,
    /// `prune.messages` as read.
    raw: Map<String, Value>,
}

impl Blocks {
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The blocks whose summaries stand in for their messages, oldest first.
    pub fn active(&self) -> impl Iterator<Item = &Block> {
        self.by_id.values().filter(|b| b.active)
    }

    /// The tool calls the active ranges stand for, which no prune of its own need hide.
    pub fn active_calls(&self) -> impl Iterator<Item = &str> {
        self.active().flat_map(|b| b.effective_tools.iter().map(String::as_str))
    }

    /// The strategy the stats count block `id` under: the agent's `compress` or dcp's
    /// finished turns, by its [`Origin`].
    pub fn strategy(&self, id: u32) -> Strategy {
        self.by_id.get(&id).map_or(Strategy::Compress, |b| b.origin.strategy())
    }

    /// A new block id and run id.
    pub fn allocate(&mut self) -> (u32, u32) {
        let id = self.next_block_id.max(self.by_id.keys().next_back().map_or(0, |k| k + 1)).max(1);
        self.next_block_id = id + 1;
        let run = self.next_run_id.max(1);
        self.next_run_id = run + 1;
        (id, run)
    }

    /// Adds `block` (built with an id from [`Blocks::allocate`]): it consumes the active
    /// blocks it lists in `consumed`.
    pub fn insert(&mut self, block: Block, message_tokens: impl IntoIterator<Item = (String, u64)>) {
        for older in &block.consumed {
            if let Some(b) = self.by_id.get_mut(older) {
                b.active = false;
                if !b.parents.contains(&block.id) {
                    b.parents.push(block.id);
                }
            }
        }
        self.message_tokens.extend(message_tokens);
        self.next_block_id = self.next_block_id.max(block.id + 1);
        self.by_id.insert(block.id, block);
    }

    /// Undoes block `id` at the user's request: its messages are sent again, and the older
    /// blocks it had consumed stand in for theirs again. Returns the blocks made active
    /// again, or `None` if `id` is not an active block.
    pub fn decompress(&mut self, id: u32) -> Option<Vec<u32>> {
        let block = self.by_id.get_mut(&id).filter(|b| b.active)?;
        block.active = false;
        block.deactivated_by_user = true;
        let consumed = block.consumed.clone();
        let mut restored = Vec::new();
        for older in consumed {
            if let Some(b) = self.by_id.get_mut(&older) {
                b.parents.retain(|p| *p != id);
                if b.parents.is_empty() && !b.deactivated_by_user {
                    b.active = true;
                    restored.push(older);
                }
            }
        }
        Some(restored)
    }

    /// Forgets every block: after a compaction the messages they covered are gone.
    pub fn clear(&mut self) {
        self.by_id.clear();
        self.message_tokens.clear();
    }

    /// Brings in `mine`, this process's blocks, over these (another process's, read from the
    /// file): a block of `mine` wins over one with the same id.
    pub fn merge(&mut self, mine: &Blocks) {
        for (id, block) in &mine.by_id {
            self.by_id.insert(*id, block.clone());
        }
        for (id, tokens) in &mine.message_tokens {
            self.message_tokens.insert(id.clone(), *tokens);
        }
        self.next_block_id = self.next_block_id.max(mine.next_block_id);
        self.next_run_id = self.next_run_id.max(mine.next_run_id);
    }

    /// Parses `prune.messages`. The error names the key.
    pub fn parse(value: &Value) -> Result<Blocks, String> {
        let Value::Object(raw) = value else {
            return Err(format!("`prune.messages` must be an object, not {}", crate::format::excerpt(value)));
        };
        let mut out = Blocks { raw: raw.clone(), ..Blocks::default() };
        if let Some(by) = raw.get("blocksById") {
            let by = by.as_object().ok_or("`prune.messages.blocksById` must be an object")?;
            for (key, block) in by {
                let block = parse_block(block).map_err(|e| format!("`prune.messages.blocksById.{key}`: {e}"))?;
                out.by_id.insert(block.id, block);
            }
        }
        if let Some(by) = raw.get("byMessageId") {
            let by = by.as_object().ok_or("`prune.messages.byMessageId` must be an object")?;
            for (id, entry) in by {
                let tokens = entry.get("tokenCount").and_then(Value::as_f64).unwrap_or(0.0).max(0.0) as u64;
                out.message_tokens.insert(id.clone(), tokens);
            }
        }
        let number =
            |key: &str| raw.get(key).and_then(Value::as_u64).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        out.next_block_id = number("nextBlockId");
        out.next_run_id = number("nextRunId");
        // What `to_value` derives need not be kept twice.
        for key in ["blocksById", "byMessageId", "activeBlockIds", "activeByAnchorMessageId"] {
            out.raw.shift_remove(key);
        }
        Ok(out)
    }

    /// `prune.messages` for the state file: the fields read, brought up to date.
    pub fn to_value(&self) -> Value {
        let mut out = self.raw.clone();
        let mut by_message: BTreeMap<&str, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
        for block in self.by_id.values() {
            for m in &block.effective_messages {
                let entry = by_message.entry(m.as_str()).or_default();
                entry.0.push(block.id);
                if block.active {
                    entry.1.push(block.id);
                }
            }
        }
        let by_message: Map<String, Value> = by_message
            .into_iter()
            .map(|(id, (all, active))| {
                let tokens = self.message_tokens.get(id).copied().unwrap_or(0);
                (id.to_string(), json!({"tokenCount": tokens, "allBlockIds": all, "activeBlockIds": active}))
            })
            .collect();
        let blocks: Map<String, Value> = self.by_id.iter().map(|(id, b)| (id.to_string(), block_value(b))).collect();
        let active: Vec<u32> = self.active().map(|b| b.id).collect();
        let by_anchor: Map<String, Value> = self.active().map(|b| (b.anchor.clone(), json!(b.id))).collect();
        out.insert("byMessageId".into(), Value::Object(by_message));
        out.insert("blocksById".into(), Value::Object(blocks));
        out.insert("activeBlockIds".into(), json!(active));
        out.insert("activeByAnchorMessageId".into(), Value::Object(by_anchor));
        let next = self.next_block_id.max(self.by_id.keys().next_back().map_or(1, |k| k + 1));
        out.insert("nextBlockId".into(), json!(next));
        out.insert("nextRunId".into(), json!(self.next_run_id.max(1)));
        Value::Object(out)
    }
}

fn parse_block(value: &Value) -> Result<Block, String> {
    let raw = value.as_object().ok_or("must be an object")?;
    let text = |key: &str| raw.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let opt_text = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_string);
    let flag = |key: &str, default: bool| raw.get(key).and_then(Value::as_bool).unwrap_or(default);
    let number = |key: &str| raw.get(key).and_then(Value::as_f64).unwrap_or(0.0).max(0.0) as u64;
    let ids = |key: &str| -> Result<Vec<u32>, String> {
        match raw.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or(format!("`{key}` must hold block ids")))
                .collect(),
            Some(_) => Err(format!("`{key}` must be a list")),
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, String> {
        match raw.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or(format!("`{key}` must be a list of strings")))
                .collect(),
            Some(_) => Err(format!("`{key}` must be a list of strings")),
        }
    };
    let id = raw
        .get("blockId")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or("`blockId` must be a number")?;
    Ok(Block {
        id,
        run_id: u32::try_from(number("runId")).unwrap_or(0),
        active: flag("active", false),
        deactivated_by_user: flag("deactivatedByUser", false),
        applied: flag("dcpApplied", true),
        origin: Origin::read(raw),
        compressed_tokens: number("compressedTokens"),
        summary_tokens: number("summaryTokens"),
        topic: text("topic"),
        start_ref: text("startId"),
        end_ref: text("endId"),
        anchor: text("anchorMessageId"),
        compress_message_id: opt_text("compressMessageId"),
        compress_call_id: opt_text("compressCallId"),
        consumed: ids("consumedBlockIds")?,
        parents: ids("parentBlockIds")?,
        direct_messages: strings("directMessageIds")?,
        direct_tools: strings("directToolIds")?,
        effective_messages: strings("effectiveMessageIds")?,
        effective_tools: strings("effectiveToolIds")?,
        created_at: raw.get("createdAt").and_then(Value::as_i64).unwrap_or(0),
        summary: text("summary"),
        raw: raw.clone(),
    })
}

fn block_value(b: &Block) -> Value {
    let mut out = b.raw.clone();
    let mut set = |key: &str, value: Value| {
        out.insert(key.to_string(), value);
    };
    set("blockId", json!(b.id));
    set("runId", json!(b.run_id));
    set("active", json!(b.active));
    set("deactivatedByUser", json!(b.deactivated_by_user));
    set("compressedTokens", json!(b.compressed_tokens));
    set("summaryTokens", json!(b.summary_tokens));
    if !b.raw.contains_key("mode") {
        set("mode", json!("range"));
    }
    set("topic", json!(b.topic));
    if !b.raw.contains_key("batchTopic") {
        set("batchTopic", json!(b.topic));
    }
    set("startId", json!(b.start_ref));
    set("endId", json!(b.end_ref));
    set("anchorMessageId", json!(b.anchor));
    set("compressMessageId", json!(b.compress_message_id));
    set("compressCallId", json!(b.compress_call_id));
    if !b.raw.contains_key("includedBlockIds") {
        set("includedBlockIds", json!(b.consumed));
    }
    set("consumedBlockIds", json!(b.consumed));
    set("parentBlockIds", json!(b.parents));
    set("directMessageIds", json!(b.direct_messages));
    set("directToolIds", json!(b.direct_tools));
    set("effectiveMessageIds", json!(b.effective_messages));
    set("effectiveToolIds", json!(b.effective_tools));
    set("createdAt", json!(b.created_at));
    set("summary", json!(b.summary));
    if b.applied {
        out.shift_remove("dcpApplied");
    } else {
        out.insert("dcpApplied".into(), json!(false));
    }
    b.origin.write(&mut out);
    Value::Object(out)
}

/// What a `compress` call did: the blocks it made, and what was wrong with the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub made: Vec<u32>,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/published-compress-state.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn the_published_layout_reads_and_renders_unchanged() {
        let file = published();
        let messages = &file["prune"]["messages"];
        let blocks = Blocks::parse(messages).unwrap();
        let b = &blocks.by_id[&1];
        assert!(b.active && b.applied);
        assert_eq!((b.start_ref.as_str(), b.end_ref.as_str()), ("m0001", "m0012"));
        assert_eq!((b.compressed_tokens, b.summary_tokens, b.net_tokens()), (6816, 193, 6623));
        assert_eq!(b.effective_messages.len(), 12);
        assert_eq!(blocks.message_tokens["msg_200f1a752001dnViVIudET0r6t"], 3537);
        assert_eq!(&blocks.to_value(), messages, "every field survives, in place");
    }

    #[test]
    fn a_new_block_consumes_an_older_one_and_decompress_restores_it() {
        let mut blocks = Blocks::parse(&published()["prune"]["messages"]).unwrap();
        let (id, run) = blocks.allocate();
        assert_eq!((id, run), (2, 2));
        let block = Block {
            id,
            run_id: run,
            active: true,
            applied: true,
            consumed: vec![1],
            effective_messages: vec!["msg_a".into()],
            summary: "s".into(),
            ..Block::default()
        };
        blocks.insert(block, [("msg_a".to_string(), 40)]);
        assert_eq!(blocks.active().map(|b| b.id).collect::<Vec<_>>(), [2]);
        assert_eq!(blocks.by_id[&1].parents, [2]);
        let value = blocks.to_value();
        assert_eq!(value["activeBlockIds"], json!([2]));
        assert_eq!(value["byMessageId"]["msg_a"], json!({"tokenCount": 40, "allBlockIds": [2], "activeBlockIds": [2]}));
        assert_eq!(Blocks::parse(&value).unwrap(), blocks, "a round trip gives the same blocks");
        assert_eq!(blocks.decompress(2), Some(vec![1]));
        assert_eq!(blocks.active().map(|b| b.id).collect::<Vec<_>>(), [1]);
        assert!(blocks.by_id[&2].deactivated_by_user);
        assert_eq!(blocks.decompress(2), None, "an inactive block cannot be undone twice");
    }

    #[test]
    fn a_held_back_block_says_so_in_its_own_field() {
        let mut blocks = Blocks::default();
        let (id, run_id) = blocks.allocate();
        blocks.insert(Block { id, run_id, active: true, applied: false, ..Block::default() }, []);
        let value = blocks.to_value();
        assert_eq!(value["blocksById"]["1"]["dcpApplied"], json!(false));
        assert!(!Blocks::parse(&value).unwrap().by_id[&1].applied);
    }

    /// The bug: a range dcp made of a finished turn was the agent's once read back, so the
    /// stats and `/dcp decompress` of a restarted dcp named it `compress`.
    #[test]
    fn whose_range_it_is_survives_the_state_file_and_a_file_without_it_reads_as_before() {
        let file = published();
        let blocks = Blocks::parse(&file["prune"]["messages"]).unwrap();
        assert_eq!(blocks.by_id[&1].origin, Origin::Agent, "a file without `dcpOrigin` holds the agent's ranges");
        assert!(!blocks.to_value().to_string().contains("dcpOrigin"), "and none is written for them");
        let mut blocks = Blocks::default();
        let (id, run_id) = blocks.allocate();
        let turn = Block { id, run_id, active: true, origin: Origin::FinishedTurn, ..Block::default() };
        blocks.insert(turn, []);
        let value = blocks.to_value();
        assert_eq!(value["blocksById"]["1"]["dcpOrigin"], json!("finished-turn"));
        let read = Blocks::parse(&value).unwrap();
        assert_eq!(read.by_id[&1].origin, Origin::FinishedTurn);
        assert_eq!(read.by_id[&1].origin.strategy(), Strategy::FinishedTurns);
        // A range of finished turns written before the field has their topic and no call.
        let before = json!({"blocksById": {"2": {"blockId": 2, "topic": TURN_TOPIC, "compressCallId": null}}});
        assert_eq!(Blocks::parse(&before).unwrap().by_id[&2].origin, Origin::FinishedTurn);
        let agent = json!({"blocksById": {"2": {"blockId": 2, "topic": TURN_TOPIC, "compressCallId": "call_1"}}});
        assert_eq!(Blocks::parse(&agent).unwrap().by_id[&2].origin, Origin::Agent);
    }

    #[test]
    fn a_malformed_block_names_its_key() {
        let err = Blocks::parse(&json!({"blocksById": {"3": {"blockId": "x"}}})).unwrap_err();
        assert_eq!(err, "`prune.messages.blocksById.3`: `blockId` must be a number");
        let err = Blocks::parse(&json!({"blocksById": {"3": {"blockId": 3, "consumedBlockIds": ["a"]}}})).unwrap_err();
        assert!(err.contains("consumedBlockIds"), "{err}");
        assert!(Blocks::parse(&json!([])).is_err());
    }
}
