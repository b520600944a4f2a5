//! What `dcp stats` counts as saved: only what reached the model. A prune whose rewrite waits
//! for the policy is waiting, never saved; the tokens kept out add up, request by request,
//! what the requests the sidecar answered left out; and `dcp report` shows the same figures.

use serde_json::{json, Value};

use crate::support::{dcp, Sandbox, SessionBuilder, Sidecar};

const SID: &str = "ses_test";

/// A session whose first read of `a.py` the second makes obsolete, followed by a big read: the
/// duplicate's rewrite would re-bill everything after it.
pub fn session(extra_steps: usize) -> Vec<Value> {
    let path = json!({"filePath": "/p/a.py"});
    let a = "def a():\n    return 1\n".repeat(200);
    let c = "row,value,more\n".repeat(3000);
    let mut b = SessionBuilder::new()
        .user("look around")
        .tool("a1", "read", path.clone(), &a)
        .tool("a2", "read", path, &a)
        .tool("c1", "read", json!({"filePath": "/p/c.csv"}), &c);
    for i in 0..extra_steps {
        b = b.text(&format!("step {i} done"));
    }
    b.build().into_iter().map(|m| serde_json::to_value(m).unwrap()).collect()
}

/// Sends `requests` requests of the growing session, a second apart; returns the answers.
fn drive(sidecar: &mut Sidecar, requests: usize) -> Vec<Value> {
    drive_session(sidecar, SID, requests)
}

/// The same for session `sid`.
fn drive_session(sidecar: &mut Sidecar, sid: &str, requests: usize) -> Vec<Value> {
    let t0 = 1_800_000_000_000i64;
    (0..requests)
        .map(|i| {
            let params = json!({"sessionID": sid, "now": t0 + 1000 * i as i64, "messages": session(i)});
            sidecar.result("transform", params)
        })
        .collect()
}

fn stats_json(s: &Sandbox) -> Value {
    let out = dcp(s, &["--json", "stats", "--session", SID]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// With the tools offered from the first request, their head costs more than a waiting prune
/// has kept out: `/dcp stats` says what dcp added, never a negative "Kept out".
#[test]
fn what_dcp_added_before_pruning_won_it_back_is_shown_as_added_not_as_a_negative_saving() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(&s, r#"{"rewrite": {"mode": "batched"}, "pruneNotification": "minimal"}"#);
    drive(&mut sidecar, 3);
    let text = sidecar.result("command", json!({"sessionID": SID, "arguments": "stats"}))["text"].clone();
    let text = text.as_str().unwrap();
    assert!(
        text.contains("  Added:           ~") && text.contains(" tokens over 3 requests (dcp's tools)\n"),
        "{text}"
    );
    assert!(text.contains("  Cost added:      ") && text.contains("% over the cost without dcp\n"), "{text}");
    assert!(!text.contains("Kept out:        -") && !text.contains("Cost saved:      -"), "{text}");
    sidecar.shutdown();
}

#[test]
fn a_waiting_prune_is_never_counted_as_saved() {
    let s = Sandbox::new();
    let mut sidecar = Sidecar::spawn(
        &s,
        r#"{"rewrite": {"mode": "batched"}, "pruneNotification": "minimal", "tools": {"settings": {"offer": "paid"}}}"#,
    );
    let answers = drive(&mut sidecar, 3);
    let notice = answers[0]["notify"].as_str().unwrap();
    assert!(notice.starts_with("▣ DCP | waiting: "), "{notice}");
    assert!(!notice.contains('-') && !notice.contains("saved"), "{notice}");
    let text = sidecar.result("command", json!({"sessionID": SID, "arguments": "stats"}))["text"].clone();
    let text = text.as_str().unwrap();
    assert!(text.contains("  Kept out:        ~0 tokens over 3 requests\n"), "{text}");
    assert!(text.contains("  In force:        ~0 per request (0 prunes)\n"), "{text}");
    assert!(text.contains("  Waiting:         ~"), "{text}");
    assert!(
        text.contains("  Cost saved:      0.0% of the cost without dcp\n") && !text.contains("Tokens saved"),
        "{text}"
    );
    sidecar.shutdown();

    let v = stats_json(&s);
    let session = &v["session"];
    assert!(session["waiting_tokens"].as_u64().unwrap() > 100, "{session}");
    assert_eq!(session["waiting_tokens"], session["pruned_tokens"], "{session}");
    assert_eq!((session["in_force_tokens"].as_u64(), session["kept_out_tokens"].as_i64()), (Some(0), Some(0)));
    assert_eq!((session["requests"].as_u64(), session["cost_saved_share"].as_f64()), (Some(3), Some(0.0)));
    // The sandbox's other state files hold no requests: all-time has kept nothing out either.
    let all = &v["all_time"];
    assert_eq!((all["kept_out_tokens"].as_i64(), all["requests"].as_u64()), (Some(0), Some(3)), "{all}");
    assert!(all["waiting_tokens"].as_u64() >= session["waiting_tokens"].as_u64(), "{all}");
}

#[test]
fn the_tokens_kept_out_add_up_what_each_request_left_out() {
    let s = Sandbox::new();
    // The agent's tools wait until paid for, so dcp adds nothing to these requests.
    let mut sidecar =
        Sidecar::spawn(&s, r#"{"rewrite": {"mode": "immediate"}, "tools": {"settings": {"offer": "paid"}}}"#);
    let answers = drive(&mut sidecar, 4);
    let notice = answers[0]["notify"].as_str().unwrap();
    assert!(notice.starts_with("▣ DCP | in force: -"), "{notice}");
    sidecar.shutdown();

    let v = stats_json(&s);
    let session = &v["session"];
    let pruned = session["pruned_tokens"].as_u64().unwrap();
    assert!(pruned > 100, "{session}");
    assert_eq!(session["in_force_tokens"].as_u64(), Some(pruned), "{session}");
    assert_eq!(session["waiting_tokens"].as_u64(), Some(0), "{session}");
    // Applied from the first request on, and nothing added (the agent's tools are not offered
    // yet): four requests, each without the pruned output.
    assert_eq!(session["kept_out_tokens"].as_i64(), Some(4 * pruned as i64), "{session}");
    assert_eq!(session["requests"].as_u64(), Some(4));
    let share = session["cost_saved_share"].as_f64().unwrap();
    let (saved, without) = (session["cost_saved"].as_f64().unwrap(), session["cost_without"].as_f64().unwrap());
    assert!(without > 0.0 && (share - saved / without).abs() < 1e-3, "{session}");
    // The state file keeps each request's context, with and without dcp.
    let file: Value =
        serde_json::from_slice(&std::fs::read(s.state_dir().join(format!("{SID}.json"))).unwrap()).unwrap();
    let trail = file["dcp"]["trail"].as_array().unwrap();
    assert_eq!(trail.len(), 4, "{file}");
    for line in trail {
        let fields: Vec<u64> = line.as_str().unwrap().split(' ').take(3).map(|f| f.parse().unwrap()).collect();
        assert_eq!(fields[1] - fields[2], pruned, "{line}");
    }
    // DCP's keys stay where DCP reads them, and dcp's sit beside them.
    assert_eq!(file["stats"]["totalPruneTokens"].as_u64(), Some(pruned));
    assert_eq!(file["stats"]["keptOutTokens"].as_i64(), Some(4 * pruned as i64));
}

/// The savings count each new message with the counter's per-part cache of outputs (which the
/// count ahead and the strategies share); over a 45-step session, counted cold, warm and after
/// the count ahead slimmed the outputs, it must equal the plain count.
#[test]
fn counting_outputs_through_the_part_cache_equals_counting_them_afresh() {
    use dcp::measure::{measure, measure_cached};
    use dcp::tokens::{EstimatorChoice, TokenCounter};
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages: 150, steps: 45, seed: 5 });
    let mut cached = TokenCounter::new(EstimatorChoice::Auto);
    let plain = TokenCounter::new(EstimatorChoice::Auto);
    let mut messages = session.messages.clone();
    let mut outputs = 0;
    for (step, new) in std::iter::once(&Vec::new()).chain(&session.steps).enumerate() {
        messages.extend(new.iter().cloned());
        for (i, message) in messages.iter().enumerate() {
            let expected = measure(std::slice::from_ref(message), &plain);
            assert_eq!(
                measure_cached(std::slice::from_ref(message), &mut cached),
                expected,
                "step {step}, message {i}"
            );
            outputs += usize::from(expected.tool_outputs > 0);
        }
        // What the count ahead does between requests, with the same cache.
        let mut slimmed = messages.clone();
        for part in slimmed.iter_mut().flat_map(|m| m.parts.iter_mut()) {
            dcp::session::slim::slim_part(part, &mut cached);
        }
        assert_eq!(measure_cached(&slimmed, &mut cached), measure(&messages, &plain), "step {step}, slimmed");
    }
    assert!(outputs > 1000, "few outputs were counted: {outputs}");
}

/// The session whose head dcp has not won back yet, and the one that saved.
pub const UNPAID: &str = "ses_unpaid";
pub const SAVED: &str = "ses_saved";
/// A Claude Code conversation through `dcp proxy`, as the proxy names its state file.
pub const PROXIED: &str = "proxy-claude-code-5e1f0c2a-3b7d4e9a";

/// Which sessions [`sessions_as_users_meet_them`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    /// [`UNPAID`] alone.
    UnpaidAlone,
    /// [`UNPAID`] beside [`SAVED`] and [`PROXIED`].
    UnpaidBesideOthers,
}

/// A sandbox whose state dir holds [`UNPAID`] (dcp's tools offered from the first request, a
/// prune waiting for the policy: dcp has added more than it kept out), and beside others, also
/// [`SAVED`] and [`PROXIED`] (prunes in force from the first request, nothing added).
pub fn sessions_as_users_meet_them(sessions: Sessions) -> Sandbox {
    let s = Sandbox::new();
    let mut unpaid = Sidecar::spawn(&s, r#"{"rewrite": {"mode": "batched"}}"#);
    drive_session(&mut unpaid, UNPAID, 3);
    unpaid.shutdown();
    if sessions == Sessions::UnpaidBesideOthers {
        let config = r#"{"rewrite": {"mode": "immediate"}, "tools": {"settings": {"offer": "paid"}}}"#;
        let mut saved = Sidecar::spawn(&s, config);
        drive_session(&mut saved, SAVED, 6);
        drive_session(&mut saved, PROXIED, 4);
        saved.shutdown();
    }
    for (sid, title) in
        [(UNPAID, "Set up the parser (dcp's tools not paid for yet)"), (SAVED, "Refactor the CSV loader")]
    {
        let file = s.state_dir().join(format!("{sid}.json"));
        let Ok(text) = std::fs::read(&file) else { continue };
        let mut v: Value = serde_json::from_slice(&text).unwrap();
        v["sessionName"] = json!(title);
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    }
    s
}

/// The first place in `text` (a page's text with its tags taken out, or a terminal's) that
/// shows a negative number: a `-` at the start of a word followed by a digit or `~`.
pub fn negative_number(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    (0..chars.len()).find_map(|i| {
        let starts_word = i == 0 || chars[i - 1].is_whitespace() || "(>:".contains(chars[i - 1]);
        let minus = chars[i] == '-' || chars[i] == '\u{2212}';
        let number = chars.get(i + 1).is_some_and(|c| c.is_ascii_digit() || *c == '~');
        (starts_word && minus && number)
            .then(|| chars[i.saturating_sub(40)..(i + 20).min(chars.len())].iter().collect())
    })
}

/// `html`'s text, its style sheet and its tags (and their attributes, where the exact values
/// for machines are) taken out.
pub fn page_text(html: &str) -> String {
    let html = match (html.find("<style>"), html.find("</style>")) {
        (Some(start), Some(end)) => format!("{}{}", &html[..start], &html[end..]),
        _ => html.to_string(),
    };
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Every surface that shows savings (`/dcp stats`, `dcp stats` for a session and all-time,
/// `dcp report`'s page) says what dcp added as added, whether dcp has paid for its head yet
/// or not, alone or beside sessions that saved: none shows a negative saving.
#[test]
fn no_surface_shows_a_negative_saving() {
    for sessions in [Sessions::UnpaidAlone, Sessions::UnpaidBesideOthers] {
        let all = sessions == Sessions::UnpaidBesideOthers;
        let s = sessions_as_users_meet_them(sessions);
        let mut sidecar = Sidecar::spawn(&s, r#"{"rewrite": {"mode": "batched"}}"#);
        let answer = sidecar.result("command", json!({"sessionID": UNPAID, "arguments": "stats"}));
        sidecar.shutdown();
        let mut surfaces = vec![("/dcp stats".to_string(), answer["text"].as_str().unwrap().to_string())];
        let sessions: &[&str] = if all { &[UNPAID, SAVED, PROXIED] } else { &[UNPAID] };
        for args in [vec!["stats"]].into_iter().chain(sessions.iter().map(|sid| vec!["stats", "--session", sid])) {
            let out = dcp(&s, &args);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            surfaces.push((format!("dcp {}", args.join(" ")), String::from_utf8_lossy(&out.stdout).into_owned()));
        }
        let page = s.dir.path().join("report.html");
        let out = dcp(&s, &["report", "--out", page.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        surfaces.push(("dcp report".to_string(), page_text(&std::fs::read_to_string(&page).unwrap())));
        assert!(surfaces[0].1.contains("  Added:           ~"), "{}", surfaces[0].1);
        for (surface, text) in &surfaces {
            assert_eq!(
                negative_number(text),
                None,
                "{surface} (with the others: {all}) shows a negative number:\n{text}"
            );
        }
        if all {
            let proxied = &surfaces.iter().find(|(name, _)| name.ends_with(PROXIED)).unwrap().1;
            assert!(proxied.contains(&format!("Session {PROXIED} (claude-code, through dcp proxy):")), "{proxied}");
        }
        let page = &surfaces.last().unwrap().1;
        // The cards (alone), the table (beside the others) and the session's own sentence.
        let added: &[&str] = if all { &["% added", "; cost added "] } else { &["Added to requests", "Cost added"] };
        assert!(added.iter().all(|a| page.contains(a)), "the page says nothing was added:\n{page}");
    }
}
