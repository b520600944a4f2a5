//! Text renderings shared by the CLI and `/dcp` in OpenCode: the context report and stats.

use std::fmt::Write as _;

use crate::context::Analysis;
use crate::format;
use crate::stats::{AllTime, SessionStats};

/// The by-category context report, with the steps and the pruned calls.
pub fn context(header: &str, analysis: &Analysis) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let _ = writeln!(
        out,
        "{} messages, {} tool calls; tokens counted with {}",
        analysis.messages, analysis.tool_calls, analysis.estimator
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<18} {:>10} {:>10}", "Category", "Before", "After");
    for ((name, before), (_, after)) in analysis.before.rows().iter().zip(analysis.after.rows()) {
        let _ = writeln!(out, "  {:<16} {:>10} {:>10}", name, format::thousands(*before), format::thousands(after));
    }
    let (b, a) = (analysis.before.total, analysis.after.total);
    let pct = if b > 0 { 100.0 * b.saturating_sub(a) as f64 / b as f64 } else { 0.0 };
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>10}   -{} ({pct:.1}%)",
        "total",
        format::thousands(b),
        format::thousands(a),
        format::thousands(b.saturating_sub(a))
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<18} {:>10} {:>10} {:>6}", "After step", "Tokens", "Saved", "Tools");
    let _ = writeln!(out, "  {:<16} {:>10}", "before pruning", format::thousands(b));
    for s in &analysis.steps {
        let _ = writeln!(
            out,
            "  {:<16} {:>10} {:>10} {:>6}",
            s.step,
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
    let recorded = analysis.pruned.iter().filter(|p| p.recorded).count();
    let _ = writeln!(
        out,
        "Pruned ({recorded} recorded in the state file, {} proposed now)",
        analysis.pruned.len() - recorded
    );
    for p in &analysis.pruned {
        let _ = writeln!(
            out,
            "  {:<22} {:<6} {:<17} {:>7}  {}",
            format::field(&p.call_id, 64),
            format::field(&p.tool, 64),
            p.strategy,
            format::thousands(p.tokens),
            p.key.as_deref().map(|k| format::field(&shorten(k, 60), 256)).unwrap_or_default()
        );
    }
    out
}

/// `text` on one line, keeping its end (where a path's file name is) when too long.
pub fn shorten(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let n = flat.chars().count();
    if n <= max {
        return flat;
    }
    let tail: String = flat.chars().skip(n - (max - 1)).collect();
    format!("…{tail}")
}

/// The statistics panel: the session's savings, if given, and all-time. Every token count
/// in it has the same precision (`~1,234`), so its rows compare at a glance.
pub fn stats(session: Option<&SessionStats>, all: &AllTime) -> String {
    let mut out = String::from("DCP statistics\n");
    if let Some(s) = session {
        let _ = writeln!(out);
        match &s.title {
            Some(title) => {
                let _ = writeln!(out, "Session \"{}\" ({}):", format::title(title), s.session_id);
            }
            None => {
                let _ = writeln!(out, "Session {}:", s.session_id);
            }
        }
        let _ = writeln!(out, "  Tokens pruned: {}", format::approx(s.tokens_pruned));
        let _ = writeln!(out, "  Tools pruned:  {}", s.tools_pruned);
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
    let _ = writeln!(out, "  Tokens saved:  {}", format::approx(all.tokens_saved));
    let _ = writeln!(out, "  Tools pruned:  {}", all.tools_pruned);
    let _ = writeln!(out, "  Sessions:      {}", all.sessions);
    out
}
