//! A new user's first half hour, as the README leads it: each error met on the way (no
//! OpenCode data yet, a mistyped session, a port in use, a bad `--listen`, a mistyped
//! `dcp.jsonc` key, on the terminal and in `/dcp help`, a binary that is not executable) names
//! what was wrong and what to do, in plain text. Snapshots hold stdout, stderr and the exit
//! status together.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{dcp_in, rendered, Sandbox};

/// `dcp ARGS --data-dir DATA` in the sandbox, rendered with the sandbox's path filtered out.
fn run(s: &Sandbox, data: &Path, args: &[&str]) -> String {
    let out = dcp_in(s, data, args, std::time::Duration::from_secs(20));
    let text = rendered(&out).replace(&s.dir.path().display().to_string(), "[SANDBOX]");
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "a raw control character: {text:?}");
    text
}

/// `dcp doctor` printed its verdict (`dcp: doctor found 1 problem`) above its report on a
/// terminal, because stdout was flushed only on success.
#[test]
fn the_doctor_s_verdict_comes_after_its_report_on_one_terminal() {
    let s = Sandbox::new();
    let log = s.dir.path().join("terminal.txt");
    let file = std::fs::File::create(&log).unwrap();
    let root = s.dir.path();
    let status = Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["doctor", "--data-dir"])
        .arg(s.data())
        .current_dir(root.join("project"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root.join("home"))
        .env("XDG_CONFIG_HOME", root.join("home/.config"))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "no config names the plugin: a problem");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("dcp doctor (dcp "), "the report comes first:\n{text}");
    assert!(lines.last().unwrap().starts_with("dcp: doctor found "), "the verdict comes last:\n{text}");
}

/// On a fresh home, `dcp sessions` said the data dir held no OpenCode data, but not what to do.
#[test]
fn a_data_dir_without_opencode_data_says_how_to_name_the_right_one() {
    let s = Sandbox::new();
    let empty = s.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    insta::assert_snapshot!(run(&s, &empty, &["sessions"]));
}

/// `dcp stats --session` with a mistyped id showed a session that had saved nothing.
#[test]
fn stats_of_a_mistyped_session_is_an_error_not_a_session_that_saved_nothing() {
    let s = Sandbox::new();
    insta::assert_snapshot!(run(&s, &s.data(), &["stats", "--session", "ses_dfedb2935ffeIhuHRntLhlCv3"]));
}

/// `dcp stats --session` of one of OpenCode's sessions that dcp has not seen yet still answers:
/// nothing saved yet.
#[test]
fn stats_of_a_session_dcp_has_not_seen_yet_answers_with_nothing_saved() {
    let s = Sandbox::new();
    let id = crate::support::DB_SESSION;
    std::fs::remove_file(s.state_dir().join(format!("{id}.json"))).unwrap();
    let text = run(&s, &s.data(), &["stats", "--session", id]);
    assert!(
        text.starts_with("success: true") && text.contains("  Kept out:        ~0 tokens over 0 requests"),
        "{text}"
    );
}

/// `dcp proxy` on a port another program holds said "Address already in use", but not what to
/// do about it.
#[test]
fn a_port_in_use_names_the_port_and_what_to_do() {
    let s = Sandbox::new();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let text = run(&s, &s.data(), &["proxy", "--upstream", "http://127.0.0.1:9", "--listen", &addr]);
    insta::assert_snapshot!(text.replace(&addr, "127.0.0.1:[PORT]"));
}

/// `dcp proxy --listen 8788` (a port alone) said "invalid socket address syntax".
#[test]
fn a_listen_address_that_is_not_host_port_says_what_it_must_be() {
    let s = Sandbox::new();
    insta::assert_snapshot!(run(&s, &s.data(), &["proxy", "--listen", "8788"]));
}

/// A mistyped `dcp.jsonc` key was ignored with a warning that did not say which key was meant.
#[test]
fn a_mistyped_config_key_names_the_key_it_meant() {
    let s = Sandbox::new();
    let config = s.dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&config).unwrap();
    let text = r#"{"pruneNotifcation": "off", "strategies": {"maskng": {}, "masking": {"keeplast": 3}}}"#;
    std::fs::write(config.join("dcp.jsonc"), text).unwrap();
    let out = dcp_in(&s, &s.data(), &["stats"], std::time::Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&s.dir.path().display().to_string(), "[SANDBOX]");
    assert!(out.status.success(), "an unknown key is a warning: {stderr}");
    insta::assert_snapshot!(stderr);
}

/// `dcp report` on a fresh home wrote a page of zeros that did not say why, nor how to see
/// what dcp would save on the sessions already there.
#[test]
fn the_report_of_a_fresh_home_says_how_to_see_what_dcp_would_save() {
    let s = Sandbox::new();
    let empty = s.dir.path().join("empty");
    let page = s.dir.path().join("report.html");
    let text = run(&s, &empty, &["report", "--out", page.to_str().unwrap()]);
    assert!(text.starts_with("success: true") && text.contains("Report written to [SANDBOX]/report.html"), "{text}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("No state files here yet") && html.contains("<code>dcp replay --all</code>"), "{html}");
}

/// A mistyped flag or value was echoed by clap as typed, colours and all: on a terminal, the
/// escape sequences in it (here a colour and an OSC 52 clipboard write) were acted on.
#[test]
fn a_wrong_flag_is_echoed_without_the_control_characters_it_holds() {
    let s = Sandbox::new();
    let env = [("CLICOLOR_FORCE", std::path::PathBuf::from("1"))];
    for args in [&["replay", "--mode", "x\u{1b}[31mred"][..], &["--bo\u{1b}]52;c;aGVsbG8=\u{7}gus"][..]] {
        let out = crate::support::run_dcp(args, s.dir.path(), &env, std::time::Duration::from_secs(20));
        let text = rendered(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "a raw control character: {text:?}");
        assert!(text.contains("error: "), "{text}");
    }
}

/// `dcp replay --requests FILE` said "cannot create FILE: File exists", as if the file were
/// the problem's answer rather than its cause.
#[test]
fn replay_requests_into_a_file_says_it_needs_a_directory() {
    let s = Sandbox::new();
    let file = s.dir.path().join("requests.txt");
    std::fs::write(&file, "mine").unwrap();
    insta::assert_snapshot!(run(&s, &s.data(), &["replay", "--requests", file.to_str().unwrap()]));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine", "the file is left as it was");
}

/// `dcp stats --help` and `dcp sweep --help` listed `--session <ID>` with no word on what it
/// is, and the README's `dcp sweep [N]` left out that sweep needs it.
#[test]
fn the_session_option_of_stats_and_sweep_says_what_it_is() {
    let s = Sandbox::new();
    for command in ["stats", "sweep"] {
        let text = run(&s, &s.data(), &[command, "--help"]);
        let line = text.lines().find(|l| l.trim_start().starts_with("--session <ID>")).unwrap_or_default();
        assert!(line.contains("`dcp sessions` lists them"), "dcp {command} --help:\n{text}");
    }
}

/// A `DCP_BIN` that is not executable made `dcp doctor` say only "does not run: Permission
/// denied (os error 13)", with no word on what to do.
#[test]
fn a_binary_that_is_not_executable_is_named_with_the_fix() {
    let s = Sandbox::new();
    let bin = s.dir.path().join("dcp-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_dcp"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let root = s.dir.path();
    let config = root.join("home/.config/opencode");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("opencode.json"), r#"{"plugin": ["dcp-opencode"]}"#).unwrap();
    let env = [("HOME", root.join("home")), ("XDG_CONFIG_HOME", root.join("home/.config")), ("DCP_BIN", bin)];
    let data = s.data();
    let args = ["doctor", "--data-dir", data.to_str().unwrap()];
    let out = crate::support::run_dcp(args, &root.join("project"), &env, std::time::Duration::from_secs(20));
    let text = rendered(&out).replace(&root.display().to_string(), "[SANDBOX]");
    let line = text.lines().find(|l| l.contains("plugin runs")).unwrap_or_default();
    assert_eq!(
        line,
        "  FAIL  plugin runs   [SANDBOX]/dcp-copy (from DCP_BIN) does not run: it is not executable (permission \
         denied): `chmod +x` it, or install it again; pruning is off",
        "{text}"
    );
}

/// A mistyped `dcp.jsonc` key was told only in OpenCode's log: in the TUI, `/dcp` said nothing
/// of it, and the user was left to wonder why the setting had no effect.
#[test]
fn the_dcp_help_answer_names_a_mistyped_config_key() {
    let s = Sandbox::new();
    let mut sidecar = crate::support::Sidecar::spawn(&s, r#"{"pruneNotificaton": "off"}"#);
    let project = s.dir.path().join("project");
    sidecar.result("initialize", serde_json::json!({"protocol": 2, "directory": project}));
    let help = sidecar.result("command", serde_json::json!({"sessionID": "ses_a", "arguments": "help"}));
    let text = help["text"].as_str().unwrap().replace(&s.dir.path().display().to_string(), "[SANDBOX]");
    sidecar.shutdown();
    let tail = text.split_once("/dcp help           this help").map(|(_, t)| t).unwrap_or_default();
    assert_eq!(
        tail,
        "\n\nIgnored in dcp's config (`dcp doctor` checks it):\n  [SANDBOX]/home/.config/opencode/dcp.jsonc: \
         unknown key `pruneNotificaton` ignored (did you mean `pruneNotification`?)",
        "{text}"
    );
}
