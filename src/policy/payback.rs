//! What a rewrite costs now, and whether it ever earns it back, under the session's price sheet.
//!
//! A rewrite re-bills its tail once and saves the cache-read price of what it removes on every
//! later request that finds the cache warm. Under a sheet whose reads are billed (every
//! provider's cache) that saving comes back in time; under one whose cached reads are free
//! (`local`: a prefix the KV cache holds costs no prefill) nothing comes back, and a rewrite
//! that re-prefills anything is a loss, whatever triggers it: so under pressure such a sheet
//! leaves the window to the host's compaction, which reads the history from the KV cache and
//! prefills only its summary. A spend, which buys a smaller context with part of the bank,
//! must pay back within `maxHorizon` requests ([`pays_back`]); pressure, which is for the
//! window and not the bill, only ever ([`ever_pays`]). The estimates of a rewrite's saving and
//! of its tail are made apart and may say it removes more than it re-bills: it counts as
//! removing the whole tail ([`rewrite_extra`]), which under free reads is still no gain.

use crate::config::Rewrite;
use crate::prices::Rates;

/// What a rewrite that removes `saved` tokens and re-bills `tail` costs beyond not making it,
/// on a warm cache priced `p`. What it removes lies in the tail it re-bills: an estimate of
/// more (the sizes are characters / 4, the saving and the tail counted apart) counts as the
/// whole tail, which under a sheet with free reads is no gain at all.
pub(super) fn rewrite_extra(p: Rates, saved: f64, tail: f64) -> f64 {
    if saved == 0.0 {
        return 0.0;
    }
    (p.write - p.read) * tail - p.write * saved.min(tail)
}

/// Whether a rewrite that removes `saved` tokens and re-bills `tail` earns its extra back
/// within `maxHorizon` requests at the sheet's read price.
pub(super) fn pays_back(config: &Rewrite, p: Rates, saved: f64, tail: f64) -> bool {
    ever_pays(p, saved, tail) && p.read * saved * f64::from(config.max_horizon) >= rewrite_extra(p, saved, tail)
}

/// Whether a rewrite that removes `saved` tokens and re-bills `tail` ever earns back what it
/// costs now. Under a sheet whose cached reads are free (`local`: a prefix the KV cache holds
/// costs no prefill) it saves nothing on later requests, and re-prefills at least the
/// placeholders it sends, which the estimate of its extra counts out: none does. Under
/// pressure such a sheet leaves the window to the host's compaction, which reads the history
/// from the KV cache and prefills only its summary.
pub(super) fn ever_pays(p: Rates, saved: f64, tail: f64) -> bool {
    p.read * saved > 0.0 || rewrite_extra(p, saved, tail) < 0.0
}
