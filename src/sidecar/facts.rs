//! What a transform knows about a request besides the history ([`RequestFacts`]): when it
//! came, whether the provider's cache is cold, the model's window and prices. Kept with a
//! request whose answer is not known yet (`super::totals::Pending`).

use crate::strategies::Rules;

/// What a transform knows about the request besides the history.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestFacts {
    /// The number of the last answer whose edits the plugin holds.
    pub have: Option<u64>,
    /// Requests since the cache was last cold, this one included.
    pub warm: u32,
    /// The gap since the session's last request, if dcp saw one.
    pub idle_seconds: Option<u64>,
    /// The model's context window, if the plugin knows it.
    pub context_limit: Option<u64>,
    /// Whether the provider's cache holds nothing of the session: its first request dcp knows
    /// of, or one after an idle gap past `rewrite.coldCacheSeconds`.
    pub cold_start: bool,
    /// Whether an idle gap since a request dcp saw let the cache go cold (the first request
    /// has no gap, so it is not one).
    pub gap_went_cold: bool,
    /// The session's cache prices, and the idle seconds after which its cache is cold (its
    /// price sheet's TTL unless `rewrite.coldCacheSeconds` is set).
    pub rates: crate::prices::Rates,
    pub cold_after: u64,
}

impl RequestFacts {
    /// What the policy weighs of this request before the session's balances: its warm run,
    /// idle gap, window and prices.
    pub fn inputs(&self) -> crate::policy::Inputs {
        let (warm, idle_seconds, context_limit) = (self.warm, self.idle_seconds, self.context_limit);
        let (rates, cold_after) = (self.rates, self.cold_after);
        crate::policy::Inputs { warm, idle_seconds, context_limit, rates, cold_after, ..Default::default() }
    }

    /// The request's balance before what dcp did on it: whether the cache went cold, and the
    /// prices.
    pub fn request(&self) -> crate::policy::Charges {
        crate::policy::Charges { cold: self.gap_went_cold, rates: self.rates, ..Default::default() }
    }

    /// The facts of a request made `idle_seconds` after the session's last one.
    pub fn new(rules: &Rules, sheet: &crate::prices::Sheet, idle_seconds: Option<u64>) -> RequestFacts {
        let cold_after = rules.config().rewrite.cold_after(sheet);
        RequestFacts {
            rates: sheet.rates,
            cold_after,
            have: None,
            warm: 0,
            idle_seconds,
            context_limit: None,
            cold_start: idle_seconds.is_none_or(|s| s >= cold_after),
            gap_went_cold: idle_seconds.is_some_and(|s| s >= cold_after),
        }
    }
}
