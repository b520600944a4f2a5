//! When a recorded prune reaches the model: the cache-aware rewrite policy.
//!
//! Providers cache exact prompt prefixes. Rewriting an old tool output changes the prompt
//! from that point on, and everything after it is billed again at the cache-write price
//! instead of the cache-read price. So a prune is recorded at once (stats, state file) but its
//! rewrite waits until it pays. Every price is the session's price sheet's ([`Rates`], from
//! `crate::prices`: a write `w` and a read `r` as shares of the input price; Anthropic's
//! 5-minute cache, `w = 1.25` and `r = 0.1`, in the figures below), and the cache goes cold
//! after the sheet's TTL unless `rewrite.coldCacheSeconds` says otherwise. Under a sheet with
//! no write premium (OpenAI's, `w = 1`) a rewrite costs less and pays sooner; without a cache
//! (`r = w = 1`) it costs nothing. The cost model, per unit of input price:
//!
//! * applying now costs `(w - r) x tail - w x saved` extra on this request (`1.15 x tail -
//!   1.25 x saved`), where `tail` is everything from the first changed part to the end of the
//!   previous request (re-billed at the write price; the saved tokens are not sent at all);
//! * it then saves `r x saved` on each later request while the cache stays warm;
//! * once the cache has gone cold (an idle gap past the provider's TTL, a restart), the whole
//!   prompt is written again anyway: a rewrite applied then costs nothing extra, and one
//!   applied earlier has stopped paying back.
//!
//! So pending rewrites are applied together (once the tail is re-billed, more edits inside
//! it cost nothing):
//!
//! * when the cache is cold after an idle gap (`coldCacheSeconds`): free;
//! * when the context passes `pressureRatio` of the model's window, and the batch removes at
//!   least `spendMinShare` of it (a smaller one would re-bill the tail for little, and again
//!   on the next request past the mark) and ever pays back (`payback`: under a local model's
//!   sheet, whose cached reads are free, none that re-prefills anything does);
//! * when `saved x (0.1 x horizon + 1.25) > 1.15 x tail` and the rewrite is affordable: near
//!   the tail (little to re-bill) this holds on the request itself; deep in the prompt only
//!   for a cut big enough to pay back within the horizon. One that only breaks even waits: it
//!   would lose the placeholders it sends, which `saved` counts out.
//!
//! The horizon is conservative: the requests that will still find this cache warm are not
//! known, and "as many remain as were made" allowed a deep rewrite at request 42 of 43. The
//! warm run so far (requests since the cache was last cold, or since the process started)
//! is the evidence: by the Copernican argument a run seen `n` requests in lasts at least
//! another `n / 2` with probability 2/3, so the horizon is half the warm run, capped by
//! `rewrite.maxHorizon` (30: a bound, not a guess, on how far ahead any saving is counted; a
//! continuous agent run goes on for 30 to 100 steps, and a cap far below half of that sets
//! aside the run's own evidence).
//!
//! Affordable: the session keeps a running balance against no pruning ([`balance`], request
//! by request: `0.1 x` the tokens of prunes in force on a warm request, `1.25 x` on a cold
//! one, minus each rewrite's extra and what dcp itself adds: its instructions and tool
//! definitions at the head, the prunable list at the tail, never cached).
//!
//! **The loss bound.** A rewrite's extra must be covered by what pruning has banked plus
//! `rewrite.lossBound` (5%) of what the session has cost without pruning so far
//! ([`unpruned_cost`], summed request by request from the sizes the sidecar sees): were the
//! session to end right after it, it would cost at most that much more than no pruning, and
//! any later request it serves pays part of it back. A bank alone never fills on a
//! continuous agent run (one prompt, 30 to 100 steps, no idle gap, no cold cache), while a
//! batch near the tail, whose outputs make most of what it re-bills,
//! pays back within a request or two. The bound grows with the session, so the deep
//! rewrites it allows come late, where a long run's remaining requests pay them back. The
//! price of dcp's own additions is kept apart ([`additions`]): it is what the agent tools
//! cost, answered for by the offer, not by the rewrites, so a session whose tools have cost
//! more than pruning saved so far may still start pruning.
//!
//! Sizes: every figure the policy weighs (the tails, what a rewrite removes, what is in
//! force) is in the same unit, characters / 4 of what the model is sent, as the sidecar's
//! mirror counts it. A prune's recorded tokens are the tokenizer's; for dense text (code,
//! CSV) they run well above characters / 4, and weighing them against a tail in characters
//! made deep rewrites look cheaper than they were. `rewrite.mode = "immediate"` applies every
//! decision on the next request, as the published DCP does.
//!
//! What dcp adds to every request ([`offer`]): its head (the agent tools' definitions and
//! their instructions) sits in front of the whole prompt, so adding it to a session whose
//! cache is warm would re-bill everything; and once there it costs `0.1 x head` on every
//! request, plus the message id tags, whether or not the agent ever prunes. By default
//! (`tools.settings.offer = "always"`) a session has them from its first request, whose
//! cache is cold anyway: an agent told about its tools has them when it needs them. The
//! `<prunable-tools>` list goes only when it pays ([`list_pays`]): it is written uncached with
//! every request that carries it, so what it names anew must be worth more per request than
//! the list itself, and more again for every list the agent has left unanswered. Once the
//! agent has left one unanswered, a list goes only within the session's budget
//! ([`list_affordable`]): with it paid for, the session stays within 1% of no pruning by the
//! meter's count (the replay's), so a run of a few requests pays for dcp's head and one list,
//! not a list for every output it makes.
//! With `offer = "paid"` a session starts without them, and they come at the start of a user
//! turn (OpenCode decides a turn's tools when its user message is created) on a cold cache,
//! once the ledger has banked their cost: `1.25 x head`, plus `0.1 x head` over the horizon
//! of `expectedRequests`. Offered, they stay. On a warm cache they would re-bill everything,
//! OpenCode's own system prompt and tools included, which dcp cannot see.
//!
//! Observation masking (`crate::strategies::masking`) is timed by the same rule: outputs that
//! leave the window of recent calls wait as candidates, and are masked in one rewrite when the
//! batch pays for its tail, when the cache is cold, or under pressure. That is the hysteresis
//! masking needs: keep the last `keepLast`, and once the older unmasked outputs outweigh the
//! tail a rewrite re-bills, mask them at once. A rewrite that goes re-bills its tail anyway, so
//! the outputs inside that tail beyond masking's narrower window (`onRewrite`) ride along
//! ([`Pending::rider`]): they count in the gain of a rewrite that starts before them and go
//! with the whole set, but never start a rewrite of their own. The volatile ones (a command's
//! output, a view superseded by a newer one; see `crate::strategies::masking`, "What goes
//! first") are no riders: they may start a rewrite from the narrower window on.
//!
//! **Bets.** The part of a rewrite's extra that the bank does not cover is a bet: the loss
//! bound pays for it, and it comes back only if the run lasts long enough. Half the warm run
//! is a guess at what is left, and a bet lost is the session's loss: late in a run, a batch
//! that removes a small part of the tail it re-bills needs more requests than the run may
//! have. So the bet must come back within the horizon and at most `expectedRequests` (8), the
//! requests any rewrite is expected to serve ([`bet_horizon`]):
//! `0.1 x saved x bet_horizon >= extra - banked`. What the bank covers needs no more than the
//! horizon, so a session that has saved may still rewrite deep in its prompt; one that has not
//! rewrites only what pays back soon, whenever in the run. A continuous run lasts 30 to 100
//! steps, so past [`LATE_RUN`] requests its end may be near: a bet placed then must come back
//! within [`LATE_BET`] (6) requests (`late`; a quick bet, below, already does).
//!
//! **Quick bets.** A bet that earns its extra back within half its bet horizon ([`quick`]) is
//! not held to the loss bound: by the same Copernican argument a run seen `n` requests in
//! lasts another `n / 4` with probability 4/5, so such a bet is likely repaid and soon. It is
//! what a continuous run's first rewrite needs: a batch that makes most of the tail it
//! re-bills, whose extra the bound of a young session does not yet cover, and which otherwise
//! waits until the batch has grown deep into a prompt whose tail it no longer makes. Its stake
//! is bounded all the same, at [`QUICK_BOUND`] times the loss bound ([`QUICK_BOUND_UNMARKED`]
//! where writes carry no premium).
//!
//! **Spending the bank.** A rewrite deep in the prompt rarely pays back: outputs that left the
//! window early in a long session (a file read three prompts ago) wait there for a cold cache
//! that may never come, and the context carries them to the end. Such a rewrite still goes
//! when it removes at least `rewrite.spendMinShare` of the context (2%), its extra cost is
//! at most `rewrite.spendBanked` of what the session has banked (half), and it pays back
//! within `maxHorizon` requests: the bank buys the time a warm run has not yet proven, not a
//! loss. The session still costs no more than no pruning were it to end right after, and half
//! the bank stays for the rewrites that pay. A context made smaller earlier is cheaper on
//! every later request, and the batches that follow are smaller; a small batch deep in the
//! prompt is not, whatever the bank holds. A spend takes what earlier turns needed and the
//! current turn's command outputs and edit inputs, but leaves the current turn's views of files
//! (reads, searches, listings: [`Pending::current_view`]): what the agent is working from, so
//! it edits and answers from them within a few steps, and a view taken before then is fetched
//! again at a price the spend never counted. A rewrite that pays, or a cold cache, still takes
//! them: such a rewrite costs nothing it does not earn back.
//!
//! The masked inputs of old edits and writes are *unsure* ([`Pending::unsure`]): they count at
//! half their size in a rewrite's gain. Their text (file contents, often prose or word
//! lists) runs cheaper in tokens than characters / 4 beside a tail of code that runs dearer,
//! so counted whole they make near-tail rewrites look free that are not. Half is a margin on
//! the unit that leaves the outputs, which start a session's bank. Weighing every chosen
//! rewrite again in tokens instead (the tail counted, frames included) blocks exactly those
//! bank-starting rewrites and costs more (docs/design.md, BENCHMARKS.md).

use self::payback::{ever_pays, pays_back, rewrite_extra};
use crate::config::{Rewrite, RewriteMode};
pub use crate::prices::Rates;

/// What the policy looks at, in approximate tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    /// Size of the whole request.
    pub context: u64,
    /// From the first part a pending rewrite changes, to the end of the request.
    pub tail: u64,
    /// Tokens the pending rewrites remove.
    pub pending: u64,
    /// Requests since the cache was last cold (an idle gap, a restart), this one included.
    pub warm: u32,
    /// Seconds since the session's previous request, if there was one.
    pub idle_seconds: Option<u64>,
    /// The model's context window, if known.
    pub context_limit: Option<u64>,
    /// What dcp has gained on no pruning in this session so far ([`balance`]).
    pub banked: f64,
    /// What the session has cost so far without pruning ([`unpruned_cost`], summed): the loss
    /// bound is a share of it.
    pub baseline: f64,
    /// What dcp's own additions have cost so far ([`additions`], summed): the price of the
    /// agent tools, which the loss bound on rewrites does not take from.
    pub added: f64,
    /// The session's cache prices, and the idle seconds after which its cache is cold.
    pub rates: Rates,
    pub cold_after: u64,
}

impl Default for Inputs {
    fn default() -> Inputs {
        let (context, tail, pending, warm, idle_seconds, context_limit) = (0, 0, 0, 0, None, None);
        let (banked, baseline, added, rates, cold_after) = (0.0, 0.0, 0.0, Rates::default(), 300);
        Inputs { context, tail, pending, warm, idle_seconds, context_limit, banked, baseline, added, rates, cold_after }
    }
}

/// What one request cost or saved against no pruning, by the cost model, in tokens at the
/// base input price: the session's running balance is the sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Charges {
    /// The cache was cold: everything is written at the cache-write price.
    pub cold: bool,
    /// Tokens of prunes in force before this request.
    pub in_force: u64,
    /// Tokens of the prunes applied on this request, and the tail their rewrite re-billed.
    pub applied: u64,
    pub tail: u64,
    /// Tokens dcp adds at the head of every request (its instructions, its tools' definitions).
    pub head: u64,
    /// Tokens dcp appends after the history (the prunable list), never cached.
    pub appended: u64,
    /// The session's cache prices.
    pub rates: Rates,
}

/// The request's balance against no pruning: what the prunes in force saved, minus the
/// rewrite's extra (see the module header) and dcp's own additions.
pub fn balance(r: &Charges) -> f64 {
    let (in_force, applied, tail, p) = (r.in_force as f64, r.applied as f64, r.tail as f64, r.rates);
    let saved =
        if r.cold { p.write * (in_force + applied) } else { p.read * in_force - rewrite_extra(p, applied, tail) };
    saved - additions(r)
}

/// What dcp's own additions cost on the request: its head (written on a cold cache, read
/// from it on a warm one) and the appended list (never cached).
pub fn additions(r: &Charges) -> f64 {
    let head = if r.cold { r.rates.write } else { r.rates.read } * r.head as f64;
    head + r.rates.write * r.appended as f64
}

/// What a request's rewrite costs the request after it when the request itself never reached
/// the model (its upstream failed): the next one finds the prunes applied and in force, and
/// its [`balance`] counts them as read from the cache, while the provider bills the rewritten
/// tail then. Added to the session's balance with the failed request's figures taken back,
/// the next request's balance is what the rewrite's own would have been. Nothing without a
/// rewrite, or on a cold cache (everything is written then anyway).
pub fn carried(r: &Charges) -> f64 {
    if r.cold || r.applied == 0 {
        return 0.0;
    }
    let applied = r.applied as f64;
    -(rewrite_extra(r.rates, applied, r.tail as f64) + r.rates.read * applied)
}

/// Why pending rewrites are applied now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Immediate,
    Pays,
    Pressure,
    ColdCache,
    /// It does not pay back, but buys a smaller context with part of the bank ([`spend`]).
    Spends,
}

/// One pending rewrite, in history order: the tokens it saves and the re-billed tail if the
/// rewrite started at its part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pending {
    pub tokens: u64,
    pub tail: u64,
    /// It only rides along: it goes with a rewrite that re-bills its part anyway (one that
    /// starts before it, or the whole set), never starts one (masking's narrower window, see
    /// `crate::strategies::masking`).
    pub rider: bool,
    /// Its size in the mirror's unit may overstate its tokens: text the agent wrote (a file's
    /// content, an edit's strings) is often cheaper in tokens than characters / 4, beside a
    /// tail of code that is dearer. It counts at [`UNSURE_SHARE`] in a rewrite's gain.
    pub unsure: bool,
    /// It is a view of a file (a read, a search, a listing) made in the current user turn:
    /// what the agent is working from now, which a rewrite that pays or a cold cache may take,
    /// but a spend leaves ([`takes`]; see the module header, "Spending the bank").
    pub current_view: bool,
}

/// The share of an unsure rewrite's size ([`Pending::unsure`]) that counts in a gain.
pub const UNSURE_SHARE: f64 = 0.5;

/// Which pending rewrites to apply now: those from index `cut` on (in history order) that the
/// trigger [`takes`], and why.
/// The whole set goes when pressure, a cold cache or immediate mode says so; otherwise the
/// suffix that gains the most, if any suffix pays (a small old prune must not hold back newer
/// ones that pay on their own, nor drag their tail back to its position). A suffix starts at
/// a pending rewrite that is no rider; the riders after its start count in its gain (an
/// unsure one at [`UNSURE_SHARE`]).
pub fn choose(config: &Rewrite, base: &Inputs, pending: &[Pending]) -> Option<(usize, Trigger)> {
    let total: u64 = pending.iter().map(|p| p.tokens).sum();
    let first_tail = pending.first().map_or(0, |p| p.tail);
    match rewrite_trigger(config, &Inputs { pending: total, tail: first_tail, ..*base }) {
        Some(Trigger::Pays) | None => {}
        Some(other) => return Some((0, other)),
    }
    if total == 0 {
        return None;
    }
    let mut best: Option<(usize, f64)> = None;
    let mut gain_tokens = 0.0;
    for (k, p) in pending.iter().enumerate().rev() {
        gain_tokens += counted(p);
        if p.rider {
            continue;
        }
        let Some(net) = pays(config, gain_tokens, p.tail as f64, base) else { continue };
        if best.is_none_or(|(_, b)| net >= b) {
            best = Some((k, net));
        }
    }
    best.map(|(k, _)| (k, Trigger::Pays)).or_else(|| spend(config, base, pending))
}

/// The rewrite of every pending one it [`takes`] from the first that is no rider, if it
/// removes at least `spendMinShare` of the context, its extra cost is at most `spendBanked` of
/// what the session has banked and it pays back within `maxHorizon` requests (see the module
/// header, "Spending the bank").
fn spend(config: &Rewrite, base: &Inputs, pending: &[Pending]) -> Option<(usize, Trigger)> {
    let start = pending.iter().position(|p| !p.rider && takes(Trigger::Spends, p))?;
    let gain: f64 = pending[start..].iter().filter(|p| takes(Trigger::Spends, p)).map(counted).sum();
    let big_enough = gain > 0.0 && gain >= config.spend_min_share * base.context as f64;
    let (tail, p) = (pending[start].tail as f64, base.rates);
    let within = rewrite_extra(p, gain, tail) <= config.spend_banked * pruning_balance(base).max(0.0);
    // What the bank buys is time: the rewrite must pay back within `maxHorizon` requests.
    (big_enough && within && pays_back(config, p, gain, tail)).then_some((start, Trigger::Spends))
}

/// Whether a rewrite applied for `trigger` takes pending rewrite `p` with the others from its
/// start on: all of them, but a spend leaves the current turn's views of files
/// ([`Pending::current_view`]).
pub fn takes(trigger: Trigger, p: &Pending) -> bool {
    trigger != Trigger::Spends || !p.current_view
}

/// What a pending rewrite counts for in a gain: its size, an unsure one's at [`UNSURE_SHARE`].
fn counted(p: &Pending) -> f64 {
    if p.unsure {
        UNSURE_SHARE * p.tokens as f64
    } else {
        p.tokens as f64
    }
}

/// Later requests a rewrite applied now is counted on to pay back over: half the warm run so
/// far, at most `maxHorizon` (see the module header).
pub fn horizon(config: &Rewrite, inputs: &Inputs) -> f64 {
    f64::from((inputs.warm / 2).min(config.max_horizon))
}

/// What a rewrite that removes `saved` tokens and re-bills `tail` gains over the horizon
/// beyond its cost, when it pays now: when that is not negative, its bet is covered
/// ([`bet_covered`]) and it is affordable ([`affordable`]). `None` when it waits.
fn pays(config: &Rewrite, saved: f64, tail: f64, inputs: &Inputs) -> Option<f64> {
    let (remaining, p, saved) = (horizon(config, inputs), inputs.rates, saved.min(tail));
    let net = saved * (p.read * remaining + p.write) - (p.write - p.read) * tail;
    // A rewrite that only breaks even gains nothing and loses its replacement text (the
    // placeholders, counted out of `saved`): under a sheet whose reads are free it is every
    // rewrite of the tail's end.
    (net > 0.0 && bet_covered(config, saved, tail, inputs) && affordable(config, saved, tail, inputs)).then_some(net)
}

/// Whether a rewrite that removes `saved` tokens and re-bills `tail` earns back what the bank
/// does not cover of its extra (the bet, which the loss bound pays for) within
/// [`bet_horizon`] requests, and late in a run within [`LATE_BET`] ([`late_bet_cap`]; see the
/// module header, "Bets"). One the bank covers always does.
fn bet_covered(config: &Rewrite, saved: f64, tail: f64, inputs: &Inputs) -> bool {
    let bet = rewrite_extra(inputs.rates, saved, tail) - pruning_balance(inputs).max(0.0);
    let within = bet_horizon(config, inputs).min(late_bet_cap(inputs.warm));
    bet <= 0.0 || inputs.rates.read * saved * within >= bet
}

/// Later requests a bet is counted on to pay back over: the horizon, at most
/// `expectedRequests`.
pub fn bet_horizon(config: &Rewrite, inputs: &Inputs) -> f64 {
    horizon(config, inputs).min(f64::from(config.expected_requests))
}

/// Whether a rewrite that removes `saved` tokens and re-bills `tail` is affordable now: were
/// the session to end right after it, it would have cost no more than no pruning plus the
/// loss bound ([`allowance`]), or it is a quick bet ([`quick`]). A rewrite that costs nothing
/// extra always is.
fn affordable(config: &Rewrite, saved: f64, tail: f64, inputs: &Inputs) -> bool {
    let extra = rewrite_extra(inputs.rates, saved, tail);
    extra <= 0.0 || extra <= allowance(config, inputs) || quick(config, saved, extra, inputs)
}

/// Whether a rewrite that removes `saved` tokens for `extra` is a quick bet: it earns its
/// extra back within half its [`bet_horizon`], a stretch of the run that the run so far makes
/// likely, and stakes at most what the bank and [`QUICK_BOUND`] times the loss bound cover
/// (see the module header, "Quick bets").
fn quick(config: &Rewrite, saved: f64, extra: f64, inputs: &Inputs) -> bool {
    let bound = if inputs.rates.write > 1.0 { QUICK_BOUND } else { QUICK_BOUND_UNMARKED };
    let wider = pruning_balance(inputs) + bound * config.loss_bound * inputs.baseline.max(0.0);
    inputs.rates.read * saved * bet_horizon(config, inputs) / 2.0 >= extra && extra <= wider
}

/// How many times `lossBound` a quick bet ([`quick`]) may put at stake: 2.5, an eighth of
/// what the session has cost so far. At 3 a bet on the last request of a 14-request run
/// staked 15% of it and lost (the suite's explore session, 1.117 of no pruning under the
/// OpenAI-style sheets); at 2.5 no session of the corpus or the held-out set changes, and the
/// suite's totals fall (docs/results/bets.md).
pub const QUICK_BOUND: f64 = 2.5;

/// [`QUICK_BOUND`] under a sheet whose cache writes cost no more than uncached input (the
/// OpenAI-style sheets): 2, a tenth of what the session has cost so far. A measured split,
/// not a derived one: at 2.5 the suite's 13-request explore session staked 11% at request
/// 11 and lost (1.024 of no pruning); at 2 every session that changes under these sheets
/// falls, while under Anthropic's, whose writes carry a premium, bets of that size at
/// requests 13 to 15 won and 2 would cost three sessions (docs/results/suite.md).
pub const QUICK_BOUND_UNMARKED: f64 = 2.0;

/// What a rewrite may cost beyond what it saves on its own request: what the session has
/// banked, plus `lossBound` of what it has cost without pruning so far (see the module
/// header, "The loss bound").
pub fn allowance(config: &Rewrite, inputs: &Inputs) -> f64 {
    pruning_balance(inputs) + config.loss_bound * inputs.baseline.max(0.0)
}

/// What pruning itself has gained on no pruning so far: the session's balance without the
/// price of dcp's own additions (the agent tools' head and lists), which the offer of the
/// tools answers for ([`offer`]), not the rewrites.
fn pruning_balance(inputs: &Inputs) -> f64 {
    inputs.banked + inputs.added
}

/// What one request costs without pruning, by the same model priced `p`: the part of
/// `context` the previous request (`previous` tokens) cached at the cache-read price, the rest
/// at the cache-write price; all of it at the write price on a cold cache or a first request.
pub fn unpruned_cost(p: Rates, previous: Option<u64>, context: u64, cold: bool) -> f64 {
    let cached = if cold { 0 } else { previous.unwrap_or(0).min(context) };
    p.read * cached as f64 + p.write * (context - cached) as f64
}

/// What the start of a user turn looks like to [`offer`], in approximate tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Turn {
    /// dcp's head: its instructions and its tools' definitions.
    pub head: u64,
    /// The cache is cold: the whole prompt is written again anyway.
    pub cold: bool,
    /// What dcp has gained on no pruning in this session so far.
    pub banked: f64,
    /// The session's cache prices.
    pub rates: Rates,
}

/// What offering dcp's head from a cold turn on costs beyond not offering it: [`offer_charge`],
/// and its cached reads over the horizon of `expectedRequests` (charged request by request
/// by [`balance`]).
pub fn offer_cost(config: &Rewrite, turn: &Turn) -> f64 {
    offer_charge(turn) + turn.rates.read * turn.head as f64 * f64::from(config.expected_requests)
}

/// What the turn that starts offering dcp's head costs at once: the head's first write.
pub fn offer_charge(turn: &Turn) -> f64 {
    turn.rates.write * turn.head as f64
}

/// Whether dcp's head is cheap enough to carry on every request from the first (`offer =
/// "always"`): a cache reads it at a fraction of the input price. Without a cache it costs its
/// full price on every request, whether or not the agent prunes, and is offered only once paid
/// for ([`offer`]).
pub fn head_is_cheap(p: Rates) -> bool {
    p.read <= CHEAP_READ
}

/// The highest cache-read price ([`head_is_cheap`]) at which the head rides from the first
/// request: OpenAI's older models read at half the input price.
pub const CHEAP_READ: f64 = 0.5;

/// Whether a session not yet offered dcp's tools gets them from this turn on: on a cold cache,
/// once what it has banked covers their cost ([`offer_cost`]), so no session pays for them
/// before dcp has saved it as much.
pub fn offer(config: &Rewrite, turn: &Turn) -> bool {
    turn.cold && turn.banked >= offer_cost(config, turn)
}

/// The verdict on the pending rewrites as one: why they are applied on this request, or
/// `None` when they wait.
pub fn rewrite_trigger(config: &Rewrite, inputs: &Inputs) -> Option<Trigger> {
    if inputs.pending == 0 {
        return None;
    }
    if config.mode == RewriteMode::Immediate {
        return Some(Trigger::Immediate);
    }
    if inputs.idle_seconds.is_some_and(|s| s >= inputs.cold_after) {
        return Some(Trigger::ColdCache);
    }
    if let Some(limit) = inputs.context_limit.filter(|l| *l > 0) {
        let (pending, tail) = (inputs.pending as f64, inputs.tail as f64);
        let worth = pending >= config.spend_min_share * inputs.context as f64 && ever_pays(inputs.rates, pending, tail);
        if inputs.context as f64 >= config.pressure_ratio * limit as f64 && worth {
            return Some(Trigger::Pressure);
        }
    }
    pays(config, inputs.pending as f64, inputs.tail as f64, inputs).map(|_| Trigger::Pays)
}

mod backoff;
pub use backoff::{backed_off, backoff_level, MAX_LEVEL as MAX_BACKOFF};

mod lists;
pub use lists::{list_affordable, list_pays, Spent, LIST_BOUND};

mod late;
pub use late::{late_bet_cap, LATE_BET, LATE_RUN};

mod payback;
#[cfg(test)]
mod sheet_tests;
#[cfg(test)]
mod tests;
