//! The meter's held edits against the plain vectors it kept before: the same edits, the same
//! messages reported changed and replaced, and no room held beyond them.

use serde_json::json;

use super::*;

fn edit(m: usize, p: usize, what: &str) -> Edit {
    Edit { m, p, path: vec!["state".into(), "output".into()], value: Some(json!(what)), append: None }
}

/// What the meter held before it kept each message's edits at their exact length: the edits
/// by message, the messages whose edits changed and what they held before.
#[derive(Default)]
struct Reference {
    edits: Vec<Vec<Edit>>,
    replaced: Vec<(usize, Vec<Edit>)>,
}

impl Reference {
    fn hold(&mut self, edits: &EditsAnswer, n: usize) -> Vec<usize> {
        self.edits.resize_with(n, Vec::new);
        let edited: Vec<usize> = match edits {
            EditsAnswer::Same => Vec::new(),
            EditsAnswer::Add(new) => edited_by(new, n),
            EditsAnswer::Keep { before, add } => {
                let before = (*before).min(n);
                let mut edited = edited_by(add, before);
                edited.extend((before..n).filter(|&m| !self.edits[m].is_empty() || add.iter().any(|e| e.m == m)));
                edited
            }
            EditsAnswer::Full(all) => {
                let mut by_message: Vec<Vec<Edit>> = vec![Vec::new(); n];
                all.iter().filter(|e| e.m < n).for_each(|e| by_message[e.m].push(e.clone()));
                (0..n).filter(|&m| self.edits[m] != by_message[m]).collect()
            }
        };
        self.replaced = edited.iter().map(|&m| (m, self.edits[m].clone())).collect();
        match edits {
            EditsAnswer::Same => {}
            EditsAnswer::Add(new) => new.iter().filter(|e| e.m < n).for_each(|e| self.edits[e.m].push(e.clone())),
            EditsAnswer::Keep { before, add } => {
                self.edits.iter_mut().skip(*before).for_each(Vec::clear);
                add.iter().filter(|e| e.m < n).for_each(|e| self.edits[e.m].push(e.clone()));
            }
            EditsAnswer::Full(all) => {
                self.edits.iter_mut().for_each(Vec::clear);
                all.iter().filter(|e| e.m < n).for_each(|e| self.edits[e.m].push(e.clone()));
            }
        }
        edited
    }
}

/// A run of answers as a session gives them: all edits, some added, a changed tail, the same,
/// a history that shrank, and edits past its end.
fn answers() -> Vec<(EditsAnswer, usize)> {
    let full: Vec<Edit> = (0..40).flat_map(|m| (0..m % 3).map(move |p| edit(m, p, "a"))).collect();
    vec![
        (EditsAnswer::Full(full.clone()), 40),
        (EditsAnswer::Add(vec![edit(3, 0, "b"), edit(41, 0, "c"), edit(3, 1, "d"), edit(50, 0, "past")]), 45),
        (EditsAnswer::Same, 45),
        (EditsAnswer::Keep { before: 30, add: vec![edit(5, 2, "e"), edit(33, 0, "f"), edit(33, 1, "g")] }, 44),
        (EditsAnswer::Keep { before: 60, add: vec![edit(43, 0, "h")] }, 44),
        (EditsAnswer::Full(full[10..].to_vec()), 38),
        (EditsAnswer::Full(Vec::new()), 38),
        (EditsAnswer::Add(vec![edit(0, 0, "i")]), 38),
    ]
}

#[test]
fn the_meter_holds_the_same_edits_as_plain_vectors_did() {
    let (mut meter, mut reference) = (Meter::default(), Reference::default());
    for (i, (answer, n)) in answers().iter().enumerate() {
        assert_eq!(meter.hold_edits(answer, *n), reference.hold(answer, *n), "answer {i}: the messages edited");
        assert_eq!(meter.edits, reference.edits, "answer {i}: the edits held");
        assert_eq!(meter.replaced, reference.replaced, "answer {i}: the edits replaced");
    }
}

#[test]
fn the_meter_holds_each_message_s_edits_at_their_exact_length() {
    let mut meter = Meter::default();
    for (i, (answer, n)) in answers().iter().enumerate() {
        meter.hold_edits(answer, *n);
        let roomy: Vec<usize> = (0..*n).filter(|&m| meter.edits[m].capacity() != meter.edits[m].len()).collect();
        assert!(roomy.is_empty(), "answer {i}: messages {roomy:?} hold room for edits they do not have");
    }
}
