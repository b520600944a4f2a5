//! Late bets: past [`LATE_RUN`] requests of a warm run, a bet must come back within
//! [`LATE_BET`] requests, not `expectedRequests`.
//!
//! The horizon (half the warm run) is the Copernican guess for a run of unknown length, and it
//! grows as the run goes on. But a continuous agent run does not last for ever: it goes on for
//! 30 to 100 steps, and the further past 30 it is, the nearer its end may be. A bet that needs
//! more than six requests to come back (a batch that makes only part of the tail it re-bills,
//! with nothing banked) was won early in a run and lost late: of the corpus, the held-out set
//! and the generated suite, every session in which this bound changes a decision had ended at
//! 1.004 of no pruning or more without it (`Convert ... to Jest` at request 93 of 94 under the
//! OpenAI-style sheets, 1.043; `django__django-11964` at 46 of 47, 1.021; `Port a Python
//! project to Rust` at 33 of 39 under the 1-hour sheet, 1.036), while before request 30 such
//! bets won down to 0.976 (docs/results/bets.md). A quick bet ([`super::QUICK_BOUND`]) is not
//! held to this: it comes back within half its horizon, at most four requests; what it may
//! stake is bounded apart, and the tests of that bound, which a short run's last request
//! also risks, are here too.

/// Requests of a warm run after which a bet must come back within [`LATE_BET`] requests.
pub const LATE_RUN: u32 = 30;

/// The most requests a bet placed past [`LATE_RUN`] may take to come back.
pub const LATE_BET: f64 = 6.0;

/// The most requests a bet placed `warm` requests into a warm run may take to come back,
/// beyond the bet horizon's own bound: [`LATE_BET`] past [`LATE_RUN`], no further bound before.
pub fn late_bet_cap(warm: u32) -> f64 {
    if warm > LATE_RUN {
        LATE_BET
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    /// Request `warm` of a run with nothing banked that has cost 200,000 so far (the loss
    /// bound allows 10,000): a batch removes 1,700 of the 3,000 tokens it re-bills, for
    /// 1.15 x 3,000 - 1.25 x 1,700 = 1,325 at once and 170 a request after: back within 8
    /// requests, not within 6, and no quick bet.
    fn slow_bet(warm: u32) -> Option<(usize, Trigger)> {
        let base = Inputs { context: 60_000, warm, baseline: 200_000.0, ..Inputs::default() };
        let batch = [Pending { tokens: 1_700, tail: 3_000, ..Pending::default() }];
        choose(&Rewrite::default(), &base, &batch)
    }

    #[test]
    fn a_bet_that_needs_eight_requests_goes_early_in_a_run_and_waits_past_its_thirtieth_request() {
        assert_eq!(slow_bet(24), Some((0, Trigger::Pays)));
        assert_eq!(slow_bet(LATE_RUN), Some((0, Trigger::Pays)));
        assert_eq!(slow_bet(LATE_RUN + 1), None);
        assert_eq!(slow_bet(94), None);
    }

    #[test]
    fn a_late_bet_back_within_six_requests_or_covered_by_the_bank_still_goes() {
        // 2,000 of the 3,000 tokens: 950 at once, 200 a request after, back within 5.
        let base = Inputs { context: 60_000, warm: 60, baseline: 200_000.0, ..Inputs::default() };
        let faster = [Pending { tokens: 2_000, tail: 3_000, ..Pending::default() }];
        assert_eq!(choose(&Rewrite::default(), &base, &faster), Some((0, Trigger::Pays)));
        // The slow one goes once the bank covers all but what it earns back within 6 requests.
        let slow = [Pending { tokens: 1_700, tail: 3_000, ..Pending::default() }];
        assert_eq!(choose(&Rewrite::default(), &Inputs { banked: 310.0, ..base }, &slow), Some((0, Trigger::Pays)));
        assert_eq!(choose(&Rewrite::default(), &Inputs { banked: 300.0, ..base }, &slow), None);
    }

    #[test]
    fn a_quick_bet_stakes_at_most_an_eighth_of_what_the_session_has_cost() {
        // Request 30 with nothing banked: a batch removes 10,000 of the 13,000 tokens it
        // re-bills, 2,450 at once and 1,000 a request after, a quick bet beyond the loss bound.
        // The suite's 14-request explore session lost such a bet, staking 15% of its cost.
        let quick = [Pending { tokens: 10_000, tail: 13_000, ..Pending::default() }];
        let after = |baseline: f64| {
            let base = Inputs { context: 40_000, warm: 30, baseline, ..Inputs::default() };
            choose(&Rewrite::default(), &base, &quick)
        };
        assert_eq!(after(20_000.0), Some((0, Trigger::Pays)), "2,450 is within 2,500");
        assert_eq!(after(18_000.0), None, "2,450 is more than an eighth of 18,000");
    }

    #[test]
    fn without_a_write_premium_a_quick_bet_stakes_at_most_a_tenth_of_what_the_session_has_cost() {
        // Request 30 with nothing banked, under the OpenAI-style sheets (writes at the base
        // price): a batch removes 10,000 of the 13,000 tokens it re-bills, 1,700 at once and
        // 1,000 a request after. The suite's 13-request explore session lost such a bet at
        // request 11, staking 11% of its cost (1.024 of no pruning).
        let openai = crate::prices::family("openai").unwrap().rates;
        let quick = [Pending { tokens: 10_000, tail: 13_000, ..Pending::default() }];
        let after = |baseline: f64| {
            let base = Inputs { context: 40_000, warm: 30, baseline, rates: openai, ..Inputs::default() };
            choose(&Rewrite::default(), &base, &quick)
        };
        assert_eq!(after(17_000.0), Some((0, Trigger::Pays)), "1,700 is a tenth of 17,000");
        assert_eq!(after(16_000.0), None, "1,700 is more than a tenth of 16,000, within an eighth");
    }

    #[test]
    fn the_late_cap_bounds_nothing_before_the_thirtieth_request() {
        assert_eq!(late_bet_cap(1), f64::INFINITY);
        assert_eq!(late_bet_cap(LATE_RUN), f64::INFINITY);
        assert_eq!(late_bet_cap(LATE_RUN + 1), LATE_BET);
    }
}
