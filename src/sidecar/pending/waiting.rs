//! A request whose answer is not known yet ([`WaitingRequest`]), with the session's figures before
//! it ([`FiguresBefore`]): a part of the live session (`crate::sidecar::live`) that only [`super`]
//! changes.

use crate::sidecar::facts::RequestFacts;
use crate::sidecar::protocol::Transformed;
use crate::sidecar::totals::PolicyTotals;
use crate::state::Ledger;

/// The running figures of a session that a request changes: its totals, and the ledger of a
/// session dcp prunes.
#[derive(Debug, Clone, Copy)]
pub(in crate::sidecar) struct FiguresBefore {
    pub(super) ledger: Option<Ledger>,
    pub(super) totals: PolicyTotals,
}

impl FiguresBefore {
    pub(in crate::sidecar) fn of(totals: PolicyTotals, ledger: Option<&Ledger>) -> FiguresBefore {
        FiguresBefore { ledger: ledger.copied(), totals }
    }
}

/// A request whose answer is not known yet.
#[derive(Debug)]
pub(in crate::sidecar) struct WaitingRequest {
    pub(super) number: u64,
    /// The session's figures before it.
    pub(super) before: FiguresBefore,
    /// What counting its savings needs: its facts and its answer (what the savings count as
    /// sent); `None` when there is nothing to count (a session dcp leaves alone).
    pub(super) count: Option<(RequestFacts, Transformed)>,
    /// What a rewrite it applied costs the next request, if it never reached the model.
    pub(super) carried: f64,
}
