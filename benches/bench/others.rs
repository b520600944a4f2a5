//! The other groups: all-time stats over 10,000 state files, the agent tools in process,
//! and the sidecar's start-up.

use super::*;

/// All-time stats over 10,000 generated state files: the first call of a process without a
/// cache, a new `dcp stats` process with the cache on disk, repeated calls in one process
/// (the sidecar's case), and a call after ten files changed.
pub(crate) fn stats_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let root = work_dir().join("stats");
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    let cache = root.join("cache");
    let dir = data.join("storage/plugin/dcp");
    let summary = match dcp_testkit::gen::write_states(10_000, SEED, &dir) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!("Stats rows skipped: cannot write state files: {e}."));
            return;
        }
    };
    eprintln!("bench: all-time stats over {} state files", summary.files);
    // One process's cache of what it knows, kept across its reports as the sidecar keeps it.
    let mut reports = dcp::stats::AllTimeCache::default();
    let t = Instant::now();
    let first = reports.all_time(&dir, Some(&cache.join("dcp")));
    let cold = ms(t.elapsed());
    match first {
        Ok(all) if all.pruned_tokens == summary.tokens_saved && all.tools_pruned == summary.tools_pruned => {}
        Ok(all) => notes.push(format!(
            "all_time disagrees with the generator: {} tokens / {} tools vs {} / {}.",
            all.pruned_tokens, all.tools_pruned, summary.tokens_saved, summary.tools_pruned
        )),
        Err(e) => {
            notes.push(format!("all_time failed: {e}."));
            return;
        }
    }
    // A new process each time, as a user's `dcp stats` is, with the cache the first call left.
    let process = stats_processes(&root, &data, &cache, summary.tokens_saved, notes);
    // 20 more calls, or fewer (at least 5) when they take more than 15 s in all.
    let budget = Instant::now();
    let mut repeated = Vec::new();
    while repeated.len() < 20 && (repeated.len() < 5 || budget.elapsed() < Duration::from_secs(15)) {
        let t = Instant::now();
        let _ = reports.all_time(&dir, Some(&cache.join("dcp")));
        repeated.push(ms(t.elapsed()));
    }
    let calls = repeated.len();
    let repeated = sorted(repeated);
    // Ten sessions saved again (rewritten in place, as the published plugin does).
    let mut names: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
    names.sort();
    for path in names.iter().take(10) {
        if let Ok(text) = std::fs::read(path) {
            let _ = std::fs::write(path, text);
        }
    }
    let t = Instant::now();
    let _ = reports.all_time(&dir, Some(&cache.join("dcp")));
    let after_change = ms(t.elapsed());
    let mb = summary.bytes as f64 / 1e6;
    stats_table(rows, mb, cold, &process, (&repeated, calls), after_change);
    let _ = std::fs::remove_dir_all(&root);
}

/// Ten runs of the `dcp stats` binary over `data`, in ms, sorted; each must find the
/// generator's `tokens_saved`.
fn stats_processes(root: &Path, data: &Path, cache: &Path, tokens_saved: u64, notes: &mut Vec<String>) -> Vec<f64> {
    let mut process = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let out = Command::new(dcp_bin())
            .args(["stats", "--json", "--data-dir"])
            .arg(data)
            .env("HOME", root)
            .env("XDG_CACHE_HOME", cache)
            .env("XDG_CONFIG_HOME", root.join("config"))
            .output();
        process.push(ms(t.elapsed()));
        match out {
            Ok(out) if out.status.success() => {
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                if v["all_time"]["pruned_tokens"].as_u64() != Some(tokens_saved) {
                    notes.push("`dcp stats` disagrees with the generator.".to_string());
                    break;
                }
            }
            other => {
                notes.push(format!("`dcp stats` failed: {other:?}."));
                break;
            }
        }
    }
    sorted(process)
}

/// The all-time stats rows: the first call (`cold`), the `dcp stats` processes, the
/// `repeated` calls in one process (`calls` of them), and one after ten files changed.
fn stats_table(rows: &mut Vec<Row>, mb: f64, cold: f64, process: &[f64], repeated: (&[f64], usize), after_change: f64) {
    let (repeated, calls) = repeated;
    rows.push(
        Row::new("all-time stats, 10,000 state files: first call, no cache", Some(cold), "ms", Some(50.0))
            .note(format!("{mb:.1} MB of state files, just written (page cache warm); writes the cache")),
    );
    rows.push(
        Row::new(
            "all-time stats, 10,000 state files: `dcp stats` process, cache on disk",
            p(process, 0.5),
            "ms",
            Some(50.0),
        )
        .note(format!(
            "p50 of {} runs, process start included; p99 {}",
            process.len(),
            p(process, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default()
        )),
    );
    rows.push(Row::new("all-time stats, 10,000 state files: repeated p50", p(repeated, 0.5), "ms", Some(5.0)).note(
        format!(
            "{calls} calls in one process; p99 {}; after 10 files were rewritten: {}",
            p(repeated, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default(),
            fmt_value(after_change, "ms")
        ),
    ));
}

/// The agent's `discard` tool on a 2,000-message session, in process: the sidecar's
/// `Server` after a first request, p50 of 5 calls (each refused, so the session stays as it is).
pub(crate) fn tools_rows(rows: &mut Vec<Row>) {
    eprintln!("bench: discard on 2000 messages");
    let root = work_dir().join("tools");
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let env = dcp::host::paths::Env {
        home: Some(home.clone()),
        xdg_config_home: Some(home.join(".config")),
        ..Default::default()
    };
    let options = dcp::sidecar::ServeOptions { data_dir: root.join("data"), env, project: None };
    let Ok(mut server) = dcp::sidecar::Server::new(options, None) else { return };
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 2_000, steps: 0, seed: SEED });
    let mut ask = |id: usize, method: &str, params: Value| {
        let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        server.handle_line(&line)
    };
    ask(0, "initialize", serde_json::json!({"protocol": 2}));
    ask(1, "transform", serde_json::json!({"sessionID": session.session_id, "messages": session.messages}));
    let mut times = Vec::new();
    for i in 0..5 {
        let args = serde_json::json!({"ids": ["999999"], "reason": "noise"});
        let t = Instant::now();
        ask(2 + i, "tool", serde_json::json!({"sessionID": session.session_id, "name": "discard", "args": args}));
        times.push(ms(t.elapsed()));
    }
    rows.push(
        Row::new("discard tool call, 2,000 msgs, in process, p50", p(&sorted(times), 0.5), "ms", None)
            .note("5 calls; the prunable list is worked out from the whole history"),
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `dcp serve` from spawn to the answer of `initialize`, over 20 spawns.
pub(crate) fn startup_rows(rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let home = work_dir().join("startup-home");
    let _ = std::fs::create_dir_all(&home);
    eprintln!("bench: sidecar start to first answer");
    let mut times = Vec::new();
    for _ in 0..20 {
        match spawn_and_initialize(&home) {
            Ok(t) => times.push(t),
            Err(e) => {
                notes.push(format!("Sidecar start: {e}."));
                return;
            }
        }
    }
    let times = sorted(times);
    rows.push(
        Row::new("sidecar start to first answer (initialize), p50", p(&times, 0.5), "ms", Some(20.0))
            .note(format!("20 spawns; p99 {}", p(&times, 0.99).map(|v| fmt_value(v, "ms")).unwrap_or_default())),
    );
    match peak_rss_after_start(&home) {
        Ok(kb) => rows.push(
            Row::new("sidecar peak RSS (VmHWM) after start, tokenizer ready", Some(kb as f64 / 1024.0), "MB", None)
                .note("`initialize` answered, then 300 ms; no session"),
        ),
        Err(e) => notes.push(format!("Sidecar RSS after start: {e}.")),
    }
}

/// A `dcp serve` with a private HOME, its stdin, and the answer line of its `initialize`.
fn spawn_initialized(home: &Path) -> Result<(std::process::Child, std::process::ChildStdin, String), String> {
    let mut child = Command::new(dcp_bin())
        .arg("serve")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("OPENCODE_CONFIG_DIR")
        .env_remove("OPENCODE_DB")
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot spawn dcp serve: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":1}}"#;
    writeln!(stdin, "{request}").map_err(|e| e.to_string())?;
    stdin.flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|e| e.to_string())?;
    Ok((child, stdin, line))
}

/// The peak RSS of a `dcp serve` 300 ms after it answered `initialize`, before any session,
/// in kB.
fn peak_rss_after_start(home: &Path) -> Result<u64, String> {
    let (mut child, stdin, _) = spawn_initialized(home)?;
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).map_err(|e| e.to_string());
    drop(stdin);
    let _ = child.wait();
    let status = status?;
    let hwm = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or("no VmHWM in /proc/<pid>/status")?;
    hwm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad line {hwm:?}"))
}

fn spawn_and_initialize(home: &Path) -> Result<f64, String> {
    let started = Instant::now();
    let (mut child, stdin, line) = spawn_initialized(home)?;
    let elapsed = ms(started.elapsed());
    // Closing stdin makes the sidecar save and exit.
    drop(stdin);
    let _ = child.wait();
    let answer: Value = serde_json::from_str(&line).map_err(|e| format!("bad answer {line:?}: {e}"))?;
    if answer.get("result").is_none() {
        return Err(format!("initialize failed: {line}"));
    }
    Ok(elapsed)
}
