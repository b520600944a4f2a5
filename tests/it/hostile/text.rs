//! Text from the history and from files reaches the terminal escaped, and JSON stays exact.

use serde_json::{json, Value};

use crate::support::{dcp, dcp_in, Sandbox, Sidecar, DB_SESSION};

/// Sets a clipboard (OSC 52), clears the screen, reverses the line and fakes another.
const HOSTILE: &str = "x\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J\u{202e}\u{9b}31m\r\nFAKE";

/// Asserts `text` holds nothing a terminal would act on.
fn assert_inert(text: &str) {
    let acts =
        |c: char| (c.is_control() && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if let Some(c) = text.chars().find(|c| acts(*c)) {
        panic!("{c:?} reaches the terminal: {text:?}");
    }
}

/// Asserts `text` holds nothing a terminal would act on, and shows the hostile escape.
fn assert_escaped(text: &str) {
    assert_inert(text);
    assert!(text.contains("x\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\u{202e}\\u{9b}31m"), "{text:?}");
}

/// Runs SQL on the sandbox's `opencode.db`.
fn sql(s: &Sandbox, statement: &str, params: impl rusqlite::Params) {
    let conn = rusqlite::Connection::open(s.data().join("opencode.db")).unwrap();
    conn.execute(statement, params).unwrap();
}

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn a_session_title_with_terminal_escapes_is_printed_escaped_by_sessions_and_context() {
    let s = Sandbox::new();
    sql(&s, "UPDATE session SET title = ?1 WHERE id = ?2", [HOSTILE, DB_SESSION]);
    let sessions = stdout(&dcp(&s, &["sessions"]));
    assert_escaped(&sessions);
    // `\r\n` escaped: the fake line is not a line of its own.
    assert!(!sessions.lines().any(|l| l.starts_with("FAKE")), "{sessions}");
    assert_escaped(&stdout(&dcp(&s, &["context", "--session", DB_SESSION])));
    // JSON carries the title exactly.
    let json: Value = serde_json::from_str(&stdout(&dcp(&s, &["sessions", "--json"]))).unwrap();
    let titles: Vec<&str> = json["sessions"].as_array().unwrap().iter().filter_map(|r| r["title"].as_str()).collect();
    assert!(titles.contains(&HOSTILE), "{json}");
}

#[test]
fn a_file_path_and_a_tool_name_with_terminal_escapes_are_printed_escaped_by_context_and_sweep() {
    let s = Sandbox::new();
    let path = format!("/src/{HOSTILE}.py");
    let set = "UPDATE part SET data = json_set(data, '$.state.input.filePath', ?1) WHERE json_extract(data, '$.callID') = 'call_12_0_5abbdb74'";
    sql(&s, set, [path.as_str()]);
    let tool = format!("bash{HOSTILE}");
    let set = "UPDATE part SET data = json_set(data, '$.tool', ?1) WHERE json_extract(data, '$.callID') = 'call_23_0_60bf3b84'";
    sql(&s, set, [tool.as_str()]);
    // `context` keeps the end of a key its pane has no room for: the path's file name.
    let context = stdout(&dcp(&s, &["context", "--session", DB_SESSION]));
    assert_inert(&context);
    assert!(context.contains("\\u{202e}\\u{9b}31m FAKE.py\n"), "{context:?}");
    assert_escaped(&stdout(&dcp(&s, &["sweep", "--session", DB_SESSION, "--dry-run"])));
}

#[test]
fn a_huge_session_name_with_terminal_escapes_is_cut_and_escaped_by_stats() {
    let s = Sandbox::new();
    let file = s.state_dir().join(format!("{DB_SESSION}.json"));
    let mut state: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    state["sessionName"] = json!(format!("{HOSTILE}{}", "t".repeat(1 << 20)));
    std::fs::write(&file, serde_json::to_vec(&state).unwrap()).unwrap();
    let text = stdout(&dcp(&s, &["stats", "--session", DB_SESSION]));
    assert_escaped(&text);
    assert!(text.len() < 4096, "a 1 MB title is printed whole: {} bytes", text.len());
}

#[test]
fn an_error_naming_a_path_with_terminal_escapes_is_printed_escaped() {
    let s = Sandbox::new();
    let data = s.dir.path().join(HOSTILE);
    let out = dcp_in(&s, &data, &["sessions"], std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("dcp: "), "{err}");
    assert_escaped(&err);
}

#[test]
fn a_dcp_answer_quoting_a_title_with_terminal_escapes_is_escaped() {
    let s = Sandbox::new();
    sql(&s, "UPDATE session SET title = ?1 WHERE id = ?2", [HOSTILE, DB_SESSION]);
    let mut sidecar = Sidecar::spawn(&s, "{}");
    for command in ["context", "stats"] {
        let answer = sidecar.result("command", json!({"sessionID": DB_SESSION, "arguments": command}));
        assert_escaped(answer["text"].as_str().unwrap());
    }
    sidecar.shutdown();
}
