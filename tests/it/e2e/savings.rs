//! Savings you can trust and see, end to end: a session recorded live through the real
//! OpenCode, whose `dcp stats` figures must equal what `dcp replay` says of the same session,
//! and whose `dcp report` page, rendered by a real browser (Debian's `chromium`, headless),
//! shows the numbers `dcp stats --json` gives.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::fake_llm::Turn;
use super::scenarios::{explore_twice_read, read, IMMEDIATE};
use super::{tail, Lab};

#[test]
fn a_live_session_s_savings_equal_its_replay_and_its_report_shows_them_in_chromium() {
    let lab = Lab::new(IMMEDIATE);
    let session = record_session(&lab);
    let stats = dcp_json(&lab, &["stats", "--session", &session]);
    stats_equal_the_replay(&lab, &session, &stats["session"]);
    report_shows_the_stats_in_chromium(&lab, &stats["all_time"]);
    slash_dcp_report_writes_the_page(&lab, &session);
}

/// Three prompts of reads, some of them again: deduplication prunes, and dcp's tools, list and
/// id tags ride along. No agent tool is called: `dcp replay` replays a session without dcp as
/// one whose agent never had them, which would leave that step's request out of its `none` run
/// and make the two runs' sums differ by a request. Returns the session.
pub(super) fn record_session(lab: &Lab) -> String {
    let session = explore_twice_read(lab, "A parser with 12 sections and 150 records.");
    lab.prompt(
        Some(&session),
        "Read the config and the readme.",
        vec![read("p2.config", "config.txt"), read("p2.readme", "README.md"), Turn::text("p2.answer", "Read.")],
    );
    lab.prompt(
        Some(&session),
        "Read the records and the parser once more.",
        vec![
            read("p3.records", "data/records.csv"),
            read("p3.parser", "src/parser.py"),
            Turn::text("p3.answer", "Done."),
        ],
    );
    session
}

/// `dcp ARGS --json` in the lab's environment (its config and data dir).
fn dcp_json(lab: &Lab, args: &[&str]) -> Value {
    let out = dcp(lab, &[&["--json"], args].concat());
    assert!(out.status.success(), "dcp {args:?}: {}", tail(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("dcp {args:?}: {e}"))
}

fn dcp(lab: &Lab, args: &[&str]) -> Output {
    let data = lab.data_dir();
    let mut cmd = Command::new(&lab.dcp_bin);
    cmd.arg("--data-dir").arg(&data).args(args).current_dir(lab.project()).envs(lab.env());
    cmd.output().unwrap()
}

/// The live figures against the replay's (`meter::live_equals_replay`), with nothing left
/// waiting in immediate mode.
fn stats_equal_the_replay(lab: &Lab, session: &str, live: &Value) {
    super::meter::live_equals_replay(lab, session, live);
    assert_eq!(live["waiting_tokens"], 0, "immediate mode leaves nothing waiting: {live}");
}

/// `dcp report` writes a page that Chromium renders (not blank) and whose numbers are those of
/// `dcp stats --json`.
fn report_shows_the_stats_in_chromium(lab: &Lab, all: &Value) {
    let page = lab.root().join("report.html");
    let out = dcp(lab, &["report", "--out", page.to_str().unwrap(), "--open"]);
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Report written to ") && said.contains("report.html"), "{said}");
    // The lab has no desktop: the command says where the file is instead of opening it.
    assert!(said.contains("No desktop here to open it: open file://"), "{said}");
    let html = std::fs::read_to_string(&page).unwrap();
    for fetched in ["http://", "https://", "<script", "<link"] {
        let outside = html.replace("http://www.w3.org/2000/svg", "");
        assert!(!outside.contains(fetched), "the page must fetch nothing: {fetched}");
    }
    let shot = lab.root().join("report.png");
    let (status, stderr) = chromium(&["--screenshot=".to_string() + shot.to_str().unwrap()], &page);
    assert!(status && shot.exists(), "chromium took no screenshot: {stderr}");
    let (colours, ink) = png_colours(&std::fs::read(&shot).unwrap());
    println!("screenshot {}: {colours} colours, {:.1}% of pixels not background", shot.display(), 100.0 * ink);
    assert!(colours >= 8 && ink > 0.02, "the page looks blank: {colours} colours, {ink:.3} ink");
    if let Some(dir) = std::env::var_os("DCP_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, Path::new(&dir).join("report-live.png")).unwrap();
    }
    let (status, dom) = chromium(&["--dump-dom".to_string()], &page);
    assert!(status, "chromium could not read the page");
    for (id, key) in [
        ("kept-out-tokens", "kept_out_tokens"),
        ("requests", "requests"),
        ("cost-saved-share", "cost_saved_share"),
        ("in-force-tokens", "in_force_tokens"),
        ("waiting-tokens", "waiting_tokens"),
        ("pruned-tokens", "pruned_tokens"),
    ] {
        let (value, text) = figure(&dom, id).unwrap_or_else(|| panic!("no #{id} in the rendered page"));
        let expected = &all[key];
        assert_eq!(value.parse::<f64>().ok(), expected.as_f64(), "#{id}: {value} against {key} {expected}");
        let shown = match key {
            "cost_saved_share" => format!("{:.1}%", 100.0 * expected.as_f64().unwrap().abs()),
            _ => dcp::format::thousands(expected.as_i64().unwrap().unsigned_abs()),
        };
        assert!(text.ends_with(&shown), "#{id} shows {text:?}, stats say {shown}");
    }
    // The bars by strategy count in force what `dcp stats` does: the ranges too.
    let bars: Vec<u64> = dom.split("data-solid=\"").skip(1).filter_map(|v| v.split('"').next()?.parse().ok()).collect();
    println!("in force by strategy, as rendered: {bars:?}");
    assert_eq!(Some(bars.iter().sum::<u64>()), all["in_force_tokens"].as_u64(), "the bars' in force: {bars:?}");
    // A negative share is said as what dcp added, never as a negative saving.
    let said = if all["cost_saved_share"].as_f64() < Some(-0.0005) { "Cost added" } else { "Cost saved" };
    assert!(dom.contains(said), "the page does not say {said:?}");
}

/// The page of a session that saved, one whose head dcp has not won back yet and a Claude Code
/// conversation through the proxy, as Chromium renders it light, dark and on a phone's width:
/// never blank, the proxied one named by its client, and no negative saving in what it shows.
/// `DCP_KEEP_SCREENSHOT=DIR` keeps the three screenshots in DIR (and the live session's, above).
#[test]
fn a_saving_an_unpaid_and_a_proxied_session_read_clearly_on_the_rendered_page() {
    use crate::savings::{negative_number, page_text, sessions_as_users_meet_them, Sessions};
    let s = sessions_as_users_meet_them(Sessions::UnpaidBesideOthers);
    let page = s.dir.path().join("report.html");
    let out = crate::support::dcp(&s, &["report", "--out", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let looks = [("light", "900,4200", ""), ("dark", "900,2600", "--force-dark-mode"), ("phone", "420,3400", "")];
    for (name, size, flag) in looks {
        let shot = s.dir.path().join(format!("report-{name}.png"));
        let mut args = vec![format!("--screenshot={}", shot.display()), format!("--window-size={size}")];
        args.extend((!flag.is_empty()).then(|| flag.to_string()));
        let (status, stderr) = chromium(&args, &page);
        assert!(status && shot.exists(), "chromium took no {name} screenshot: {stderr}");
        let (colours, ink) = png_colours(&std::fs::read(&shot).unwrap());
        println!("{name} screenshot: {colours} colours, {:.1}% of pixels not background", 100.0 * ink);
        assert!(colours >= 8 && ink > 0.02, "the {name} page looks blank: {colours} colours, {ink:.3} ink");
        if let Some(dir) = std::env::var_os("DCP_KEEP_SCREENSHOT") {
            std::fs::copy(&shot, Path::new(&dir).join(format!("report-{name}.png"))).unwrap();
        }
    }
    let (status, dom) = chromium(&["--dump-dom".to_string()], &page);
    assert!(status, "chromium could not read the page");
    let text = page_text(&dom);
    assert_eq!(negative_number(&text), None, "the rendered page shows a negative number:\n{text}");
    assert!(text.contains("claude-code, through dcp proxy") && text.contains(" added"), "{text}");
}

/// Runs headless Chromium on `page` with `args` (a window of 900 by 2200 unless they give
/// one); returns whether it succeeded, and its stdout (or stderr when it failed).
pub(super) fn chromium(args: &[String], page: &Path) -> (bool, String) {
    let url = format!("file://{}", page.display());
    let out = Command::new(super::system::program(super::system::Program::Chromium))
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(args.iter().all(|a| !a.starts_with("--window-size=")).then_some("--window-size=900,2200"))
        .args(args)
        .arg(&url)
        .output()
        .expect("chromium could not be run");
    let text = if out.status.success() { &out.stdout } else { &out.stderr };
    (out.status.success(), String::from_utf8_lossy(text).into_owned())
}

/// The `data-value` and the text of the element with `id` in `dom`.
pub(super) fn figure(dom: &str, id: &str) -> Option<(String, String)> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let rest = &dom[at..];
    let value = rest.split("data-value=\"").nth(1)?.split('"').next()?.to_string();
    let text = rest.split('>').nth(1)?.split('<').next()?.to_string();
    Some((value, text))
}

/// The distinct colours of an 8-bit RGB or RGBA PNG, and the share of its pixels that are
/// not the most common colour (the background).
fn png_colours(png: &[u8]) -> (usize, f64) {
    use std::io::Read;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut idat, mut header) = (8, Vec::new(), (0usize, 0usize, 0u8));
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let (kind, data) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
        match kind {
            b"IHDR" => {
                let n = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "8-bit samples");
                header = (n(0), n(4), data[9]);
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let (width, height, colour) = header;
    let channels = match colour {
        2 => 3,
        6 => 4,
        other => panic!("colour type {other}"),
    };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
    let stride = width * channels;
    let mut pixels = vec![0u8; stride * height];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels { pixels[y * stride + x - channels] as i32 } else { 0 };
            let b = if y > 0 { pixels[(y - 1) * stride + x] as i32 } else { 0 };
            let c = if x >= channels && y > 0 { pixels[(y - 1) * stride + x - channels] as i32 } else { 0 };
            pixels[y * stride + x] = (line[x] as i32 + predicted(filter, a, b, c)) as u8;
        }
    }
    let mut counts: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for px in pixels.chunks(channels) {
        *counts.entry(px).or_default() += 1;
    }
    let background = counts.values().copied().max().unwrap_or(0);
    (counts.len(), 1.0 - background as f64 / (width * height) as f64)
}

/// What PNG filter `filter` predicts from the bytes left (`a`), above (`b`) and above left (`c`).
fn predicted(filter: u8, a: i32, b: i32, c: i32) -> i32 {
    match filter {
        0 => 0,
        1 => a,
        2 => b,
        3 => (a + b) / 2,
        _ => {
            let p = a + b - c;
            let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
            if pa <= pb && pa <= pc {
                a
            } else if pb <= pc {
                b
            } else {
                c
            }
        }
    }
}

/// `/dcp report` in the session writes the page and answers with its path, without a model
/// request.
fn slash_dcp_report_writes_the_page(lab: &Lab, session: &str) {
    let requests = lab.llm.log().len();
    let out = lab.opencode(&["run", "--session", session, "--command", "dcp", "report"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Savings report written to "), "{stdout}\n{}", tail(&out.stderr));
    let file = lab.root().join("xdg/cache/dcp/report.html");
    assert!(stdout.contains(file.to_str().unwrap()), "{stdout}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("id=\"kept-out-tokens\""));
    assert_eq!(lab.llm.log().len(), requests, "a /dcp command sends no model request");
}
