//! Shell commands of a recorded session, mapped onto OpenCode's tools.
//!
//! Harnesses without file tools (SWE-agent's `bash`, Codex's `command_execution`) view and
//! search files with shell commands. Only unambiguous forms map onto OpenCode's own tools:
//! `cat FILE`, `sed -n 'A,Bp' FILE`, `nl -ba FILE | sed -n 'A,Bp'` and `head -n N FILE` become
//! `read`; a simple `grep`/`rg` becomes `grep`; `find PATH -name PAT` becomes `glob`.
//! Everything else stays `bash`, with its output verbatim. A non-zero exit stays
//! `completed`, as OpenCode's bash tool has it.

use serde_json::{json, Value};

use super::model::Call;

/// OpenCode keeps at most this much of a bash output in `metadata.output`.
pub const META_MAX: usize = 30_000;

/// What a recorded shell command ran and answered.
#[derive(Debug, Clone, Copy)]
pub struct ShellRun<'a> {
    pub command: &'a str,
    pub output: &'a str,
    /// The working directory and the session's root (for relative paths and titles).
    pub cwd: &'a str,
    pub root: &'a str,
    pub exit: Option<i64>,
    pub dur_ms: i64,
}

/// `bash -lc 'inner'` (Codex) → `inner`.
pub fn unwrap_bash_lc(cmd: &str) -> String {
    let rest = ["/bin/bash -lc ", "bash -lc ", "/bin/sh -lc ", "sh -lc "].iter().find_map(|p| cmd.strip_prefix(p));
    let Some(rest) = rest else { return cmd.to_string() };
    match split(rest) {
        Some(parts) if parts.len() == 1 => parts.into_iter().next().unwrap_or_default(),
        _ => rest.to_string(),
    }
}

/// Splits `s` as a POSIX shell would split plain words and quotes; `None` on an open quote.
pub fn split(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => w.push(ch),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => w.push(chars.next()?),
                        ch => w.push(ch),
                    }
                }
            }
            '\\' => cur.get_or_insert_with(String::new).push(chars.next()?),
            c if c.is_whitespace() => words.extend(cur.take()),
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(cur);
    Some(words)
}

fn has_meta(c: &str) -> bool {
    c.contains(['|', ';', '&', '<', '>', '`', '\n', '*']) || c.contains("$(") || c.replace("\\?", "").contains('?')
}

/// `path` made absolute against `cwd`, with `.` and `..` resolved.
pub fn absolute(path: &str, cwd: &str) -> String {
    let joined =
        if path.starts_with('/') { path.to_string() } else { format!("{}/{}", cwd.trim_end_matches('/'), path) };
    let mut out: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    format!("/{}", out.join("/"))
}

/// `path` relative to `root` when inside it (OpenCode's titles).
pub fn relative(path: &str, root: &str) -> String {
    let root = root.trim_end_matches('/');
    match path.strip_prefix(root).and_then(|r| r.strip_prefix('/')) {
        Some(r) if !root.is_empty() => r.to_string(),
        _ => path.to_string(),
    }
}

/// The OpenCode tool and input a command maps onto; `None` keeps it `bash`.
fn classify(cmd: &str, cwd: &str) -> Option<(&'static str, Value)> {
    let mut c = cmd.trim().to_string();
    let mut cwd = cwd.to_string();
    if let Some(rest) = c.strip_prefix("cd ") {
        if let Some((dir, tail)) = rest.split_once("&&") {
            if !dir.trim().contains(char::is_whitespace) && !has_meta(&tail.replace("| sed -n", "")) {
                cwd = absolute(dir.trim(), &cwd);
                c = tail.trim().to_string();
            }
        }
    }
    if let Some(read) = numbered_view(&c, &cwd) {
        return Some(read);
    }
    if has_meta(&c) {
        return None;
    }
    let t = split(&c)?;
    match t.first().map(String::as_str)? {
        "cat" if t.len() == 2 && !t[1].starts_with('-') => Some(("read", json!({"filePath": absolute(&t[1], &cwd)}))),
        "sed" if t.len() == 4 && t[1] == "-n" => {
            let (a, b) = line_range(&t[2])?;
            Some(("read", json!({"filePath": absolute(&t[3], &cwd), "offset": a, "limit": b - a + 1})))
        }
        "head" if t.len() == 4 && t[1] == "-n" => {
            let n: i64 = t[2].parse().ok()?;
            Some(("read", json!({"filePath": absolute(&t[3], &cwd), "limit": n})))
        }
        "grep" | "rg" => grep_input(&t, &cwd).map(|v| ("grep", v)),
        "find" => find_input(&t, &cwd).map(|v| ("glob", v)),
        _ => None,
    }
}

/// `nl -ba FILE | sed -n 'A,Bp'`.
fn numbered_view(c: &str, cwd: &str) -> Option<(&'static str, Value)> {
    let (left, right) = c.split_once(" | ")?;
    let file = left.strip_prefix("nl -ba ")?.trim();
    let range = right.strip_prefix("sed -n ")?.trim().trim_matches(['\'', '"']);
    if file.contains(char::is_whitespace) || has_meta(file) {
        return None;
    }
    let (a, b) = line_range(range)?;
    Some(("read", json!({"filePath": absolute(file, cwd), "offset": a, "limit": b - a + 1})))
}

/// `A,Bp` → (A, B).
fn line_range(s: &str) -> Option<(i64, i64)> {
    let (a, b) = s.strip_suffix('p')?.split_once(',')?;
    let (a, b): (i64, i64) = (a.parse().ok()?, b.parse().ok()?);
    (b >= a).then_some((a, b))
}

fn grep_input(t: &[String], cwd: &str) -> Option<Value> {
    let mut include = None;
    let mut rest = Vec::new();
    let mut i = 1;
    while i < t.len() {
        let a = &t[i];
        if let Some(g) = a.strip_prefix("--include=") {
            include = Some(g.to_string());
        } else if t[0] == "rg" && (a == "-g" || a == "--glob") && i + 1 < t.len() {
            include = Some(t[i + 1].clone());
            i += 1;
        } else if a == "--line-number" || a == "--recursive" {
        } else if let Some(flags) = a.strip_prefix('-') {
            if flags.is_empty() || !flags.chars().all(|f| "rRnisEwlIF".contains(f)) {
                return None;
            }
        } else {
            rest.push(a.clone());
        }
        i += 1;
    }
    let mut input = json!({"pattern": rest.first()?});
    match rest.len() {
        1 => {}
        2 => input["path"] = json!(absolute(&rest[1], cwd)),
        _ => return None,
    }
    if let Some(g) = include {
        input["include"] = json!(g);
    }
    Some(input)
}

/// `find PATH -name PAT [-type f]` and `find PATH -type f -name PAT`.
fn find_input(t: &[String], cwd: &str) -> Option<Value> {
    if t.len() != 4 && t.len() != 6 {
        return None;
    }
    let mut name = None;
    let mut j = 2;
    while j < t.len() {
        match (t[j].as_str(), t.get(j + 1).map(String::as_str)) {
            ("-name" | "-iname", Some(n)) => name = Some(n.to_string()),
            ("-type", Some("f" | "d")) => {}
            _ => return None,
        }
        j += 2;
    }
    Some(json!({"pattern": format!("**/{}", name?), "path": absolute(&t[1], cwd)}))
}

fn missing_file(out: &str) -> bool {
    out.contains("No such file or directory") || (out.contains("can't read ") && out.contains("No such file"))
}

fn non_empty_lines(s: &str) -> usize {
    s.lines().filter(|l| !l.trim().is_empty()).count()
}

/// The call a recorded shell command becomes.
pub fn shell_call(run: &ShellRun<'_>) -> Call {
    let mut mapped = classify(run.command, run.cwd);
    let search_failed = !matches!(run.exit, None | Some(0) | Some(1))
        || run.output.get(..300.min(run.output.len())).unwrap_or(run.output).contains("command not found");
    if matches!(mapped, Some(("grep" | "glob", _))) && search_failed {
        mapped = None;
    }
    match mapped {
        Some(("read", input)) => {
            if missing_file(run.output) && run.exit != Some(0) {
                return Call::failed("read", input, run.output).with_duration(run.dur_ms);
            }
            let title = relative(input["filePath"].as_str().unwrap_or(""), run.root);
            Call::completed("read", input, run.output)
                .with_title(&title)
                .with_meta("preview", json!(run.output.lines().take(20).collect::<Vec<_>>().join("\n")))
                .with_meta("truncated", json!(false))
                .with_duration(run.dur_ms)
        }
        Some((tool @ ("grep" | "glob"), input)) => {
            let (title, key) = if tool == "grep" {
                (input["pattern"].as_str().unwrap_or("").to_string(), "matches")
            } else {
                (relative(input["path"].as_str().unwrap_or(""), run.root), "count")
            };
            Call::completed(tool, input, run.output)
                .with_title(&title)
                .with_meta(key, json!(non_empty_lines(run.output)))
                .with_meta("truncated", json!(false))
                .with_duration(run.dur_ms)
        }
        _ => bash_call(run.command, run.output, run.exit, None).with_duration(run.dur_ms),
    }
}

/// A `bash` call as OpenCode records one.
pub fn bash_call(command: &str, output: &str, exit: Option<i64>, description: Option<&str>) -> Call {
    let mut input = json!({"command": command});
    let cut = floor_boundary(output, META_MAX);
    let mut call = Call::completed("bash", Value::Null, output)
        .with_meta("output", json!(&output[..cut]))
        .with_meta("truncated", json!(output.len() > META_MAX));
    if let Some(code) = exit {
        call = call.with_meta("exit", json!(code));
    }
    if let Some(d) = description {
        input["description"] = json!(d);
        call = call.with_meta("description", json!(d));
    }
    let title = description.map(str::to_string).unwrap_or_else(|| command.chars().take(200).collect());
    call.input = input;
    call.with_title(&title)
}

/// The largest char boundary of `s` at or below `max`.
pub fn floor_boundary(s: &str, max: usize) -> usize {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
