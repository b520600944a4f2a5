//! When a recorded prune reaches the model: the cache-aware rewrite policy.
//!
//! Providers cache exact prompt prefixes. Rewriting an old tool output changes the prompt
//! from that point on, and everything after it is billed again at the cache-write price
//! (1.25x) instead of the cache-read price (0.1x). So a prune is recorded at once (stats,
//! state file) but its rewrite waits until it pays. The cost model, per unit of input price:
//!
//! * applying now costs `1.15 x tail - 1.25 x saved` extra on this request, where `tail` is
//!   everything from the first changed part to the end of the previous request (re-billed at
//!   1.25 instead of 0.1; the saved tokens are not sent at all);
//! * it then saves `0.1 x saved` on each later request while the cache stays warm;
//! * once the cache has gone cold (an idle gap past the provider's TTL, a restart), the whole
//!   prompt is written again anyway: a rewrite applied then costs nothing extra, and one
//!   applied earlier has stopped paying back.
//!
//! So pending rewrites are applied together (once the tail is re-billed, more edits inside
//! it cost nothing):
//!
//! * when the cache is cold after an idle gap (`coldCacheSeconds`): free;
//! * when the context passes `pressureRatio` of the model's window;
//! * when `saved x (0.1 x horizon + 1.25) >= 1.15 x tail` and the rewrite is affordable: near
//!   the tail (little to re-bill) this holds on the request itself; deep in the prompt only
//!   for a cut big enough to pay back within the horizon.
//!
//! The horizon is conservative: the requests that will still find this cache warm are not
//! known, and "as many remain as were made" allowed a deep rewrite at request 42 of 43. The
//! warm run so far (requests since the cache was last cold, or since the process started)
//! is the evidence: by the Copernican argument a run seen `n` requests in lasts at least
//! another `n / 2` with probability 2/3, so the horizon is half the warm run, capped by
//! `expectedRequests` (a bound, not a guess: how far ahead any saving is counted).
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
//! made deep rewrites look cheaper than they were. `rewrite.mode = "immediate"` applies every decision on the next request, as the
//! published DCP does.
//!
//! What dcp adds to every request ([`offer`]): its head (the agent tools' definitions and
//! their instructions) sits in front of the whole prompt, so adding it to a session whose
//! cache is warm would re-bill everything; and once there it costs `0.1 x head` on every
//! request, plus the message id tags, whether or not the agent ever prunes. By default
//! (`tools.settings.offer = "always"`) a session has them from its first request, whose
//! cache is cold anyway: an agent told about its tools has them when it needs them. The
//! `<prunable-tools>` list goes only when it pays ([`list_pays`]): it is written uncached with
//! every request, so what it names must be worth more per request than the list itself.
//! With `offer = "paid"` a session starts without them, and they come at the start of a user
//! turn (OpenCode decides a turn's tools when its user message is created) on a cold cache,
//! once the ledger has banked their cost: `1.25 x head`, plus `0.1 x head` over the horizon
//! of `expectedRequests`. Offered, they stay. On a warm cache they would re-bill everything,
//! OpenCode's own system prompt and tools included, which dcp cannot see: in the lab
//! (`long`), tools that came at a warm turn paid from the bank took the session from 0.72 to
//! 0.81 of no pruning's cost.
//!
//! Observation masking (`crate::strategies::masking`) is timed by the same rule: outputs that
//! leave the window of recent calls wait as candidates, and are masked in one rewrite when the
//! batch pays for its tail, when the cache is cold, or under pressure. That is the hysteresis
//! masking needs: keep the last `keepLast`, and once the older unmasked outputs outweigh the
//! tail a rewrite re-bills, mask them at once. A rewrite that goes re-bills its tail anyway, so
//! the outputs inside that tail beyond masking's narrower window (`onRewrite`) ride along
//! ([`Pending::rider`]): they count in the gain of a rewrite that starts before them and go
//! with the whole set, but never start a rewrite of their own.
//!
//! **Spending the bank.** A rewrite deep in the prompt rarely pays back: outputs that left the
//! window early in a long session (a file read three prompts ago) wait there for a cold cache
//! that may never come, and the context carries them to the end. Such a rewrite still goes
//! when it removes at least `rewrite.spendMinShare` of the context (2%) and its extra cost is
//! at most `rewrite.spendBanked` of what the session has banked (half): the bank buys a
//! smaller context, the session still costs no more than no pruning were it to end right
//! after, and half the bank stays for the rewrites that pay. On the suite this lowered the
//! median cost too (0.710 to 0.705 at a 5-minute cache): a context made smaller earlier is
//! cheaper on every later request, and the batches that follow are smaller.
//!
//! The masked inputs of old edits and writes are *unsure* ([`Pending::unsure`]): they count at
//! half their size in a rewrite's gain. Their text (file contents, often prose or word
//! lists) runs cheaper in tokens than characters / 4 beside a tail of code that runs dearer,
//! so counted whole they made near-tail rewrites look free that were not: one session of the
//! suite cost 1.008 of no pruning, a rewrite that removed 0.92 of its tail in characters and
//! 0.88 in tokens. Half is a margin on the unit that leaves the outputs, which start a
//! session's bank, counted as before. Weighing every chosen rewrite again in tokens instead
//! (the tail counted, frames included) was measured: it blocks exactly those bank-starting
//! rewrites (0.92 of the tail in characters is about 0.88 in tokens there too), and the
//! suite's median cost went from 0.717 to 0.753.

use crate::config::{Rewrite, RewriteMode};

/// Cache-read price, as a share of the base input price.
pub const CACHE_READ: f64 = 0.1;
/// Cache-write price, as a share of the base input price.
pub const CACHE_WRITE: f64 = 1.25;

/// What the policy looks at, in approximate tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Inputs {
    /// Size of the whole request.
    pub context: u64,
    /// From the first part a pending rewrite changes, to the end of the request.
    pub tail: u64,
    /// Tokens the pending rewrites remove.
    pub pending: u64,
    /// Requests this session has sent so far.
    pub requests: u32,
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
}

/// What one request cost or saved against no pruning, by the cost model, in tokens at the
/// base input price: the session's running balance is the sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Request {
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
}

/// The request's balance against no pruning: what the prunes in force saved, minus the
/// rewrite's extra (see the module header) and dcp's own additions.
pub fn balance(r: &Request) -> f64 {
    let (in_force, applied, tail) = (r.in_force as f64, r.applied as f64, r.tail as f64);
    let saved =
        if r.cold { CACHE_WRITE * (in_force + applied) } else { CACHE_READ * in_force - rewrite_extra(applied, tail) };
    saved - additions(r)
}

/// What dcp's own additions cost on the request: its head (written on a cold cache, read
/// from it on a warm one) and the appended list (never cached).
pub fn additions(r: &Request) -> f64 {
    let head = if r.cold { CACHE_WRITE } else { CACHE_READ } * r.head as f64;
    head + CACHE_WRITE * r.appended as f64
}

/// What a rewrite that removes `saved` tokens and re-bills `tail` costs beyond not making it,
/// on a warm cache.
fn rewrite_extra(saved: f64, tail: f64) -> f64 {
    if saved == 0.0 {
        return 0.0;
    }
    (CACHE_WRITE - CACHE_READ) * tail - CACHE_WRITE * saved
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
}

/// The share of an unsure rewrite's size ([`Pending::unsure`]) that counts in a gain.
pub const UNSURE_SHARE: f64 = 0.5;

/// Which pending rewrites to apply now: those from index `cut` on (in history order), and why.
/// The whole set goes when pressure, a cold cache or immediate mode says so; otherwise the
/// suffix that gains the most, if any suffix pays (a small old prune must not hold back newer
/// ones that pay on their own, nor drag their tail back to its position). A suffix starts at
/// a pending rewrite that is no rider; the riders after its start count in its gain (an
/// unsure one at [`UNSURE_SHARE`]).
pub fn choose(config: &Rewrite, base: &Inputs, pending: &[Pending]) -> Option<(usize, Trigger)> {
    let total: u64 = pending.iter().map(|p| p.tokens).sum();
    let first_tail = pending.first().map_or(0, |p| p.tail);
    match decide(config, &Inputs { pending: total, tail: first_tail, ..*base }) {
        Some(Trigger::Pays) | None => {}
        Some(other) => return Some((0, other)),
    }
    if total == 0 {
        return None;
    }
    let remaining = horizon(config, base);
    let mut best: Option<(usize, f64)> = None;
    let mut gain_tokens = 0.0;
    for (k, p) in pending.iter().enumerate().rev() {
        gain_tokens += counted(p);
        if p.rider {
            continue;
        }
        let net = gain_tokens * (CACHE_READ * remaining + CACHE_WRITE) - (CACHE_WRITE - CACHE_READ) * p.tail as f64;
        if net >= 0.0 && affordable(config, gain_tokens, p.tail as f64, base) && best.is_none_or(|(_, b)| net >= b) {
            best = Some((k, net));
        }
    }
    best.map(|(k, _)| (k, Trigger::Pays)).or_else(|| spend(config, base, pending))
}

/// The rewrite of every pending one from the first that is no rider, if it removes at least
/// `spendMinShare` of the context and its extra cost is at most `spendBanked` of what the
/// session has banked (see the module header, "Spending the bank").
fn spend(config: &Rewrite, base: &Inputs, pending: &[Pending]) -> Option<(usize, Trigger)> {
    let start = pending.iter().position(|p| !p.rider)?;
    let gain: f64 = pending[start..].iter().map(counted).sum();
    let big_enough = gain > 0.0 && gain >= config.spend_min_share * base.context as f64;
    let within =
        rewrite_extra(gain, pending[start].tail as f64) <= config.spend_banked * pruning_balance(base).max(0.0);
    (big_enough && within).then_some((start, Trigger::Spends))
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
/// far, at most `expectedRequests` (see the module header).
pub fn horizon(config: &Rewrite, inputs: &Inputs) -> f64 {
    f64::from((inputs.warm / 2).min(config.expected_requests))
}

/// Whether a rewrite that removes `saved` tokens and re-bills `tail` is affordable now: were
/// the session to end right after it, it would have cost no more than no pruning plus the
/// loss bound ([`allowance`]). A rewrite that costs nothing extra always is.
fn affordable(config: &Rewrite, saved: f64, tail: f64, inputs: &Inputs) -> bool {
    let extra = rewrite_extra(saved, tail);
    extra <= 0.0 || extra <= allowance(config, inputs)
}

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

/// What one request costs without pruning, by the same model: the part of `context` the
/// previous request (`previous` tokens) cached at the cache-read price, the rest at the
/// cache-write price; all of it at the write price on a cold cache or a first request.
pub fn unpruned_cost(previous: Option<u64>, context: u64, cold: bool) -> f64 {
    let cached = if cold { 0 } else { previous.unwrap_or(0).min(context) };
    CACHE_READ * cached as f64 + CACHE_WRITE * (context - cached) as f64
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
}

/// What offering dcp's head from a cold turn on costs beyond not offering it: [`offer_charge`],
/// and its cached reads over the horizon of `expectedRequests` (charged request by request
/// by [`balance`]).
pub fn offer_cost(config: &Rewrite, turn: &Turn) -> f64 {
    offer_charge(turn) + CACHE_READ * turn.head as f64 * f64::from(config.expected_requests)
}

/// What the turn that starts offering dcp's head costs at once: the head's first write.
pub fn offer_charge(turn: &Turn) -> f64 {
    CACHE_WRITE * turn.head as f64
}

/// Whether a session not yet offered dcp's tools gets them from this turn on: on a cold cache,
/// once what it has banked covers their cost ([`offer_cost`]), so no session pays for them
/// before dcp has saved it as much.
pub fn offer(config: &Rewrite, turn: &Turn) -> bool {
    turn.cold && turn.banked >= offer_cost(config, turn)
}

/// Whether a `<prunable-tools>` list of `list` tokens that names outputs of `listed` tokens is
/// worth sending: it is written uncached with every request, and pruning what it names saves
/// a cached read of them on every later one.
pub fn list_pays(listed: u64, list: u64) -> bool {
    CACHE_READ * listed as f64 >= CACHE_WRITE * list as f64
}

/// The verdict: apply every pending rewrite now, or wait.
pub fn decide(config: &Rewrite, inputs: &Inputs) -> Option<Trigger> {
    if inputs.pending == 0 {
        return None;
    }
    if config.mode == RewriteMode::Immediate {
        return Some(Trigger::Immediate);
    }
    if inputs.idle_seconds.is_some_and(|s| s >= config.cold_cache_seconds) {
        return Some(Trigger::ColdCache);
    }
    if let Some(limit) = inputs.context_limit.filter(|l| *l > 0) {
        if inputs.context as f64 >= config.pressure_ratio * limit as f64 {
            return Some(Trigger::Pressure);
        }
    }
    let remaining = horizon(config, inputs);
    let gain = inputs.pending as f64 * (CACHE_READ * remaining + CACHE_WRITE);
    let cost = (CACHE_WRITE - CACHE_READ) * inputs.tail as f64;
    (gain >= cost && affordable(config, inputs.pending as f64, inputs.tail as f64, inputs)).then_some(Trigger::Pays)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batched() -> Rewrite {
        Rewrite::default()
    }

    #[test]
    fn a_small_prune_deep_in_a_long_prompt_waits() {
        let i = Inputs { context: 50_000, tail: 40_000, pending: 2_000, requests: 3, warm: 3, ..Inputs::default() };
        assert_eq!(decide(&batched(), &i), None);
    }

    #[test]
    fn a_prune_near_the_tail_applies_at_once() {
        // Little to re-bill: it pays on this very request, whatever the horizon.
        let i = Inputs { context: 50_000, tail: 5_000, pending: 4_800, requests: 2, warm: 1, ..Inputs::default() };
        assert_eq!(horizon(&batched(), &i), 0.0);
        assert_eq!(decide(&batched(), &i), Some(Trigger::Pays));
    }

    #[test]
    fn a_deep_prune_pays_only_within_half_the_warm_run() {
        let deep = Inputs {
            context: 50_000,
            tail: 10_000,
            pending: 6_000,
            requests: 42,
            warm: 4,
            banked: 5_000.0,
            ..Inputs::default()
        };
        // Two requests since the cache was last cold: it would need seven to pay back.
        assert_eq!(horizon(&batched(), &deep), 2.0);
        assert_eq!(decide(&batched(), &deep), None);
        let long = Inputs { warm: 16, ..deep };
        assert_eq!(horizon(&batched(), &long), 8.0);
        assert_eq!(decide(&batched(), &long), Some(Trigger::Pays));
        // However long the warm run, savings are counted `expectedRequests` ahead at most.
        let longer = Inputs { warm: 400, pending: 3_000, ..deep };
        assert_eq!(horizon(&batched(), &longer), f64::from(batched().expected_requests));
        assert_eq!(decide(&batched(), &longer), None);
    }

    #[test]
    fn a_rewrite_that_pays_back_waits_until_the_session_can_afford_it() {
        // It would pay back within the horizon, but if the session ended right after it, it
        // would cost 6,000 more than it saved, and nothing is banked yet.
        let i = Inputs { context: 20_000, tail: 15_000, pending: 9_000, requests: 30, warm: 30, ..Inputs::default() };
        assert!((rewrite_extra(9_000.0, 15_000.0) - 6_000.0).abs() < 1e-9);
        assert_eq!(decide(&batched(), &i), None);
        let banked = Inputs { banked: 6_000.0, ..i };
        assert_eq!(decide(&batched(), &banked), Some(Trigger::Pays));
    }

    #[test]
    fn the_balance_counts_savings_rewrites_and_dcps_own_additions() {
        let warm = Request { in_force: 10_000, head: 400, appended: 100, ..Request::default() };
        assert!((balance(&warm) - (1_000.0 - 40.0 - 125.0)).abs() < 1e-9);
        let rewrite = Request { applied: 2_000, tail: 3_000, ..warm };
        assert!((balance(&rewrite) - (1_000.0 - (3_450.0 - 2_500.0) - 40.0 - 125.0)).abs() < 1e-9);
        // On a cold cache everything is written again: what is pruned saves its full price.
        let cold = Request { cold: true, ..rewrite };
        assert!((balance(&cold) - (1.25 * 12_000.0 - 1.25 * 400.0 - 125.0)).abs() < 1e-9);
    }

    #[test]
    fn a_newer_prune_that_pays_goes_without_an_old_one_that_does_not() {
        let base = Inputs { context: 50_000, requests: 10, warm: 10, banked: 5_000.0, ..Inputs::default() };
        // An old small prune (its tail is almost the whole prompt), then a big recent one.
        let pending = [
            Pending { tokens: 300, tail: 45_000, ..Pending::default() },
            Pending { tokens: 5_000, tail: 7_000, ..Pending::default() },
        ];
        assert_eq!(choose(&batched(), &base, &pending), Some((1, Trigger::Pays)));
        // Nothing pays: nothing goes.
        let pending = [
            Pending { tokens: 300, tail: 45_000, ..Pending::default() },
            Pending { tokens: 200, tail: 30_000, ..Pending::default() },
        ];
        assert_eq!(choose(&batched(), &base, &pending), None);
        // Under pressure everything goes.
        let pressed = Inputs { context: 100_000, context_limit: Some(128_000), ..base };
        assert_eq!(choose(&batched(), &pressed, &pending), Some((0, Trigger::Pressure)));
    }

    #[test]
    fn a_rider_goes_with_a_rewrite_that_starts_before_it_but_never_starts_one() {
        let base = Inputs { context: 50_000, requests: 10, warm: 10, banked: 6_000.0, ..Inputs::default() };
        let deep = Pending { tokens: 10_000, tail: 20_000, ..Pending::default() };
        let rider = Pending { tokens: 4_000, tail: 6_000, rider: true, unsure: false };
        // Alone, the deep masking does not pay back; with the rider inside its tail it does.
        assert_eq!(choose(&batched(), &base, &[deep]), None);
        assert_eq!(choose(&batched(), &base, &[deep, rider]), Some((0, Trigger::Pays)));
        // A rider near the tail would pay on its own, but only rides along.
        assert_eq!(choose(&batched(), &base, &[rider]), None);
        let small = Pending { tokens: 100, tail: 45_000, ..Pending::default() };
        assert_eq!(choose(&batched(), &base, &[small, rider]), None);
        // When the whole prompt is written again, riders go too.
        let cold = Inputs { idle_seconds: Some(600), ..base };
        assert_eq!(choose(&batched(), &cold, &[rider]), Some((0, Trigger::ColdCache)));
    }

    #[test]
    fn an_unsure_rewrite_counts_at_half_its_size() {
        // Nothing banked: a rewrite goes only if it costs nothing extra on its own request,
        // removing at least 1.15 / 1.25 of the tail it re-bills.
        let base = Inputs { context: 20_000, requests: 11, warm: 1, ..Inputs::default() };
        let output = Pending { tokens: 800, tail: 1_000, ..Pending::default() };
        let input = Pending { tokens: 150, tail: 600, rider: false, unsure: true };
        assert_eq!(choose(&batched(), &base, &[output]), None);
        // Counted whole, the edit's text would make the rewrite look free (950 of 1,000): text
        // cheaper in tokens than in characters / 4 would make it cost more than it saves.
        let sure = Pending { unsure: false, ..input };
        assert_eq!(choose(&batched(), &base, &[output, sure]), Some((0, Trigger::Pays)));
        assert_eq!(choose(&batched(), &base, &[output, input]), None);
        // Where half of it is enough, it goes, and may start a rewrite of its own.
        let big = Pending { tokens: 300, ..input };
        assert_eq!(choose(&batched(), &base, &[output, big]), Some((0, Trigger::Pays)));
        let alone = Pending { tokens: 1_200, tail: 1_300, ..input };
        assert_eq!(choose(&batched(), &base, &[alone]), None);
        assert_eq!(choose(&batched(), &base, &[Pending { tokens: 2_400, ..alone }]), Some((0, Trigger::Pays)));
        // On a cold cache it goes whatever it weighs.
        let cold = Inputs { idle_seconds: Some(600), ..base };
        assert_eq!(choose(&batched(), &cold, &[input]), Some((0, Trigger::ColdCache)));
    }

    #[test]
    fn a_rewrite_that_does_not_pay_back_may_spend_half_the_bank_on_a_smaller_context() {
        let base = Inputs { context: 50_000, requests: 40, warm: 4, banked: 4_000.0, ..Inputs::default() };
        // Deep in the prompt: 2,000 of a tail of 40,000 never pays back within two requests.
        let deep = Pending { tokens: 2_000, tail: 40_000, ..Pending::default() };
        let extra = rewrite_extra(2_000.0, 40_000.0);
        assert!((extra - 43_500.0).abs() < 1e-9);
        assert_eq!(choose(&batched(), &base, &[deep]), None, "the bank does not cover it");
        let rich = Inputs { banked: 2.0 * extra, ..base };
        assert_eq!(choose(&batched(), &rich, &[deep]), Some((0, Trigger::Spends)));
        // More than half the bank: it waits.
        let short = Inputs { banked: 2.0 * extra - 1.0, ..base };
        assert_eq!(choose(&batched(), &short, &[deep]), None);
        // Less than 2% of the context: not worth the bank.
        let small = Pending { tokens: 900, ..deep };
        assert_eq!(choose(&batched(), &Inputs { banked: 1e9, ..base }, &[small]), None);
        // A rider alone never starts one; off, nothing is spent.
        let rider = Pending { rider: true, ..deep };
        assert_eq!(choose(&batched(), &rich, &[rider]), None);
        let off = Rewrite { spend_banked: 0.0, ..batched() };
        assert_eq!(choose(&off, &rich, &[deep]), None);
    }

    #[test]
    fn the_tools_are_offered_once_the_bank_covers_them() {
        let turn = Turn { head: 600, cold: true, banked: 0.0 };
        // Nothing banked: a session that never prunes never pays for the tools.
        assert!(!offer(&batched(), &turn));
        // The head's first write (750) and its cached reads over the horizon (8 x 60).
        assert!((offer_cost(&batched(), &turn) - 1_230.0).abs() < 1e-9);
        assert!(!offer(&batched(), &Turn { banked: 1_229.0, ..turn }));
        assert!(offer(&batched(), &Turn { banked: 1_230.0, ..turn }));
        // On a warm cache the whole prompt would be written again: never, whatever is banked.
        assert!(!offer(&batched(), &Turn { cold: false, banked: 1e9, ..turn }));
    }

    #[test]
    fn a_rewrite_may_cost_up_to_the_loss_bound_of_what_the_session_cost_so_far() {
        // Nothing banked, half the tail removed near the end of a long warm run: it pays back
        // within the horizon, and costs 1.15 x 10,000 - 1.25 x 6,000 = 4,000 at once.
        let base = Inputs { context: 40_000, requests: 30, warm: 30, ..Inputs::default() };
        let batch = [Pending { tokens: 6_000, tail: 10_000, ..Pending::default() }];
        assert_eq!(choose(&batched(), &base, &batch), None, "a session that cost nothing yet may lose nothing");
        let loss = batched().loss_bound;
        let enough = Inputs { baseline: 4_000.0 / loss, ..base };
        assert_eq!(choose(&batched(), &enough, &batch), Some((0, Trigger::Pays)));
        let short = Inputs { baseline: 4_000.0 / loss - 100.0, ..base };
        assert_eq!(choose(&batched(), &short, &batch), None);
        // What dcp's own head and lists cost is the tools' price, not the rewrites' loss.
        let tools = Inputs { banked: -3_000.0, added: 3_000.0, ..enough };
        assert_eq!(choose(&batched(), &tools, &batch), Some((0, Trigger::Pays)));
        // A rewrite that lost the bank's worth already leaves less for the next one.
        let lost = Inputs { banked: -1_000.0, ..enough };
        assert_eq!(choose(&batched(), &lost, &batch), None);
        // Off, only what the bank covers goes.
        let off = Rewrite { loss_bound: 0.0, ..batched() };
        assert_eq!(choose(&off, &enough, &batch), None);
    }

    #[test]
    fn a_rewrite_that_costs_nothing_extra_goes_whatever_the_balance() {
        let base = Inputs { context: 40_000, requests: 5, warm: 5, banked: -5_000.0, ..Inputs::default() };
        let free = [Pending { tokens: 9_500, tail: 10_000, ..Pending::default() }];
        assert_eq!(choose(&batched(), &base, &free), Some((0, Trigger::Pays)));
    }

    #[test]
    fn the_cost_without_pruning_reads_the_previous_request_from_the_cache() {
        assert!((unpruned_cost(None, 1_000, false) - 1_250.0).abs() < 1e-9);
        assert!((unpruned_cost(Some(800), 1_000, false) - (80.0 + 250.0)).abs() < 1e-9);
        assert!((unpruned_cost(Some(800), 1_000, true) - 1_250.0).abs() < 1e-9);
        // A history that shrank (a compaction) is read from the cache up to its new size.
        assert!((unpruned_cost(Some(2_000), 1_000, false) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn no_run_loses_more_than_the_loss_bound_whatever_its_outputs() {
        // Simulated continuous runs: each request adds a step (an output of random size and
        // some assistant text); outputs beyond the last five wait for the policy, which is
        // asked every request. By the cost model, at the end of every request the run has
        // cost at most (1 + lossBound) x what it would have without pruning.
        let config = batched();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut rewrites = 0;
        for _run in 0..200 {
            let steps = 5 + next(100) as usize;
            // What each request added: an output (its size now: 0 once masked) and text.
            let mut items: Vec<(u64, bool)> = vec![(2_000, false)];
            let (mut unpruned, mut previous) = (2_000u64, None);
            let (mut banked, mut baseline, mut in_force) = (0.0, 0.0, 0u64);
            for step in 1..=steps {
                let big = next(4) == 0;
                let size = 50 + next(if big { 12_000 } else { 1_500 });
                let text = 20 + next(400);
                items.push((size, true));
                items.push((text, false));
                unpruned += size + text;
                baseline += unpruned_cost(previous, unpruned, false);
                previous = Some(unpruned);
                let tail = |from: usize, items: &[(u64, bool)]| items[from..].iter().map(|i| i.0).sum::<u64>();
                let outputs: Vec<usize> = (0..items.len()).filter(|&i| items[i].1).collect();
                let waiting: Vec<usize> =
                    outputs[..outputs.len().saturating_sub(5)].iter().copied().filter(|&i| items[i].0 > 0).collect();
                let pending: Vec<Pending> = waiting
                    .iter()
                    .map(|&i| Pending { tokens: items[i].0, tail: tail(i, &items), ..Pending::default() })
                    .collect();
                let context = tail(0, &items);
                let base =
                    Inputs { context, requests: step as u32, warm: step as u32, banked, baseline, ..Inputs::default() };
                let mut request = Request { in_force, ..Request::default() };
                if let Some((cut, _)) = choose(&config, &base, &pending) {
                    request.applied = pending[cut..].iter().map(|p| p.tokens).sum();
                    request.tail = pending[cut].tail;
                    for &i in &waiting[cut..] {
                        items[i].0 = 0;
                    }
                    in_force += request.applied;
                    rewrites += 1;
                }
                banked += balance(&request);
                let bound = -config.loss_bound * baseline - 1e-6;
                assert!(banked >= bound, "run lost {banked:.0} of {baseline:.0} at step {step}");
            }
        }
        assert!(rewrites > 400, "only {rewrites} rewrites in 200 runs");
    }

    #[test]
    fn the_prunable_list_goes_only_when_what_it_names_is_worth_more_than_the_list() {
        // Written uncached with every request: 1.25 x 40 against a cached read of what it names.
        assert!(!list_pays(400, 40));
        assert!(list_pays(500, 40));
    }

    #[test]
    fn pressure_cold_cache_and_immediate_mode_apply() {
        let i = Inputs {
            context: 90_000,
            tail: 80_000,
            pending: 100,
            requests: 3,
            context_limit: Some(128_000),
            ..Inputs::default()
        };
        assert_eq!(decide(&batched(), &i), Some(Trigger::Pressure));
        let cold = Inputs { context_limit: None, idle_seconds: Some(600), ..i };
        assert_eq!(decide(&batched(), &cold), Some(Trigger::ColdCache));
        let warm = Inputs { idle_seconds: Some(30), ..cold };
        assert_eq!(decide(&batched(), &warm), None);
        let immediate = Rewrite { mode: RewriteMode::Immediate, ..batched() };
        assert_eq!(decide(&immediate, &warm), Some(Trigger::Immediate));
        assert_eq!(decide(&immediate, &Inputs::default()), None, "nothing pending");
    }
}
