//! The report's HTML: one page, its CSS inline (light, and dark where the system prefers it),
//! no script, nothing fetched. Every figure `dcp stats --json` also gives carries its exact
//! value in a `data-value` attribute beside the text a person reads, so a test can hold the two
//! against each other. Every text that comes from a session (titles, ids) is escaped.

use std::fmt::Write as _;

use super::charts::{self, Axes, Bar, ChartMarker, Series};
use super::{esc, ChartSource, Report, SessionView};
use crate::format;
use crate::state::savings::Mark;
use crate::stats::{Direction, Figures, Net, SessionStats};

const STYLE: &str = r#"
:root { --bg: #ffffff; --fg: #1b1f24; --muted: #5b6570; --card: #f3f5f7; --line: #d7dce1;
  --without: #b4572a; --with: #1f6fb2; --saved: #1d8a4e; --rewrite: #8250df; --compaction: #b08800; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0f1317; --fg: #e6e9ec; --muted: #9aa5b1; --card: #1a2027; --line: #2e3741;
    --without: #f0885a; --with: #5fb0f5; --saved: #4cc38a; --rewrite: #b794f6; --compaction: #e3b341; }
}
body { background: var(--bg); color: var(--fg); font: 15px/1.5 system-ui, sans-serif; margin: 0 auto;
  max-width: 780px; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 32px 0 8px; }
h3 { font-size: 15px; margin: 20px 0 4px; } .muted, .note { color: var(--muted); } code { font-size: 13px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 10px; }
.card { background: var(--card); border-radius: 8px; padding: 10px 12px; }
.card .big { font-size: 22px; font-weight: 600; display: block; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 6px; text-align: right; }
th:first-child, td:first-child { text-align: left; } td { white-space: nowrap; }
td:first-child { white-space: normal; min-width: 12em; } td code { word-break: break-all; }
.wide { overflow-x: auto; } .when { white-space: nowrap; }
.chart { width: 100%; min-width: 520px; height: auto; display: block; }
.chart text { fill: var(--muted); font: 11px system-ui, sans-serif; } .chart text.label { fill: var(--fg); }
.chart .grid { stroke: var(--line); stroke-width: 1; } .chart .zero { stroke: var(--muted); stroke-width: 1; }
.chart polyline { stroke-width: 2; stroke-linejoin: round; }
.chart .without { stroke: var(--without); } .chart .with { stroke: var(--with); }
.chart .kept { stroke: var(--with); } .chart .saved { stroke: var(--saved); }
.chart .rewrite { stroke: var(--rewrite); stroke-dasharray: 3 3; }
.chart .compaction { stroke: var(--compaction); stroke-width: 2; }
.chart .whole { fill: var(--line); } .chart .solid { fill: var(--with); }
.key span { margin-right: 14px; white-space: nowrap; } .key i { display: inline-block; width: 14px; height: 3px; margin-right: 4px;
  vertical-align: middle; background: currentColor; }
.k-without { color: var(--without); } .k-with, .k-kept { color: var(--with); } .k-saved { color: var(--saved); }
.k-rewrite { color: var(--rewrite); } .k-compaction { color: var(--compaction); }
@media (max-width: 600px) { body { padding: 12px; } .chart text { font-size: 15px; } }
"#;

/// The whole page.
pub fn page(r: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\"><title>dcp savings</title><style>{STYLE}</style></head><body>"
    );
    let _ = write!(
        out,
        "<h1>dcp savings</h1><p class=\"muted\">{} ({}) in <code>{}</code>, made <span class=\"when\">{}</span>.</p>",
        format::count(r.all.files, "state file"),
        esc(&format::bytes(r.all.bytes)),
        esc(&r.state_dir.display().to_string()),
        esc(&r.generated)
    );
    if r.all.files == 0 {
        out.push_str(
            "<p>No state files here yet: dcp writes one per session once the plugin (or <code>dcp proxy</code>) \
             answers its requests. To see what it would have saved on the sessions you already have, run \
             <code>dcp replay --all</code>.</p>",
        );
    }
    all_time(&mut out, r);
    super::money::money(&mut out, r);
    super::money::trial(&mut out, &r.trial);
    over_time(&mut out, r);
    strategies(&mut out, r);
    top(&mut out, r);
    for (i, s) in r.sessions.iter().enumerate().take(super::CHARTED) {
        session(&mut out, i, s);
    }
    out.push_str("</body></html>\n");
    out
}

/// A figure: its exact value for machines, its text for people.
fn figure(id: &str, value: impl std::fmt::Display, text: &str) -> String {
    format!(r#"<span class="big" id="{id}" data-value="{value}">{}</span>"#, esc(text))
}

fn all_time(out: &mut String, r: &Report) {
    let (a, f): (_, &Figures) = (&r.all, &r.all.figures);
    let share = (f.cost_saved_share * 10_000.0).round() / 10_000.0;
    let net = Net::of(f);
    let (kept_title, kept_note) = match net.tokens {
        Direction::Saved => ("Kept out of requests", "tokens, net of what dcp adds"),
        Direction::Added => ("Added to requests", "tokens of dcp's tools, not won back by pruning yet"),
    };
    let cards = [
        (kept_title, figure("kept-out-tokens", f.kept_out_tokens, &format::thousands(net.token_count)), kept_note),
        ("Requests", figure("requests", f.requests, &format::thousands(f.requests)), "answered by dcp"),
        (
            net.cost_label(),
            figure("cost-saved-share", share, &net.cost_percent()),
            &format!("{} (prompt cache counted)", net.cost_note()),
        ),
        (
            "In force",
            figure("in-force-tokens", f.in_force_tokens, &format::thousands(f.in_force_tokens)),
            "tokens off every request now",
        ),
        (
            "Waiting",
            figure("waiting-tokens", f.waiting_tokens, &format::thousands(f.waiting_tokens)),
            "tokens recorded, not sent yet: nothing saved",
        ),
        (
            "Pruned (DCP's figure)",
            figure("pruned-tokens", a.pruned_tokens, &format::thousands(a.pruned_tokens)),
            "one-time size of every prune",
        ),
        (
            "Misses seen",
            figure("misses-seen", f.refetches + f.restores, &format::thousands(f.refetches + f.restores)),
            &misses_note(f),
        ),
    ];
    out.push_str("<h2>All-time</h2><div class=\"cards\">");
    for (title, value, note) in cards {
        let _ = write!(out, "<div class=\"card\">{}{value}<span class=\"note\">{}</span></div>", esc(title), esc(note));
    }
    let proxied: Vec<String> = a.proxied.iter().map(|(client, n)| format!("{client} {n}")).collect();
    let proxied =
        if proxied.is_empty() { String::new() } else { format!("; through the proxy: {}", proxied.join(", ")) };
    let _ = write!(
        out,
        "</div><p class=\"muted\">{} with prunes; {} tools pruned{}.</p>",
        format::count(a.sessions, "session"),
        a.tools_pruned,
        esc(&proxied)
    );
}

/// When the first and the last request were, in UTC: to the minute, or to the second when
/// that tells them apart.
fn span(first: i64, last: i64) -> (String, String) {
    let at = |ms: i64, format: &str| {
        chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |t| t.format(format).to_string())
    };
    let minutes = (at(first, "%Y-%m-%d %H:%M UTC"), at(last, "%Y-%m-%d %H:%M UTC"));
    if minutes.0 != minutes.1 || first == last {
        return minutes;
    }
    (at(first, "%Y-%m-%d %H:%M:%S UTC"), at(last, "%Y-%m-%d %H:%M:%S UTC"))
}

fn over_time(out: &mut String, r: &Report) {
    out.push_str("<h2>Savings over time</h2>");
    let (Some(first), Some(last)) = (r.over_time.first(), r.over_time.last()) else {
        out.push_str("<p class=\"muted\">No request answered by dcp is recorded yet.</p>");
        return;
    };
    let kept = Series {
        class: "kept",
        name: "tokens kept out, so far",
        values: r.over_time.iter().map(|p| p.1 as f64).collect(),
    };
    let saved = Series {
        class: "saved",
        name: "cost saved so far, in tokens at the input price",
        values: r.over_time.iter().map(|p| p.2).collect(),
    };
    let (first, last) = span(first.0, last.0);
    let axes = Axes { first: &first, last: &last, label: "savings over every request" };
    let below = if r.over_time.iter().any(|p| p.1 < 0 || p.2 < 0.0) { " (below 0: what dcp added)" } else { "" };
    let _ = write!(
        out,
        "<p class=\"key\"><span class=\"k-kept\"><i></i>tokens kept out, so far</span><span class=\"k-saved\"><i></i>cost saved, in tokens at the input price</span><span class=\"muted\">{below}</span></p>"
    );
    out.push_str(&charts::lines(&[kept, saved], &[], &axes));
}

fn strategies(out: &mut String, r: &Report) {
    out.push_str("<h2>By strategy</h2>");
    if r.strategies.is_empty() {
        out.push_str("<p class=\"muted\">Nothing pruned yet.</p>");
        return;
    }
    let mut rows: Vec<&super::StrategyRow> = r.strategies.iter().collect();
    rows.sort_by_key(|s| std::cmp::Reverse(s.pruned));
    let bars: Vec<Bar<'_>> = rows
        .iter()
        .map(|s| Bar {
            name: s.name,
            whole: s.pruned,
            solid: s.in_force,
            note: format!(
                "{} pruned, {} in force, {}",
                format::compact(s.pruned),
                format::compact(s.in_force),
                format::count(s.tools, "tool")
            ),
        })
        .collect();
    out.push_str("<p class=\"key\"><span class=\"k-with\"><i></i>in force now</span><span class=\"muted\">grey: pruned over the sessions' life (DCP's figure)</span></p>");
    out.push_str(&charts::bars(&bars, "tokens pruned by strategy"));
}

fn top(out: &mut String, r: &Report) {
    out.push_str("<h2>Sessions, most kept out first</h2>");
    if r.sessions.is_empty() {
        out.push_str("<p class=\"muted\">No session has prunes or requests yet.</p>");
        return;
    }
    out.push_str("<div class=\"wide\"><table><tr><th>Session</th><th>Requests</th><th>Kept out</th><th>Cost saved</th><th>In force</th><th>Waiting</th><th>Pruned (DCP)</th><th>Re-fetches / restores</th></tr>");
    for s in &r.sessions {
        let (st, f) = (&s.stats, &s.stats.figures);
        let net = Net::of(f);
        let _ = write!(
            out,
            "<tr data-session=\"{}\"><td>{}<br><code class=\"muted\">{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td></tr>",
            esc(&st.session_id),
            esc(&name(st)),
            esc(&st.session_id),
            f.requests,
            net_tokens(&net),
            net_cost(&net),
            format::thousands(f.in_force_tokens),
            format::thousands(f.waiting_tokens),
            format::thousands(st.pruned_tokens),
            f.refetches,
            f.restores
        );
    }
    out.push_str("</table></div>");
}

/// What the misses card says: the re-fetches and restores apart.
fn misses_note(f: &Figures) -> String {
    format!("{} calls run or files read again, {} texts restored, of what dcp hid", f.refetches, f.restores)
}

/// A session's net in a sentence: `Kept out 19,026 tokens over 6 requests; cost saved 12.6% of
/// the cost without dcp.`, or what dcp added, which a chart whose lines nearly meet hides.
fn net_sentence(f: &Figures) -> String {
    let net = Net::of(f);
    format!(
        "{} {} {}; {} {} {}.",
        net.tokens_label(),
        format::thousands(net.token_count),
        net.tokens_note(f.requests),
        net.cost_label().to_lowercase(),
        net.cost_percent(),
        net.cost_note()
    )
}

/// A table cell's net tokens: `12,345`, or `1,234 added`.
fn net_tokens(net: &Net) -> String {
    match net.tokens {
        Direction::Saved => format::thousands(net.token_count),
        Direction::Added => format!("{} added", format::thousands(net.token_count)),
    }
}

/// A table cell's net cost: `12.3%`, or `1.2% added`.
fn net_cost(net: &Net) -> String {
    match net.cost {
        Direction::Saved => net.cost_percent(),
        Direction::Added => format!("{} added", net.cost_percent()),
    }
}

/// What a session is called: its title; else, for a conversation through `dcp proxy`, its
/// client (as `dcp stats` labels it); else `(untitled)`.
fn name(s: &SessionStats) -> String {
    if let Some(title) = &s.title {
        return title.clone();
    }
    match s.proxy_client() {
        Some(client) => format!("{client}, through dcp proxy"),
        None => "(untitled)".to_string(),
    }
}

fn session(out: &mut String, i: usize, s: &SessionView) {
    let title = name(&s.stats);
    let _ = write!(
        out,
        "<h3 id=\"session-{i}\">{} <code class=\"muted\">{}</code></h3>",
        esc(&title),
        esc(&s.stats.session_id)
    );
    if s.stats.figures.requests > 0 {
        let _ = write!(out, "<p>{}</p>", esc(&net_sentence(&s.stats.figures)));
    }
    let note = match s.source {
        ChartSource::State => "Each request's context as dcp answered it.",
        ChartSource::Replay => "Replayed from OpenCode's history: its state file holds no requests.",
        ChartSource::Missing => {
            out.push_str("<p class=\"muted\">No requests recorded, and no history to replay.</p>");
            return;
        }
    };
    let without =
        Series { class: "without", name: "without dcp", values: s.points.iter().map(|p| p.without as f64).collect() };
    let with = Series { class: "with", name: "with dcp", values: s.points.iter().map(|p| p.with as f64).collect() };
    let markers: Vec<ChartMarker> = s
        .points
        .iter()
        .enumerate()
        .filter_map(|(at, p)| match p.mark {
            Mark::None => None,
            Mark::Rewrite => Some(ChartMarker {
                at,
                class: "rewrite",
                title: format!("request {}: dcp applied waiting rewrites", at + 1),
            }),
            Mark::Compaction => {
                Some(ChartMarker { at, class: "compaction", title: format!("request {}: compaction", at + 1) })
            }
        })
        .collect();
    let last = format!("request {}", s.points.len());
    let axes = Axes { first: "request 1", last: &last, label: "context per request, with and without dcp" };
    let _ = write!(
        out,
        "<p class=\"muted\">{} <span class=\"key\"><span class=\"k-without\"><i></i>without dcp</span><span class=\"k-with\"><i></i>with dcp</span><span class=\"k-rewrite\"><i></i>rewrite</span><span class=\"k-compaction\"><i></i>compaction</span></span></p>",
        esc(note)
    );
    out.push_str(&charts::lines(&[without, with], &markers, &axes));
}
