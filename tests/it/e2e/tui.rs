//! The real OpenCode TUI in a tmux pane, read the way a user reads it.
//!
//! Each [`Screen`] is a tmux server of its own (`tmux -L <unique socket>`) running OpenCode's
//! TUI in one pane of a fixed size, in a [`Lab`]'s environment. Tests type with `send-keys`
//! and read the pane with `capture-pane -p`; every wait polls the pane against a deadline and
//! fails with the pane's text, never sleeps blindly. What a snapshot keeps is one block of the
//! pane, with the lab's paths, session ids and durations filtered out.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::fake_llm::Turn;
use super::scenarios::{read, IMMEDIATE};
use super::{opencode, Lab, PLUGIN_DEPS};

/// Wide enough for dcp's tables, narrow enough that OpenCode hides its sidebar.
pub const COLUMNS: u16 = 118;
pub const ROWS: u16 = 50;
/// Generous: waits are polled, so a long limit costs nothing when things are fast, and a
/// loaded two-core machine is slow. OpenCode's first start in a lab loads the plugin and its
/// dependencies; an agent turn is several model requests.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(90);
const TURN_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(100);

/// One TUI at a time: on two cores, two would starve each other past every timeout.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A tmux server with OpenCode's TUI in its one pane; dropping it kills the server.
pub struct Screen {
    socket: String,
    lab_root: String,
    _turn: MutexGuard<'static, ()>,
}

impl Screen {
    /// Starts `opencode ARGS` (the TUI) in the lab's project, and waits until it is ready for
    /// input.
    pub fn start(lab: &Lab, args: &[&str]) -> Screen {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = !lab.root().join("xdg/config/opencode/node_modules").exists();
        let deps = fresh.then(|| PLUGIN_DEPS.lock().unwrap_or_else(|e| e.into_inner()));
        let socket = format!("dcp-tui-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let conf = lab.root().join("tmux.conf");
        // The pane stays after OpenCode exits, so a crash leaves its last screen to read.
        std::fs::write(&conf, "set -g remain-on-exit on\nset -g status off\n").unwrap();
        let mut pane = vec!["env".to_string()];
        for name in Lab::UNSET {
            pane.extend(["-u".to_string(), name.to_string()]);
        }
        for (k, v) in lab.env() {
            pane.push(format!("{k}={}", v.to_string_lossy()));
        }
        pane.push(opencode().display().to_string());
        pane.extend(args.iter().map(|a| a.to_string()));
        let screen = Screen { socket, lab_root: lab.root().display().to_string(), _turn: turn };
        let size = [COLUMNS.to_string(), ROWS.to_string()];
        let mut new =
            vec!["-f", conf.to_str().unwrap(), "new-session", "-d", "-s", "dcp", "-x", &size[0], "-y", &size[1]];
        let project = lab.project().display().to_string();
        new.extend(["-c", &project]);
        new.extend(pane.iter().map(String::as_str));
        screen.tmux(&new);
        screen.wait_until("the TUI's prompt", START_TIMEOUT, |s| s.contains("ctrl+p commands"));
        if deps.is_some() {
            lab.cache_plugin_deps();
        }
        screen
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new(super::system::program(super::system::Program::Tmux))
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux could not be run");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane as it is now, one line per row, trailing blanks trimmed.
    pub fn text(&self) -> String {
        let raw = self.tmux(&["capture-pane", "-p", "-t", "dcp"]);
        raw.lines().map(str::trim_end).collect::<Vec<_>>().join("\n")
    }

    /// Polls the pane until `done` holds, and returns it; fails with the pane after `timeout`.
    pub fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let text = self.text();
            if done(&text) {
                return text;
            }
            assert!(start.elapsed() < timeout, "waited {timeout:?} for {what}; the pane:\n{text}");
            std::thread::sleep(POLL);
        }
    }

    /// Waits until `needle` is on screen.
    pub fn wait_for(&self, needle: &str) -> String {
        self.wait_until(&format!("{needle:?} on screen"), ANSWER_TIMEOUT, |s| s.contains(needle))
    }

    /// Types `line` into the prompt, waits until it shows there, and presses Enter. For a
    /// line starting with `/`, the command's name is typed first and must appear in OpenCode's
    /// command list (so it is registered); it is then erased and the whole line typed at once:
    /// typed after the name, the arguments would leave the list open, and Enter would pick
    /// the list's entry instead of sending the line.
    pub fn submit(&self, line: &str) {
        if let Some((name, _)) = line.split_once(' ').filter(|_| line.starts_with('/')) {
            // A row of the list is the name, a gap, and the command's description.
            let listed = |s: &str| {
                s.lines().any(|l| {
                    let row = l.trim().trim_matches('┃').trim();
                    row.strip_prefix(name).is_some_and(|rest| rest.starts_with("  ") && !rest.trim().is_empty())
                })
            };
            self.keys(name);
            self.wait_until(&format!("{name} in the command list"), ANSWER_TIMEOUT, listed);
            for _ in name.chars() {
                self.tmux(&["send-keys", "-t", "dcp", "BSpace"]);
            }
            self.wait_until(&format!("the command list closed"), ANSWER_TIMEOUT, |s| !listed(s));
        }
        self.keys(line);
        self.wait_for(line);
        self.tmux(&["send-keys", "-t", "dcp", "Enter"]);
    }

    fn keys(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "dcp", "-l", text]);
    }

    /// The pane with the lab's paths, session ids and durations replaced by placeholders.
    pub fn filtered(&self, text: &str) -> String {
        filter(text, &self.lab_root)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let tmux =
            |args: &[&str]| Command::new("tmux").arg("-L").arg(&self.socket).args(args).stderr(Stdio::null()).output();
        let socket = tmux(&["display-message", "-p", "#{socket_path}"])
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let _ = tmux(&["kill-server"]);
        // tmux leaves its socket file behind.
        if let Ok(path) = socket.as_deref() {
            if !path.is_empty() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Replaces what changes from run to run: the lab's root, session ids, durations and clock
/// times.
pub fn filter(text: &str, lab_root: &str) -> String {
    let mut out = text.to_string();
    // A toast wraps a long path where it likes: join the lab's root back where a row broke it.
    for (k, _) in lab_root.char_indices().skip(1) {
        out = out.replace(&format!("{} {}", &lab_root[..k], &lab_root[k..]), lab_root);
    }
    out = out.replace(lab_root, "[LAB]");
    // `/dcp context` cuts a long path to its end: what it kept of the root is the root too.
    for (k, _) in lab_root.char_indices().skip(1) {
        out = out.replace(&format!("…{}/", &lab_root[k..]), "…[LAB]/");
    }
    out = replace_words(&out, |w| w.starts_with("ses_") && w.len() == 30, "ses_[ID]");
    out = replace_words(&out, is_duration, "[T]");
    out
}

fn is_duration(word: &str) -> bool {
    let Some(number) = word.strip_suffix("ms").or_else(|| word.strip_suffix('s')) else { return false };
    !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.contains(|c: char| c.is_ascii_digit())
}

/// Replaces each whitespace-separated word (punctuation at its ends aside) that `matches`.
fn replace_words(text: &str, matches: impl Fn(&str) -> bool, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let core = word.trim_matches(|c: char| "()[],:;".contains(c));
        if !core.is_empty() && matches(core) {
            out.push_str(&word.replacen(core, with, 1));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// A pane row's text inside OpenCode's message bar (`┃`), trimmed.
fn body(line: &str) -> &str {
    let line = line.trim();
    line.strip_prefix('┃').unwrap_or(line).trim()
}

/// Where the last message block starting with `first` starts: the last row that is `first`,
/// else the last row that starts with it.
fn block_start(lines: &[&str], first: &str) -> Option<usize> {
    lines.iter().rposition(|l| body(l) == first).or_else(|| lines.iter().rposition(|l| body(l).starts_with(first)))
}

/// The message block of the pane that starts at the row `first` (see [`block_start`]): that
/// row and the rows after it up to the block's end (an empty row), without the bar.
pub fn block(text: &str, first: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = block_start(&lines, first) else {
        panic!("{first:?} is not on screen:\n{text}");
    };
    let mut out = Vec::new();
    for line in &lines[at..] {
        if line.trim().is_empty() {
            break;
        }
        let row = line.trim_start();
        let row = row.strip_prefix('┃').unwrap_or(row);
        out.push(row.strip_prefix("  ").unwrap_or(row).trim_end());
    }
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out.join("\n")
}

/// Whether the lab's model received no request since it had `before`.
pub fn no_new_request(lab: &Lab, before: usize) -> bool {
    lab.llm.log().len() == before
}

/// The session dcp's CLI takes as the newest, with its `context` report.
pub fn cli_context(lab: &Lab, session: &str) -> String {
    let out = Command::new(&lab.dcp_bin)
        .args(["context", "--session", session, "--data-dir"])
        .arg(lab.data_dir())
        .env("XDG_CONFIG_HOME", lab.root().join("xdg/config"))
        .env("XDG_DATA_HOME", lab.root().join("xdg/data"))
        .env("XDG_CACHE_HOME", lab.root().join("xdg/cache"))
        .output()
        .unwrap();
    assert!(out.status.success(), "dcp context: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every digit as `#`, so that a table keeps its shape: token counts depend on the lab's
/// path, which tool outputs hold. The tokenizer's name keeps its digits.
pub(super) fn numbers_out(text: &str) -> String {
    let masked: String = text.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
    masked.replace("o###k_base", "o200k_base")
}

/// The answer block to `/dcp ARGS`, filtered for a snapshot.
fn answer(screen: &Screen, text: &str, command: &str) -> String {
    numbers_out(&screen.filtered(&block(text, command)))
}

/// Waits until the block of `command`'s answer holds `needle`.
pub(super) fn wait_answer(screen: &Screen, command: &str, needle: &str) -> String {
    screen.wait_until(&format!("the answer to {command} with {needle:?}"), ANSWER_TIMEOUT, |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines
            .iter()
            .rposition(|l| body(l) == command)
            .is_some_and(|at| lines[at + 1..].iter().any(|l| l.contains(needle)))
    })
}

#[test]
fn tui_shows_dcp_answers_and_prune_notices_without_a_model_request() {
    let lab = Lab::new(r#"{"pruneNotification": "detailed", "prices": {"sheet": "claude-sonnet-4"}}"#); // money in /dcp stats
    lab.llm.push(vec![
        read("p1.parser", "src/parser.py"),
        read("p1.records", "data/records.csv"),
        read("p1.parser_again", "src/parser.py"),
        Turn::text("p1.answer", "Explored: a parser with 12 sections and 150 records."),
    ]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Explore the project.");
    // The deduplicated read is told once the turn ends: recorded now, rewritten when it pays.
    let text = screen.wait_until("the turn's answer and its prune notice", TURN_TIMEOUT, |s| {
        s.contains("Explored: a parser") && s.contains("▣ DCP |")
    });
    insta::assert_snapshot!("tui_prune_notice", numbers_out(&screen.filtered(&block(&text, "▣ DCP |"))));
    // With the defaults a new session is offered dcp's tools from its first request.
    let body = &lab.llm.request_for("p1.answer").body;
    let tools: Vec<&str> =
        body["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"read") && tools.contains(&"discard") && tools.contains(&"compress"), "{tools:?}");
    let session = lab.session_id();

    let requests = lab.llm.log().len();
    let commands = [
        ("/dcp stats", "All-time"),
        ("/dcp context", "After step"),
        ("/dcp sweep 1", "1 tool output"),
        ("/dcp help", "/dcp sweep [N]"),
        ("/dcp decompress", "No compressed ranges"),
    ];
    for (command, needle) in commands {
        screen.submit(command);
        let text = wait_answer(&screen, command, needle);
        assert!(!text.contains("interrupted"), "{command} left an interrupted line:\n{text}");
        // The pane as the user reads it, digits kept (`--nocapture` shows it).
        println!("--- the pane's answer to {command} ---\n{}", screen.filtered(&block(&text, command)));
        let name = command.trim_start_matches('/').replace(' ', "_");
        insta::assert_snapshot!(format!("tui_{name}"), answer(&screen, &text, command));
        nothing_waiting_is_counted_as_saved(command, &screen.filtered(&block(&text, command)));
    }
    dcp_report_is_where_its_answer_says(&screen, &lab, &session);
    assert!(no_new_request(&lab, requests), "a /dcp command sent a model request");
    drop(screen);

    // A fresh OpenCode process on the same session answers from its stored history, as the
    // CLI does, before any prompt.
    let cli = cli_context(&lab, &session);
    let counts = cli.lines().nth(1).unwrap().to_string();
    assert!(counts.contains(" messages, ") && !counts.starts_with("0 messages"), "{cli}");
    let screen = Screen::start(&lab, &["--session", &session]);
    screen.submit("/dcp context");
    // The session's history on screen holds the first process's answer; this one has the
    // CLI's counts.
    let text = screen.wait_until(&format!("/dcp context saying {counts:?}"), ANSWER_TIMEOUT, |s| {
        let lines: Vec<&str> = s.lines().collect();
        block_start(&lines, "/dcp context").is_some() && block(s, "/dcp context").contains(&counts)
    });
    assert!(!text.contains("interrupted"), "{text}");
    assert!(no_new_request(&lab, requests), "a /dcp command sent a model request");
}

/// The agent compresses a range in a step of its own; the user lists it and restores it with
/// `/dcp decompress`, reading both answers on screen, and no model request is made for them.
#[test]
fn tui_lists_a_compressed_range_and_restores_it() {
    let lab = Lab::new(IMMEDIATE);
    lab.llm.push(vec![
        read("p1.parser", "src/parser.py"),
        read("p1.records", "data/records.csv"),
        Turn::text("p1.answer", "Explored: a parser with 12 sections and 150 records."),
    ]);
    let summary = "src/parser.py has parse_section_1..12; data/records.csv has 150 rows.";
    let range = json!({"startId": "m1", "endId": "m4", "summary": summary});
    lab.llm.push(vec![
        Turn::tool("p2.compress", "compress", json!({"topic": "exploration", "content": [range]})),
        Turn::text("p2.answer", "Compressed the exploration."),
    ]);
    let screen = Screen::start(&lab, &[]);
    screen.submit("Explore the project.");
    screen.wait_until("the first answer", TURN_TIMEOUT, |s| s.contains("Explored: a parser"));
    screen.submit("Compress what you explored.");
    screen.wait_until("the second answer", TURN_TIMEOUT, |s| s.contains("Compressed the exploration."));
    assert!(lab.llm.request_for("p2.answer").text().contains(summary), "the summary reached the model");

    let requests = lab.llm.log().len();
    screen.submit("/dcp decompress");
    let text = wait_answer(&screen, "/dcp decompress", "b1");
    println!("--- the pane's answer to /dcp decompress ---\n{}", screen.filtered(&block(&text, "/dcp decompress")));
    insta::assert_snapshot!("tui_dcp_decompress_lists_b1", answer(&screen, &text, "/dcp decompress"));
    screen.submit("/dcp decompress b1");
    let text = wait_answer(&screen, "/dcp decompress b1", "Restored b1");
    assert!(!text.contains("interrupted"), "{text}");
    insta::assert_snapshot!("tui_dcp_decompress_b1", answer(&screen, &text, "/dcp decompress b1"));
    assert!(no_new_request(&lab, requests), "a /dcp command sent a model request");
    let session = lab.session_id();
    assert_eq!(lab.state(&session)["prune"]["messages"]["blocksById"]["1"]["deactivatedByUser"], true);
}

#[test]
fn tui_tells_a_missing_binary_and_dcp_answers_with_the_reason() {
    let mut lab = Lab::new("{}");
    lab.dcp_bin = lab.root().join("missing/dcp");
    lab.llm.push(vec![Turn::text("p1.answer", "Hello.")]);
    let screen = Screen::start(&lab, &[]);
    // Told once the TUI is up, before anything is typed.
    let text = screen.wait_for("was not found");
    println!("--- the toast ---\n{}", screen.filtered(&toast(&text, "was not found")));
    insta::assert_snapshot!("tui_missing_binary_toast", screen.filtered(&toast(&text, "was not found")));
    screen.submit("Hello?");
    screen.wait_until("the model's answer", TURN_TIMEOUT, |s| s.contains("Hello."));
    let requests = lab.llm.log().len();
    screen.submit("/dcp stats");
    let text = wait_answer(&screen, "/dcp stats", "was not found");
    println!("--- the pane's answer to /dcp stats ---\n{}", screen.filtered(&block(&text, "/dcp stats")));
    assert!(!text.contains("interrupted"), "{text}");
    insta::assert_snapshot!("tui_missing_binary_dcp_stats", screen.filtered(&block(&text, "/dcp stats")));
    assert!(no_new_request(&lab, requests), "/dcp stats went to the model");
}

#[test]
fn tui_tells_a_bad_config_value_naming_the_file_and_key() {
    let lab = Lab::new(r#"{"pruneNotification": "loud"}"#);
    let screen = Screen::start(&lab, &[]);
    let text = screen.wait_for("pruneNotification");
    let told = toast(&text, "pruneNotification");
    assert!(told.contains("dcp.jsonc"), "{told}");
    insta::assert_snapshot!("tui_bad_config_toast", screen.filtered(&told));
    // `/dcp` is still there, and answers with the reason, with no model request.
    screen.submit("/dcp stats");
    let text = wait_answer(&screen, "/dcp stats", "must be one of");
    assert!(!text.contains("interrupted"), "{text}");
    assert!(no_new_request(&lab, 0), "/dcp stats went to the model");
}

/// The scenario's deduplication waits for the cache: `/dcp stats` counts nothing of it as kept
/// out or in force. What dcp added to the requests (its tools, offered from the first request)
/// is counted against it: what it kept out is nothing or less.
fn nothing_waiting_is_counted_as_saved(command: &str, pane: &str) {
    if command == "/dcp stats" {
        let kept_out_nothing = pane.contains("Kept out:        ~0 tokens") || pane.contains("Added:           ~");
        assert!(kept_out_nothing && pane.contains("In force:        ~0"), "{pane}");
        let money = pane.contains("Money added:     $") || pane.contains("Money saved:     $");
        assert!(money && pane.contains("(claude-sonnet-4 prices)"), "{pane}");
    }
}

/// `/dcp report` writes the page where its answer on the screen says, naming the session.
fn dcp_report_is_where_its_answer_says(screen: &Screen, lab: &Lab, session: &str) {
    screen.submit("/dcp report");
    let text = wait_answer(screen, "/dcp report", "Savings report written to");
    let page = lab.root().join("xdg/cache/dcp/report.html");
    let html = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}\n{text}", page.display()));
    let answer = screen.filtered(&block(&text, "/dcp report"));
    assert!(answer.contains("report.html") && answer.contains("in a browser"), "{answer}");
    assert!(html.contains(session) || html.contains("Exploring the demo project"), "{}", page.display());
}

/// The text of the toast holding `needle`. OpenCode draws a toast in the pane's top right
/// corner, framed by `┃` on both sides, and wraps its text; the rows are joined back into one
/// paragraph (directly after a row ending in `/`, where a path was wrapped).
fn toast(text: &str, needle: &str) -> String {
    let rows: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
    let at =
        text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not on screen:\n{text}"));
    let frame = |row: &[char], col: usize| row.get(col).is_some_and(|c| *c == '┃');
    // The frame's left edge: the last `┃` before the needle on its row.
    let first = needle.chars().next().unwrap();
    let row = &rows[at];
    let needle_col =
        (0..row.len()).find(|&i| row[i] == first && row[i..].iter().collect::<String>().starts_with(needle)).unwrap();
    let col = (0..needle_col).rev().find(|&i| frame(row, i)).unwrap_or_else(|| panic!("no toast frame:\n{text}"));
    let mut start = at;
    while start > 0 && frame(&rows[start - 1], col) {
        start -= 1;
    }
    let mut out = String::new();
    for row in rows[start..].iter().take_while(|r| frame(r, col)) {
        let inner: String = row[col + 1..].iter().take_while(|c| **c != '┃').collect();
        let inner = inner.trim();
        if inner.is_empty() {
            continue;
        }
        if !out.is_empty() && !out.ends_with('/') {
            out.push(' ');
        }
        out.push_str(inner);
    }
    out
}
