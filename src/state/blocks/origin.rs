//! Who made a compressed range, as the state file's `dcpOrigin` records it: the agent (no
//! field), dcp of a finished turn (`finished-turn`), or a newer dcp in a way this version does
//! not know (any other value), whose range is counted under "other" and keeps its field (see
//! `crate::state::foreign`).

use serde_json::{json, Map, Value};

use crate::state::foreign::Unknown;
use crate::state::Strategy;

/// The topic of the ranges dcp makes of finished turns (`crate::strategies::turns`).
pub const TURN_TOPIC: &str = "tool calls of a finished turn";

/// Who made a compressed range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// The agent, with its `compress` tool.
    #[default]
    Agent,
    /// dcp, of a finished turn's tool calls (`crate::strategies::turns`).
    FinishedTurn,
    /// A newer dcp, in a way this version does not know: the block's `dcpOrigin` is kept as
    /// it was read.
    Other,
}

impl Origin {
    /// The value of the state file's `dcpOrigin`; the agent's ranges have none.
    const FINISHED_TURN: &'static str = "finished-turn";

    /// The strategy the stats count a range of this origin under.
    pub fn strategy(self) -> Strategy {
        match self {
            Origin::Agent => Strategy::Compress,
            Origin::FinishedTurn => Strategy::FinishedTurns,
            Origin::Other => Strategy::Other(Unknown::OTHER),
        }
    }

    /// The origin a block read from `raw` records, or, without `dcpOrigin`, the one its
    /// fields show: a range of finished turns written before the field has their topic and
    /// no `compress` call.
    pub(super) fn read(raw: &Map<String, Value>) -> Origin {
        match raw.get("dcpOrigin").and_then(Value::as_str) {
            Some(Origin::FINISHED_TURN) => Origin::FinishedTurn,
            Some(_) => Origin::Other,
            None if raw.get("topic").and_then(Value::as_str) == Some(TURN_TOPIC)
                && raw.get("compressCallId").is_none_or(Value::is_null) =>
            {
                Origin::FinishedTurn
            }
            None => Origin::Agent,
        }
    }

    /// Sets the `dcpOrigin` of `block`, a block's entry being written from what was read.
    pub(super) fn write(self, block: &mut Map<String, Value>) {
        match self {
            Origin::Agent => {
                block.shift_remove("dcpOrigin");
            }
            Origin::FinishedTurn => {
                block.insert("dcpOrigin".into(), json!(Origin::FINISHED_TURN));
            }
            // The value a newer dcp wrote stays as it was read.
            Origin::Other => {}
        }
    }
}
