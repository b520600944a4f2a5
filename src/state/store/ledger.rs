//! The policy's ledger in a session's [`Slot`]: read by the sidecar's requests, moved by
//! each one (it rides along with the next save, [`Slot::unsaved`]), and changed as a decision
//! the next save writes (the head offered, a failed request's figures put back).

use super::Slot;
use crate::state::Ledger;

impl Slot {
    /// The policy's running figures, as the state file keeps them.
    pub fn ledger(&self) -> &Ledger {
        &self.state.ledger
    }

    /// The policy's running figures to change: they ride along with the next save, as
    /// [`Slot::unsaved`] says, with no change to note.
    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.state.ledger
    }

    /// The session's requests carry dcp's head from now on, its `charge` taken from the
    /// ledger's bank: a decision the next save writes.
    pub fn offer_head(&mut self, charge: f64) {
        self.state.ledger.banked -= charge;
        self.state.ledger.offered = true;
        self.dirty = true;
    }

    /// Puts the ledger back as it was before a request that never reached the model; whether
    /// that changed it (the next save then writes it).
    pub fn put_back_ledger(&mut self, ledger: Ledger) -> bool {
        if self.state.ledger == ledger {
            return false;
        }
        self.state.ledger = ledger;
        self.dirty = true;
        true
    }
}
