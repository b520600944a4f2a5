//! The end-to-end scenarios: several prompts of one session through the real OpenCode, with
//! dcp loaded, asserting on what the fake model received.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use super::fake_llm::{Logged, Turn};
use super::{tail, Lab};

/// Writes the demo project the scripted turns work on, as a git repository.
pub fn write_project(dir: &Path) {
    let mut parser = String::from("\"\"\"Line-oriented record parser.\"\"\"\n\nimport re\n\nFIELD_RE = re.compile(r\"^(?P<key>[a-z_]+)\\s*=\\s*(?P<value>.*)$\")\n\n");
    for i in 1..=12 {
        parser.push_str(&format!(
            "def parse_section_{i}(lines):\n    \"\"\"Parse section {i}: `key = value` lines; '#' starts a comment.\"\"\"\n    result = {{}}\n    for raw in lines:\n        line = raw.strip()\n        if not line or line.startswith('#'):\n            continue\n        m = FIELD_RE.match(line)\n        if not m:\n            raise ValueError('section {i}: bad line %r' % line)\n        result[m.group('key')] = m.group('value') * {}\n    return result\n\n",
            i % 3 + 1
        ));
    }
    let mut records = String::from("id,name,qty,price\n");
    for i in 1..=150 {
        records.push_str(&format!("{i},item-{i:03},{},{}.{:02}\n", (i * 7) % 13, (i * 31) % 97, i % 100));
    }
    let files = [
        ("src/parser.py", parser),
        ("data/records.csv", records),
        ("config.txt", "mode = fast\nretries = 3\ntimeout = 30\n# comments start with a hash\n".to_string()),
        ("README.md", "# demo\n\nA project for dcp's end-to-end tests.\n".to_string()),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "demo"]);
}

pub fn read(label: &str, rel: &str) -> Turn {
    Turn::tool(label, "read", json!({"filePath": format!("{{{{cwd}}}}/{rel}")}))
}

/// The first prompt most lab sessions open with: parser.py read, the records read, parser.py
/// read again (the first read made obsolete), then `answer`. Returns the new session's id.
pub fn explore_twice_read(lab: &Lab, answer: &str) -> String {
    lab.prompt(
        None,
        "Explore the project.",
        vec![
            read("p1.parser", "src/parser.py"),
            read("p1.records", "data/records.csv"),
            read("p1.parser_again", "src/parser.py"),
            Turn::text("p1.answer", answer),
        ],
    );
    lab.session_id()
}

/// The call id of the tool call a scripted turn made, from the model's next request.
pub(super) fn call_id_of(lab: &Lab, label: &str) -> String {
    let log = lab.llm.main_requests();
    let at =
        log.iter().position(|l| l.label.as_deref() == Some(label)).unwrap_or_else(|| panic!("turn {label} never ran"));
    let next = &log[at + 1];
    let assistant: Vec<&Value> = next.messages().iter().filter(|m| m["role"] == "assistant").collect();
    assistant.last().unwrap()["tool_calls"][0]["id"].as_str().unwrap().to_string()
}

/// The result of `call` in `req`, as the model read it, without the message id tag dcp
/// appends to the last result of each step.
pub(super) fn result(req: &Logged, call: &str) -> String {
    let text = req.tool_result(call).unwrap_or_else(|| panic!("no result for {call} in request {:?}", req.label));
    match text.rfind("\n<") {
        Some(i) if dcp::strategies::compress::is_tag(&text[i + 1..]) => text[..i].to_string(),
        _ => text,
    }
}

pub const IMMEDIATE: &str = r#"{
  // Apply every decision on the next request, so each step can be checked at once.
  "rewrite": {"mode": "immediate"},
  "pruneNotification": "minimal",
  // List every output, small ones included, so the small config file can be extracted; and
  // tag every message, so compress can name any range of a short run by its tags.
  "tools": {"settings": {"nudgeEnabled": false, "minTokens": 0}, "compress": {"tagsFrom": 0}},
  // Masking would take the first prompt's outputs at the second prompt; this run checks the
  // other strategies and the agent's tools (the lab sessions of fixtures/replay run masking
  // in the real OpenCode).
  "strategies": {"masking": {"enabled": false}},
}"#;

#[test]
fn plugin_prunes_the_requests_remembers_across_restarts_and_clears_on_compaction() {
    let lab = Lab::new(IMMEDIATE);
    let calls = first_prompt_deduplicates_and_lists(&lab);
    let config = discard_and_extract(&lab, &calls);
    let saved_before_compaction = state_and_stats_command(&lab, &calls, &config);
    restart_keeps_the_state_and_history_is_untouched(&lab, &calls, &config);
    let FirstPrompt { session, records, .. } = &calls;
    // A compaction clears the session's prune list and keeps its stats.
    compact(&lab, &session);
    lab.prompt(Some(&session), "Carry on.", vec![Turn::text("p5.answer", "Continuing after the summary.")]);
    let after = lab.llm.request_for("p5.answer");
    assert!(after.tool_result(&records).is_none(), "old calls are gone after the summary");
    let state = lab.state(&session);
    assert_eq!(state["prune"]["toolIds"], json!([]), "{state}");
    assert_eq!(state["stats"]["totalPruneTokens"].as_u64().unwrap(), saved_before_compaction);
    assert!(state["dcp"]["lastCompaction"].as_i64().unwrap() > 0);
}

/// The calls of the scenario's first prompt, and its session.
struct FirstPrompt {
    session: String,
    parser_first: String,
    records: String,
}

/// Prompt 1: parser.py is read twice; the first read reaches the model as the placeholder,
/// the list and the tools are offered, and the notification is shown in the session.
fn first_prompt_deduplicates_and_lists(lab: &Lab) -> FirstPrompt {
    let session = explore_twice_read(lab, "Explored: a parser with 12 sections and 150 records.");
    let parser_first = call_id_of(&lab, "p1.parser");
    let records = call_id_of(&lab, "p1.records");
    let parser_again = call_id_of(&lab, "p1.parser_again");

    // Deduplication: the first read of parser.py arrives as the placeholder, the second whole.
    let answer = lab.llm.request_for("p1.answer");
    assert!(crate::restore::is_pruned(Some(&result(&answer, &parser_first))));
    assert!(result(&answer, &parser_again).contains("def parse_section_12"));
    // The prunable list rides at the tail, after the history.
    let last = answer.messages().last().unwrap();
    assert_eq!(last["role"], "user");
    let list = super::fake_llm::content_text(&last["content"]);
    assert!(
        list.starts_with("<prunable-tools>") && list.contains(": read, ") && list.contains("records.csv"),
        "{list}"
    );
    // The discard and compress tools are offered; their descriptions are all dcp adds.
    let tools: Vec<&str> =
        answer.body["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"discard") && tools.contains(&"compress"), "{tools:?}");
    assert!(!answer.text().contains("Keep your context small"), "no system line");
    // The prune notification is shown in the session once the turn ends, never to the model.
    // Stored as the turn ends: on a loaded machine that can come a moment after `run` returns.
    let notice = || lab.stored_parts(&session).into_iter().find(|p| p.contains("▣ DCP |"));
    crate::support::poll(|| notice().is_some(), std::time::Duration::from_secs(10));
    let notice: Value = serde_json::from_str(&notice().expect("a notification in the session")).unwrap();
    assert_eq!(notice["ignored"], true);
    FirstPrompt { session, parser_first, records }
}

/// Prompts 2 and 3: the agent discards the records output and extracts the config; returns
/// the config read's call id.
fn discard_and_extract(lab: &Lab, calls: &FirstPrompt) -> String {
    let FirstPrompt { session, records, .. } = calls;
    // Discard by list id: the records output goes.
    lab.prompt(
        Some(&session),
        "Clean up, then check the config.",
        vec![
            Turn::tool("p2.discard", "discard", json!({"ids": ["{{list:records.csv}}"], "reason": "completion"})),
            read("p2.config", "config.txt"),
            Turn::text("p2.answer", "Config read."),
        ],
    );
    let after_discard = lab.llm.request_for("p2.config");
    assert!(crate::restore::is_pruned(Some(&result(&after_discard, &records))));
    let discard_call = call_id_of(&lab, "p2.discard");
    assert!(
        result(&after_discard, &discard_call).starts_with("Discarded 1 tool output"),
        "{}",
        result(&after_discard, &discard_call)
    );
    let config = call_id_of(&lab, "p2.config");

    // A discard with a distillation extracts: the config output becomes the distillation.
    lab.prompt(Some(&session), "Keep only the essentials of the config.", vec![
        Turn::tool(
            "p3.extract",
            "discard",
            json!({"ids": ["{{list:config.txt}}"], "distillation": ["config.txt: mode=fast, retries=3, timeout=30"]}),
        ),
        Turn::text("p3.answer", "Kept the essentials."),
    ]);
    let after_extract = lab.llm.request_for("p3.answer");
    let extract_call = call_id_of(lab, "p3.extract");
    let answered = result(&after_extract, &extract_call);
    assert!(answered.starts_with("Extracted 1 tool output"), "{answered}");
    assert_eq!(result(&after_extract, &config), "config.txt: mode=fast, retries=3, timeout=30");
    assert!(crate::restore::is_pruned(Some(&result(&after_extract, &records))));
    config
}

/// The state file holds the prunes and stats, and `/dcp stats` answers without a model
/// request; returns the tokens saved so far.
fn state_and_stats_command(lab: &Lab, calls: &FirstPrompt, config: &str) -> u64 {
    let FirstPrompt { session, parser_first, records } = calls;
    // The state file holds the pruned ids and the stats.
    let state = lab.state(&session);
    let ids: Vec<&str> = state["prune"]["toolIds"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for id in [parser_first.as_str(), records.as_str(), config] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let saved_before_compaction = state["stats"]["totalPruneTokens"].as_u64().unwrap();
    assert!(saved_before_compaction > 500, "{state}");
    for strategy in ["deduplication", "discard", "extract"] {
        assert_eq!(state["dcp"]["byStrategy"][strategy]["tools"], 1, "{strategy}: {state}");
    }

    // /dcp stats answers in the session, and sends nothing to the model.
    let requests_before = lab.llm.log().len();
    let stats = lab.opencode(&["run", "--session", &session, "--command", "dcp", "stats"]);
    let stdout = String::from_utf8_lossy(&stats.stdout);
    assert!(stdout.contains("DCP statistics"), "stdout: {stdout}\n{}", tail(&stats.stderr));
    // What dcp kept out, or what its tools added while its agent calls' own steps outweigh it
    // (they are left out of "without dcp", as replay leaves them).
    let figure = stdout.contains("Kept out:") || stdout.contains("Added:");
    assert!(figure && stdout.contains("Pruned (DCP):"), "{stdout}");
    assert_eq!(lab.llm.log().len(), requests_before, "a /dcp command sends no model request");
    saved_before_compaction
}

/// After OpenCode restarts the state is in force, and OpenCode's stored history is untouched.
fn restart_keeps_the_state_and_history_is_untouched(lab: &Lab, calls: &FirstPrompt, config: &str) {
    let FirstPrompt { session, parser_first, records } = calls;
    // After OpenCode restarts (every `opencode run` is a new process), the state is in force.
    lab.prompt(Some(&session), "Anything else?", vec![Turn::text("p4.answer", "Nothing else.")]);
    let restarted = lab.llm.request_for("p4.answer");
    assert!(crate::restore::is_pruned(Some(&result(&restarted, &parser_first))));
    assert!(crate::restore::is_pruned(Some(&result(&restarted, &records))));
    assert_eq!(result(&restarted, &config), "config.txt: mode=fast, retries=3, timeout=30");
    assert!(!restarted.text().contains("DCP statistics"), "the /dcp answer never reaches the model");
    assert!(!restarted.text().contains("▣ DCP"), "notifications never reach the model");

    // OpenCode's stored history is untouched: every output is as the tools wrote it.
    let stored = lab.stored_parts(&session);
    assert!(stored.iter().all(|p| !p.contains("[Output removed to save context")), "a placeholder reached opencode.db");
    assert!(stored.iter().all(|p| !p.contains("\\n<m1>")), "a message id tag reached opencode.db");
    let stored_output = |call: &str| -> String {
        let part: Value =
            stored.iter().map(|p| serde_json::from_str::<Value>(p).unwrap()).find(|p| p["callID"] == call).unwrap();
        part["state"]["output"].as_str().unwrap().to_string()
    };
    assert!(stored_output(&records).contains("150,item-150"));
    assert!(stored_output(&config).contains("timeout = 30"));
}

/// Compacts `session` through `opencode serve`: `POST /session/{id}/summarize`.
pub fn compact(lab: &Lab, session: &str) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut serve = lab
        .command(&["serve", "--print-logs", "--port", &port.to_string(), "--hostname", "127.0.0.1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(lab.root().join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    // Wait for the server to say it listens (probing the port first made it drop the request).
    let stdout = serve.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("listening") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(60)).expect("opencode serve did not start");
    let body = json!({"providerID": "fake", "modelID": "fake-model"}).to_string();
    // curl, as OpenCode's docs do; Bun's server did not answer a hand-written request.
    let curl = Command::new("curl")
        .args(["-s", "-i", "-m", "90", "-XPOST", "-H", "content-type: application/json", "-d", &body])
        .arg(format!("http://127.0.0.1:{port}/session/{session}/summarize"))
        .output()
        .expect("curl is needed for the compaction test");
    let response = String::from_utf8_lossy(&curl.stdout).into_owned();
    let _ = serve.kill();
    let _ = serve.wait();
    let log = std::fs::read(lab.root().join("serve.log")).unwrap_or_default();
    assert!(response.starts_with("HTTP/1.1 200"), "summarize: {response}\n{}", tail(&log));
}

#[test]
fn killing_the_sidecar_mid_session_does_not_break_the_run() {
    let mut lab = Lab::new(IMMEDIATE);
    // The fake model kills the sidecar mid-session, by the pid the wrapper records.
    let pidfile = record_sidecar_pids(&mut lab);
    // The kill comes after the request that pruned the first read, so there is saved state.
    lab.prompt(
        None,
        "Read things while dcp crashes.",
        vec![
            read("k.parser", "src/parser.py"),
            read("k.parser_again", "src/parser.py"),
            read("k.records", "data/records.csv").killing(&pidfile),
            read("k.parser_third", "src/parser.py"),
            Turn::text("k.answer", "Done despite the crash."),
        ],
    );
    let pids = std::fs::read_to_string(&pidfile).unwrap();
    assert!(pids.lines().count() >= 2, "the sidecar was restarted: {pids:?}");
    // After the restart, pruning is back: both earlier reads of parser.py are placeholders.
    let answer = lab.llm.request_for("k.answer");
    assert!(crate::restore::is_pruned(Some(&result(&answer, &call_id_of(&lab, "k.parser")))));
    assert!(crate::restore::is_pruned(Some(&result(&answer, &call_id_of(&lab, "k.parser_again")))));
    assert!(result(&answer, &call_id_of(&lab, "k.parser_third")).contains("def parse_section_1"));
    // The state saved before the kill is intact, and the restarted sidecar counted nothing twice.
    let session = lab.session_id();
    let state = lab.state(&session);
    assert!(state["dcp"]["pruned"].get(call_id_of(&lab, "k.parser")).is_some(), "{state}");
    assert_eq!(state["dcp"]["byStrategy"]["deduplication"]["tools"], 2, "{state}");
    let leftovers: Vec<String> = std::fs::read_dir(lab.state_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp") || n.contains(".corrupt-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_missing_sidecar_passes_messages_through() {
    let mut lab = Lab::new(IMMEDIATE);
    lab.dcp_bin = lab.root().join("no-such-dcp");
    lab.prompt(
        None,
        "Read twice without dcp.",
        vec![read("m.one", "src/parser.py"), read("m.two", "src/parser.py"), Turn::text("m.answer", "ok")],
    );
    let answer = lab.llm.request_for("m.answer");
    assert!(result(&answer, &call_id_of(&lab, "m.one")).contains("def parse_section_1"), "unchanged");
    assert!(!answer.text().contains("<prunable-tools>"));
}

/// Puts a wrapper in front of the lab's `dcp` that appends each sidecar's pid to the file
/// returned (the wrapper `exec`s it, so the pid is the sidecar's own).
fn record_sidecar_pids(lab: &mut Lab) -> std::path::PathBuf {
    let pidfile = lab.root().join("sidecar.pids");
    let wrapper = fake_sidecar(
        lab,
        "dcp-wrapper.sh",
        &format!("echo $$ >> '{}'\nexec '{}' \"$@\"", pidfile.display(), lab.dcp_bin.display()),
    );
    lab.dcp_bin = wrapper;
    pidfile
}

/// Waits until every sidecar `pidfile` names has exited (gone, or a zombie no one reaped):
/// OpenCode does not wait for its sidecar, which saves as it stops.
fn wait_for_sidecars(pidfile: &Path) {
    let pids = std::fs::read_to_string(pidfile).expect("a sidecar was started");
    for pid in pids.split_whitespace() {
        let exited = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state is the field after the parenthesised command name.
            Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
            Err(_) => true,
        };
        assert!(crate::support::poll(exited, std::time::Duration::from_secs(30)), "sidecar {pid} did not exit");
    }
}

/// A stand-in for `dcp` that misbehaves as `script` says.
fn fake_sidecar(lab: &Lab, name: &str, script: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = lab.root().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A first run with the real sidecar saves state; a second run of the same session with the
/// misbehaving `fake` passes the messages through and leaves that state byte for byte.
fn passes_through_and_keeps_the_state(mut lab: Lab, prefix: &str, fake: std::path::PathBuf) {
    let label = |s: &str| format!("{prefix}.{s}");
    let pidfile = record_sidecar_pids(&mut lab);
    lab.prompt(
        None,
        "Read twice with dcp.",
        vec![
            read(&label("one"), "src/parser.py"),
            read(&label("two"), "src/parser.py"),
            Turn::text(&label("first"), "ok"),
        ],
    );
    let session = lab.session_id();
    let file = lab.state_dir().join(format!("{session}.json"));
    // The first run's sidecar may still be stopping (and saving) after OpenCode exited.
    wait_for_sidecars(&pidfile);
    let saved = std::fs::read(&file).expect("the first run saved state");
    assert!(lab.state(&session)["dcp"]["pruned"].get(call_id_of(&lab, &label("one"))).is_some());

    lab.dcp_bin = fake;
    lab.prompt(
        Some(&session),
        "Read again while dcp misbehaves.",
        vec![read(&label("three"), "src/parser.py"), Turn::text(&label("answer"), "ok")],
    );
    let answer = lab.llm.request_for(&label("answer"));
    assert!(result(&answer, &call_id_of(&lab, &label("one"))).contains("def parse_section_1"), "passed through");
    assert!(!answer.text().contains("<prunable-tools>"));
    // Byte for byte, `lastUpdated` included: the state as the first run's sidecar left it.
    assert_eq!(std::fs::read(&file).unwrap(), saved, "the state saved before the failure changed");
}

#[test]
fn a_sidecar_that_answers_garbage_is_passed_through() {
    let lab = Lab::new(IMMEDIATE);
    let fake = fake_sidecar(&lab, "garbage.sh", "while read line; do echo 'this is not json'; done");
    passes_through_and_keeps_the_state(lab, "g", fake);
}

#[test]
fn a_sidecar_that_hangs_is_passed_through() {
    let lab = Lab::new(IMMEDIATE);
    let fake = fake_sidecar(&lab, "hang.sh", "exec cat >/dev/null");
    passes_through_and_keeps_the_state(lab, "h", fake);
}

/// The README's check of an install, `opencode run --command dcp help`, printed OpenCode's own
/// help: its argument parser reads `help` as its own. `opencode run --command dcp` prints dcp's
/// commands, and the README now says that.
#[test]
fn the_readme_s_check_of_the_install_prints_dcp_s_commands() {
    let lab = Lab::new(IMMEDIATE);
    let out = lab.opencode(&["run", "--command", "dcp"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("DCP commands:") && stdout.contains("/dcp stats"), "{stdout}\n{}", tail(&out.stderr));
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(readme.contains("`opencode run --command dcp` prints dcp's commands"), "the README names another check");
}
