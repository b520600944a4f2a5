//! The report's pictures as inline SVG: line charts (savings over time, a session's context
//! per request with and without dcp, with rewrites and compactions marked) and bars (by
//! strategy). Colours come from the page's CSS variables, so dark and light both read. Each
//! chart sits in a `wide` box that scrolls sideways on a narrow screen rather than shrinking
//! its labels past reading.

use std::fmt::Write as _;

use super::esc;
use crate::format;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
/// Room for the axis labels: left, right, top, bottom.
const PAD: (f64, f64, f64, f64) = (84.0, 16.0, 12.0, 28.0);

/// One line of a chart: its CSS class (its colour), its name, and its values.
pub struct Series<'a> {
    pub class: &'a str,
    pub name: &'a str,
    pub values: Vec<f64>,
}

/// A vertical mark at an index: its CSS class and what it says on hover.
pub struct ChartMarker {
    pub at: usize,
    pub class: &'static str,
    pub title: String,
}

/// What the chart's axes say.
pub struct Axes<'a> {
    /// Under the first and last points (dates, request numbers).
    pub first: &'a str,
    pub last: &'a str,
    pub label: &'a str,
}

/// A line chart of `series` over the same indices, with `markers`.
pub fn lines(series: &[Series<'_>], markers: &[ChartMarker], axes: &Axes<'_>) -> String {
    let n = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    let values = series.iter().flat_map(|s| s.values.iter().copied());
    let (lo, hi) = values.fold((0f64, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let hi = if hi - lo < 1.0 { lo + 1.0 } else { hi };
    let (left, right, top, bottom) = PAD;
    let x = |i: usize| left + (WIDTH - left - right) * if n > 1 { i as f64 / (n - 1) as f64 } else { 0.5 };
    let y = |v: f64| top + (HEIGHT - top - bottom) * (1.0 - (v - lo) / (hi - lo));
    let mut svg = format!(
        r#"<div class="wide"><svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        esc(axes.label)
    );
    grid(&mut svg, [lo, (lo + hi) / 2.0, hi].map(|v| (v, y(v))));
    if lo < 0.0 {
        zero_line(&mut svg, y(0.0), [lo, (lo + hi) / 2.0, hi].map(&y));
    }
    for m in markers.iter().filter(|m| m.at < n) {
        let _ = write!(
            svg,
            r#"<line class="{}" x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{}"><title>{}</title></line>"#,
            m.class,
            HEIGHT - bottom,
            esc(&m.title),
            x = x(m.at),
        );
    }
    for s in series {
        let mut points: Vec<String> =
            s.values.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v))).collect();
        // One request is one point, which a polyline does not draw: a short dash shows it.
        if let [v] = s.values[..] {
            points = vec![format!("{:.1},{:.1}", x(0) - 8.0, y(v)), format!("{:.1},{:.1}", x(0) + 8.0, y(v))];
        }
        let _ = write!(
            svg,
            r#"<polyline class="{}" fill="none" points="{}"><title>{}</title></polyline>"#,
            s.class,
            points.join(" "),
            esc(s.name)
        );
    }
    let base = HEIGHT - 8.0;
    let _ = write!(
        svg,
        r#"<text class="axis" x="{left}" y="{base}">{}</text><text class="axis" x="{}" y="{base}" text-anchor="end">{}</text></svg></div>"#,
        esc(axes.first),
        WIDTH - right,
        esc(axes.last)
    );
    svg
}

/// The line at zero, at height `zero`, labelled unless a grid line's label (at heights `grid`)
/// is too near to read both.
fn zero_line(svg: &mut String, zero: f64, grid: [f64; 3]) {
    let (left, right, _, _) = PAD;
    let _ = write!(svg, r#"<line class="zero" x1="{left}" x2="{}" y1="{zero:.1}" y2="{zero:.1}"/>"#, WIDTH - right);
    if grid.iter().all(|y| (y - zero).abs() >= 14.0) {
        let _ =
            write!(svg, r#"<text class="axis" x="{}" y="{:.1}" text-anchor="end">0</text>"#, left - 6.0, zero + 4.0);
    }
}

/// The grid lines at `rows` (a value and its height), labelled on the left.
fn grid(svg: &mut String, rows: [(f64, f64); 3]) {
    let (left, right, _, _) = PAD;
    for (v, y) in rows {
        let _ = write!(
            svg,
            r#"<line class="grid" x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            WIDTH - right,
            left - 6.0,
            y + 4.0,
            esc(&axis_value(v)),
        );
    }
}

/// A value on an axis, in tokens: `12K`. Below zero, a net saving is what dcp added (see
/// `crate::stats::Net`): `1.2K added`, never a negative saving.
fn axis_value(v: f64) -> String {
    let added = if v <= -0.5 { " added" } else { "" };
    format!("{}{added}", format::compact(v.abs().round() as u64))
}

/// One bar of [`bars`]: its name, its whole length and the part of it drawn solid.
pub struct Bar<'a> {
    pub name: &'a str,
    pub whole: u64,
    pub solid: u64,
    pub note: String,
}

/// Horizontal bars, longest first as given: the whole in a light tone, the solid part over it.
/// Each note carries its bar's exact figures (`data-whole`, `data-solid`) for whoever reads the
/// page as data.
pub fn bars(bars: &[Bar<'_>], label: &str) -> String {
    const ROW: f64 = 26.0;
    const NAME: f64 = 150.0;
    const NOTE: f64 = 230.0;
    let height = ROW * bars.len().max(1) as f64 + 8.0;
    let max = bars.iter().map(|b| b.whole.max(b.solid)).max().unwrap_or(0).max(1) as f64;
    let span = WIDTH - NAME - NOTE;
    let mut svg = format!(
        r#"<div class="wide"><svg class="chart bars" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        esc(label)
    );
    for (i, b) in bars.iter().enumerate() {
        let top = 4.0 + ROW * i as f64;
        let (whole, solid) = (span * b.whole as f64 / max, span * b.solid as f64 / max);
        let _ = write!(
            svg,
            r#"<text class="label" x="{}" y="{:.1}" text-anchor="end">{}</text><rect class="whole" x="{NAME}" y="{top:.1}" width="{whole:.1}" height="18" rx="3"/><rect class="solid" x="{NAME}" y="{top:.1}" width="{solid:.1}" height="18" rx="3"/><text class="axis" x="{:.1}" y="{:.1}" data-whole="{}" data-solid="{}">{}</text>"#,
            NAME - 8.0,
            top + 13.0,
            esc(b.name),
            NAME + whole.max(solid) + 8.0,
            top + 13.0,
            b.whole,
            b.solid,
            esc(&b.note)
        );
    }
    svg.push_str("</svg></div>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_of_one_request_is_drawn_as_a_dash_not_left_invisible() {
        let one = Series { class: "with", name: "with dcp", values: vec![1_200.0] };
        let axes = Axes { first: "request 1", last: "request 1", label: "context" };
        let svg = lines(&[one], &[], &axes);
        let points = svg.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(points.split(' ').count(), 2, "{svg}");
    }
}
