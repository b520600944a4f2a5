//! A session's requests as `dcp stats --json` gives them: what dcp counted of each (its
//! context without dcp and as sent, what it saved) beside what the provider reported it
//! billed, and that usage summed (see `crate::state::savings`).

use serde::Serialize;

use crate::prices::Sheet;
use crate::state::savings::{Mark, Savings, Usage};

/// One request: dcp's count and the provider's.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequestRow {
    /// Its number among the session's requests, from 1.
    pub request: u64,
    /// When it was made (ms since the epoch).
    pub time: i64,
    /// Its context in tokens without dcp and as dcp sent it, and what dcp saved on it in
    /// tokens at the input price (below 0: what it added).
    pub without: u64,
    pub with: u64,
    pub saved: i64,
    /// `rewrite` when dcp applied waiting rewrites, `compaction` when OpenCode compacted before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mark: Option<&'static str>,
    /// What the provider reported, when dcp learned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<UsageRow>,
}

/// A provider's usage as `dcp stats --json` gives it: tokens by kind, the client's cost, and
/// the model (`provider/id`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UsageRow {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl UsageRow {
    fn of(u: &Usage, model: Option<String>) -> UsageRow {
        let (input, output, reasoning) = (u.input, u.output, u.reasoning);
        UsageRow { input, output, reasoning, cache_read: u.cache_read, cache_write: u.cache_write, cost: u.cost, model }
    }
}

/// The usage the provider reported, summed over the requests dcp learned it for.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReportedTotals {
    /// How many requests that is.
    pub requests: u64,
    #[serde(flatten)]
    pub usage: UsageRow,
}

/// The requests of `savings`, each with what the provider reported of it.
pub fn rows(savings: &Savings) -> Vec<RequestRow> {
    let mut reported = savings.reported.iter().peekable();
    let model = |i: Option<u32>| {
        let m = savings.models.get(i? as usize)?;
        Some(if m.provider.is_empty() { m.id.clone() } else { format!("{}/{}", m.provider, m.id) })
    };
    let mut out = Vec::with_capacity(savings.trail.len());
    for (i, point) in savings.trail.iter().enumerate() {
        let request = i as u64 + 1;
        while reported.next_if(|r| r.request < request).is_some() {}
        let usage = reported.next_if(|r| r.request == request).map(|r| UsageRow::of(&r.usage, model(r.model)));
        let mark = match point.mark {
            Mark::None => None,
            Mark::Rewrite => Some("rewrite"),
            Mark::Compaction => Some("compaction"),
        };
        let (time, without, with, saved) = (point.time, point.without, point.with, point.saved);
        out.push(RequestRow { request, time, without, with, saved, mark, reported: usage });
    }
    out
}

/// The usage of `savings`' requests summed, `None` while the provider reported none.
pub fn totals(savings: &Savings) -> Option<ReportedTotals> {
    let (usage, requests) = savings.reported_total();
    (requests > 0).then(|| ReportedTotals { requests, usage: UsageRow::of(&usage, None) })
}

/// Whether a bill counts the output the provider reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// At the sheet's output price's share of its input price, where the sheet knows both.
    Counted,
    Left,
}

/// What the provider reported it billed for `savings`' requests, in tokens at `sheet`'s input
/// price (uncached input whole, cache reads and writes at the sheet's rates), and how many
/// requests that is.
pub fn bill(savings: &Savings, sheet: &Sheet, outputs: Outputs) -> (f64, u64) {
    let output_share = match (outputs, &sheet.money) {
        (Outputs::Counted, Some(m)) => m.output.filter(|_| m.input > 0.0).map_or(0.0, |o| o / m.input),
        _ => 0.0,
    };
    let rates = sheet.rates;
    let one = |u: &Usage| {
        let prompt = u.input as f64 + rates.read * u.cache_read as f64 + rates.write * u.cache_write as f64;
        prompt + output_share * (u.output + u.reasoning) as f64
    };
    (savings.reported.iter().map(|r| one(&r.usage)).sum(), savings.reported.len() as u64)
}

/// dcp's estimate of what the requests the provider reported would have cost without
/// pruning, from each request's context without dcp (`dcp.trail`) priced at `sheet`: the
/// context the request before it had is read from the cache while the cache is warm, the rest
/// written, as the meter counts it (`crate::sidecar::savings`).
pub fn estimate_without(savings: &Savings, sheet: &Sheet) -> f64 {
    let (rates, ttl_ms) = (sheet.rates, sheet.ttl.seconds().saturating_mul(1_000));
    let mut reported = savings.reported.iter().map(|r| r.request).peekable();
    let mut total = 0.0;
    for (i, point) in savings.trail.iter().enumerate() {
        let request = i as u64 + 1;
        while reported.next_if(|&r| r < request).is_some() {}
        if reported.next_if(|&r| r == request).is_none() {
            continue;
        }
        let before = i.checked_sub(1).and_then(|b| savings.trail.get(b));
        let warm = before.filter(|b| sheet.caches && ((point.time - b.time).max(0) as u64) <= ttl_ms);
        let cached = warm.map_or(0, |b| b.without.min(point.without));
        total += rates.read * cached as f64 + rates.write * (point.without - cached) as f64;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::savings::{Model, RequestFigures};

    #[test]
    fn each_request_has_what_the_provider_reported_of_it_beside_what_dcp_counted() {
        let mut s = Savings::default();
        for time in [10, 20, 30] {
            let r = RequestFigures {
                time,
                without: 1_000,
                with: 800,
                appended: 0,
                cached_without: 0,
                cached_with: 0,
                mark: Mark::None,
                rates: crate::prices::Rates::default(),
            };
            s.add(&r);
        }
        let model = Model { provider: "fake".into(), id: "fake-model".into(), ..Model::default() };
        let usage = Usage { input: 700, output: 20, cache_read: 100, cost: Some(0.5), ..Usage::default() };
        s.report(2, usage, Some(&model));
        s.report(3, Usage { cost: None, ..usage }, None);
        let rows = rows(&s);
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].without, rows[0].with, rows[0].saved, rows[0].reported.as_ref()), (1_000, 800, 250, None));
        assert_eq!(rows[1].reported.as_ref().and_then(|r| r.model.as_deref()), Some("fake/fake-model"));
        assert_eq!(rows[2].reported.as_ref().map(|r| (r.input, r.cost)), Some((700, None)));
        let summed = totals(&s).unwrap();
        assert_eq!((summed.requests, summed.usage.input, summed.usage.cost), (2, 1_400, Some(0.5)));
        assert_eq!(totals(&Savings::default()), None);
    }
}
