//! The strategies and the rewrite, on synthetic sessions.

use dcp::config::Config;
use dcp::session::{History, Message, Node};
use dcp::state::{Action, SessionState, Strategy};
use dcp::strategies::{
    self, manual, prunable, sweep, Rules, ERROR_INPUT_PLACEHOLDER, OUTPUT_PLACEHOLDER, WRITE_CONTENT_PLACEHOLDER,
};
use dcp::tokens::{EstimatorChoice, TokenCounter};
use serde_json::json;

use crate::support::{input_of, output_of, SessionBuilder};

/// Runs the automatic strategies, records them, and returns the rewritten messages.
fn auto(messages: &[Message], config: &Config) -> (Vec<Message>, SessionState) {
    let mut state = SessionState::default();
    let rules = Rules::new(config.clone()).unwrap();
    let mut counter = TokenCounter::new(EstimatorChoice::Auto);
    for d in strategies::automatic(&History::new(messages), &state, &rules, &mut counter) {
        state.record(&d.call_id, d.record);
    }
    let mut out = messages.to_vec();
    strategies::apply(&mut out, &state, |_| true);
    (out, state)
}

fn read(path: &str) -> serde_json::Value {
    json!({"filePath": path})
}

/// An output of some 200 tokens that starts with `head`: long enough that its placeholder
/// saves something.
fn long(head: &str) -> String {
    format!("{head}\n{}", "    let value = parse_entry(&buffer[offset..], limit)?;\n".repeat(16))
}

#[test]
fn deduplication_keeps_only_the_newest_output() {
    let messages = SessionBuilder::new()
        .user("look")
        .tool("c1", "read", read("/p/a.py"), &long("a v1"))
        .tool("c2", "read", read("/p/b.py"), &long("b"))
        .tool("c3", "read", json!({"filePath": "/p/a.py", "offset": null}), &long("a v2"))
        .tool("c4", "read", read("/p/a.py"), &long("a v3"))
        .build();
    let (out, state) = auto(&messages, &Config::default());
    assert_eq!(output_of(&out, "c1"), OUTPUT_PLACEHOLDER);
    assert_eq!(output_of(&out, "c3"), OUTPUT_PLACEHOLDER);
    assert_eq!(output_of(&out, "c4"), long("a v3").as_str());
    assert_eq!(output_of(&out, "c2"), long("b").as_str());
    assert_eq!(state.pruned.len(), 2);
    assert!(state.pruned.values().all(|r| r.strategy == Strategy::Deduplication));
    let tally = state.stats.by_strategy[&Strategy::Deduplication];
    assert_eq!(tally.tools, 2);
    assert!(tally.tokens > 0);
}

#[test]
fn deduplication_leaves_protected_tools_and_files_alone() {
    let messages = SessionBuilder::new()
        .user("go")
        .tool("t1", "task", json!({"prompt": "x"}), "sub 1")
        .tool("t2", "task", json!({"prompt": "x"}), "sub 2")
        .tool("e1", "read", read("/p/.env"), "SECRET=1")
        .tool("e2", "read", read("/p/.env"), "SECRET=1")
        .tool("g1", "grep", json!({"pattern": "x"}), "hits")
        .tool("g2", "grep", json!({"pattern": "x"}), "hits")
        .build();
    let mut config = Config::default();
    config.protected_file_patterns = vec!["**/.env".into()];
    config.strategies.deduplication.protected_tools = vec!["grep".into()];
    let (out, state) = auto(&messages, &config);
    assert!(state.pruned.is_empty(), "{:?}", state.pruned);
    assert_eq!(out, messages);
}

#[test]
fn turn_protection_spares_young_calls() {
    let mut config = Config::default();
    config.turn_protection.enabled = true;
    config.turn_protection.turns = 3;
    let young = SessionBuilder::new()
        .user("go")
        .tool("c1", "read", read("/a"), &long("1"))
        .tool("c2", "read", read("/a"), &long("2"))
        .text("done")
        .build();
    let (_, state) = auto(&young, &config);
    assert!(state.pruned.is_empty(), "c1 is 2 steps old, under the 3 protected");
    let old = SessionBuilder::continuing(young).text("more").build();
    let (out, state) = auto(&old, &config);
    assert_eq!(state.pruned.keys().collect::<Vec<_>>(), ["c1"]);
    assert_eq!(output_of(&out, "c1"), OUTPUT_PLACEHOLDER);
}

#[test]
fn supersede_writes_prunes_content_a_later_read_covers() {
    let body = "line\n".repeat(50);
    let messages = SessionBuilder::new()
        .user("write")
        .tool("w1", "write", json!({"filePath": "/p/NOTES.md", "content": body}), "Wrote file successfully.")
        .tool("w2", "write", json!({"filePath": "/p/OTHER.md", "content": body}), "Wrote file successfully.")
        .tool("r1", "read", read("/p/NOTES.md"), "<content>...</content>")
        .tool("w3", "write", json!({"filePath": "/p/NOTES.md", "content": "new"}), "Wrote file successfully.")
        .build();
    let (out, state) = auto(&messages, &Config::default());
    assert_eq!(input_of(&out, "w1")["content"], WRITE_CONTENT_PLACEHOLDER);
    assert_eq!(input_of(&out, "w1")["filePath"], "/p/NOTES.md");
    assert_eq!(output_of(&out, "w1"), "Wrote file successfully.");
    assert_eq!(input_of(&out, "w2")["content"], body.as_str(), "no read of OTHER.md follows");
    assert_eq!(input_of(&out, "w3")["content"], "new", "the read came before this write");
    assert_eq!(state.pruned["w1"].action, Action::WriteContent);
    assert_eq!(state.pruned.len(), 1);

    let mut off = Config::default();
    off.strategies.supersede_writes.enabled = false;
    assert!(auto(&messages, &off).1.pruned.is_empty());
}

#[test]
fn purge_errors_blanks_inputs_of_old_failed_calls() {
    let mut b = SessionBuilder::new()
        .user("go")
        .error("x1", "bash", json!({"command": long("make all"), "timeout": 30, "description": "build"}), "exit 2")
        .tool("ok", "bash", json!({"command": "ls"}), "a b");
    for i in 0..2 {
        b = b.tool(&format!("s{i}"), "glob", json!({"pattern": format!("*{i}")}), "x");
    }
    let young = b.build();
    let mut config = Config::default();
    assert!(auto(&young, &config).1.pruned.is_empty(), "3 steps after the error, under 4");

    config.strategies.purge_errors.turns = 3;
    let (out, state) = auto(&young, &config);
    let input = input_of(&out, "x1");
    assert_eq!(input["command"], ERROR_INPUT_PLACEHOLDER);
    assert_eq!(input["description"], ERROR_INPUT_PLACEHOLDER);
    assert_eq!(input["timeout"], 30, "only string inputs go");
    let part = out[1].parts[1].clone();
    assert_eq!(part["state"]["error"], "exit 2", "the error message stays");
    assert_eq!(state.pruned["x1"].strategy, Strategy::PurgeErrors);

    config.strategies.purge_errors.protected_tools = vec!["bash".into()];
    assert!(auto(&young, &config).1.pruned.is_empty());
}

#[test]
fn outputs_opencode_already_cleared_are_not_pruned_or_counted() {
    let cleared = json!({"status": "completed", "input": {"filePath": "/a"}, "output": "old", "time": {"start": 1, "end": 2, "compacted": 99}});
    let messages = SessionBuilder::new()
        .user("go")
        .tool_state("c1", "read", cleared)
        .tool("c2", "read", read("/a"), "new")
        .build();
    let (out, state) = auto(&messages, &Config::default());
    assert!(state.pruned.is_empty());
    assert_eq!(state.stats.tokens(), 0);
    assert_eq!(out, messages);
}

/// The prunable list with the default listing: every output, absolute paths.
fn listed(messages: &[Message], state: &mut SessionState, rules: &Rules) -> Vec<prunable::Prunable> {
    prunable::prunable(&History::new(messages), state, rules, &prunable::Listing::default())
}

/// The manual session with every call listed, as the agent's tools find it.
struct Listed {
    messages: Vec<Message>,
    rules: Rules,
    state: SessionState,
    counter: TokenCounter,
}

fn listed_session() -> Listed {
    let messages = manual_session();
    let rules = Rules::new(Config::default()).unwrap();
    let mut state = SessionState::default();
    listed(&messages, &mut state, &rules);
    Listed { messages, rules, state, counter: TokenCounter::new(EstimatorChoice::Auto) }
}

fn manual_session() -> Vec<Message> {
    SessionBuilder::new()
        .user("explore")
        .tool("c1", "read", read("/src/parser.py"), "parser source")
        .tool("c2", "bash", json!({"command": "cat data/records.csv"}), "id,name\n1,a")
        .tool("c3", "task", json!({"prompt": "sub"}), "subagent report")
        .tool("c4", "glob", json!({"pattern": "**/*.py"}), "a.py\nb.py")
        .build()
}

#[test]
fn prunable_list_names_calls_with_stable_small_ids() {
    let messages = manual_session();
    let config = Config::default();
    let rules = Rules::new(config.clone()).unwrap();
    let mut state = SessionState::default();
    let list = listed(&messages, &mut state, &rules);
    let lines: Vec<String> = list.iter().map(|p| p.line()).collect();
    assert_eq!(lines, ["1: read, /src/parser.py", "2: bash, cat data/records.csv", "3: glob, **/*.py"]);
    // A new call gets the next id; the old ones keep theirs.
    let more = SessionBuilder::continuing(messages).tool("c5", "read", read("/x"), "x").build();
    let list = listed(&more, &mut state, &rules);
    assert_eq!(list.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
}

#[test]
fn the_list_leaves_out_small_outputs_and_shortens_project_paths() {
    let big = "x ".repeat(400);
    let messages = SessionBuilder::new()
        .user("go")
        .tool("small", "read", read("/proj/a.txt"), "tiny")
        .tool("big", "read", read("/proj/src/big.py"), &big)
        .tool("outside", "read", read("/etc/hosts"), &big)
        .build();
    let config = Config::default();
    let rules = Rules::new(config.clone()).unwrap();
    let mut state = SessionState::default();
    let listing = prunable::Listing { project: Some("/proj"), min_tokens: 200 };
    let list = prunable::prunable(&History::new(&messages), &mut state, &rules, &listing);
    let lines: Vec<String> = list.iter().map(|p| p.line()).collect();
    assert_eq!(lines, ["1: read, src/big.py", "2: read, /etc/hosts"]);
}

fn names(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn one_bad_id_no_longer_voids_a_discard() {
    let Listed { messages, rules, mut state, mut counter } = listed_session();
    let history = History::new(&messages);
    let ctx = manual::Ctx { history: &history, state: &state, rules: &rules };

    let named = names(&["noise", "1", "9", "3"]);
    let applied = manual::discard(&ctx, manual::without_reason(&named), &mut counter);
    assert_eq!(applied.decisions.iter().map(|d| d.call_id.as_str()).collect::<Vec<_>>(), ["c1", "c4"]);
    assert_eq!(applied.problems, ["9: no tool call has this id"]);
    for d in applied.decisions {
        state.record(&d.call_id, d.record);
    }
    let mut out = messages.clone();
    strategies::apply(&mut out, &state, |_| true);
    assert_eq!(output_of(&out, "c1"), OUTPUT_PLACEHOLDER);
    assert_eq!(output_of(&out, "c4"), OUTPUT_PLACEHOLDER);
    assert_eq!(output_of(&out, "c2"), "id,name\n1,a");

    // Naming a pruned call again, or a protected one, says why and prunes the rest.
    let ctx = manual::Ctx { history: &history, state: &state, rules: &rules };
    let applied = manual::discard(&ctx, &names(&["1", "c3", "2"]), &mut counter);
    assert_eq!(applied.decisions.iter().map(|d| d.call_id.as_str()).collect::<Vec<_>>(), ["c2"]);
    assert_eq!(applied.problems, ["1 (read): already pruned", "c3 (task): a protected tool"]);
}

#[test]
fn the_agent_may_name_a_call_left_out_of_the_list() {
    // A small output is not listed (minTokens), so it has no list id; its call id and its
    // message's id still name it.
    let big = "x ".repeat(400);
    let messages = SessionBuilder::new()
        .user("go")
        .tool("small", "read", read("/proj/a.txt"), "tiny")
        .tool("big", "read", read("/proj/big.py"), &big)
        .tool("small2", "glob", json!({"pattern": "*"}), "a.txt")
        .build();
    let rules = Rules::new(Config::default()).unwrap();
    let mut state = SessionState::default();
    let listing = prunable::Listing { project: Some("/proj"), min_tokens: 200 };
    let list = prunable::prunable(&History::new(&messages), &mut state, &rules, &listing);
    assert_eq!(list.iter().map(|p| p.call_id.as_str()).collect::<Vec<_>>(), ["big"]);
    let history = History::new(&messages);
    let ctx = manual::Ctx { history: &history, state: &state, rules: &rules };
    let mut counter = TokenCounter::new(EstimatorChoice::Auto);
    let applied = manual::discard(&ctx, &names(&["small", "m0004", "m0099"]), &mut counter);
    assert_eq!(applied.decisions.iter().map(|d| d.call_id.as_str()).collect::<Vec<_>>(), ["small", "small2"]);
    assert_eq!(applied.problems, ["m0099: no tool call has this id"]);
    assert_eq!(applied.done[1].name, "m0004");
}

#[test]
fn extract_replaces_each_output_with_its_distillation() {
    let Listed { messages, rules, mut state, mut counter } = listed_session();
    let history = History::new(&messages);
    let ctx = manual::Ctx { history: &history, state: &state, rules: &rules };
    // Three ids, two distillations, one of them empty: the one good pair is applied.
    let applied = manual::extract(&ctx, &names(&["1", "2", "3"]), &names(&["parser: 18", " "]), &mut counter);
    assert_eq!(applied.decisions.iter().map(|d| d.call_id.as_str()).collect::<Vec<_>>(), ["c1"]);
    assert_eq!(
        applied.problems,
        ["got 3 ids but 2 distillations: only the first 2 pairs were used", "2: the distillation is empty"]
    );

    let distilled = names(&["parser: 18 section parsers", "120 rows"]);
    let applied = manual::extract(&ctx, &names(&["2", "1"]), &distilled, &mut counter);
    assert!(applied.problems.is_empty(), "{:?}", applied.problems);
    for d in applied.decisions {
        state.record(&d.call_id, d.record);
    }
    let mut out = messages.clone();
    strategies::apply(&mut out, &state, |_| true);
    assert_eq!(output_of(&out, "c2"), "parser: 18 section parsers");
    assert_eq!(output_of(&out, "c1"), "120 rows");
    assert_eq!(state.stats.by_strategy[&Strategy::Extract].tools, 2);
}

#[test]
fn sweep_takes_calls_since_the_last_user_message_or_the_last_n() {
    let messages = SessionBuilder::new()
        .user("one")
        .tool("a", "read", read("/a"), "A")
        .user("two")
        .tool("b", "read", read("/b"), "B")
        .tool("t", "todowrite", json!({"todos": []}), "[]")
        .error("c", "bash", json!({"command": "false"}), "exit 1")
        .build();
    let config = Config::default();
    let rules = Rules::new(config.clone()).unwrap();
    let state = SessionState::default();
    let mut counter = TokenCounter::new(EstimatorChoice::Auto);
    let since = sweep::decide(&messages, &state, &rules, None, &mut counter);
    let ids: Vec<_> = since.iter().map(|d| (d.call_id.as_str(), d.record.action.clone())).collect();
    assert_eq!(ids, [("b", Action::Output), ("c", Action::ErrorInputs)]);
    let last = sweep::decide(&messages, &state, &rules, Some(3), &mut counter);
    assert_eq!(last.iter().map(|d| d.call_id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
}

#[test]
fn the_same_input_gives_byte_identical_output_and_keeps_unknown_fields() {
    let mut messages = SessionBuilder::new()
        .user("go")
        .tool("c1", "read", read("/a"), &long("1"))
        .tool("c2", "read", read("/a"), &long("2"))
        .build();
    messages[1].parts.push(Node::from(json!({"id": "prt_x", "type": "future-part", "payload": {"z": 1, "a": [3, 2]}})));
    let state = messages[1].parts[1].get_mut("state").and_then(Node::as_object_mut).unwrap();
    state.insert("futureField", Node::from(json!({"b": 2, "a": 1})));
    messages[1].info.as_object_mut().unwrap().insert("novel", Node::from(true));
    let (first, _) = auto(&messages, &Config::default());
    let (second, _) = auto(&messages, &Config::default());
    let a = serde_json::to_vec(&first).unwrap();
    let b = serde_json::to_vec(&second).unwrap();
    assert_eq!(a, b);
    let text = String::from_utf8(a).unwrap();
    assert!(text.contains(r#"{"id":"prt_x","type":"future-part","payload":{"z":1,"a":[3,2]}}"#), "{text}");
    assert!(text.contains(r#""futureField":{"b":2,"a":1}"#));
    assert!(text.contains(r#""novel":true"#));
    assert_eq!(output_of(&first, "c1"), OUTPUT_PLACEHOLDER);
}

#[test]
fn placeholders_are_the_ones_dcp_uses() {
    assert_eq!(OUTPUT_PLACEHOLDER, "[Output removed to save context - information superseded or no longer needed]");
    assert_eq!(ERROR_INPUT_PLACEHOLDER, "[input removed due to failed tool call]");
}
