//! Text renderings shared by the CLI and `/dcp` in OpenCode: the context report and stats.

use std::fmt::Write as _;

use crate::context::{Analysis, Status};
use crate::format;
use crate::stats::{AllTime, Figures, Net, SessionStats};

/// The by-category context report: what the model is sent without pruning, what it is sent
/// now (the prunes in force), and what it would be sent with every prune applied (those
/// waiting for the policy and those proposed now too); then the steps and the pruned calls.
pub fn context(header: &str, analysis: &Analysis) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
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
    if analysis.pruned.is_empty() {
        let _ = writeln!(out, "Nothing to prune.");
        return out;
    }
    let of = |status: Status| analysis.pruned.iter().filter(|p| p.status == status).count();
    let _ = writeln!(
        out,
        "Pruned ({} in force, {} waiting for the policy, {} proposed now)",
        of(Status::InForce),
        of(Status::Waiting),
        of(Status::Proposed)
    );
    for p in &analysis.pruned {
        let _ = writeln!(
            out,
            "  {:<22} {:<6} {:<17} {:<9} {:>7}  {}",
            format::field(&p.call_id, 64),
            format::field(&p.tool, 64),
            p.strategy,
            p.status.name(),
            format::thousands(p.tokens),
            p.key.as_deref().map(|k| format::field(&format::shorten(k, 50), 256)).unwrap_or_default()
        );
    }
    out
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
}
