//! Text renderings shared by the CLI and `/dcp` in OpenCode: the context report and stats.
//! The context report is read in OpenCode's message area, so every line of it fits
//! [`PANE_WIDTH`] columns: a row's last field (a key, a topic) gets the columns left, cut at
//! the end that tells less (a path keeps its file name, a topic its start).

use std::fmt::Write as _;

use crate::context::{Analysis, PruneStatus, Pruned, Range, RangeStatus};
use crate::format::{self, Keep, PANE_WIDTH};
use crate::state::blocks::Origin;
use crate::stats::money::{self, MoneyFigures};
use crate::stats::{AllTime, Figures, Net, SessionStats};

/// The by-category context report: what the model is sent without pruning, what it is sent
/// now (the prunes in force), and what it would be sent with every prune applied (those
/// waiting for the policy and those proposed now too); then the steps and the pruned calls.
pub fn context(header: &str, analysis: &Analysis) -> String {
    let mut out = String::new();
    match header.chars().count() <= PANE_WIDTH {
        true => out.push_str(header),
        false => out.push_str(&format::fit(header, PANE_WIDTH, Keep::Start)),
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{} messages, {} tool calls; tokens counted with {}",
        analysis.messages, analysis.tool_calls, analysis.estimator
    );
    let _ = writeln!(out);
    categories(&mut out, analysis);
    let b = analysis.before.total;
    let _ = writeln!(out, "{:<28} {:>10} {:>10} {:>6}", "After step", "Tokens", "Removes", "Tools");
    let _ = writeln!(out, "  {:<26} {:>10}", "unpruned", format::thousands(b));
    for s in &analysis.steps {
        let step =
            if matches!(s.step, "in force" | "waiting") { s.step.to_string() } else { format!("{}, proposed", s.step) };
        let _ = writeln!(
            out,
            "  {:<26} {:>10} {:>10} {:>6}",
            step,
            format::thousands(s.tokens),
            format::thousands(s.saved),
            s.tools
        );
    }
    let _ = writeln!(out);
    ranges(&mut out, &analysis.ranges);
    if analysis.pruned.is_empty() {
        if analysis.ranges.is_empty() {
            let _ = writeln!(out, "Nothing to prune.");
        }
        return out;
    }
    let of = |status: PruneStatus| analysis.pruned.iter().filter(|p| p.status == status).count();
    let _ = writeln!(
        out,
        "Pruned ({} in force, {} waiting for the policy, {} proposed now)",
        of(PruneStatus::InForce),
        of(PruneStatus::Waiting),
        of(PruneStatus::Proposed)
    );
    for p in &analysis.pruned {
        let prefix = format!(
            "  {:<20} {:<9} {:<16} {:<8} {:>7}  ",
            format::fit(&p.call_id, 20, Keep::End),
            format::fit(&p.tool, 9, Keep::Start),
            p.strategy,
            p.status.name(),
            format::thousands(p.tokens)
        );
        let key = p.key.as_deref().map(|k| format::fit(k, room(&prefix), Keep::End)).unwrap_or_default();
        let _ = writeln!(out, "{}", format!("{prefix}{key}").trim_end());
    }
    legend(&mut out, &analysis.pruned);
    out
}

/// Ranges the context report lists; it says how many more there are and what they remove.
const RANGES_SHOWN: usize = 10;

/// The compressed ranges in force and waiting, those that remove most (at most
/// [`RANGES_SHOWN`]) in their order; the restored ones only counted, for they remove nothing.
fn ranges(out: &mut String, ranges: &[Range]) {
    if ranges.is_empty() {
        return;
    }
    let active: Vec<&Range> = ranges.iter().filter(|r| r.status != RangeStatus::Restored).collect();
    let of = |status: RangeStatus| active.iter().filter(|r| r.status == status).count();
    let restored = match ranges.len() - active.len() {
        0 => String::new(),
        n => format!("; {n} restored, sent in full"),
    };
    let (in_force, waiting) = (of(RangeStatus::InForce), of(RangeStatus::Waiting));
    let _ = writeln!(out, "Compressed ranges ({in_force} in force, {waiting} waiting for the policy{restored})");
    let mut largest: Vec<usize> = (0..active.len()).collect();
    largest.sort_by_key(|&i| std::cmp::Reverse(active[i].tokens));
    largest.truncate(RANGES_SHOWN);
    largest.sort_unstable();
    for r in largest.iter().map(|&i| active[i]) {
        let span = match (&r.from, &r.to) {
            (Some(from), Some(to)) if from == to => from.clone(),
            (Some(from), Some(to)) => format!("{from}..{to}"),
            _ => "not in the history".to_string(),
        };
        let prefix = format!(
            "  {:<5} {:<13} {:<24} {:<8} {:>7}  ",
            format::fit(&r.block, 5, Keep::End),
            format::fit(&span, 13, Keep::End),
            made_by(r),
            r.status.name(),
            format::thousands(r.tokens)
        );
        let topic = format::fit(&r.topic, room(&prefix), Keep::Start);
        let _ = writeln!(out, "{}", format!("{prefix}{topic}").trim_end());
    }
    let rest: Vec<&Range> = (0..active.len()).filter(|i| !largest.contains(i)).map(|i| active[i]).collect();
    if !rest.is_empty() {
        let tokens: u64 = rest.iter().map(|r| r.tokens).sum();
        let (more, tokens) = (format::count(rest.len() as u64, "more range"), format::thousands(tokens));
        let _ = writeln!(out, "  … and {more}, {tokens} tokens (/dcp decompress lists every range)");
    }
    let _ = writeln!(out);
}

/// The columns a row's last field (a key, a topic) has after `prefix`, within [`PANE_WIDTH`].
fn room(prefix: &str) -> usize {
    PANE_WIDTH.saturating_sub(prefix.chars().count())
}

/// What the pruned list's strategies a user cannot know mean, one line each, for those shown.
fn legend(out: &mut String, pruned: &[Pruned]) {
    const MEANINGS: [(&str, &str); 2] = [
        ("imported", "pruned by an older DCP, whose state file did not record why"),
        ("other", "pruned by a strategy of a newer dcp"),
    ];
    for (strategy, meaning) in MEANINGS {
        if pruned.iter().any(|p| p.strategy == strategy) {
            let _ = writeln!(out, "  {strategy}: {meaning}");
        }
    }
}

/// Who made a range, as the context report says it.
fn made_by(range: &Range) -> &'static str {
    match range.origin {
        Origin::Agent => "compressed by the agent",
        Origin::FinishedTurn => "finished turn (dcp)",
        Origin::Other => "made by a newer dcp",
    }
}

/// The categories' tokens unpruned, sent now and with everything applied, and the totals.
fn categories(out: &mut String, analysis: &Analysis) {
    let _ = writeln!(out, "{:<18} {:>10} {:>10} {:>12}", "Category", "Unpruned", "Sent now", "All applied");
    let rows = analysis.before.rows().into_iter().zip(analysis.in_force.rows()).zip(analysis.after.rows());
    let totals = ("total", analysis.before.total);
    let totals = ((totals, ("", analysis.in_force.total)), ("", analysis.after.total));
    for (((name, before), (_, now)), (_, after)) in rows.chain([totals]) {
        let [b, n, a] = [before, now, after].map(format::thousands);
        let _ = writeln!(out, "  {name:<16} {b:>10} {n:>10} {a:>12}");
    }
    let (b, n, a) = (analysis.before.total, analysis.in_force.total, analysis.after.total);
    let _ = writeln!(out, "  in force now:    -{} ({})", format::thousands(b.saturating_sub(n)), percent(b, n));
    let _ = writeln!(out, "  all applied:     -{} ({})", format::thousands(b.saturating_sub(a)), percent(b, a));
    let _ = writeln!(out);
}

/// How much of `before` is gone in `after`, as a percentage.
fn percent(before: u64, after: u64) -> String {
    let pct = if before > 0 { 100.0 * before.saturating_sub(after) as f64 / before as f64 } else { 0.0 };
    format!("{pct:.1}%")
}

/// The statistics panel: the session's savings, if given, and all-time. What reached the
/// model comes first (kept out of requests, cost saved, in force), then what waits, then DCP's
/// one-time figure. Every token count has the same precision (`~1,234`), so rows compare at a
/// glance.
pub fn stats(session: Option<&SessionStats>, all: &AllTime) -> String {
    let mut out = String::from("DCP statistics\n");
    if let Some(s) = session {
        let _ = writeln!(out);
        match &s.title {
            Some(title) => {
                let _ = writeln!(out, "Session \"{}\" ({}):", format::title(title), s.session_id);
            }
            None => match s.proxy_client() {
                Some(client) => {
                    let _ = writeln!(out, "Session {} ({client}, through dcp proxy):", s.session_id);
                }
                None => {
                    let _ = writeln!(out, "Session {}:", s.session_id);
                }
            },
        }
        figures(&mut out, &s.figures, Some((s.in_force_prunes, s.waiting_prunes)));
        money(&mut out, &s.figures, &s.money);
        let _ = writeln!(
            out,
            "  Pruned (DCP):    {}, {}",
            format::approx(s.pruned_tokens),
            format::count(s.tools_pruned, "tool")
        );
        for t in &s.by_strategy {
            let _ = writeln!(
                out,
                "    {:<17} {:>8}  {}",
                t.strategy,
                format::approx(t.tokens),
                format::count(t.tools, "tool")
            );
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "All-time ({}, {}):", format::count(all.files, "state file"), format::bytes(all.bytes));
    figures(&mut out, &all.figures, None);
    money(&mut out, &all.figures, &all.money);
    let _ = writeln!(
        out,
        "  Pruned (DCP):    {}, {}",
        format::approx(all.pruned_tokens),
        format::count(all.tools_pruned, "tool")
    );
    let _ = writeln!(out, "  Sessions:        {}", all.sessions);
    if !all.proxied.is_empty() {
        let by_client: Vec<String> = all.proxied.iter().map(|(client, n)| format!("{client} {n}")).collect();
        let _ = writeln!(out, "  Through the proxy: {}", by_client.join(", "));
    }
    out
}

/// The rows of what reached the model; `prunes` counts those in force and waiting. The net
/// rows are said by [`Net`]: what was added until pruning has won it back, never a negative
/// saving.
fn figures(out: &mut String, f: &Figures, prunes: Option<(u64, u64)>) {
    let net = Net::of(f);
    let tokens = format!("{}:", net.tokens_label());
    let _ = writeln!(out, "  {tokens:<16} {} {}", format::approx(net.token_count), net.tokens_note(f.requests));
    let cost = format!("{}:", net.cost_label());
    let _ = writeln!(out, "  {cost:<16} {} {}", net.cost_percent(), net.cost_note());
    let count = |n: Option<u64>| n.map(|n| format!(" ({})", format::count(n, "prune"))).unwrap_or_default();
    let _ = writeln!(
        out,
        "  In force:        {} per request{}",
        format::approx(f.in_force_tokens),
        count(prunes.map(|p| p.0))
    );
    let _ = writeln!(
        out,
        "  Waiting:         {}{}, not sent yet",
        format::approx(f.waiting_tokens),
        count(prunes.map(|p| p.1))
    );
    if f.refetches + f.restores > 0 {
        let refetches = if f.refetches == 1 { "1 re-fetch".to_string() } else { format!("{} re-fetches", f.refetches) };
        let restores = format::count(f.restores, "restore");
        let _ = writeln!(out, "  Misses seen:     {refetches}, {restores} of what dcp hid");
    }
}

/// The money row: what dcp saved (or added) in money where the sheet has money prices, else
/// the cost saved in tokens at the input price; and, where the provider's reported bill
/// contradicts a saving, that instead of a claim.
fn money(out: &mut String, f: &Figures, m: &MoneyFigures) {
    if f.requests == 0 {
        return;
    }
    if let Some(check) = m.reported_check.filter(|c| c.contradicted) {
        let _ = writeln!(out, "  Money saved:     none claimed: the provider's bill is not below dcp's estimate");
        let _ = writeln!(
            out,
            "                   without pruning ({} against {}, {})",
            tokens_worth(check.reported),
            tokens_worth(check.estimate_without),
            format::count(check.requests, "request"),
        );
        return;
    }
    let net = Net::of(f);
    let label = match net.cost {
        crate::stats::Direction::Saved => "Money saved:",
        crate::stats::Direction::Added => "Money added:",
    };
    let line = match (&m.currency, m.money_saved, m.money_without) {
        (Some(currency), Some(saved), Some(without)) => format!(
            "{} of {} without dcp ({} prices)",
            money::amount(saved.abs(), currency),
            money::amount(without, currency),
            format::field(&m.sheet, 30)
        ),
        _ => format!("{}; {} has no money prices", tokens_worth(f.cost_saved.abs()), format::field(&m.sheet, 30)),
    };
    let _ = writeln!(out, "  {label:<16} {line}");
}

/// A cost in tokens at the input price: `~1,234 tokens' worth`.
fn tokens_worth(cost: f64) -> String {
    format!("{} tokens' worth", format::approx(cost.round().max(0.0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Breakdown;

    fn range(i: u64, origin: Origin) -> Range {
        Range {
            block: format!("b{i}"),
            strategy: origin.strategy().name(),
            origin,
            from: Some(format!("m{}", 3 * i)),
            to: Some(format!("m{}", 3 * i + 2)),
            messages: 3,
            tokens: 100 * i,
            topic: String::new(),
            status: if i == 30 { RangeStatus::Waiting } else { RangeStatus::InForce },
        }
    }

    /// Fields of any length keep every line within the pane: a long title, call id, tool name,
    /// key, range id, span and topic, and a topic with a terminal escape.
    #[test]
    fn every_line_fits_the_pane_whatever_the_fields_hold() {
        let long = |c: &str| c.repeat(150);
        let pruned = Pruned {
            call_id: long("i"),
            tool: long("t"),
            key: Some(long("/k")),
            strategy: "supersede-writes",
            action: "output",
            tokens: 12_345_678,
            recorded: true,
            status: PruneStatus::Waiting,
        };
        let mut wide = range(123_456, Origin::Agent);
        (wide.from, wide.topic) = (Some("m1000000".into()), format!("\u{1b}[31m{}", long("topic ")));
        let analysis = Analysis {
            estimator: "test",
            messages: 1,
            tool_calls: 1,
            before: Breakdown::default(),
            in_force: Breakdown::default(),
            after: Breakdown::default(),
            steps: Vec::new(),
            pruned: vec![Pruned { strategy: "imported", ..pruned.clone() }, pruned],
            ranges: vec![wide, Range { status: RangeStatus::Restored, ..range(1, Origin::FinishedTurn) }],
        };
        let text = context(&format!("Session \"{}\" (ses_1)", long("title ")), &analysis);
        let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > PANE_WIDTH).collect();
        assert!(wide.is_empty(), "{wide:#?}");
        assert!(text.contains("\n  imported: pruned by an older DCP"), "{text}");
        assert!(text.contains("/k/k/k\n") && !text.contains('\u{1b}'), "{text}");
    }

    /// Thirty ranges take a dozen lines: those that remove most, in history order, then one
    /// line for the rest.
    #[test]
    fn a_session_of_thirty_ranges_lists_the_ten_that_remove_most_and_counts_the_rest() {
        let origin = |i: u64| if i % 2 == 0 { Origin::Agent } else { Origin::FinishedTurn };
        let analysis = Analysis {
            estimator: "test",
            messages: 90,
            tool_calls: 60,
            before: Breakdown::default(),
            in_force: Breakdown::default(),
            after: Breakdown::default(),
            steps: Vec::new(),
            pruned: Vec::new(),
            ranges: (1..=30).map(|i| range(i, origin(i))).collect(),
        };
        let text = context("Session", &analysis);
        let section = text.split("Compressed ranges").nth(1).unwrap();
        let lines: Vec<&str> = section.trim_end().lines().collect();
        assert_eq!(lines.len(), 12, "{section}");
        assert_eq!(lines[0], " (29 in force, 1 waiting for the policy)");
        assert!(lines[1].starts_with("  b21   m63..m65      finished turn (dcp)      in force   2,100"), "{section}");
        assert!(lines[10].starts_with("  b30   m90..m92      compressed by the agent  waiting    3,000"), "{section}");
        // 100 + 200 + ... + 2,000 tokens for b1 to b20.
        assert_eq!(lines[11], "  … and 20 more ranges, 21,000 tokens (/dcp decompress lists every range)");
        assert!(!text.contains("Nothing to prune."), "{text}");
    }
}
