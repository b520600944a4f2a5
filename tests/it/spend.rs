//! The bank's spending, through the engine as `dcp replay` runs it: a rewrite that spends
//! leaves the views of files the current user turn made (`dcp::policy::takes`), and takes the
//! rest as before.

use std::collections::HashSet;

use dcp::config::Config;
use dcp::replay::{self, Mode, RecordedSession};
use dcp::session::{Message, Node};
use dcp::strategies::masking;

use crate::masking::{generated_sessions, replay_options};

/// The ids of the tool parts of `messages` whose output is masked.
fn masked(messages: &[Message]) -> HashSet<String> {
    let output = |p: &Node| p.get("state")?.get("output")?.as_str().map(str::to_string);
    let id = |p: &Node| p.get("id").and_then(Node::as_str).map(str::to_string);
    let parts = messages.iter().flat_map(|m| &m.parts);
    parts.filter(|p| output(p).is_some_and(|o| o.starts_with("[Output masked"))).filter_map(id).collect()
}

/// The ids of the reads, searches and listings made since the latest user prompt of `messages`.
fn current_views(messages: &[Message]) -> HashSet<String> {
    let start = messages.iter().rposition(dcp::session::is_prompt).unwrap_or(0);
    let tool = |p: &Node| p.get("tool").and_then(Node::as_str).is_some_and(masking::is_view);
    let parts = messages[start..].iter().flat_map(|m| &m.parts);
    parts.filter(|p| tool(p)).filter_map(|p| p.get("id").and_then(Node::as_str).map(str::to_string)).collect()
}

#[test]
fn a_spend_masks_no_read_or_search_of_the_current_turn_and_still_masks_older_outputs() {
    let options = replay_options(Config::default());
    let (mut spends, mut taken) = (0, 0);
    for (seed, i, _, messages) in generated_sessions() {
        let session =
            RecordedSession { id: "ses_test", parent_id: None, directory: None, messages: &messages, totals: None };
        let replayed = replay::replay(&session, &options).unwrap();
        let run = &replayed.runs.iter().find(|(m, _)| *m == Mode::Dcp).unwrap().1;
        let sent = replay::requests(&session, Mode::Dcp, &options).unwrap();
        for (k, bill) in run.per_request.iter().enumerate().skip(1) {
            if bill.applied.as_deref() != Some("spends") {
                continue;
            }
            spends += 1;
            let before = masked(&sent[k - 1].messages);
            let now: HashSet<String> = masked(&sent[k].messages).difference(&before).cloned().collect();
            let views = current_views(&sent[k].messages);
            assert!(
                now.is_disjoint(&views),
                "seed {seed}, session {i}: request {k} spent on a view of the current turn"
            );
            taken += now.len();
        }
    }
    assert!(spends > 0 && taken > 0, "no spend in the generated sessions: the test checks nothing");
}
