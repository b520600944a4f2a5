//! Misses in `dcp replay`: a step that quotes text dcp hid from the request that produced it.
//! Sessions are written to a real `opencode.db` and replayed by the `dcp` binary.

use dcp::session::Message;
use serde_json::{json, Value};

use crate::support::{dcp, Sandbox, SessionBuilder, DB_SESSION};

/// Masking of every output but the newest, applied on every request; nothing else prunes.
const MASK_ALL_BUT_LAST: &str = r#"{"rewrite": {"mode": "immediate"},
  "strategies": {"deduplication": {"enabled": false}, "supersedeWrites": {"enabled": false},
                 "purgeErrors": {"enabled": false},
                 "masking": {"keepLast": 1, "keepUserTurns": 0, "keepTokens": 0}}}"#;

const SID: &str = "ses_replaymisses0000000001";

/// A source file of 40 distinct lines.
fn source(name: &str) -> Vec<String> {
    (1..=40).map(|i| format!("    let {name}_{i} = compute_{name}(&input[{i}..], limit_{i})?;")).collect()
}

/// A file view as OpenCode's `read` prints it: `00012| line`.
fn opencode_view(lines: &[String]) -> String {
    lines.iter().enumerate().map(|(i, l)| format!("{:05}| {l}\n", i + 1)).collect()
}

/// The same view as Claude Code's reader prints it: `    12→line`.
fn claude_view(lines: &[String]) -> String {
    lines.iter().enumerate().map(|(i, l)| format!("{:>6}→{l}\n", i + 1)).collect()
}

/// An edit whose `oldString` is lines 10 to 12 of `lines`, copied without their numbers and
/// with the indentation turned into a tab.
fn edit_of(lines: &[String]) -> Value {
    let old: Vec<String> = lines[9..12].iter().map(|l| format!("\t{}", l.trim_start())).collect();
    json!({"filePath": "/p/a.rs", "oldString": old.join("\n"), "newString": "    todo!()"})
}

/// Stores `messages` in the sandbox's `opencode.db` as session `sid`.
fn store(sandbox: &Sandbox, sid: &str, messages: &[Message]) {
    let conn = rusqlite::Connection::open(sandbox.data().join("opencode.db")).unwrap();
    conn.execute("CREATE TEMP TABLE copy AS SELECT * FROM session WHERE id = ?1", [DB_SESSION]).unwrap();
    conn.execute("UPDATE copy SET id = ?1, title = 'misses'", [sid]).unwrap();
    conn.execute("INSERT INTO session SELECT * FROM copy", []).unwrap();
    for m in messages {
        let (mid, t) = (m.id(), m.time_created());
        let row = "INSERT INTO message VALUES (?1, ?2, ?3, ?3, ?4)";
        conn.execute(row, rusqlite::params![mid, sid, t, m.info.to_string()]).unwrap();
        for (i, p) in m.parts.iter().enumerate() {
            let row = "INSERT INTO part VALUES (?1, ?2, ?3, ?4, ?4, ?5)";
            let pid = p["id"].as_str().unwrap();
            conn.execute(row, rusqlite::params![pid, mid, sid, t + i as i64, p.to_string()]).unwrap();
        }
    }
}

/// `dcp replay --json` of session `sid` under `config`.
fn replay_json(sandbox: &Sandbox, config: &str, sid: &str) -> Value {
    let cfg = sandbox.dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("dcp.jsonc"), config).unwrap();
    let out = dcp(sandbox, &["replay", "--session", sid, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A session that reads a.rs, then b.rs and c.rs (which push a.rs's view out of the masking
/// window), then `last` (none, or one more step), then edits a.rs quoting its view.
fn session(last: Option<(&str, Value, String)>) -> Vec<Message> {
    let a = source("alpha");
    let mut b = SessionBuilder::new()
        .user("fix alpha")
        .tool("c_a", "read", json!({"filePath": "/p/a.rs"}), &opencode_view(&a))
        .tool("c_b", "read", json!({"filePath": "/p/b.rs"}), &opencode_view(&source("beta")))
        .tool("c_c", "read", json!({"filePath": "/p/c.rs"}), &opencode_view(&source("gamma")));
    if let Some((tool, input, output)) = last {
        b = b.tool("c_last", tool, input, &output);
    }
    b.tool("c_edit", "edit", edit_of(&a), "Edit applied successfully.").build()
}

fn run<'a>(v: &'a Value, mode: &str) -> &'a Value {
    &v["sessions"][0]["modes"][mode]
}

#[test]
fn a_masked_output_quoted_by_a_later_step_is_a_miss_and_is_charged() {
    let s = Sandbox::new();
    let messages = session(None);
    store(&s, SID, &messages);
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let dcp = run(&v, "dcp");
    let edit_step = messages.last().unwrap().id();
    let missed: Vec<&Value> = dcp["per_request"].as_array().unwrap().iter().filter(|r| !r["miss"].is_null()).collect();
    assert_eq!(missed.len(), 1, "{:#}", dcp["per_request"]);
    let miss = missed[0];
    assert_eq!(miss["message_id"], json!(edit_step));
    // The quote came from a.rs's view, masked at that request; b.rs and c.rs were not quoted.
    let read_a = messages[1].parts[1]["id"].as_str().unwrap();
    assert_eq!(miss["miss"]["quoted"], json!([read_a]));
    let hidden = miss["miss"]["hidden_tokens"].as_u64().unwrap();
    assert!(hidden > 300, "{hidden}");
    // Charged: the request again at the cache-read price, the hidden view at the write price.
    let (tokens, charge) = (miss["tokens"].as_u64().unwrap(), miss["miss"]["charge"].as_f64().unwrap());
    assert!((charge - (0.1 * tokens as f64 + 1.25 * hidden as f64)).abs() <= 1.0, "{charge}");
    assert_eq!((dcp["misses"].as_u64(), dcp["miss_share"].as_f64()), (Some(1), Some(0.25)));
    let (cost, charged) = (dcp["cost"].as_f64().unwrap(), dcp["cost_with_misses"].as_f64().unwrap());
    assert!((charged - cost - charge).abs() <= 1.0, "{cost} + {charge} != {charged}");
    // Without pruning nothing is hidden, so nothing is missed.
    assert_eq!(run(&v, "none")["misses"], json!(0));
    assert_eq!(run(&v, "none")["cost_with_misses"], run(&v, "none")["cost"]);
    // The aggregate carries both.
    let aggregate = &v["aggregate"]["dcp"];
    assert_eq!(aggregate["misses"]["total"], json!(0.25));
    assert!(aggregate["cost_with_misses"]["total"].as_f64() > aggregate["cost"]["total"].as_f64());
}

#[test]
fn a_masked_output_quoted_while_still_visible_elsewhere_is_no_miss() {
    let s = Sandbox::new();
    // a.rs is read again, as Claude Code numbers its lines: that view is the newest and stays.
    let again = ("read", json!({"filePath": "/p/a.rs", "offset": 1}), claude_view(&source("alpha")));
    store(&s, SID, &session(Some(again)));
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let dcp = run(&v, "dcp");
    // Masking did hide the first view (the request is not what no pruning sent)...
    assert!(dcp["cost"].as_f64() != run(&v, "none")["cost"].as_f64());
    // ...but the quote is in the view that is still there, once line numbers are dropped.
    assert_eq!(dcp["misses"], json!(0), "{:#}", dcp["per_request"]);
}

#[test]
fn a_quote_matches_across_line_numbers_and_whitespace_but_not_a_different_line() {
    let s = Sandbox::new();
    // The newest output holds the same lines as text with no numbers, but one character differs
    // in every line: nothing of 64 characters is visible, so the quote is still a miss.
    let near: String = source("alpha").iter().map(|l| l.replace("input", "inpvt") + "\n").collect();
    store(&s, SID, &session(Some(("bash", json!({"command": "cat /p/a.rs.orig"}), near))));
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    assert_eq!(run(&v, "dcp")["misses"], json!(1), "{:#}", run(&v, "dcp")["per_request"]);
    // The same lines exactly, in other whitespace: visible, no miss.
    let same: String = source("alpha").iter().map(|l| format!("{}\r\n", l.replace(' ', "  "))).collect();
    let s = Sandbox::new();
    store(&s, SID, &session(Some(("bash", json!({"command": "cat /p/a.rs.orig"}), same))));
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    assert_eq!(run(&v, "dcp")["misses"], json!(0), "{:#}", run(&v, "dcp")["per_request"]);
}

#[test]
fn the_text_report_shows_misses_and_the_charged_cost() {
    let s = Sandbox::new();
    store(&s, SID, &session(None));
    replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let out = dcp(&s, &["replay", "--session", SID]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cost with misses") && text.contains("1 (25.0%)"), "{text}");
    let all = dcp(&s, &["replay", "--all"]);
    let text = String::from_utf8_lossy(&all.stdout);
    assert!(text.contains("Cost with misses charged, ratio to no pruning"), "{text}");
    assert!(text.contains("Misses, share of steps"), "{text}");
}

/// An edit of `path` whose `oldString` is lines `from` to `from + 2` (1-based) of `lines`.
fn edit_at(path: &str, lines: &[String], from: usize) -> Value {
    json!({"filePath": path, "oldString": lines[from - 1..from + 2].join("\n"), "newString": "    todo!()"})
}

/// The requests of `run` whose step was a miss, by index: under issue 23's rule with `field`
/// "miss", under the re-read model with "miss_reread".
fn missed(run: &Value, field: &str) -> Vec<usize> {
    let requests = run["per_request"].as_array().unwrap();
    requests.iter().enumerate().filter(|(_, r)| !r[field].is_null()).map(|(i, _)| i).collect()
}

/// A session whose edits (requests 2, 3 and 4) quote a.rs's view three times, after only
/// the last output is left unmasked.
fn three_quotes_of_a(s: &Sandbox) -> Vec<Message> {
    let a = source("alpha");
    let messages = SessionBuilder::new()
        .user("fix alpha")
        .tool("c_a", "read", json!({"filePath": "/p/a.rs"}), &opencode_view(&a))
        .tool("c_b", "read", json!({"filePath": "/p/b.rs"}), &opencode_view(&source("beta")))
        .tool("c_e1", "edit", edit_at("/p/a.rs", &a, 10), "Edit applied successfully.")
        .tool("c_e2", "edit", edit_at("/p/a.rs", &a, 20), "Edit applied successfully.")
        .tool("c_e3", "edit", edit_at("/p/a.rs", &a, 30), "Edit applied successfully.")
        .tool("c_d", "read", json!({"filePath": "/p/d.rs"}), &opencode_view(&source("delta")))
        .build();
    store(s, SID, &messages);
    messages
}

#[test]
fn a_text_quoted_three_times_after_it_was_hidden_is_three_misses_each_charged_in_full() {
    let s = Sandbox::new();
    let messages = three_quotes_of_a(&s);
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let dcp = run(&v, "dcp");
    let requests = dcp["per_request"].as_array().unwrap();
    // Issue 23's rule, the headline: every step that quotes hidden text is a miss.
    assert_eq!(missed(dcp, "miss"), vec![2, 3, 4], "{:#}", dcp["per_request"]);
    assert_eq!(dcp["misses"], json!(3));
    let read_a = messages[1].parts[1]["id"].as_str().unwrap();
    let mut charges = 0.0;
    for r in &requests[2..5] {
        assert_eq!(r["miss"]["quoted"], json!([read_a]));
        let (tokens, hidden) = (r["tokens"].as_u64().unwrap(), r["miss"]["hidden_tokens"].as_u64().unwrap());
        let charge = r["miss"]["charge"].as_f64().unwrap();
        assert!((charge - (0.1 * tokens as f64 + 1.25 * hidden as f64)).abs() <= 1.0, "{charge}");
        charges += charge;
    }
    // Nothing carried: each miss is charged in full, and the re-read model costs less.
    let (cost, charged) = (dcp["cost"].as_f64().unwrap(), dcp["cost_with_misses"].as_f64().unwrap());
    assert!((charged - cost - charges).abs() <= 2.0, "{cost} + {charges} != {charged}");
    let reread = dcp["cost_with_misses_reread"].as_f64().unwrap();
    assert!(reread < charged, "{reread} >= {charged}");
}

#[test]
fn under_the_re_read_model_a_text_quoted_three_times_after_it_was_hidden_is_one_miss_carried_after() {
    let s = Sandbox::new();
    let messages = three_quotes_of_a(&s);
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let dcp = run(&v, "dcp");
    let requests = dcp["per_request"].as_array().unwrap();
    // Each edit quoted a.rs's masked view; only the first is a miss: the re-read brings it back.
    assert_eq!(dcp["misses_reread"], json!(1), "{:#}", dcp["per_request"]);
    assert_eq!(missed(dcp, "miss_reread"), vec![2], "{:#}", dcp["per_request"]);
    let miss = &requests[2]["miss_reread"];
    let read_a = messages[1].parts[1]["id"].as_str().unwrap();
    assert_eq!(miss["quoted"], json!([read_a]));
    // From the request after the miss on, the re-read view is carried, read from the cache.
    let hidden = miss["hidden_tokens"].as_u64().unwrap();
    let carried: Vec<u64> = requests.iter().map(|r| r["carried"].as_u64().unwrap()).collect();
    assert_eq!(carried, vec![0, 0, 0, hidden, hidden, hidden]);
    let (cost, charged) = (dcp["cost"].as_f64().unwrap(), dcp["cost_with_misses_reread"].as_f64().unwrap());
    let expected = cost + miss["charge"].as_f64().unwrap() + 3.0 * 0.1 * hidden as f64;
    assert!((charged - expected).abs() <= 2.0, "{charged} != {expected}");
}

#[test]
fn under_the_re_read_model_a_different_hidden_text_is_still_a_miss_after_one_was_re_read() {
    let s = Sandbox::new();
    let (a, b) = (source("alpha"), source("beta"));
    let messages = SessionBuilder::new()
        .user("fix alpha and beta")
        .tool("c_a", "read", json!({"filePath": "/p/a.rs"}), &opencode_view(&a))
        .tool("c_b", "read", json!({"filePath": "/p/b.rs"}), &opencode_view(&b))
        .tool("c_c", "read", json!({"filePath": "/p/c.rs"}), &opencode_view(&source("gamma")))
        .tool("c_ea", "edit", edit_at("/p/a.rs", &a, 10), "Edit applied successfully.")
        .tool("c_eb", "edit", edit_at("/p/b.rs", &b, 10), "Edit applied successfully.")
        .build();
    store(&s, SID, &messages);
    let v = replay_json(&s, MASK_ALL_BUT_LAST, SID);
    let dcp = run(&v, "dcp");
    let requests = dcp["per_request"].as_array().unwrap();
    assert_eq!(missed(dcp, "miss_reread"), vec![3, 4], "{:#}", dcp["per_request"]);
    let read_b = messages[2].parts[1]["id"].as_str().unwrap();
    assert_eq!(requests[4]["miss_reread"]["quoted"], json!([read_b]));
}

/// The string values of `v`, depth first.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| strings(i, out)),
        _ => {}
    }
}

/// What a part sends, naively: its inputs (or text), then its result.
fn sent_texts(part: &Value) -> [Vec<String>; 2] {
    let state = &part["state"];
    match part["type"].as_str() {
        Some("text") if part["ignored"] != json!(true) => [vec![part["text"].as_str().unwrap_or("").into()], vec![]],
        Some("reasoning") => [vec![part["text"].as_str().unwrap_or("").into()], vec![]],
        Some("tool") => {
            let mut inputs = Vec::new();
            strings(&state["input"], &mut inputs);
            let result = state["output"].as_str().or(state["error"].as_str()).unwrap_or("").to_string();
            [inputs, vec![result]]
        }
        _ => [vec![], vec![]],
    }
}

fn normalised(text: &str) -> String {
    dcp::strategies::windows::normalise(text).into_iter().collect()
}

/// Whether the step `step` produced by a request that sent `sent` (original `history`) is a
/// miss, by plain substring search over every window: the rule without the index. `restored`:
/// under the re-read model, the hidden texts earlier misses fetched, which count as visible;
/// it gains this step's (empty each time: issue 23's rule).
fn naive_miss(step: &Value, (history, gone): (&[Value], &[Value]), sent: &[Value], restored: &mut Vec<String>) -> bool {
    let (mut visible, mut hidden) = (Vec::new(), Vec::new());
    // Every text of a message a compressed range stands in for is hidden.
    for part in gone.iter().flat_map(|m| m["parts"].as_array().unwrap()) {
        hidden.extend(sent_texts(part).iter().flatten().map(|t| normalised(t)));
    }
    for (m, message) in sent.iter().enumerate() {
        for (p, part) in message["parts"].as_array().unwrap().iter().enumerate() {
            let now = sent_texts(part);
            let was = history.get(m).map(|h| sent_texts(&h["parts"][p]));
            for g in 0..2 {
                visible.extend(now[g].iter().map(|t| normalised(t)));
                if let Some(was) = was.as_ref().filter(|was| was[g] != now[g]) {
                    hidden.extend(was[g].iter().map(|t| normalised(t)));
                }
            }
        }
    }
    let mut quotes = Vec::new();
    for part in step["parts"].as_array().unwrap() {
        match part["type"].as_str() {
            Some("text") => quotes.push(part["text"].as_str().unwrap_or("").to_string()),
            Some("tool") if !["discard", "extract", "compress"].contains(&part["tool"].as_str().unwrap_or("")) => {
                strings(&part["state"]["input"], &mut quotes)
            }
            _ => {}
        }
    }
    let mut hit: Vec<String> = Vec::new();
    for q in quotes.iter().map(|q| normalised(q).chars().collect::<Vec<char>>()) {
        for w in q.windows(64) {
            let w: String = w.iter().collect();
            if visible.iter().chain(restored.iter()).any(|v| v.contains(&w)) {
                continue;
            }
            hit.extend(hidden.iter().filter(|h| h.contains(&w) && !hit.contains(h)).cloned().collect::<Vec<_>>());
        }
    }
    let missed = !hit.is_empty();
    restored.extend(hit);
    missed
}

/// The messages before `step` from the first one `sent` holds on that `sent` does not hold:
/// those compressed ranges stand in for.
fn in_ranges(messages: &[dcp::session::Message], sent: &[Value], step: usize) -> Vec<Value> {
    let ids: Vec<&str> = sent.iter().filter_map(|m| m["info"]["id"].as_str()).collect();
    let first = messages.iter().position(|m| ids.contains(&m.id())).unwrap_or(step);
    let gone = messages[first..step].iter().filter(|m| !ids.contains(&m.id()));
    gone.map(|m| serde_json::to_value(m).unwrap()).collect()
}

#[test]
fn the_windowed_index_finds_the_misses_a_plain_substring_search_finds() {
    use dcp::replay::{self, Mode, RecordedSession, ReplayOptions};
    let mut compared = 0;
    let mut found = 0;
    for name in ["long", "own-steps", "shared", "compress"] {
        let data = dcp::host::DataDir::new(&crate::support::fixtures().join("replay").join(name), &Default::default());
        let info = data.latest().unwrap().unwrap();
        let messages = data.load(&info.id).unwrap().messages;
        for config in ["{}", MASK_ALL_BUT_LAST] {
            let config: dcp::config::Config = serde_json::from_str(config).unwrap();
            let options = ReplayOptions {
                modes: Vec::new(),
                prices: replay::Prices::anthropic(replay::cost::Ttl::Seconds(300)),
                context_limit: Some(200_000),
                overhead: replay::OPENCODE_OVERHEAD,
                config,
                estimator: dcp::tokens::EstimatorChoice::CharsDiv4,
            };
            let session =
                RecordedSession { id: &info.id, parent_id: None, directory: None, messages: &messages, totals: None };
            let replayed = replay::replay(&session, &options).unwrap();
            let run = &replayed.runs.iter().find(|(m, _)| *m == Mode::Dcp).unwrap().1;
            let sent = replay::requests(&session, Mode::Dcp, &options).unwrap();
            let by_id = |id: &str| messages.iter().position(|m| m.id() == id).unwrap();
            let mut restored = Vec::new();
            for (r, bill) in sent.iter().zip(&run.per_request) {
                let step = serde_json::to_value(&messages[by_id(&r.message_id)]).unwrap();
                let sent: Vec<Value> = r.messages.iter().map(|m| serde_json::to_value(m).unwrap()).collect();
                let history: Vec<Value> = sent
                    .iter()
                    .map(|m| {
                        let id = m["info"]["id"].as_str().unwrap_or("");
                        messages.iter().find(|o| o.id() == id).map_or(Value::Null, |o| serde_json::to_value(o).unwrap())
                    })
                    .collect();
                let gone = in_ranges(&messages, &sent, by_id(&r.message_id));
                let naive = naive_miss(&step, (&history, &gone), &sent, &mut Vec::new());
                assert_eq!(bill.miss.is_some(), naive, "{name}: request {} ({})", r.index, r.message_id);
                let reread = naive_miss(&step, (&history, &gone), &sent, &mut restored);
                assert_eq!(bill.miss_reread.is_some(), reread, "{name}: re-read, request {}", r.index);
                compared += 1;
                found += usize::from(naive);
            }
        }
    }
    // The comparison covered misses, not only requests without one.
    assert!(found >= 5 && compared > 100, "{found} misses in {compared} requests");
}
