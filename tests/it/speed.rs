//! Work proportional to what is new (issue 39, part 7): each figure the sidecar now keeps
//! between requests, or reads once per message, equals what the computation over the whole
//! history it replaced gives, request by request, over generated sessions whose requests
//! append, resend an edited tail, revert and resend everything.

use serde_json::Value;

use dcp::session::{Message, Node};
use dcp::sidecar::mirror::Mirror;
use dcp::strategies::compress;

/// One request of a scenario: how many leading messages the mirror keeps, and the history.
struct Request {
    base: usize,
    history: Vec<Value>,
}

/// The requests of a generated session of `messages` messages and `steps` steps: each step
/// appends its message; every fifth request resends its last three messages, every seventh
/// reverts the last two steps (and the next brings them back), every eleventh resends all.
fn scenario(messages: usize, steps: usize, seed: u64) -> Vec<Request> {
    let session = dcp_testkit::gen::session(&dcp_testkit::gen::SessionSpec { messages, steps, seed });
    let values = |m: &[Message]| -> Vec<Value> { m.iter().map(|m| serde_json::to_value(m).unwrap()).collect() };
    let mut history = values(&session.messages);
    let mut requests = vec![Request { base: 0, history: history.clone() }];
    for (i, step) in session.steps.iter().enumerate() {
        let sent = history.len();
        history.extend(values(step));
        let (base, shown) = match i + 1 {
            s if s % 11 == 0 => (0, history.len()),
            s if s % 7 == 0 => (sent - 2, sent - 2),
            s if s % 5 == 0 => (sent - 3, history.len()),
            _ => (requests.last().map_or(0, |r| r.history.len()).min(sent), history.len()),
        };
        requests.push(Request { base, history: history[..shown].to_vec() });
    }
    requests
}

/// Drives a mirror through `requests`, handing `check` the messages of each.
fn through_mirror(requests: &[Request], mut check: impl FnMut(usize, &Mirror)) {
    let mut mirror = Mirror::default();
    for (i, r) in requests.iter().enumerate() {
        let base = r.base.min(mirror.messages().len());
        let wire: Vec<Node> = r.history[base..].iter().cloned().map(Node::from).collect();
        mirror.resolve(base, wire).unwrap();
        check(i, &mirror);
    }
}

fn sessions() -> [(usize, usize, u64); 3] {
    [(300, 60, 11), (600, 45, 5), (120, 80, 2026)]
}

/// What `compress::tag_sites` finds over the whole history: how many, and the last one's
/// message.
fn tag_sites_read_again(messages: &[Message]) -> (usize, Option<usize>) {
    let sites = compress::tag_sites(messages, 0);
    (sites.len(), sites.last().map(|s| s.message))
}

#[test]
fn the_tag_sites_the_mirror_reads_once_per_message_are_those_of_the_whole_history() {
    let mut seen = 0;
    for (messages, steps, seed) in sessions() {
        through_mirror(&scenario(messages, steps, seed), |i, mirror| {
            assert_eq!(mirror.tag_sites(), tag_sites_read_again(mirror.messages()), "seed {seed}, request {i}");
            seen += mirror.tag_sites().0;
        });
    }
    assert!(seen > 10_000, "the sessions have tag sites to count ({seen})");
}
