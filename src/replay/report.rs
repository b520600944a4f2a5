//! What `dcp replay` prints: per session, and over many sessions the ratios to no pruning
//! with their median, worst and total.
//!
//! The JSON fields are stable (README): `{estimator, cache_ttl, prices, overhead, sessions:
//! [{session_id, title, parent_id, requests, recorded, sheet, calibration, modes: {none: M,
//! dcp: M, …}}], total:
//! {none: M, …}, aggregate: {mode: {tokens_sent|cost|final_context: {median, worst,
//! total}}, cost_with_misses: {…}, misses: {median, worst, total}}}}`, where `M` is
//! `{requests, tokens_sent, cost, final_context, rewrites, misses, miss_share,
//! cost_with_misses, misses_reread, cost_with_misses_reread, refetches, agent_calls,
//! agent_calls_same, per_request}` and each `per_request` entry carries `miss` and `miss_reread`, each `null |
//! {quoted, hidden_tokens, charge}`, and `carried`. `misses`, `miss_share`,
//! `cost_with_misses` and `miss` follow issue 23's rule, the headline: every step that quotes
//! hidden text is a miss, charged in full. The `_reread` fields and `carried` are the re-read
//! model beside it: a hidden text is a miss once, then carried from the cache (see
//! `replay::misses`). `cost_with_misses` is aggregated as a ratio to no pruning's cost,
//! `misses` as the share of steps (the total is all misses over all steps). `sheet` is the
//! price sheet the session was billed and decided with (`{name, unit, read, write, ttl,
//! caches, money}`), `calibration` the bills by the model fitted to the usage the session
//! recorded (`replay::calibrate`), or `null`; `cache_ttl` is `--cache-ttl` (`null`: never,
//! `"sheet"`: each sheet's own), `prices` what `--prices` said (`auto`: each session's own).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::calibrate::{Basis, Calibration};
use super::cost::{Totals, Ttl};
use super::steps::Recorded;
use super::{Mode, SessionReplay};
use crate::format::thousands;
use crate::prices::Sheet;

/// A replayed session with what the report says about it besides the runs.
pub struct Row<'a> {
    pub title: &'a str,
    pub parent_id: Option<&'a str>,
    pub replay: &'a SessionReplay,
}

/// What the report says about how it counted.
pub struct Header {
    pub estimator: &'static str,
    /// `--cache-ttl`, over every sheet's.
    pub ttl: Option<Ttl>,
    pub overhead: u64,
    /// What `--prices` said: `auto`, a sheet's name or a file.
    pub prices: String,
}

/// One figure of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    TokensSent,
    Cost,
    FinalContext,
    /// The cost with each miss charged (no pruning has none).
    CostWithMisses,
}

impl Figure {
    pub const ALL: [Figure; 4] = [Figure::TokensSent, Figure::Cost, Figure::CostWithMisses, Figure::FinalContext];

    pub fn key(self) -> &'static str {
        match self {
            Figure::TokensSent => "tokens_sent",
            Figure::Cost => "cost",
            Figure::FinalContext => "final_context",
            Figure::CostWithMisses => "cost_with_misses",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Figure::TokensSent => "Tokens sent",
            Figure::Cost => "Cache-weighted cost",
            Figure::FinalContext => "Final context",
            Figure::CostWithMisses => "Cost with misses charged",
        }
    }

    pub fn of(self, t: &Totals) -> f64 {
        match self {
            Figure::TokensSent => t.tokens_sent as f64,
            Figure::Cost => t.cost,
            Figure::FinalContext => t.final_context as f64,
            Figure::CostWithMisses => t.cost_with_misses,
        }
    }
}

/// Median, worst (highest) and total ratio to no pruning over sessions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Aggregate {
    pub median: f64,
    pub worst: f64,
    pub total: f64,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

fn totals(replay: &SessionReplay, mode: Mode) -> Option<&Totals> {
    replay.runs.iter().find(|(m, _)| *m == mode).map(|(_, run)| &run.totals)
}

/// The modes of the runs, in the order they ran.
fn modes(rows: &[Row<'_>]) -> Vec<Mode> {
    rows.first().map(|r| r.replay.runs.iter().map(|(m, _)| *m).collect()).unwrap_or_default()
}

/// `figure`'s ratio of `mode` to no pruning over `rows`.
pub fn aggregate(rows: &[Row<'_>], mode: Mode, figure: Figure) -> Option<Aggregate> {
    let mut ratios: Vec<f64> = Vec::new();
    let (mut sum, mut sum_none) = (0.0, 0.0);
    for row in rows {
        let (Some(t), Some(none)) = (totals(row.replay, mode), totals(row.replay, Mode::None)) else { continue };
        if let Some(r) = ratio(figure.of(t), figure.of(none)) {
            ratios.push(r);
            sum += figure.of(t);
            sum_none += figure.of(none);
        }
    }
    summary(ratios, ratio(sum, sum_none).unwrap_or(1.0))
}

/// The median and highest of `values`, with `total`.
fn summary(mut values: Vec<f64>, total: f64) -> Option<Aggregate> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    Some(Aggregate { median, worst: values[n - 1], total })
}

/// The share of steps that were misses in `mode` over `rows`: median and worst (highest)
/// session, and all misses over all steps.
pub fn miss_aggregate(rows: &[Row<'_>], mode: Mode) -> Option<Aggregate> {
    let runs: Vec<&Totals> = rows.iter().filter_map(|r| totals(r.replay, mode)).filter(|t| t.requests > 0).collect();
    let (misses, requests) = runs.iter().fold((0, 0), |(m, r), t| (m + t.misses, r + t.requests));
    summary(runs.iter().map(|t| t.miss_share).collect(), misses as f64 / requests.max(1) as f64)
}

/// The re-fetches per session in `mode` over `rows`: median and worst (most) session, and
/// their sum.
pub fn refetch_aggregate(rows: &[Row<'_>], mode: Mode) -> Option<Aggregate> {
    let counts: Vec<f64> = rows.iter().filter_map(|r| totals(r.replay, mode)).map(|t| t.refetches as f64).collect();
    let sum = counts.iter().sum();
    summary(counts, sum)
}

/// The `--json` document.
pub fn json(header: &Header, rows: &[Row<'_>]) -> Value {
    let modes = modes(rows);
    let sessions: Vec<Value> = rows
        .iter()
        .map(|row| {
            let runs: Map<String, Value> = row
                .replay
                .runs
                .iter()
                .map(|(m, run)| (m.name().to_string(), serde_json::to_value(run).unwrap_or(Value::Null)))
                .collect();
            json!({
                "session_id": row.replay.session_id, "title": row.title, "parent_id": row.parent_id,
                "requests": row.replay.requests, "recorded": row.replay.recorded,
                "sheet": sheet_json(&row.replay.sheet), "calibration": row.replay.calibration, "modes": runs,
            })
        })
        .collect();
    let mut total = Map::new();
    let mut aggregates = Map::new();
    for mode in &modes {
        let mut sum = Totals::default();
        rows.iter().filter_map(|r| totals(r.replay, *mode)).for_each(|t| sum.merge(t));
        total.insert(mode.name().to_string(), serde_json::to_value(sum).unwrap_or(Value::Null));
        if *mode != Mode::None {
            let mut figures: Map<String, Value> = Figure::ALL
                .iter()
                .map(|f| (f.key().to_string(), serde_json::to_value(aggregate(rows, *mode, *f)).unwrap_or_default()))
                .collect();
            figures.insert("misses".into(), serde_json::to_value(miss_aggregate(rows, *mode)).unwrap_or_default());
            let refetches = refetch_aggregate(rows, *mode);
            figures.insert("refetches".into(), serde_json::to_value(refetches).unwrap_or_default());
            aggregates.insert(mode.name().to_string(), Value::Object(figures));
        }
    }
    json!({
        "estimator": header.estimator,
        "cache_ttl": match header.ttl { Some(Ttl::Seconds(s)) => json!(s), Some(Ttl::Never) => Value::Null, None => json!("sheet") },
        "prices": header.prices,
        "overhead": header.overhead,
        "sessions": sessions,
        "total": total,
        "aggregate": aggregates,
    })
}

/// The misses over many sessions: per session and mode, the share of steps that quoted text
/// hidden from their request.
fn misses_table(rows: &[Row<'_>], modes: &[Mode]) -> String {
    let mut out = String::from("Misses, share of steps that quoted text hidden from their request:\n");
    let mut head = format!("  {:<34} {:>5}", "session", "reqs");
    for m in modes.iter().filter(|m| **m != Mode::None) {
        let _ = write!(head, " {:>w$}", m.name(), w = m.name().len().max(6));
    }
    let _ = writeln!(out, "{head}");
    for row in rows {
        let (id, requests) = (&row.replay.session_id, row.replay.requests);
        let cells = ratio_cells(modes, |m| totals(row.replay, m).map(|t| t.miss_share));
        let _ = writeln!(out, "  {id:<34} {requests:>5}{cells}");
    }
    for (name, pick) in [("median", 0), ("worst", 1), ("total", 2)] {
        let cells = ratio_cells(modes, |m| miss_aggregate(rows, m).map(|a| [a.median, a.worst, a.total][pick]));
        let _ = writeln!(out, "  {name:<34} {:>5}{cells}", "");
    }
    out.push('\n');
    out
}

/// A sheet as `--json` gives it.
fn sheet_json(s: &Sheet) -> Value {
    let ttl = match s.ttl {
        Ttl::Seconds(n) if s.caches => json!(n),
        _ => Value::Null,
    };
    json!({"name": s.name, "unit": s.unit, "read": s.rates.read, "write": s.rates.write, "ttl": ttl,
           "caches": s.caches, "money": s.money})
}

/// How the costs were priced: the one sheet of every session, or each its own.
fn priced(sheets: &[&Sheet]) -> String {
    let Some(first) = sheets.first().filter(|f| sheets.iter().all(|s| s.rates == f.rates && s.ttl == f.ttl)) else {
        return "each session at its own price sheet (`sheet` in --json); a cached prefix expires after its TTL".into();
    };
    let ttl = match first.ttl {
        _ if !first.caches => "nothing is cached".to_string(),
        Ttl::Seconds(s) => format!("a cached prefix expires after {s} s"),
        Ttl::Never => "the cache never expires".to_string(),
    };
    let (r, w) = (first.rates.read, first.rates.write);
    format!("{r} x the prefix shared with the previous request + {w} x the rest; {ttl}")
}

fn how(header: &Header, sheets: &[&Sheet]) -> String {
    format!(
        "Tokens: {}; cost: {}.\n\
         System prompt and tool definitions: estimated as {} tokens per request (--overhead), plus\n\
         dcp's instructions and tool descriptions where it offers its tools (counted).\n\
         A miss: the step a request produced quotes 64+ characters (line numbers and whitespace\n\
         normalised) found only in text that request hid; charged as the request again at the\n\
         cache-read price plus the hidden text at the cache-write price.\n",
        header.estimator,
        priced(sheets),
        thousands(header.overhead)
    )
}

fn cell(t: &Totals, none: &Totals, figure: Figure) -> String {
    let v = figure.of(t);
    match ratio(v, figure.of(none)) {
        Some(r) if !std::ptr::eq(t, none) => format!("{} ({r:.2})", thousands(v.round() as u64)),
        _ => thousands(v.round() as u64),
    }
}

/// The recorded session's cost as the modes' is weighed, from the provider's cache counts;
/// `-` when the provider reported no cache reads or writes, for then its counts do not say
/// what the cache made of the requests.
fn recorded_cost(rec: &Recorded) -> String {
    if rec.cache_read == 0 && rec.cache_write == 0 {
        return "-".to_string();
    }
    thousands((rec.input as f64 + 0.1 * rec.cache_read as f64 + 1.25 * rec.cache_write as f64).round() as u64)
}

/// A run's misses: how many steps, and their share of the steps.
fn misses_cell(t: &Totals) -> String {
    format!("{} ({:.1}%)", t.misses, 100.0 * t.miss_share)
}

/// The text report of one session.
pub fn session(header: &Header, row: &Row<'_>) -> String {
    let r = row.replay;
    let mut out = format!("Session {}  \"{}\": {} requests\n\n", r.session_id, row.title, r.requests);
    let _ = writeln!(
        out,
        "  {:<18} {:>19} {:>19} {:>19} {:>17} {:>9} {:>12}",
        "mode", "tokens sent", "cost", "cost with misses", "final context", "rewrites", "misses"
    );
    let none = totals(r, Mode::None).cloned().unwrap_or_default();
    for (mode, run) in &r.runs {
        let t = &run.totals;
        let cells: Vec<String> =
            Figure::ALL.iter().map(|f| cell(t, if *mode == Mode::None { t } else { &none }, *f)).collect();
        let reasons: Vec<String> = t.reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let why = if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) };
        let (name, rewrites, misses) = (mode.name(), t.rewrites, misses_cell(t));
        let _ = writeln!(
            out,
            "  {name:<18} {:>19} {:>19} {:>19} {:>17} {rewrites:>9} {misses:>12}{why}",
            cells[0], cells[1], cells[2], cells[3]
        );
    }
    if let Some(rec) = &r.recorded {
        let (input, read, write) = (thousands(rec.input), thousands(rec.cache_read), thousands(rec.cache_write));
        let counts = format!("(provider's counts: {input} input, {read} cache reads, {write} cache writes)");
        let (sent, cost) = (thousands(rec.prompt()), recorded_cost(rec));
        let _ = writeln!(out, "  {:<18} {sent:>19} {cost:>19}     {counts}", "recorded");
    }
    let calls: Vec<String> = r
        .runs
        .iter()
        .filter(|(_, run)| run.agent_calls > 0)
        .map(|(m, run)| format!("{}: {} of {} answered as recorded", m.name(), run.agent_calls_same, run.agent_calls))
        .collect();
    if !calls.is_empty() {
        let _ = writeln!(out, "\nAgent discard/extract calls replayed ({}).", calls.join("; "));
    }
    out.push_str(&refetches_line(&r.runs.iter().map(|(m, run)| (*m, run.totals.refetches)).collect::<Vec<_>>()));
    out.push_str(&calibration_text(r.calibration.as_ref()));
    out.push('\n');
    out.push_str(&how(header, &[&r.sheet]));
    out
}

/// The re-fetches of each run but `none`: calls run or files read again whose output the
/// run had hidden, an upper bound on a recording.
fn refetches_line(runs: &[(Mode, u64)]) -> String {
    let cells: Vec<String> =
        runs.iter().filter(|(m, _)| *m != Mode::None).map(|(m, n)| format!("{} {n}", m.name())).collect();
    format!("\nRe-fetches of hidden outputs (an upper bound: the agent ran without dcp): {}.\n", cells.join(", "))
}

/// A table row's ratio cells, one per mode but `none`: what `ratio` gives, or `-`.
fn ratio_cells(modes: &[Mode], ratio: impl Fn(Mode) -> Option<f64>) -> String {
    let mut out = String::new();
    for m in modes.iter().filter(|m| **m != Mode::None) {
        let cell = ratio(*m).map_or("-".to_string(), |r| format!("{r:.2}"));
        let _ = write!(out, " {cell:>w$}", w = m.name().len().max(6));
    }
    out
}

/// The text report over many sessions: one table per figure, a column per mode.
pub fn sessions(header: &Header, rows: &[Row<'_>]) -> String {
    let modes = modes(rows);
    let mut out = String::new();
    for figure in Figure::ALL {
        let _ = writeln!(out, "{}, ratio to no pruning (none: {}):", figure.title(), figure.key());
        let mut head = format!("  {:<34} {:>5} {:>12}", "session", "reqs", "none");
        for m in modes.iter().filter(|m| **m != Mode::None) {
            let _ = write!(head, " {:>w$}", m.name(), w = m.name().len().max(6));
        }
        let _ = writeln!(out, "{head}");
        for row in rows {
            let none = totals(row.replay, Mode::None).cloned().unwrap_or_default();
            let (id, requests) = (&row.replay.session_id, row.replay.requests);
            let cells =
                ratio_cells(&modes, |m| totals(row.replay, m).and_then(|t| ratio(figure.of(t), figure.of(&none))));
            let _ = writeln!(out, "  {id:<34} {requests:>5} {:>12}{cells}", thousands(figure.of(&none).round() as u64));
        }
        for (name, pick) in [("median", 0), ("worst", 1), ("total", 2)] {
            let cells = ratio_cells(&modes, |m| aggregate(rows, m, figure).map(|a| [a.median, a.worst, a.total][pick]));
            let _ = writeln!(out, "  {name:<34} {:>5} {:>12}{cells}", "", "");
        }
        out.push('\n');
    }
    out.push_str(&misses_table(rows, &modes));
    let mut sums: Vec<(Mode, u64)> = modes.iter().map(|m| (*m, 0)).collect();
    for (m, sum) in &mut sums {
        *sum = rows.iter().filter_map(|r| totals(r.replay, *m)).map(|t| t.refetches).sum();
    }
    out.push_str(refetches_line(&sums).trim_start());
    out.push_str(&calibration_table(rows));
    let _ = writeln!(out, "{} sessions.", rows.len());
    let sheets: Vec<&Sheet> = rows.iter().map(|r| &r.replay.sheet).collect();
    out.push_str(&how(header, &sheets));
    out
}

/// A session's calibration as `dcp replay --session` prints it: nothing without one.
pub fn calibration_text(c: Option<&Calibration>) -> String {
    let Some(c) = c else { return String::new() };
    let basis = match c.basis {
        Basis::Requests => format!("{} requests", c.requests),
        Basis::Totals => "the run's totals only, so its error is 0 by construction".to_string(),
    };
    let t = |x: f64| thousands(x.round().max(0.0) as u64);
    let mut out = format!(
        "\nCalibrated on the provider's usage ({basis}): a fixed prefix of {} tokens, {:.2} provider tokens per o200k token, {} cold requests.\n",
        c.fixed_prefix, c.token_ratio, c.cold
    );
    let _ = writeln!(
        out,
        "  reported {}, modelled without pruning {} ({:+.1}%), dcp {} ({:.2} of the reported bill)",
        t(c.reported),
        t(c.modelled),
        100.0 * c.error,
        t(c.dcp),
        c.effect
    );
    if let Some(m) = &c.money {
        let recorded = m.recorded.map(|r| format!("; the harness recorded {r:.2}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  in money, output included: {:.2} {} reported, {:.2} with dcp{recorded}",
            m.reported, m.currency, m.dcp
        );
    }
    out
}

/// The calibration of every session that has one, as `dcp replay --all` prints it: nothing
/// when none has.
pub fn calibration_table(rows: &[Row<'_>]) -> String {
    let calibrated: Vec<(&str, &Calibration)> =
        rows.iter().filter_map(|r| Some((r.replay.session_id.as_str(), r.replay.calibration.as_ref()?))).collect();
    if calibrated.is_empty() {
        return String::new();
    }
    let mut out = String::from("Calibrated on the provider's usage: bills in tokens at the input price.\n");
    let _ = writeln!(
        out,
        "  {:<34} {:>5} {:>12} {:>12} {:>7} {:>7}",
        "session", "reqs", "reported", "modelled", "error", "dcp"
    );
    for (id, c) in &calibrated {
        let t = |x: f64| thousands(x.round().max(0.0) as u64);
        let (reported, modelled) = (t(c.reported), t(c.modelled));
        let _ = writeln!(
            out,
            "  {id:<34} {:>5} {reported:>12} {modelled:>12} {:>+6.1}% {:>7.2}",
            c.requests,
            100.0 * c.error,
            c.effect
        );
    }
    let mut errors: Vec<f64> = calibrated.iter().map(|(_, c)| c.error.abs()).collect();
    let mut effects: Vec<f64> = calibrated.iter().map(|(_, c)| c.effect).collect();
    let (error, effect) = (median(&mut errors), median(&mut effects));
    let worst = errors.last().copied().unwrap_or(0.0);
    let _ = writeln!(
        out,
        "  median error {:.1}%, worst {:.1}%; dcp's median {effect:.2} of the reported bill\n",
        100.0 * error,
        100.0 * worst
    );
    out
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
