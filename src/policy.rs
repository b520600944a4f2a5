//! When a recorded prune reaches the model: the cache-aware rewrite policy.
//!
//! Providers cache exact prompt prefixes. Rewriting an old tool output changes the prompt
//! from that point on, and everything after it is billed again at the cache-write price
//! (1.25x) instead of the cache-read price (0.1x). So a prune is recorded at once (stats,
//! state file) but its rewrite waits until it pays:
//!
//! * applying now costs about `1.15 x tail - 1.25 x saved` extra on this request, where `tail`
//!   is everything from the first changed part to the end of the previous request;
//! * it then saves `0.1 x saved` on each later request (the pruned tokens are no longer
//!   read from the cache), over `remaining` requests.
//!
//! Pending rewrites are applied together (once the tail is re-billed, more edits inside it
//! cost nothing) when `saved x (0.1 x remaining + 1.25) >= 1.15 x tail`, when the context
//! passes `pressureRatio` of the model's window, or when the cache is cold anyway after an
//! idle gap. The expected number of remaining requests is what the session has already run
//! (a session that ran long tends to go on), and at least `expectedRequests`.
//! `rewrite.mode = "immediate"` applies every decision on the next request, as the published
//! DCP does.

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
    /// Requests this session has sent so far (in this process).
    pub requests: u32,
    /// Seconds since the session's previous request, if there was one.
    pub idle_seconds: Option<u64>,
    /// The model's context window, if known.
    pub context_limit: Option<u64>,
}

/// Why pending rewrites are applied now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Immediate,
    Pays,
    Pressure,
    ColdCache,
}

/// One pending rewrite, in history order: the tokens it saves and the re-billed tail if the
/// rewrite started at its part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub tokens: u64,
    pub tail: u64,
}

/// Which pending rewrites to apply now: those from index `cut` on (in history order), and why.
/// The whole set goes when pressure, a cold cache or immediate mode says so; otherwise the
/// suffix that gains the most, if any suffix pays (a small old prune must not hold back newer
/// ones that pay on their own, nor drag their tail back to its position).
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
    let remaining = (base.requests.max(config.expected_requests)) as f64;
    let mut best: Option<(usize, f64)> = None;
    let mut gain_tokens = 0u64;
    for (k, p) in pending.iter().enumerate().rev() {
        gain_tokens += p.tokens;
        let net =
            gain_tokens as f64 * (CACHE_READ * remaining + CACHE_WRITE) - (CACHE_WRITE - CACHE_READ) * p.tail as f64;
        if net >= 0.0 && best.is_none_or(|(_, b)| net >= b) {
            best = Some((k, net));
        }
    }
    best.map(|(k, _)| (k, Trigger::Pays))
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
    let remaining = (inputs.requests.max(config.expected_requests)) as f64;
    let gain = inputs.pending as f64 * (CACHE_READ * remaining + CACHE_WRITE);
    let cost = (CACHE_WRITE - CACHE_READ) * inputs.tail as f64;
    (gain >= cost).then_some(Trigger::Pays)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batched() -> Rewrite {
        Rewrite::default()
    }

    #[test]
    fn a_small_prune_deep_in_a_long_prompt_waits() {
        let i = Inputs { context: 50_000, tail: 40_000, pending: 2_000, requests: 3, ..Inputs::default() };
        assert_eq!(decide(&batched(), &i), None);
    }

    #[test]
    fn a_prune_that_pays_for_its_tail_applies() {
        let i = Inputs { context: 50_000, tail: 10_000, pending: 6_000, requests: 3, ..Inputs::default() };
        assert_eq!(decide(&batched(), &i), Some(Trigger::Pays));
        // A long-running session expects more requests, so less saving is enough.
        let long = Inputs { pending: 3_000, requests: 40, ..i };
        assert_eq!(decide(&batched(), &long), Some(Trigger::Pays));
    }

    #[test]
    fn a_newer_prune_that_pays_goes_without_an_old_one_that_does_not() {
        let base = Inputs { context: 50_000, requests: 10, ..Inputs::default() };
        // An old small prune (its tail is almost the whole prompt), then a big recent one.
        let pending = [Pending { tokens: 300, tail: 45_000 }, Pending { tokens: 5_000, tail: 8_000 }];
        assert_eq!(choose(&batched(), &base, &pending), Some((1, Trigger::Pays)));
        // Nothing pays: nothing goes.
        let pending = [Pending { tokens: 300, tail: 45_000 }, Pending { tokens: 200, tail: 30_000 }];
        assert_eq!(choose(&batched(), &base, &pending), None);
        // Under pressure everything goes.
        let pressed = Inputs { context: 100_000, context_limit: Some(128_000), ..base };
        assert_eq!(choose(&batched(), &pressed, &pending), Some((0, Trigger::Pressure)));
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
