//! The report's money and its control group: what dcp saved in money (all-time, and for each
//! session listed, at its sheet; in tokens at the input price where the sheet has no money
//! prices, and no claim where the provider's reported bill contradicts one), and the
//! comparison of the sessions dcp pruned with those it sent unpruned (`holdout`, see
//! `crate::stats::trial`). Each figure carries its exact value in `data-value` for a test.

use std::fmt::Write as _;

use super::{esc, Report};
use crate::format;
use crate::stats::money::{amount, MoneyFigures};
use crate::stats::trial::{Comparison, Measure, TOO_FEW};
use crate::stats::Figures;

/// The money section.
pub(super) fn money(out: &mut String, r: &Report) {
    out.push_str("<h2>Money</h2>");
    let (m, f) = (&r.all.money, &r.all.figures);
    let _ = write!(
        out,
        "<div class=\"cards\"><div class=\"card\">Money saved, all-time{}<span class=\"note\">{}</span></div></div>",
        figure("money-saved", m, f),
        esc(&note(m))
    );
    let listed: Vec<_> = r.sessions.iter().filter(|s| s.stats.figures.requests > 0).collect();
    if listed.is_empty() {
        return;
    }
    out.push_str(
        "<div class=\"wide\"><table><tr><th>Session</th><th>Prices</th><th>Saved</th><th>Without dcp</th></tr>",
    );
    for s in listed {
        let (m, f) = (&s.stats.money, &s.stats.figures);
        let without = match (&m.currency, m.money_without) {
            (Some(c), Some(w)) => amount(w, c),
            _ => format!("{} tokens' worth", format::thousands(f.cost_without.round().max(0.0) as u64)),
        };
        let _ = write!(
            out,
            "<tr data-money-session=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.stats.session_id),
            esc(&s.stats.session_id),
            esc(&m.sheet),
            saved_text(m, f),
            esc(&without)
        );
    }
    out.push_str("</table></div>");
}

/// The all-time saving as a figure: money where priced (its value in `data-value`, its
/// currency in `data-currency`), else tokens at the input price.
fn figure(id: &str, m: &MoneyFigures, f: &Figures) -> String {
    match (&m.currency, m.money_saved) {
        (Some(c), Some(saved)) => format!(
            r#"<span class="big" id="{id}" data-value="{}" data-currency="{}">{}</span>"#,
            (saved * 1_000_000.0).round() / 1_000_000.0,
            esc(c),
            esc(&signed(m, f))
        ),
        _ => format!(
            r#"<span class="big" id="{id}" data-value="" data-tokens="{}">{}</span>"#,
            (f.cost_saved * 10.0).round() / 10.0,
            esc(&signed(m, f))
        ),
    }
}

/// A saving as its magnitude, `added` in front when dcp cost more than it saved: no surface
/// shows a negative saving (`crate::stats::Net`).
fn signed(m: &MoneyFigures, f: &Figures) -> String {
    let added = if f.cost_saved < 0.0 { "added " } else { "" };
    match (&m.currency, m.money_saved) {
        (Some(c), Some(s)) => format!("{added}{}", amount(s.abs(), c)),
        _ => format!("{added}{} tokens' worth", format::thousands(f.cost_saved.abs().round() as u64)),
    }
}

fn note(m: &MoneyFigures) -> String {
    match (&m.currency, m.money_without) {
        (Some(c), Some(w)) => format!("of {} without dcp, at {} prices", amount(w, c), m.sheet),
        _ => format!("at the input price: {} has no money prices (`prices` in dcp.jsonc)", m.sheet),
    }
}

/// A session's saving, or why none is claimed.
fn saved_text(m: &MoneyFigures, f: &Figures) -> String {
    if let Some(c) = m.reported_check.filter(|c| c.contradicted) {
        return esc(&format!(
            "none claimed: the provider's bill ({} tokens' worth) is not below dcp's estimate without pruning ({})",
            format::thousands(c.reported.round() as u64),
            format::thousands(c.estimate_without.round() as u64)
        ));
    }
    esc(&signed(m, f))
}

/// The control group's section.
pub(super) fn trial(out: &mut String, c: &Comparison) {
    out.push_str("<h2>Control group</h2>");
    if c.pruned + c.unpruned == 0 {
        out.push_str(
            "<p class=\"muted\" id=\"holdout-verdict\" data-value=\"off\">No session is in the control group: \
             set <code>holdout</code> in dcp.jsonc (e.g. 0.1) to send that share of new sessions unpruned.</p>",
        );
        return;
    }
    let _ = write!(
        out,
        "<p id=\"holdout-verdict\" data-value=\"{}\">{} pruned, {} unpruned: {}. {}; at least {} sessions per arm.</p>",
        c.verdict,
        format::count(c.pruned, "session"),
        c.unpruned,
        esc(c.verdict),
        esc(c.method),
        c.min_per_arm
    );
    out.push_str("<div class=\"wide\"><table><tr><th>Measure</th><th>Pruned</th><th>Unpruned</th><th>Difference (95% interval)</th></tr>");
    for m in &c.measures {
        row(out, m);
    }
    out.push_str("</table></div>");
}

fn row(out: &mut String, m: &Measure) {
    let side = |s: &crate::stats::trial::Side| match s.mean {
        Some(mean) => format!("{mean:.2} ({})", format::count(s.sessions as u64, "session")),
        None => "no session".to_string(),
    };
    let difference = match (m.difference, m.low, m.high) {
        (Some(d), Some(l), Some(h)) => format!("{d:+.2} ({l:+.2} to {h:+.2})"),
        _ => TOO_FEW.to_string(),
    };
    let _ = write!(
        out,
        "<tr id=\"holdout-{}\" data-verdict=\"{}\" data-pruned=\"{}\" data-unpruned=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        m.name,
        m.verdict,
        m.pruned.mean.map_or(String::new(), |v| v.to_string()),
        m.unpruned.mean.map_or(String::new(), |v| v.to_string()),
        m.name.replace('_', " "),
        esc(&side(&m.pruned)),
        esc(&side(&m.unpruned)),
        esc(&difference)
    );
}
