//! The policy's running totals of a live session besides its ledger (which the state file
//! keeps: `crate::state::Ledger`): the requests since this process first saw it, what the
//! session has cost without pruning and what dcp's own additions have cost, and what the last
//! request's rewrite costs the next if it never reached the model. A request adds to them
//! (`transform`), and one that failed puts them back (`pending`). The costs go on from the
//! ledger's in a new process ([`PolicyTotals::resume`], at its first request) and go back to it with each request
//! ([`PolicyTotals::keep`]): a new OpenCode process, so a new sidecar, decides as one that had
//! answered every request would, and as `dcp replay` does.

use crate::policy;
use crate::prices::Rates;
use crate::state::Ledger;

/// A live session's running totals.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PolicyTotals {
    requests: u32,
    /// What the session has cost without pruning, and the size of its last request without
    /// pruning (see `crate::policy::unpruned_cost`).
    baseline: f64,
    unpruned: Option<u64>,
    /// What dcp's head and lists have cost the session.
    added: f64,
    /// What the last request's rewrite costs the next if it never reached the model
    /// (`policy::carried`).
    carried: f64,
}

impl PolicyTotals {
    pub fn requests(&self) -> u32 {
        self.requests
    }

    pub fn baseline(&self) -> f64 {
        self.baseline
    }

    pub fn added(&self) -> f64 {
        self.added
    }

    pub fn carried(&self) -> f64 {
        self.carried
    }

    /// Counts a request.
    pub fn request(&mut self) {
        self.requests += 1;
    }

    /// Goes on from the costs `ledger` holds.
    pub fn resume(&mut self, ledger: &Ledger) {
        (self.baseline, self.unpruned, self.added) = (ledger.baseline, ledger.unpruned, ledger.added);
    }

    /// Writes the costs into `ledger`, which the next save keeps.
    pub fn keep(&self, ledger: &mut Ledger) {
        (ledger.baseline, ledger.unpruned, ledger.added) = (self.baseline, self.unpruned, self.added);
    }

    /// Adds what a request of `unpruned` tokens would cost without pruning to the baseline,
    /// which the loss bound is a share of (`crate::policy::allowance`).
    pub fn count_unpruned(&mut self, rates: Rates, unpruned: u64, cold_start: bool) {
        self.baseline += policy::unpruned_cost(rates, self.unpruned, unpruned, cold_start);
        self.unpruned = Some(unpruned);
    }

    /// Adds the price of dcp's own additions to a request (`crate::policy::additions`) to what
    /// they have cost, and notes what its rewrite costs the next request if it never reaches the
    /// model.
    pub fn charge(&mut self, request: &policy::Charges) {
        self.added += policy::additions(request);
        self.carried = policy::carried(request);
    }

    /// Puts back the totals as they were `before` a request that never reached the model: only
    /// the price of its rewrite stays carried.
    pub fn put_back(&mut self, before: PolicyTotals) {
        *self = PolicyTotals { carried: self.carried, ..before };
    }
}
