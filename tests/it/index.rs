//! The sidecar's incremental index against the batch strategies: fed the same generated
//! session one step at a time, both must decide the same prunes and show the same
//! `<prunable-tools>` list after every step, and the same calls for masking to take (and to
//! take along on a rewrite), with and without turn protection, and after the index has had to
//! start over.

use dcp::config::Config;
use dcp::session::{History, Message};
use dcp::state::SessionState;
use dcp::strategies::incremental::Index;
use dcp::strategies::masking::{self, Window};
use dcp::strategies::{self, prunable, Decision, Rules};
use dcp::texts;
use dcp::tokens::{EstimatorChoice, TokenCounter};
use dcp_testkit::gen::{self, GeneratedSession, SessionSpec};

/// One side: a state, a token counter, and what was recorded since the list last looked.
struct Side {
    state: SessionState,
    counter: TokenCounter,
    recorded: Vec<String>,
}

impl Side {
    fn new() -> Side {
        Side { state: SessionState::default(), counter: TokenCounter::new(EstimatorChoice::Auto), recorded: Vec::new() }
    }

    /// Records `decisions` and returns them as comparable lines.
    fn record(&mut self, decisions: Vec<Decision>) -> Vec<String> {
        let mut lines: Vec<String> = decisions
            .into_iter()
            .filter_map(|d| {
                let line = format!("{} {:?}", d.call_id, d.record);
                self.state.record(&d.call_id, d.record).then(|| {
                    self.recorded.push(d.call_id);
                    line
                })
            })
            .collect();
        lines.sort();
        lines
    }
}

/// Runs both over `spec`'s session and steps; `restart_at` lists steps where the index is
/// told that messages it read have changed, so it must rebuild. Returns the number of steps
/// that pruned something, so a caller can check the run was not vacuous.
fn side_by_side(spec: &SessionSpec, config: &Config, restart_at: &[usize]) -> usize {
    side_by_side_over(&gen::session(spec), config, restart_at)
}

/// The same over a session given whole.
fn side_by_side_over(session: &GeneratedSession, config: &Config, restart_at: &[usize]) -> usize {
    side_by_side_arriving(session, config, restart_at, Arrival::Whole)
}

/// How each step's messages arrive.
#[derive(Clone, Copy, PartialEq)]
enum Arrival {
    Whole,
    /// The step's last message arrives in another form first ([`unfinished`]) and as it is with
    /// the next step, which changes a message the index read.
    Unfinished,
}

/// A form `message` may take before it is finished, one of three by `step`: as in OpenCode,
/// its calls running without their output and its last part still to come; its calls in
/// the other order, each at another place in the history; or with a call more, a second run
/// of its first call, which leaves.
fn unfinished(message: &Message, step: usize) -> Message {
    let mut v = serde_json::to_value(message).unwrap();
    let parts = v["parts"].as_array_mut().unwrap();
    let tool = |p: &&mut serde_json::Value| p["type"] == "tool";
    match step % 3 {
        0 => {
            if parts.len() > 1 {
                parts.pop();
            }
            for p in parts.iter_mut().filter(tool) {
                p["state"]["status"] = "running".into();
                p["state"].as_object_mut().unwrap().remove("output");
            }
        }
        1 => parts.reverse(),
        _ => {
            if let Some(first) = parts.iter_mut().find(tool).map(|p| p.clone()) {
                let mut again = first;
                again["callID"] = format!("{}-again", again["callID"].as_str().unwrap_or("call")).into();
                again["id"] = format!("{}-again", again["id"].as_str().unwrap_or("part")).into();
                parts.push(again);
            }
        }
    }
    serde_json::from_value(v).unwrap()
}

/// Syncs `index` at `step` with the first `kept` of the `indexed` messages it read unchanged
/// (all but the last but one at a `restart`), and checks how it read them again; whether it
/// went back to the last message.
fn sync(
    index: &mut Index,
    messages: &[Message],
    (kept, indexed): (usize, usize),
    restart: bool,
    step: usize,
    rules: &Rules,
) -> bool {
    let (rebuilds, rewinds) = (index.rebuilds(), index.rewinds());
    let rebuilt = index.sync(messages, kept, 0, rules);
    assert_eq!(rebuilt, restart || kept < indexed, "step {step}: read again");
    let went_back = index.rewinds() > rewinds;
    assert_eq!(index.rebuilds() - rebuilds, u64::from(rebuilt), "step {step}: rebuilds");
    assert!(!went_back || !restart, "step {step}: went back past the last message");
    // A message OpenCode finished only gained: going back to it always holds. The other forms
    // may leave a call behind a masking window, and rebuild.
    let opencode = step >= 2 && (step - 1) % 3 == 0;
    if !restart && kept < indexed && opencode {
        assert!(went_back, "step {step}: rebuilt for a message that only gained");
    }
    went_back
}

/// [`side_by_side_over`], each step's messages arriving as `arrival` says.
fn side_by_side_arriving(session: &GeneratedSession, config: &Config, restart_at: &[usize], arrival: Arrival) -> usize {
    let rules = Rules::new(config.clone()).unwrap();
    let listing = prunable::Listing { project: Some("/home/dev/project"), min_tokens: 200 };
    let mut messages: Vec<Message> = session.messages.clone();
    let (mut batch, mut incremental) = (Side::new(), Side::new());
    let mut index = Index::default();
    let mut indexed = 0usize;
    let mut pruning_steps = 0;
    let mut masked_steps = 0;
    let (mut finishing, mut went_back_steps): (Option<Message>, usize) = (None, 0);
    for step in 0..=session.steps.len() {
        let mut kept = indexed;
        if let Some(finished) = finishing.take() {
            *messages.last_mut().unwrap() = finished;
            kept -= 1;
        }
        if step > 0 {
            messages.extend(session.steps[step - 1].iter().cloned());
            if arrival == Arrival::Unfinished {
                let last = messages.last_mut().unwrap();
                finishing = Some(std::mem::replace(last, unfinished(last, step)));
            }
        }
        let restart = restart_at.contains(&step) && step > 0;
        let kept = if restart { indexed.saturating_sub(3) } else { kept };
        went_back_steps += usize::from(sync(&mut index, &messages, (kept, indexed), restart, step, &rules));
        indexed = messages.len();

        let history = History::new(&messages);
        let decisions = strategies::automatic(&history, &batch.state, &rules, &mut batch.counter);
        let expected = batch.record(decisions);
        let decisions = index.decisions(&messages, &incremental.state, &rules, &mut incremental.counter);
        let got = incremental.record(decisions);
        assert_eq!(got, expected, "step {step}: decisions");
        pruning_steps += usize::from(!got.is_empty());
        let got = masks(&mut index, &messages, &mut incremental, &rules);
        assert_eq!(got, batch_masks(&history, &mut batch, &rules), "step {step}: masking");
        masked_steps += usize::from(!got.1.is_empty());

        let list = prunable::prunable(&history, &mut batch.state, &rules, &listing);
        let lines: Vec<String> = list.iter().map(|p| p.line()).collect();
        let expected = (!list.is_empty()).then(|| texts::prunable_list(lines.iter().map(String::as_str)));
        let recorded = std::mem::take(&mut incremental.recorded);
        let got = index.prunable(&messages, &recorded, &mut incremental.state, &rules, &listing).map(str::to_string);
        assert_eq!(got, expected, "step {step}: prunable list");
        assert_eq!(incremental.state.ids, batch.state.ids, "step {step}: ids");
    }
    assert!(masked_steps > 0, "no step had a call to take along on a rewrite");
    if arrival == Arrival::Unfinished {
        let steps = session.steps.len();
        assert!(went_back_steps * 2 > steps, "went back at only {went_back_steps} of {steps} steps");
    }
    pruning_steps
}

/// The calls the index would mask now, and those it would take along on a rewrite.
fn masks(index: &mut Index, messages: &[Message], side: &mut Side, rules: &Rules) -> (Vec<String>, Vec<String>) {
    let candidates = index.mask_candidates(messages, &side.state, None, rules, &mut side.counter).to_vec();
    let riders = index.mask_riders(messages, &side.state, rules, &mut side.counter);
    let ids = |list: &[_]| list.iter().map(|c| index.candidate(c).0.to_string()).collect();
    (ids(&candidates), ids(&riders))
}

/// The same by the batch functions: masking's decisions, and the calls between the kept window
/// and the narrower one that masking could take.
fn batch_masks(history: &History<'_>, side: &mut Side, rules: &Rules) -> (Vec<String>, Vec<String>) {
    let decided = masking::decide_over_history(history, &side.state, rules, &mut side.counter);
    let (kept, narrow) =
        (masking::window_start(history, rules, Window::Kept), masking::window_start(history, rules, Window::OnRewrite));
    let working = masking::working(history, rules);
    let riders = history.calls[kept..narrow]
        .iter()
        .zip(&working[kept..narrow])
        .filter(|(c, working)| !**working && !c.compacted && !side.state.pruned.contains_key(c.call_id))
        .map(|(c, _)| c)
        .filter_map(|c| masking::prune(c, rules, &mut side.counter))
        .map(|d| d.call_id);
    (decided.into_iter().map(|d| d.call_id).collect(), riders.collect())
}

fn spec(messages: usize, steps: usize, seed: u64) -> SessionSpec {
    SessionSpec { messages, steps, seed }
}

#[test]
fn the_index_decides_and_lists_as_the_batch_strategies_do() {
    let pruning = side_by_side(&spec(300, 120, 7), &Config::default(), &[]);
    assert!(pruning > 20, "only {pruning} steps pruned anything");
}

#[test]
fn the_index_agrees_under_turn_protection_and_protected_files() {
    let mut config = Config::default();
    config.turn_protection.enabled = true;
    config.turn_protection.turns = 3;
    config.protected_file_patterns = vec!["**/*.md".into()];
    config.strategies.purge_errors.turns = 6;
    let pruning = side_by_side(&spec(200, 120, 11), &config, &[]);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
}

#[test]
fn the_index_agrees_after_it_starts_over() {
    let pruning = side_by_side(&spec(150, 60, 3), &Config::default(), &[10, 11, 40]);
    assert!(pruning > 5, "only {pruning} steps pruned anything");
}

#[test]
fn the_index_goes_back_to_a_changed_last_message_and_agrees() {
    let pruning =
        side_by_side_arriving(&gen::session(&spec(300, 120, 7)), &Config::default(), &[], Arrival::Unfinished);
    assert!(pruning > 20, "only {pruning} steps pruned anything");
    let (session, _) = with_quotes_and_names(gen::session(&spec(200, 120, 11)));
    let pruning = side_by_side_arriving(&session, &Config::default(), &[40], Arrival::Unfinished);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
}

#[test]
fn the_index_goes_back_to_a_changed_last_message_under_turn_protection() {
    let mut config = Config::default();
    config.turn_protection.enabled = true;
    config.turn_protection.turns = 3;
    config.strategies.purge_errors.turns = 6;
    let session = with_partial_reads(gen::session(&spec(200, 120, 11)));
    let pruning = side_by_side_arriving(&session, &config, &[], Arrival::Unfinished);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
}

#[test]
fn the_index_keeps_the_same_working_files_as_the_batch_masking() {
    let mut config = Config::default();
    config.strategies.masking.working_files = 2;
    config.strategies.masking.working_calls = 0;
    let pruning = side_by_side(&spec(200, 100, 5), &config, &[30]);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
}

/// `session` with about a third of its reads (by call id) made reads of part of their file.
fn with_partial_reads(mut session: GeneratedSession) -> GeneratedSession {
    let part_of = |m: &mut Message| {
        let mut v = serde_json::to_value(&*m).unwrap();
        for p in v["parts"].as_array_mut().into_iter().flatten() {
            let id: u32 = p["callID"].as_str().unwrap_or("").bytes().map(u32::from).sum();
            if p["tool"] == "read" && id.is_multiple_of(3) {
                (p["state"]["input"]["offset"], p["state"]["input"]["limit"]) = (20.into(), 50.into());
            }
        }
        *m = serde_json::from_value(v).unwrap();
    };
    session.messages.iter_mut().chain(session.steps.iter_mut().flatten()).for_each(part_of);
    session
}

/// Reads of part of a file that follow a read of the whole file, in `session`'s order.
fn partial_reads_after_whole(session: &GeneratedSession) -> usize {
    let mut read_whole = std::collections::HashSet::new();
    let mut count = 0;
    for m in session.messages.iter().chain(session.steps.iter().flatten()) {
        let v = serde_json::to_value(m).unwrap();
        for p in v["parts"].as_array().into_iter().flatten().filter(|p| p["tool"] == "read") {
            let input = &p["state"]["input"];
            let path = input["filePath"].as_str().unwrap_or_default().to_string();
            if input.get("offset").is_none() {
                read_whole.insert(path);
            } else if read_whole.contains(&path) {
                count += 1;
            }
        }
    }
    count
}

#[test]
fn the_index_keeps_the_same_whole_reads_as_the_batch_masking_when_reads_of_part_of_a_file_follow() {
    let session = with_partial_reads(gen::session(&spec(200, 100, 9)));
    let partial = partial_reads_after_whole(&session);
    assert!(partial > 10, "only {partial} reads of part of a file follow a read of the whole");
    let pruning = side_by_side_over(&session, &Config::default(), &[25]);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
}

/// A session of one task: a read of work.rs, `greps` searches, then an edit of work.rs.
fn edit_after_searches(greps: usize) -> crate::support::SessionBuilder {
    let long =
        |head: &str| format!("{head}\n{}", "    let value = parse_entry(&buffer[offset..], limit)?;\n".repeat(16));
    let read = serde_json::json!({"filePath": "/p/work.rs"});
    let mut b = crate::support::SessionBuilder::new().user("one task").tool("view", "read", read, &long("w"));
    for i in 0..greps {
        b = b.tool(&format!("g{i}"), "grep", serde_json::json!({"pattern": format!("fn g{i}")}), &long("hit"));
    }
    let edit = serde_json::json!({"filePath": "/p/work.rs", "oldString": "a", "newString": "b"});
    b.tool("e", "edit", edit, "Edit applied successfully.")
}

#[test]
fn the_file_edited_in_an_earlier_user_turn_leaves_the_working_set_at_the_next_prompt() {
    let rules = Rules::new(Config::default()).unwrap();
    let masked_by_both = |messages: &[Message]| {
        let mut index = Index::default();
        index.sync(messages, 0, 0, &rules);
        let (mut batch, mut incremental) = (Side::new(), Side::new());
        let (got, _) = masks(&mut index, messages, &mut incremental, &rules);
        let (expected, _) = batch_masks(&History::new(messages), &mut batch, &rules);
        assert_eq!(got, expected, "the index and the batch masking differ");
        got.contains(&"view".to_string())
    };
    // In the turn of the edit, the view of the file it changed is working material.
    assert!(!masked_by_both(&edit_after_searches(11).build()));
    // One call into the next prompt, well within `workingCalls` of the edit, it is not.
    let next = edit_after_searches(11).text("done").user("next task");
    assert!(masked_by_both(&next.tool("n", "grep", serde_json::json!({"pattern": "fn n"}), "hit").build()));
}

/// `session` with quotes and names: every other edit's old text is a run of the latest search
/// or write before it, and each prompt after the first names the latest file read. Returns it
/// and how many edits quote.
fn with_quotes_and_names(mut session: GeneratedSession) -> (GeneratedSession, usize) {
    let (mut source, mut file, mut edits, mut quoting) = (String::new(), String::new(), 0usize, 0);
    let mut change = |m: &mut Message| {
        let mut v = serde_json::to_value(&*m).unwrap();
        let user = v["info"]["role"] == "user";
        for p in v["parts"].as_array_mut().into_iter().flatten() {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            match p["tool"].as_str().map(str::to_string).as_deref() {
                Some("grep") => source = text(&p["state"]["output"]),
                Some("write") => source = text(&p["state"]["input"]["content"]),
                Some("read") => file = text(&p["state"]["input"]["filePath"]),
                Some("edit") if source.chars().count() > 200 => {
                    edits += 1;
                    if edits % 2 == 0 {
                        p["state"]["input"]["oldString"] = source.chars().skip(40).take(150).collect::<String>().into();
                        quoting += 1;
                    }
                }
                _ => {}
            }
            if user && p["type"] == "text" && !file.is_empty() {
                let name = file.rsplit('/').next().unwrap_or_default().to_string();
                p["text"] = format!("{} Then look at {name} again.", p["text"].as_str().unwrap_or_default()).into();
            }
        }
        *m = serde_json::from_value(v).unwrap();
    };
    session.messages.iter_mut().chain(session.steps.iter_mut().flatten()).for_each(&mut change);
    (session, quoting)
}

#[test]
fn the_index_keeps_what_the_next_steps_need_as_the_batch_masking_does() {
    let (session, quoting) = with_quotes_and_names(gen::session(&spec(200, 120, 11)));
    assert!(quoting > 5, "only {quoting} edits quote a search or a write");
    let all: Vec<Message> = session.messages.iter().chain(session.steps.iter().flatten()).cloned().collect();
    let rules = Rules::new(Config::default()).unwrap();
    let needed = masking::needed(&History::new(&all), &rules).iter().filter(|n| **n).count();
    let history = History::new(&all);
    let prompts = all.iter().filter(|m| dcp::session::is_prompt(m)).count();
    assert!(prompts > 1 && history.calls.len() > 100, "{prompts} prompts");
    let pruning = side_by_side_over(&session, &Config::default(), &[40]);
    assert!(pruning > 10, "only {pruning} steps pruned anything");
    // The session ends with something the next steps need, or an earlier step had: the
    // signals are not vacuous over the run.
    let ever: usize = (1..=session.steps.len())
        .step_by(4)
        .map(|k| {
            let prefix: Vec<Message> =
                session.messages.iter().chain(session.steps[..k].iter().flatten()).cloned().collect();
            masking::needed(&History::new(&prefix), &rules).iter().filter(|n| **n).count()
        })
        .sum();
    assert!(ever + needed > 5, "the rules kept almost nothing: {ever}");
}
