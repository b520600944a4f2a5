use serde_json::{json, Value};

use super::{finished_turn, Collapse};
use crate::config::Config;
use crate::session::Message;
use crate::state::blocks::{Block, Blocks};
use crate::strategies::Rules;

/// One step of a scripted session.
enum Step<'a> {
    Prompt(&'a str),
    /// A step that calls `tool` with `input` (a completed call with a long output).
    Call(&'a str, Value),
    /// A step with text only: an answer, or the agent's narration between calls.
    Says(&'a str),
}

fn message(i: usize, role: &str, parts: Vec<Value>) -> Message {
    let info = json!({"id": format!("m{i}"), "sessionID": "s", "role": role, "time": {"created": i}});
    Message::from_values(info, parts)
}

fn session(steps: &[Step<'_>]) -> Vec<Message> {
    let text = |i: usize, t: &str| json!({"id": format!("p{i}"), "type": "text", "text": t});
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| match step {
            Step::Prompt(t) => message(i, "user", vec![text(i, t)]),
            Step::Says(t) => message(i, "assistant", vec![text(i, t)]),
            Step::Call(tool, input) => {
                let state = json!({"status": "completed", "input": input, "output": "let x = 1;\n".repeat(80)});
                let call = format!("c{i}");
                let part = json!({"id": format!("p{i}"), "type": "tool", "callID": call, "tool": tool, "state": state});
                message(i, "assistant", vec![part])
            }
        })
        .collect()
}

/// What the defaults collapse of `messages`, every message weighing `size`.
fn collapsed(messages: &[Message], blocks: &Blocks, size: u64) -> Vec<Collapse> {
    let rules = Rules::new(Config::default()).unwrap();
    finished_turn(messages, &vec![size; messages.len()], blocks, &rules, &|_| false)
}

fn read(path: &str) -> Value {
    json!({"filePath": path})
}

#[test]
fn the_calls_of_a_turn_the_person_has_answered_become_one_line_that_names_them() {
    let messages = session(&[
        Step::Prompt("explain the parser"),
        Step::Call("glob", json!({"pattern": "**/*.py"})),
        Step::Call("read", read("/p/src/parser.py")),
        Step::Says("The parser reads key = value lines."),
        Step::Prompt("now fix div"),
    ]);
    let runs = collapsed(&messages, &Blocks::default(), 200);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!((runs[0].from, runs[0].to), (1, 2), "the calls go, the prompt and the answer stay");
    // The line names each call whole, as the agent may write it again.
    assert!(runs[0].summary.contains("glob `**/*.py`"), "{}", runs[0].summary);
    assert!(runs[0].summary.contains("read `/p/src/parser.py`"), "{}", runs[0].summary);
}

#[test]
fn the_turn_still_going_keeps_its_calls() {
    let messages = session(&[
        Step::Prompt("explain the parser"),
        Step::Call("read", read("/p/src/parser.py")),
        Step::Says("The parser reads key = value lines."),
    ]);
    assert!(collapsed(&messages, &Blocks::default(), 200).is_empty(), "no newer prompt: the turn is not finished");
}

#[test]
fn the_agent_s_text_between_calls_and_its_edits_stay_and_split_the_turn_into_runs() {
    let edit = json!({"filePath": "/p/src/calc.py", "oldString": "a", "newString": "b"});
    let messages = session(&[
        Step::Prompt("fix div"),
        Step::Call("grep", json!({"pattern": "def div"})),
        Step::Says("Found it; reading the file."),
        Step::Call("read", read("/p/src/calc.py")),
        Step::Call("edit", edit),
        Step::Call("bash", json!({"command": "python3 -c 'import calc'"})),
        Step::Says("Fixed."),
        Step::Prompt("thanks; now the docs"),
    ]);
    let runs: Vec<(usize, usize)> =
        collapsed(&messages, &Blocks::default(), 200).iter().map(|r| (r.from, r.to)).collect();
    assert_eq!(runs, [(1, 1), (3, 3), (5, 5)], "the narration (2), the edit (4) and the answer (6) stay");
}

#[test]
fn a_turn_without_an_answer_is_left_alone() {
    let messages = session(&[
        Step::Prompt("explain the parser"),
        Step::Call("read", read("/p/src/parser.py")),
        Step::Prompt("stop; fix div instead"),
    ]);
    assert!(collapsed(&messages, &Blocks::default(), 200).is_empty(), "the person cut the turn short");
}

#[test]
fn calls_already_in_a_range_and_calls_smaller_than_their_line_are_left_alone() {
    let messages = session(&[
        Step::Prompt("explain the parser"),
        Step::Call("read", read("/p/src/parser.py")),
        Step::Says("The parser reads key = value lines."),
        Step::Prompt("now fix div"),
    ]);
    assert!(collapsed(&messages, &Blocks::default(), 5).is_empty(), "a 5-token step is no bigger than the line");
    let mut blocks = Blocks::default();
    let block = Block { id: 1, active: true, effective_messages: vec!["m1".into()], ..Block::default() };
    blocks.by_id.insert(1, block);
    assert!(collapsed(&messages, &blocks, 200).is_empty(), "the agent compressed it already");
}
