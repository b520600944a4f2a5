//! Range compression on synthetic sessions: message ids, ranges, nesting, undo, the state file.

use dcp::session::Message;
use dcp::state::{persist, SessionState};
use dcp::strategies::compress::{self, CompressCall, RangeRequest};
use dcp::tokens::{EstimatorChoice, TokenCounter};
use serde_json::{json, Value};

use crate::support::SessionBuilder;

fn session() -> Vec<Message> {
    let big = "line of output\n".repeat(200);
    SessionBuilder::new()
        .user("explore the project")
        .tool("c1", "read", json!({"filePath": "/p/a.py"}), &big)
        .tool("c2", "bash", json!({"command": "ls"}), "a.py b.py")
        .text("a.py is big")
        .user("now fix b.py")
        .tool("c3", "read", json!({"filePath": "/p/b.py"}), &big)
        .error("c4", "edit", json!({"filePath": "/p/b.py"}), "oldString not found")
        .text("fixed")
        .user("thanks")
        .build()
}

fn range(start: &str, end: &str, summary: &str) -> RangeRequest {
    RangeRequest { start: start.into(), end: end.into(), summary: summary.into() }
}

fn request() -> CompressCall<'static> {
    CompressCall {
        session_id: "ses_test",
        topic: "exploration",
        message_id: Some("msg_x"),
        call_id: Some("call_x"),
        now: 7,
        restore: None,
    }
}

fn run(messages: &[Message], state: &mut SessionState, ranges: &[RangeRequest]) -> compress::Outcome {
    let mut counter = TokenCounter::new(EstimatorChoice::Auto);
    compress::compress(messages, state, &request(), ranges, &mut counter)
}

/// `messages` as the model sees them: tags appended, active blocks in place.
fn rendered(messages: &[Message], state: &SessionState) -> Vec<Value> {
    let mut out: Vec<Value> = messages.iter().map(|m| serde_json::to_value(m).unwrap()).collect();
    for site in compress::tag_sites(messages, 0) {
        let mut target = &mut out[site.message]["parts"][site.part];
        for key in &site.path {
            target = &mut target[key.as_str()];
        }
        *target = json!(format!("{}{}", target.as_str().unwrap(), site.text));
    }
    for span in compress::spans(messages, &state.blocks, |_| true).iter().rev() {
        let block = &state.blocks.by_id[&span.block];
        let summary = compress::summary_message("ses_test", block, &messages[span.from]);
        out.splice(span.from..=span.to, [summary]);
    }
    out
}

fn texts(out: &[Value]) -> String {
    serde_json::to_string(out).unwrap()
}

#[test]
fn message_ids_sit_at_the_end_of_what_the_model_sees_and_never_change() {
    let messages = session();
    let sites = compress::tag_sites(&messages, 0);
    let shown: Vec<(usize, String, String)> =
        sites.iter().map(|s| (s.message, s.path.join("."), s.text.trim().to_string())).collect();
    assert_eq!(shown[0], (0, "text".into(), "<m1>".into()));
    assert_eq!(shown[1], (1, "state.output".into(), "<m2>".into()));
    assert_eq!(shown[6], (6, "state.error".into(), "<m7>".into()));
    assert_eq!(shown[7], (7, "text".into(), "<m8>".into()));
    // A longer history keeps every earlier tag where it was: the prompt prefix is stable.
    let longer = SessionBuilder::continuing(messages.clone()).text("you're welcome").build();
    let again = compress::tag_sites(&longer, 0);
    assert_eq!(again[..sites.len()], sites[..]);
    assert_eq!(compress::tag_sites(&longer, messages.len()).len(), 1);
}

#[test]
fn a_range_becomes_one_summary_message_and_waits_for_the_policy() {
    let messages = session();
    let mut state = SessionState::default();
    let outcome = run(&messages, &mut state, &[range("m0001", "m0004", "explored: a.py is big")]);
    assert_eq!(outcome.made, [1]);
    assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
    let block = &state.blocks.by_id[&1];
    assert!(block.active && !block.applied, "held back until the policy applies it");
    assert_eq!(block.effective_messages, ["msg_0001", "msg_0002", "msg_0003", "msg_0004"]);
    assert_eq!(block.effective_tools, ["c1", "c2"]);
    assert!(block.compressed_tokens > 600 && block.summary_tokens < 40, "{block:?}");
    assert!(block.summary.ends_with("\n<b1>"));
    let out = rendered(&messages, &state);
    assert_eq!(out.len(), messages.len() - 3);
    assert_eq!(out[0]["info"]["role"], "user");
    assert!(out[0]["parts"][0]["text"].as_str().unwrap().contains("explored: a.py is big"));
    assert!(texts(&out[1..]).contains("<m5>"), "later messages keep their ids");
    let answer = dcp::texts::compress_answer(&state, &outcome);
    assert!(answer.starts_with("Compressed 4 messages into b1"), "{answer}");
}

#[test]
fn one_bad_range_does_not_void_the_others() {
    let messages = session();
    let mut state = SessionState::default();
    let outcome = run(
        &messages,
        &mut state,
        &[range("m0001", "m0004", "explored"), range("m5", "m42", "fix"), range("m6", "m7", " ")],
    );
    assert_eq!(outcome.made, [1]);
    assert_eq!(
        outcome.problems,
        [
            "Range 2 (m5..m42): m42 is not in the conversation (the newest message is m9)",
            "Range 3 (m6..m7): the summary is empty"
        ]
    );
    let answer = dcp::texts::compress_answer(&state, &outcome);
    assert!(answer.contains("Not applied: Range 2"), "{answer}");
}

#[test]
fn a_newer_range_consumes_older_blocks_and_decompress_brings_them_back() {
    let messages = session();
    let mut state = SessionState::default();
    run(&messages, &mut state, &[range("m0002", "m0003", "a.py is big")]);
    // Starts inside nothing, ends inside b1: it grows to take b1 whole.
    let outcome = run(&messages, &mut state, &[range("m0001", "m0002", "explored")]);
    assert_eq!(outcome.made, [2]);
    assert_eq!(outcome.notes, ["The range was widened to m1..b1 so that it holds whole compressed blocks."]);
    assert_eq!(state.blocks.by_id[&2].consumed, [1]);
    // Named by its block id, b2 is covered by a third range.
    let outcome = run(&messages, &mut state, &[range("b2", "m0008", "explored and fixed")]);
    assert_eq!(outcome.made, [3]);
    let active: Vec<u32> = state.blocks.active().map(|b| b.id).collect();
    assert_eq!(active, [3]);
    assert_eq!(rendered(&messages, &state).len(), 2, "the summary and the last user message");
    assert_eq!(state.blocks.by_id[&3].direct_messages, ["msg_0004", "msg_0005", "msg_0006", "msg_0007", "msg_0008"]);
    assert_eq!(state.blocks.decompress(3), Some(vec![2]));
    assert_eq!(state.blocks.active().map(|b| b.id).collect::<Vec<_>>(), [2]);
    assert_eq!(rendered(&messages, &state).len(), 7);
}

/// The lab's failing scenario: the agent compressed a range over a finished turn's collapsed
/// block, in force; the new range waited for the policy while the block it took in left at
/// once, so the turn's outputs were sent whole again on every later request (3,143 tokens on
/// each of 29). The range now takes the block's place in force at once.
#[test]
fn a_range_over_a_block_in_force_is_in_force_at_once_and_its_messages_are_not_sent_again() {
    let messages = session();
    let mut state = SessionState::default();
    run(&messages, &mut state, &[range("m0002", "m0003", "a.py is big")]);
    state.blocks.by_id.get_mut(&1).unwrap().applied = true;
    let in_force = |state: &SessionState| compress::spans(&messages, &state.blocks, |b| b.applied).len();
    assert_eq!(in_force(&state), 1);
    run(&messages, &mut state, &[range("m0001", "m0003", "explored")]);
    assert_eq!(state.blocks.by_id[&2].consumed, [1]);
    assert!(state.blocks.by_id[&2].applied, "b2 took b1's place in force");
    assert_eq!(in_force(&state), 1);
    // A range over blocks that wait for the policy waits with them.
    run(&messages, &mut state, &[range("m0006", "m0007", "fixed b.py")]);
    assert!(!state.blocks.by_id[&3].applied);
    run(&messages, &mut state, &[range("m0005", "m0007", "asked and fixed")]);
    assert!(!state.blocks.by_id[&4].applied);
}

#[test]
fn a_compaction_forgets_the_blocks_and_keeps_the_stats() {
    let messages = session();
    let mut state = SessionState::default();
    run(&messages, &mut state, &[range("m0001", "m0004", "explored")]);
    state.stats.total_prune_tokens = 5;
    state.clear_after_compaction(1);
    assert!(state.blocks.is_empty());
    assert_eq!(state.stats.total_prune_tokens, 5);
}

#[test]
fn blocks_survive_the_state_file_in_the_published_layout() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/published-compress-state.json");
    let bytes = std::fs::read(path).unwrap();
    let original: Value = serde_json::from_slice(&bytes).unwrap();
    let state = persist::parse(&bytes).unwrap();
    assert_eq!(state.blocks.active().count(), 1);
    let written: Value = serde_json::from_slice(&persist::render(&state, "t")).unwrap();
    assert_eq!(written["prune"]["messages"], original["prune"]["messages"]);
    assert_eq!(written["prune"]["tools"], original["prune"]["tools"]);
    assert_eq!(written["nudges"], original["nudges"]);

    // A block of dcp's own, held back, reads back the same.
    let messages = session();
    let mut state = persist::parse(&bytes).unwrap();
    run(&messages, &mut state, &[range("m0005", "m0008", "fixed b.py")]);
    let again = persist::parse(&persist::render(&state, "t")).unwrap();
    assert_eq!(again.blocks, state.blocks);
    assert!(!again.blocks.by_id[&2].applied);
}

#[test]
fn compress_arguments_are_read_in_every_form_an_agent_sends() {
    let one = json!({"startId": "m0001", "endId": "m0002", "summary": "s"});
    let expected = vec![range("m0001", "m0002", "s")];
    for args in [
        json!({"topic": "t", "content": [one.clone()]}),
        json!({"topic": "t", "content": one.clone()}),
        json!({"topic": "t", "content": serde_json::to_string(&[one.clone()]).unwrap()}),
        json!({"topic": "t", "startId": "m0001", "endId": "m0002", "summary": "s"}),
        json!({"topic": "t", "from": "m0001", "to": "m0002", "summary": "s"}),
        json!({"topic": "t", "range": "m0001..m0002", "summary": "s"}),
    ] {
        let (topic, ranges) = compress::ranges_from_args(&args);
        assert_eq!((topic.as_str(), &ranges), ("t", &expected), "{args}");
    }
    assert!(compress::ranges_from_args(&json!({"content": 7})).1.is_empty());
}

#[test]
fn a_range_argument_is_read_as_its_from_and_to_ends_and_an_id_alone_as_one_message() {
    // `compress` is registered with one `range`, the `from..to` its description names.
    for (written, from, to) in [
        ("m3..m9", "m3", "m9"),
        (" m3 .. m9 ", "m3", "m9"),
        ("m3...m9", "m3", "m9"),
        ("m3\u{2026}m9", "m3", "m9"),
        ("call_a to call_b", "call_a", "call_b"),
        ("b1", "b1", "b1"),
        ("..m9", "", "m9"),
    ] {
        assert_eq!(compress::range_ends(written), (from.to_string(), to.to_string()), "{written:?}");
    }
    // Explicit ends win over a range given beside them.
    let (_, ranges) = compress::ranges_from_args(&json!({"from": "m1", "to": "m2", "range": "m5..m6", "summary": "s"}));
    assert_eq!(ranges, vec![range("m1", "m2", "s")]);
}

#[test]
fn a_compress_that_grows_its_range_is_refused() {
    // In a lab session a compress made its range bigger (about 21 to about 40 tokens) and was
    // accepted. "a.py is big" (m4) is a few tokens; a summary of it longer than it saves nothing.
    let messages = session();
    let mut state = SessionState::default();
    let long = "The agent looked at a.py, which is big, and said so in a short message of its own.";
    let out = run(&messages, &mut state, &[range("m4", "m4", long)]);
    assert!(out.made.is_empty(), "{:?}", out.problems);
    let said = dcp::texts::compress_answer(&state, &out);
    assert!(said.contains("is not shorter than what it would replace"), "{said}");
    assert!(said.starts_with("Nothing was compressed."), "{said}");
    // The same summary over the range with the big read is shorter than it: it goes.
    let out = run(&messages, &mut state, &[range("m1", "m4", long)]);
    assert_eq!(out.made.len(), 1, "{:?}", out.problems);
}
