//! Config files as the CLI meets them: a hostile `dcp.jsonc` (truncated, not UTF-8, nested too
//! deep, wrongly typed, out of range) is an error naming the file and the key, and a huge one
//! of whitespace and comments is read quickly.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{dcp, dcp_in, stderr, Sandbox};

/// Writes `bytes` as the project's `.opencode/dcp.jsonc` and returns its path.
fn project_config(sandbox: &Sandbox, bytes: &[u8]) -> PathBuf {
    let dir = sandbox.dir.path().join("project/.opencode");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dcp.jsonc");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn hostile_config_files_are_errors_naming_the_file_and_key() {
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("truncated", br#"{"strategies": {"purgeErrors": {"turns": 4"#.to_vec(), &["is not valid JSONC"]),
        ("not UTF-8", b"{\"debug\": \"\xff\"}".to_vec(), &["is not valid JSONC", "not UTF-8"]),
        ("deeply nested objects", "{\"a\":".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        ("deeply nested lists", "[".repeat(100_000).into_bytes(), &["is not valid JSONC", "nested"]),
        (
            "nesting behind a quote in a comment",
            format!("// \"\n{}", "[".repeat(100_000)).into_bytes(),
            &["is not valid JSONC", "nest"],
        ),
        ("the top level a list", b"[1, 2]".to_vec(), &["is not valid JSONC", "top level"]),
        (
            "a wrongly typed value",
            br#"{"strategies": {"purgeErrors": {"turns": "four"}}}"#.to_vec(),
            &["`strategies.purgeErrors.turns` must be a whole number"],
        ),
        ("a wrongly typed section", br#"{"rewrite": [1]}"#.to_vec(), &["`rewrite` must be an object"]),
        (
            "a huge number",
            br#"{"rewrite": {"expectedRequests": 1e999}}"#.to_vec(),
            &["Number is out of range", "line 1"],
        ),
        ("a ratio out of range", br#"{"rewrite": {"pressureRatio": -0.5}}"#.to_vec(), &["rewrite.pressureRatio"]),
        ("a bank share out of range", br#"{"rewrite": {"spendBanked": 2}}"#.to_vec(), &["rewrite.spendBanked"]),
        (
            "masking's inputs not a boolean",
            br#"{"strategies": {"masking": {"inputs": "yes"}}}"#.to_vec(),
            &["strategies.masking.inputs"],
        ),
    ];
    let s = Sandbox::new();
    for (what, bytes, needles) in cases {
        let path = project_config(&s, &bytes);
        let out = dcp(&s, &["stats"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.starts_with("dcp: config ") && err.contains(&path.display().to_string()), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        for n in needles {
            assert!(err.contains(n), "{what}: no {n:?} in {err}");
        }
        assert!(err.len() < 1000, "{what}: an unreadably long error: {err}");
    }
}

#[test]
fn a_huge_config_of_whitespace_and_comments_is_read_quickly() {
    let s = Sandbox::new();
    let mut text = String::with_capacity(21 << 20);
    text.push_str("// padding\n");
    text.push_str(&" \n".repeat(5 << 20));
    text.push_str("/* ");
    text.push_str(&"x".repeat(10 << 20));
    text.push_str(" */\n{\"pruneNotification\": \"minimal\"}\n");
    project_config(&s, text.as_bytes());
    let start = Instant::now();
    let out = dcp_in(&s, &s.data(), &["stats"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(15), "{:?}", start.elapsed());
}
