//! The cost model, as the lab's `summarize.py` has it: what each request costs given the one
//! before it.
//!
//! A request is a sequence of [`Piece`]s in the order the provider reads them (the system
//! prompt and tool definitions, then each message). The longest common prefix with the
//! previous request is read from the provider's prompt cache at the price sheet's cache-read
//! price (0.1x the input price on Anthropic's 5-minute cache), unless the previous request was
//! more than the cache TTL ago; the rest is written to the cache at its cache-write price
//! (1.25x). Without a cache, every token is at the input price. `summarize.py` compares characters; here a piece either matches the previous
//! request's piece at its position or it does not, so a piece that changed counts whole as
//! uncached (within a changed message `summarize.py` still finds a few shared characters).
//!
//! A request whose shared prefix ends before the previous request's history did is a
//! rewrite: something already sent was sent differently (a prune applied, a compaction).

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::prices::Ttl;
use crate::prices::{Rates, Sheet};

/// One chunk of a request. Equal ids mean equal content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub id: u64,
    pub tokens: u64,
}

/// What one request cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bill {
    pub tokens: u64,
    pub cached: u64,
    #[serde(serialize_with = "round")]
    pub cost: f64,
    /// The request changed what an earlier one had sent.
    #[serde(skip)]
    pub rewrite: bool,
    /// The cache had expired: nothing was read from it.
    pub cold: bool,
    /// Tokens of the prefix shared with the previous request, cached or not (what the cache
    /// would have read had it been warm).
    #[serde(skip)]
    pub shared: u64,
}

/// Sums over a run: the figures `dcp replay` reports per mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub tokens_sent: u64,
    #[serde(serialize_with = "round")]
    pub cost: f64,
    pub final_context: u64,
    pub rewrites: u64,
    /// The rewrites by reason.
    pub reasons: BTreeMap<String, u64>,
    /// Steps that quoted text dcp had hidden from their request (see `replay::misses`).
    pub misses: u64,
    /// `misses` over `requests`.
    #[serde(serialize_with = "round4")]
    pub miss_share: f64,
    /// `cost` plus, for each miss, a request of its context at the cache-read price and the
    /// hidden texts it quoted at the cache-write price.
    #[serde(serialize_with = "round")]
    pub cost_with_misses: f64,
    /// The misses under the re-read model (see `replay::misses`): a hidden text is a miss
    /// only at the first step that quotes it.
    pub misses_reread: u64,
    /// `cost` plus each of `misses_reread` charged as a miss, and on every later request the
    /// hidden texts they fetched at the cache-read price.
    #[serde(serialize_with = "round")]
    pub cost_with_misses_reread: f64,
    /// Calls the recorded agent ran again, and files it read again, whose earlier output the
    /// run had hidden: what dcp counts live as re-fetches (`crate::state::misses`). On a
    /// recording an upper bound: the agent ran without dcp, and had its reasons.
    pub refetches: u64,
}

impl Totals {
    /// Adds a request, and the reason of its rewrite if it was one.
    pub fn add(&mut self, bill: &Bill, rewrite: Option<&str>) {
        self.requests += 1;
        self.tokens_sent += bill.tokens;
        self.cost += bill.cost;
        self.cost_with_misses += bill.cost;
        self.cost_with_misses_reread += bill.cost;
        self.final_context = bill.tokens;
        if let Some(reason) = rewrite {
            self.rewrites += 1;
            *self.reasons.entry(reason.to_string()).or_default() += 1;
        }
        self.miss_share = self.misses as f64 / self.requests as f64;
    }

    /// Charges a miss on the request just added, billed `bill`, whose step quoted
    /// `hidden_tokens` of hidden text; returns the charge.
    pub fn charge(&mut self, p: Rates, bill: &Bill, hidden_tokens: u64) -> f64 {
        let charge = miss_charge(p, bill.tokens, hidden_tokens);
        self.misses += 1;
        self.cost_with_misses += charge;
        self.miss_share = self.misses as f64 / self.requests.max(1) as f64;
        charge
    }

    /// Charges, under the re-read model, the `tokens` of hidden texts earlier misses fetched,
    /// carried by the request just added: read from the cache as part of its context.
    pub fn carry(&mut self, p: Rates, tokens: u64) {
        self.cost_with_misses_reread += p.read * tokens as f64;
    }

    /// Charges a miss under the re-read model on the request just added, billed `bill`;
    /// returns the charge.
    pub fn charge_reread(&mut self, p: Rates, bill: &Bill, hidden_tokens: u64) -> f64 {
        let charge = miss_charge(p, bill.tokens, hidden_tokens);
        self.misses_reread += 1;
        self.cost_with_misses_reread += charge;
        charge
    }

    /// Sums sessions: the final context of a total is the sum of the sessions' final contexts.
    pub fn merge(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.tokens_sent += other.tokens_sent;
        self.cost += other.cost;
        self.final_context += other.final_context;
        self.rewrites += other.rewrites;
        self.misses += other.misses;
        self.cost_with_misses += other.cost_with_misses;
        self.misses_reread += other.misses_reread;
        self.cost_with_misses_reread += other.cost_with_misses_reread;
        self.refetches += other.refetches;
        self.miss_share = self.misses as f64 / self.requests.max(1) as f64;
        for (reason, n) in &other.reasons {
            *self.reasons.entry(reason.clone()).or_default() += n;
        }
    }
}

/// What a miss costs: the request made again with its context read from the cache, and the
/// hidden text brought back, written to it.
pub fn miss_charge(p: Rates, context: u64, hidden_tokens: u64) -> f64 {
    p.read * context as f64 + p.write * hidden_tokens as f64
}

pub fn round4<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((v * 10_000.0).round() / 10_000.0)
}

pub fn round<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(v.round() as u64)
}

/// Bills the requests of one run, in order.
#[derive(Debug)]
pub struct Biller {
    rates: Rates,
    /// How long a prefix stays cached; `None` without a cache.
    ttl: Option<Ttl>,
    previous: Vec<Piece>,
    /// How many of the previous request's pieces were its history (the rest was appended).
    previous_history: usize,
    previous_time: Option<i64>,
}

impl Biller {
    /// A meter for one run priced by `sheet`.
    pub fn new(sheet: &Sheet) -> Biller {
        let ttl = sheet.caches.then_some(sheet.ttl);
        Biller { rates: sheet.rates, ttl, previous: Vec::new(), previous_history: 0, previous_time: None }
    }

    /// Bills a request sent at `time` (ms) made of `pieces`, the first `history` of which
    /// are the system prompt, the tools and the history.
    pub fn bill(&mut self, time: i64, pieces: Vec<Piece>, history: usize) -> Bill {
        let shared = pieces.iter().zip(&self.previous).take_while(|(a, b)| a == b).count();
        let tokens: u64 = pieces.iter().map(|p| p.tokens).sum();
        let shared_tokens: u64 = pieces[..shared].iter().map(|p| p.tokens).sum();
        let expired = match (self.ttl, self.previous_time) {
            (None, Some(_)) => true,
            (Some(Ttl::Seconds(ttl)), Some(t)) => (time - t) as f64 / 1000.0 > ttl as f64,
            _ => false,
        };
        let cached = if expired { 0 } else { shared_tokens };
        let rewrite = !self.previous.is_empty() && shared < self.previous_history;
        self.previous = pieces;
        self.previous_history = history;
        self.previous_time = Some(time);
        let cost = self.rates.read * cached as f64 + self.rates.write * (tokens - cached) as f64;
        Bill { tokens, cached, cost, rewrite, cold: expired, shared: shared_tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: u64, tokens: u64) -> Piece {
        Piece { id, tokens }
    }

    #[test]
    fn the_shared_prefix_is_read_and_the_rest_written() {
        let mut m = Biller::new(&Sheet { ttl: Ttl::Never, ..Sheet::default() });
        let first = m.bill(0, vec![p(1, 100), p(2, 50), p(9, 10)], 2);
        assert_eq!((first.tokens, first.cached, first.cost), (160, 0, 200.0));
        // The tail (9) is replaced by the next message: no rewrite.
        let next = m.bill(1_000, vec![p(1, 100), p(2, 50), p(3, 20), p(9, 10)], 3);
        assert_eq!((next.cached, next.rewrite), (150, false));
        assert!((next.cost - (15.0 + 37.5)).abs() < 1e-9);
        // A changed history piece (2 -> 4) is a rewrite; everything after it is written.
        let rewritten = m.bill(2_000, vec![p(1, 100), p(4, 5), p(3, 20)], 3);
        assert_eq!((rewritten.cached, rewritten.rewrite), (100, true));
    }

    #[test]
    fn a_request_after_the_ttl_reads_nothing_from_the_cache() {
        let mut m = Biller::new(&Sheet::default());
        m.bill(0, vec![p(1, 100)], 1);
        let warm = m.bill(300_000, vec![p(1, 100), p(2, 10)], 2);
        assert_eq!((warm.cached, warm.cold), (100, false));
        let cold = m.bill(600_001, vec![p(1, 100), p(2, 10)], 2);
        assert_eq!((cold.cached, cold.cold, cold.rewrite), (0, true, false));
    }
}
