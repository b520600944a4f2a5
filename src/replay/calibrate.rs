//! Replay calibrated on the usage the provider reported: the bill a user paid, and the one
//! dcp would have made of it.
//!
//! Replay's own bill is a model: the history counted in o200k tokens, OpenCode's 6,700 tokens
//! of system prompt and tools in front, a cache that keeps the exact prefix. A recording that
//! kept the provider's usage per request (`Recorded`: uncached input, cache reads and writes)
//! says what was really sent and billed: another client's prefix (Claude Code's is 12,000 to
//! 60,000 tokens), another tokenizer, a cache that went cold when the clock says it should not
//! have. So per session the model is fitted to the usage ([`calibrate`]):
//!
//! * **Prompt size**: each request's reported prompt (input + reads + writes) against the
//!   history replay counted for it, `T = P + k x h`, by least squares: `P` is the client's
//!   fixed prefix (system prompt, tool definitions, what it attaches), `k` the tokenizer's
//!   ratio to o200k. A compaction starts a new `P` (the client attaches files after it), with
//!   the same `k`.
//! * **The cache**, by the sheet ([`own_sheet`]: the model's, or what the usage says: writes
//!   mostly to the 1-hour cache make it `anthropic-1h`, no cache reads or writes at all from a
//!   known provider make it `none`). An explicit cache (a write premium: Anthropic's) reads
//!   the prefix shared with the previous request up to that request's last breakpoint, except
//!   on a request the usage shows cold (it read less than half of that prefix): then it read
//!   only what it reported, at most `P` (the client's prefix, cached by its other sessions).
//!   The `input` a request reported is what it sent after its last breakpoint: uncached, at
//!   the input price, and written by the next request (a few tokens where the client marks
//!   the request's end; Claude Code once marked an earlier block and sent 7,366 so). An implicit cache (no write premium:
//!   OpenAI, Gemini, DeepSeek) hits a share of the shared prefix, `hit_share`, the reads it
//!   reported over the prefixes it shared. The first request reads at most `P`, as reported.
//! * **Totals only**: a log that keeps only the run's totals (`codex exec --json`, SWE-agent's
//!   `model_stats`) gives one `P` (with `k = 1`) and the hit share from them: its bill is
//!   reproduced by construction, and its `error` says nothing.
//!
//! The reported bill prices the usage as billed: uncached input at 1, reads at the sheet's
//! read price, Anthropic's 5-minute writes at 1.25 and 1-hour writes at 2 (a sheet without a
//! write premium: its write price). `modelled` is no pruning's bill by the fitted model over
//! the same requests, `error` its distance to the reported one, and `dcp` the same model's bill
//! of dcp's run (its requests' sizes and shared prefixes, the cold requests the usage showed):
//! dcp's `effect` is that over the reported bill. Costs are in tokens at the input price; with
//! the sheet's money prices, `money` adds both bills in money, output included (the same with
//! and without dcp), beside what the harness itself recorded, where it did.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::cost::{round, round4, Bill};
use super::steps::{Recorded, Timeline};
use crate::prices::{self, Sheet};
use crate::session::{Message, Role};

/// What a calibration is fitted with besides the runs.
pub struct Fit<'a> {
    /// The session's requests, with the usage each recorded.
    pub timeline: &'a Timeline,
    /// Tokens replay counts in front of every request (OpenCode's system prompt and tools).
    pub overhead: u64,
    pub sheet: &'a Sheet,
    /// The run's totals, for a log that records no usage per request.
    pub totals: Option<Recorded>,
}

/// What the fit rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The usage of each request.
    Requests,
    /// Only the run's totals: the bill is reproduced by construction.
    Totals,
}

/// A session's bills by the model fitted to its usage (see the module header).
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub basis: Basis,
    /// Requests the bills cover: those that recorded usage (all, for totals).
    pub requests: usize,
    /// The client's fixed prefix before the first compaction, in the provider's tokens.
    pub fixed_prefix: i64,
    /// The provider's tokens per o200k token of history.
    #[serde(serialize_with = "round4")]
    pub token_ratio: f64,
    /// An implicit cache's hits over the prefixes requests shared.
    pub hit_share: Option<f64>,
    /// Requests the usage shows found the cache cold.
    pub cold: usize,
    #[serde(serialize_with = "round")]
    pub reported: f64,
    #[serde(serialize_with = "round")]
    pub modelled: f64,
    /// `modelled / reported - 1`.
    #[serde(serialize_with = "round4")]
    pub error: f64,
    #[serde(serialize_with = "round")]
    pub dcp: f64,
    /// `dcp / reported`.
    #[serde(serialize_with = "round4")]
    pub effect: f64,
    pub money: Option<MoneyBill>,
}

/// Both bills in money, output included.
#[derive(Debug, Clone, Serialize)]
pub struct MoneyBill {
    pub currency: String,
    pub reported: f64,
    pub dcp: f64,
    /// What the harness recorded the run cost, where it did.
    pub recorded: Option<f64>,
}

/// The provider and model of the session's first assistant message.
fn model_of(messages: &[Message]) -> (&str, &str) {
    let first = messages.iter().find(|m| m.role() == Role::Assistant);
    let field = |k: &str| first.and_then(|m| crate::session::str_field(&m.info, k)).unwrap_or("");
    (field("providerID"), field("modelID"))
}

/// Whether the session's provider is one the sheets know: only then is its usage a bill.
fn known_provider(messages: &[Message]) -> bool {
    let (provider, model) = model_of(messages);
    prices::for_model(model).is_some() || prices::for_provider(provider).is_some()
}

/// The session's own sheet: its model's (or, with a model id the table does not know, its
/// provider's), then what its usage says (see the module header); the default without either.
pub fn own_sheet(messages: &[Message], recorded: Option<&Recorded>) -> Sheet {
    let (provider, model) = model_of(messages);
    let by_provider = || (!model.is_empty()).then(|| prices::for_provider(provider)).flatten();
    let base = prices::for_model(model).or_else(by_provider).unwrap_or_default();
    let Some(r) = recorded.filter(|_| known_provider(messages)) else { return base };
    let family = if r.cache_write_1h * 2 > r.cache_write {
        prices::family("anthropic-1h")
    } else if r.cache_read == 0 && r.cache_write == 0 {
        prices::family("none")
    } else {
        None
    };
    family.map_or(base.clone(), |f| Sheet { money: base.money, ..f })
}

/// How the sheet's cache reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cache {
    None,
    /// Breakpoints and a write premium: the exact shared prefix.
    Explicit,
    /// No write premium: a share of it.
    Implicit(f64),
}

/// One request of a run, as the fit sees it.
#[derive(Debug, Clone, Copy)]
struct Row<'a> {
    /// The assistant message the request produced.
    id: &'a str,
    /// History tokens (everything after OpenCode's prefix) and the part shared with the
    /// previous request.
    h: f64,
    s: f64,
    first: bool,
    usage: Option<Recorded>,
    /// The fixed prefix of the request's segment (set once fitted).
    p: f64,
    cold: bool,
    /// What an explicit cache's request reported it sent uncached: the prompt after its last
    /// breakpoint, which the next request cannot read (set once the cache is known).
    tail: f64,
}

/// One run's requests: the assistant message each produced, and its bill.
pub type Bills<'a> = [(&'a str, Bill)];

/// The rows of `run`: each request's sizes, its usage and the segment it belongs to.
fn rows<'a>(fit: &Fit<'_>, run: &Bills<'a>) -> (Vec<Row<'a>>, Vec<usize>) {
    let messages = fit.timeline.messages();
    let by_id: FxHashMap<&str, (Option<Recorded>, usize)> = fit
        .timeline
        .requests()
        .iter()
        .map(|r| (messages[r.message].id(), (r.recorded, fit.timeline.range(r).start)))
        .collect();
    let o = fit.overhead as f64;
    let (mut rows, mut segments) = (Vec::new(), Vec::new());
    for (i, (id, bill)) in run.iter().enumerate() {
        let (usage, segment) = by_id.get(id).copied().unwrap_or((None, 0));
        let h = (bill.tokens as f64 - o).max(0.0);
        let s = (bill.shared as f64 - o).max(0.0);
        rows.push(Row { id, h, s, first: i == 0, usage, p: 0.0, cold: bill.cold, tail: 0.0 });
        segments.push(segment);
    }
    (rows, segments)
}

/// The fixed prefix of each segment and the token ratio, by least squares over the rows that
/// recorded usage (see the module header); `None` without any.
fn fit_sizes(rows: &[Row<'_>], segments: &[usize]) -> Option<(FxHashMap<usize, f64>, f64)> {
    let mut by_segment: FxHashMap<usize, Vec<(f64, f64)>> = FxHashMap::default();
    for (row, seg) in rows.iter().zip(segments) {
        if let Some(u) = row.usage {
            by_segment.entry(*seg).or_default().push((row.h, u.prompt() as f64));
        }
    }
    let n: usize = by_segment.values().map(Vec::len).sum();
    if n == 0 {
        return None;
    }
    let mean = |v: &[(f64, f64)]| {
        let len = v.len() as f64;
        (v.iter().map(|p| p.0).sum::<f64>() / len, v.iter().map(|p| p.1).sum::<f64>() / len)
    };
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for points in by_segment.values() {
        let (mh, mt) = mean(points);
        sxy += points.iter().map(|(h, t)| (h - mh) * (t - mt)).sum::<f64>();
        sxx += points.iter().map(|(h, _)| (h - mh) * (h - mh)).sum::<f64>();
    }
    let k = if n >= 3 && sxx > 0.0 { (sxy / sxx).clamp(0.5, 3.0) } else { 1.0 };
    let prefixes = by_segment.iter().map(|(seg, points)| (*seg, mean(points).1 - k * mean(points).0)).collect();
    Some((prefixes, k))
}

/// The fixed prefix of every row: its segment's, or the last fitted one before it.
fn assign_prefixes(rows: &mut [Row<'_>], segments: &[usize], prefixes: &FxHashMap<usize, f64>) {
    let mut last = prefixes.iter().min_by_key(|(seg, _)| **seg).map_or(0.0, |(_, p)| *p);
    for (row, seg) in rows.iter_mut().zip(segments) {
        last = prefixes.get(seg).copied().unwrap_or(last);
        row.p = last;
    }
}

/// What request `row`, `t` tokens long of which `shared` were sent before, reads from the
/// cache.
fn cached(cache: Cache, row: &Row<'_>, t: f64, shared: f64) -> f64 {
    let reported = row.usage.map_or(0.0, |u| u.cache_read as f64);
    let c = match cache {
        Cache::None => 0.0,
        _ if row.first || row.cold => reported.min(row.p.max(0.0)),
        Cache::Explicit => shared,
        Cache::Implicit(share) => share * shared,
    };
    c.clamp(0.0, t)
}

/// Each request's size and the prefix it shares with the previous one that the cache holds:
/// at most up to the previous request's last breakpoint (its size less its `tail`), where its
/// usage showed one.
fn sizes<'r, 'a>(rows: &'r [Row<'a>], k: f64) -> impl Iterator<Item = (&'r Row<'a>, f64, f64)> + 'r {
    let mut breakpoint = f64::INFINITY;
    rows.iter().map(move |row| {
        let t = (row.p + k * row.h).max(0.0);
        let shared = (row.p + k * row.s).clamp(0.0, t).min(breakpoint);
        breakpoint = if row.tail > 0.0 { t - row.tail.min(t) } else { f64::INFINITY };
        (row, t, shared)
    })
}

/// The bill of `rows` by the fitted model: the requests' sizes, what each read from the cache,
/// and what it sent uncached after its last breakpoint (at the input price, not written).
fn bill(rows: &[Row<'_>], k: f64, cache: Cache, sheet: &Sheet, only_usage: bool) -> f64 {
    let mut sum = 0.0;
    for (row, t, shared) in sizes(rows, k).filter(|(r, ..)| !only_usage || r.usage.is_some()) {
        let c = cached(cache, row, t, shared);
        let uncached = row.tail.min(t - c);
        sum += sheet.rates.read * c + uncached + sheet.rates.write * (t - c - uncached);
    }
    sum
}

/// The usage priced as billed (see the module header).
fn reported(u: &Recorded, sheet: &Sheet) -> f64 {
    let (five, hour) = (rate("anthropic-5m"), rate("anthropic-1h"));
    let writes = if sheet.rates.write > 1.0 {
        five * u.cache_write.saturating_sub(u.cache_write_1h) as f64 + hour * u.cache_write_1h as f64
    } else {
        sheet.rates.write * u.cache_write as f64
    };
    u.input as f64 + sheet.rates.read * u.cache_read as f64 + writes
}

fn rate(family: &str) -> f64 {
    prices::family(family).map_or(1.0, |s| s.rates.write)
}

/// The session's runs billed by the model fitted to its usage; `None` when it recorded none,
/// or its provider is not one the sheets know (a scripted model's counts are no bill).
pub fn calibrate(fit: &Fit<'_>, messages: &[Message], (none, dcp): (&Bills<'_>, &Bills<'_>)) -> Option<Calibration> {
    if !known_provider(messages) {
        return None;
    }
    let (mut rows, segments) = rows(fit, none);
    let (basis, prefixes, k) = match fit_sizes(&rows, &segments) {
        Some((prefixes, k)) => (Basis::Requests, prefixes, k),
        None => {
            let totals = fit.totals.filter(|t| t.prompt() > 0)?;
            let n = rows.len().max(1) as f64;
            let p = (totals.prompt() as f64 - rows.iter().map(|r| r.h).sum::<f64>()) / n;
            (Basis::Totals, std::iter::once((0, p)).collect(), 1.0)
        }
    };
    assign_prefixes(&mut rows, &segments, &prefixes);
    let cache = cache_of(fit, &rows, k, basis);
    observe_tails(&mut rows, cache);
    observe_cold(&mut rows, cache, k);
    let only_usage = basis == Basis::Requests;
    let modelled = bill(&rows, k, cache, fit.sheet, only_usage);
    let dcp_rows = dcp_rows(fit, dcp, &rows, &prefixes);
    let dcp_bill = bill(&dcp_rows, k, cache, fit.sheet, only_usage);
    let usage = rows.iter().filter_map(|r| r.usage).reduce(Recorded::sum).or(fit.totals)?;
    let reported = match basis {
        Basis::Requests => rows.iter().filter_map(|r| r.usage).map(|u| reported(&u, fit.sheet)).sum(),
        Basis::Totals => reported(&usage, fit.sheet),
    };
    Some(Calibration {
        basis,
        requests: if only_usage { rows.iter().filter(|r| r.usage.is_some()).count() } else { rows.len() },
        fixed_prefix: rows.first().map_or(0.0, |r| r.p).round() as i64,
        token_ratio: k,
        hit_share: match cache {
            Cache::Implicit(share) => Some((share * 10_000.0).round() / 10_000.0),
            _ => None,
        },
        cold: rows.iter().filter(|r| r.cold && !r.first && r.usage.is_some()).count(),
        reported,
        modelled,
        error: if reported > 0.0 { modelled / reported - 1.0 } else { 0.0 },
        dcp: dcp_bill,
        effect: if reported > 0.0 { dcp_bill / reported } else { 1.0 },
        money: money(fit.sheet, &usage, fit.totals.unwrap_or_default(), (reported, dcp_bill)),
    })
}

/// How the sheet's cache reads; an implicit cache's hit share from the usage.
fn cache_of(fit: &Fit<'_>, rows: &[Row<'_>], k: f64, basis: Basis) -> Cache {
    if !fit.sheet.caches {
        return Cache::None;
    }
    if fit.sheet.rates.write > 1.0 {
        return Cache::Explicit;
    }
    let later = || rows.iter().filter(|r| !r.first);
    let shared: f64 = later().filter(|r| basis == Basis::Totals || r.usage.is_some()).map(|r| r.p + k * r.s).sum();
    let read = match basis {
        Basis::Requests => later().filter_map(|r| r.usage).map(|u| u.cache_read as f64).sum(),
        Basis::Totals => fit.totals.map_or(0.0, |t| t.cache_read as f64),
    };
    Cache::Implicit(if shared > 0.0 { read / shared } else { 0.0 })
}

/// Marks the requests whose usage shows the explicit cache cold: they read less than half of
/// the prefix they shared with the previous request. Without usage, the meter's clock says.
fn observe_cold(rows: &mut [Row<'_>], cache: Cache, k: f64) {
    let shared: Vec<f64> = sizes(rows, k).map(|(_, _, shared)| shared).collect();
    for (row, shared) in rows.iter_mut().zip(shared).filter(|(r, _)| !r.first) {
        let Some(u) = row.usage else { continue };
        row.cold = cache == Cache::Explicit && (u.cache_read as f64) < 0.5 * shared;
    }
}

/// Sets each request's uncached tail from its usage: an explicit cache bills `input` as the
/// part after the request's last breakpoint (a few tokens when the client marks its end, the
/// new content when it marks an earlier block), and the next request writes it again.
fn observe_tails(rows: &mut [Row<'_>], cache: Cache) {
    for row in rows.iter_mut() {
        row.tail = match (cache, row.usage) {
            (Cache::Explicit, Some(u)) => u.input as f64,
            _ => 0.0,
        };
    }
}

/// The rows of dcp's run: its sizes, with the coldness the usage showed for the same request
/// without pruning (by message id).
fn dcp_rows<'a>(fit: &Fit<'_>, dcp: &Bills<'a>, none: &[Row<'_>], prefixes: &FxHashMap<usize, f64>) -> Vec<Row<'a>> {
    let (mut rows, segments) = rows(fit, dcp);
    assign_prefixes(&mut rows, &segments, prefixes);
    let tails: FxHashMap<&str, f64> = none.iter().map(|r| (r.id, r.tail)).collect();
    for row in rows.iter_mut() {
        row.tail = tails.get(row.id).copied().unwrap_or(0.0);
    }
    let cold: FxHashMap<&str, bool> = none.iter().map(|r| (r.id, r.cold)).collect();
    for row in rows.iter_mut() {
        row.cold = cold.get(row.id).copied().unwrap_or(row.cold);
    }
    rows
}

/// Both bills in money, where the sheet has money prices; the output and what the harness
/// recorded, from the messages or else the run's row (`run`: a stream-json log's messages
/// carry their output as streamed at their start, its row the run's).
fn money(sheet: &Sheet, usage: &Recorded, run: Recorded, (reported, dcp): (f64, f64)) -> Option<MoneyBill> {
    let m = sheet.money.as_ref()?;
    let output = m.output.unwrap_or(0.0) * usage.output.max(run.output) as f64 / 1_000_000.0;
    let run_cost = run.cost;
    let cents = |x: f64| (x * 10_000.0).round() / 10_000.0;
    Some(MoneyBill {
        currency: m.currency.clone(),
        reported: cents(reported * m.input / 1_000_000.0 + output),
        dcp: cents(dcp * m.input / 1_000_000.0 + output),
        recorded: [usage.cost, run_cost].into_iter().find(|c| *c > 0.0).map(cents),
    })
}
