//! Whether a `<prunable-tools>` list goes: what it names must pay for it ([`list_pays`]), and
//! once the agent has left a list unanswered, the session must afford it ([`list_affordable`]).
//! See the policy's module header, on what dcp adds to every request.

use crate::prices::Rates;

/// Whether a `<prunable-tools>` list of `list` tokens is worth sending under prices `p`, when
/// what it names that the last list sent did not weighs `listed` tokens: it is written uncached, and pruning
/// those outputs saves a cached read of them on every later request. What an earlier list
/// named, the agent has seen already. That saving comes only if the agent acts on the list:
/// each list sent since the agent last discarded, extracted or compressed (`unanswered`)
/// doubles what the next must name, so an agent that ignores the lists gets them ever more
/// rarely, and one that uses them keeps them.
pub fn list_pays(p: Rates, listed: u64, list: u64, unanswered: u32) -> bool {
    let margin = f64::from(1u32 << unanswered.min(MAX_UNANSWERED));
    p.read * listed as f64 >= margin * p.write * list as f64
}

/// Unanswered lists beyond this many raise the bar no further ([`list_pays`]).
const MAX_UNANSWERED: u32 = 16;

/// What the session has cost so far by the meter (`crate::state::savings`: the replay's count,
/// in the tokenizer's unit, the host's fixed prefix and dcp's own additions in it), in tokens
/// at the base input price.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Without dcp.
    pub without: f64,
    /// What dcp saved of it: below 0 while its head and lists have cost more than pruning saved.
    pub saved: f64,
}

/// Whether a `<prunable-tools>` list of `list` tokens fits the session's budget for dcp's
/// additions. The first list, and every list after one the agent answered (`unanswered` 0),
/// goes: an agent that uses the lists keeps them, whatever they cost. Once the agent has left
/// one unanswered, a list goes only while the session, with it paid for at the write price,
/// stays within [`LIST_BOUND`] of no pruning by the meter ([`Spent`]). A session of a few
/// requests whose agent never prunes pays for dcp's head and one list, not one for every
/// output it makes; one whose pruning has banked more than its lists cost keeps them.
pub fn list_affordable(p: Rates, list: u64, unanswered: u32, spent: Spent) -> bool {
    unanswered == 0 || spent.saved - p.write * list as f64 >= -LIST_BOUND * spent.without
}

/// The share of a session's cost without dcp that its additions may cost beyond what pruning
/// saved, once its agent has left a list unanswered ([`list_affordable`]).
pub const LIST_BOUND: f64 = 0.01;
