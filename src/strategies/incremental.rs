//! The sidecar's incremental view of a session's tool calls: what the automatic strategies
//! and the `<prunable-tools>` list need, kept up to date one message at a time.
//!
//! The batch functions ([`crate::strategies::automatic`], [`prunable::prunable`]) look at every
//! call of a history, which suits the CLI. On a model request only the newest messages are new,
//! so the sidecar keeps an [`Index`] per session and does work in proportion to what is new:
//!
//! * a call becomes a *candidate* when something new makes it prunable: a newer call with the same
//!   signature (deduplication), a later read of the file it wrote (supersede-writes), or its own
//!   error (purge-errors). Candidates wait in a queue until their turn protection expires, and are
//!   then judged by the same per-call rules as the batch strategies;
//! * the list grows at its end as calls leave turn protection, loses a line when its call is
//!   pruned, and is rendered again only when it changed.
//!
//! The index reads messages only once. When the last message it read changed (OpenCode adds
//! an assistant message's results and finish to it between requests), it goes back to before
//! that message and reads it again ([`rewind`]). It is rebuilt from scratch when messages
//! before that changed (OpenCode marked old outputs compacted, a revert) or when the state was
//! reset (a compaction, a merge with another process's file), so it always agrees with the
//! batch functions; `tests/it/index.rs` runs both side by side over generated sessions.

use std::cmp::Reverse;
use std::{collections::BinaryHeap, sync::Arc};

use rustc_hash::FxHashMap as HashMap;

use crate::session::{starts_turn, CallFacts, Message, Role, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::strategies::prunable::{self, Listing};
use crate::strategies::{dedup, keep, masking, purge_errors, supersede_writes, Decision, Rules};
use crate::texts;
use crate::tokens::{Field, TokenCounter};

mod masks;
mod rewind;
mod working;

/// One tool call of the history, as read when its message arrived.
#[derive(Debug)]
struct Call {
    facts: CallFacts,
    message: usize,
    turn: u32,
    /// User prompts up to the call's message.
    prompts: u32,
    /// What its output weighs against masking's `keepTokens` ([`masking::weight`]), read once.
    weight: u64,
}

/// A call masking would take, waiting for the policy to say the rewrite pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskCandidate {
    /// The call's index in the index.
    call: usize,
    /// Tokens masking it saves.
    pub tokens: u64,
    /// It masks the text arguments of an edit or write, not the output.
    pub inputs: bool,
    /// Its output is no working material once a newer one exists ([`masking::volatile`]): it
    /// leaves at the narrower window and may start a rewrite there.
    pub volatile: bool,
}

impl MaskCandidate {
    /// The candidate of call `at` for masking's decision `d`.
    fn of(at: usize, d: &Decision) -> MaskCandidate {
        MaskCandidate {
            call: at,
            tokens: d.record.tokens,
            inputs: d.record.action == Action::MaskInputs,
            volatile: false,
        }
    }
}

/// The start of a masking window: calls before `start` are beyond it.
#[derive(Debug, Default, Clone, Copy)]
struct Cursor {
    start: usize,
    /// The weight of the calls from `start` on.
    kept_weight: u64,
}

/// A line of the prunable list.
#[derive(Debug)]
struct Listed {
    call: usize,
    /// The line, as [`prunable::Prunable::line`] renders it.
    line: String,
    /// Approximate tokens of the output, for the nudge.
    approx: u64,
}

/// What the sidecar knows of one session's tool calls between requests.
#[derive(Debug, Default)]
pub struct Index {
    calls: Vec<Call>,
    by_call_id: HashMap<Arc<str>, usize>,
    /// Messages read so far: a prefix of the history.
    messages: usize,
    /// The current model step: the number of assistant messages read.
    current: u32,
    /// User prompts read.
    prompts: u32,
    /// Where masking's window starts ([`masking::Window::Kept`]).
    window: Cursor,
    /// Where the narrower window a rewrite masks down to starts ([`masking::Window::OnRewrite`]).
    deep: Cursor,
    /// Calls before this one were considered for masking.
    mask_cursor: usize,
    /// Calls beyond the masking window not masked yet, and those of them that are no working
    /// material now ([`masking::working`]).
    masking: Vec<MaskCandidate>,
    ready: Vec<MaskCandidate>,
    /// Masking's decision on each call looked at as a rider ([`Index::mask_riders`]), made
    /// once: a call's part does not change while the index holds it.
    riders: HashMap<usize, Option<MaskCandidate>>,
    /// The calls found pruned: a prune is dropped only by a reset, which rebuilds the index.
    pruned: Vec<bool>,
    /// The slot's changes mark and number of prunes the waiting candidates were last checked
    /// against ([`Index::mask_candidates`]).
    masks_checked: Option<(crate::state::store::ChangesMark, usize)>,
    /// Each file's view, the read of it the agent works from ([`masking::FileView`]).
    file_views: HashMap<String, masking::FileView>,
    /// The latest completed edit or write of each file.
    last_edit: HashMap<String, usize>,
    /// The distinct files the latest completed reads, edits and writes touched, the most
    /// recent first, at most [`masking::MAX_WORKING_FILES`] ([`masking::working`]).
    recent_files: Vec<String>,
    /// The latest completed call of each tool and key argument ([`masking::volatile`]).
    latest_view: HashMap<(Arc<str>, Arc<str>), usize>,
    /// What the latest prompt names and which calls the latest steps quoted ([`keep`]).
    signals: keep::Signals,
    /// The slot's `resets` the index was built against.
    resets: u64,
    /// The newest deduplication-eligible call of each signature.
    newest: HashMap<u64, usize>,
    /// Completed writes of each path that no later read covers yet.
    writes: HashMap<String, Vec<usize>>,
    /// Candidates by the model step from which they may be pruned, each with the call that
    /// made it one (to go back past that call).
    waiting: BinaryHeap<Reverse<(u32, usize, Strategy, usize)>>,
    /// Calls before this one were considered for the prunable list.
    cursor: usize,
    listed: Vec<Listed>,
    /// The rendered list, while it is current.
    text: Option<String>,
    /// How often the index read again messages it had read, rebuilt from scratch or gone back
    /// to the last message (for its readers, logs and tests), and how often it went back.
    rebuilds: u64,
    rewinds: u64,
    /// Where the latest going back went to: the message read again, and the calls before it.
    rewound_to: (usize, usize),
    /// Where the index stood before it read the last message, and what reading that message
    /// overwrote since ([`rewind`]).
    mark: Option<rewind::IndexMark>,
    journal: Vec<rewind::Undo>,
}

impl Index {
    /// Brings the index up to `messages`, of which the first `kept` are unchanged since the
    /// last call; `resets` is the slot's reset count. Returns whether messages it had read
    /// were read again: it went back to the last one, or was rebuilt.
    pub fn sync(&mut self, messages: &[Message], kept: usize, resets: u64, rules: &Rules) -> bool {
        let kept = kept.min(messages.len());
        let (reset, changed) = (resets != self.resets, kept < self.messages);
        let rewound = (changed && !reset).then(|| self.rewind(kept)).flatten();
        if reset || (changed && rewound.is_none()) {
            self.start_over(resets);
        }
        self.read(messages, rules);
        if let Some(before) = rewound {
            if self.rewind_holds(before, rules) {
                (self.rebuilds, self.rewinds) = (self.rebuilds + 1, self.rewinds + 1);
            } else {
                self.start_over(resets);
                self.read(messages, rules);
            }
        }
        reset || changed
    }

    /// Reads the messages after those read so far.
    fn read(&mut self, messages: &[Message], rules: &Rules) {
        for (mi, message) in messages.iter().enumerate().skip(self.messages) {
            if mi + 1 == messages.len() {
                self.mark_before(mi);
            }
            if message.role() == Role::Assistant {
                self.current += 1;
            }
            self.prompts += u32::from(starts_turn(messages, mi));
            self.signals.message(message);
            for facts in CallFacts::of(message) {
                let Some(part) = message.parts.get(facts.part) else { continue };
                let at = self.calls.len();
                let call = ToolCall::from_facts(mi, &facts, part, self.current);
                self.add(at, &call, rules);
                self.note_files(at, &call, &facts);
                self.signals.call(call.key_argument(), masking::given_text(&call).as_deref());
                let weight = masking::weight(&call, rules);
                self.window.kept_weight += weight;
                self.deep.kept_weight += weight;
                let old = self.by_call_id.insert(facts.call_id.clone(), at);
                self.note(|| rewind::Undo::CallId(facts.call_id.clone(), old));
                self.calls.push(Call { facts, message: mi, turn: self.current, prompts: self.prompts, weight });
            }
        }
        self.messages = messages.len();
    }

    /// Notes what call `at` makes prunable.
    fn add(&mut self, at: usize, call: &ToolCall<'_>, rules: &Rules) {
        let s = &rules.config().strategies;
        let turns = rules.turns();
        match call.status {
            ToolStatus::Completed => {
                if s.deduplication.enabled && dedup::eligible(call, rules) {
                    let sig = dedup::signature_hash(call.tool, call.input());
                    let older = self.newest.insert(sig, at);
                    self.note(|| rewind::Undo::Newest(sig, older));
                    if let Some(older) = older {
                        let ready = self.calls[older].turn.saturating_add(turns);
                        self.waiting.push(Reverse((ready, older, Strategy::Deduplication, at)));
                    }
                }
                if s.supersede_writes.enabled {
                    if let Some(path) = call.file_path() {
                        match call.tool {
                            "write" => {
                                self.writes.entry(path.to_string()).or_default().push(at);
                                self.note(|| rewind::Undo::Write(path.to_string()));
                            }
                            "read" => {
                                let Some(writes) = self.writes.remove(path) else { return };
                                for &write in &writes {
                                    let ready = self.calls[write].turn.saturating_add(turns);
                                    self.waiting.push(Reverse((ready, write, Strategy::SupersedeWrites, at)));
                                }
                                self.note(|| rewind::Undo::Covered(path.to_string(), writes));
                            }
                            _ => {}
                        }
                    }
                }
            }
            ToolStatus::Error if s.purge_errors.enabled => {
                let ready = purge_errors::ready_at(call, rules);
                self.waiting.push(Reverse((ready, at, Strategy::PurgeErrors, at)));
            }
            _ => {}
        }
    }

    /// The automatic strategies' new decisions: every candidate whose protection has expired
    /// and that is still open, judged by its strategy's rules. Not yet recorded.
    pub fn decisions(
        &mut self,
        messages: &[Message],
        state: &SessionState,
        rules: &Rules,
        counter: &mut TokenCounter,
    ) -> Vec<Decision> {
        let mut ready = Vec::new();
        while let Some(Reverse((at_turn, at, strategy, _))) = self.waiting.peek().copied() {
            if at_turn > self.current {
                break;
            }
            self.waiting.pop();
            ready.push((strategy, at));
        }
        // The batch order: by strategy, then history order.
        ready.sort_unstable();
        ready.dedup();
        let open: Vec<(Strategy, ToolCall<'_>)> = ready
            .into_iter()
            .filter_map(|(strategy, at)| Some((strategy, view(&self.calls, messages, at)?)))
            .filter(|(_, call)| !call.compacted && !state.pruned.contains_key(call.call_id))
            .collect();
        // Deduplication needs the outputs' tokens: counted together (see
        // `TokenCounter::count_parts`), as a first request decides hundreds at once.
        let outputs: Vec<(&str, &str)> = open
            .iter()
            .filter(|(strategy, _)| *strategy == Strategy::Deduplication)
            .map(|(_, call)| (call.part_id, call.output().unwrap_or("")))
            // A slimmed output holds its count already.
            .filter(|(_, output)| crate::session::slim::marker(output).is_none())
            .collect();
        counter.count_parts(Field::Output, &outputs);
        open.iter()
            .filter_map(|(strategy, call)| match strategy {
                Strategy::Deduplication => dedup::prune(call, counter),
                Strategy::SupersedeWrites => supersede_writes::prune(call, rules, counter),
                Strategy::PurgeErrors => purge_errors::prune(call, rules, counter),
                _ => None,
            })
            .collect()
    }

    /// The user prompts read so far.
    pub fn prompts(&self) -> u32 {
        self.prompts
    }

    /// Where call `call_id` is: its message and part.
    pub fn position(&self, call_id: &str) -> Option<(usize, usize)> {
        let call = &self.calls[*self.by_call_id.get(call_id)?];
        Some((call.message, call.facts.part))
    }

    /// The id of the `at`-th tool call of the history.
    pub fn call_id(&self, at: usize) -> Option<&str> {
        self.calls.get(at).map(|c| &*c.facts.call_id)
    }

    /// How many tool calls the history holds.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Takes prunes recorded since the last call (`recorded`, call ids) off the list, adds the
    /// calls that left turn protection, and returns the rendered list (`None` when empty).
    #[allow(clippy::too_many_arguments)]
    pub fn prunable(
        &mut self,
        messages: &[Message],
        recorded: &[String],
        state: &mut SessionState,
        rules: &Rules,
        listing: &Listing<'_>,
    ) -> Option<&str> {
        for call_id in recorded {
            let Some(&at) = self.by_call_id.get(call_id.as_str()) else { continue };
            if let Ok(i) = self.listed.binary_search_by_key(&at, |l| l.call) {
                self.listed.remove(i);
                self.text = None;
            }
        }
        // Calls beyond the masking window are masked when the policy says so: the list leaves
        // them out (a line is re-sent uncached with every request).
        self.advance_window(rules);
        let turns = rules.turns();
        while self.cursor < self.calls.len() {
            let at = self.cursor;
            let call = &self.calls[at];
            if turns > 0 && self.current.saturating_sub(call.turn) < turns {
                break;
            }
            self.cursor += 1;
            if at < self.window.start {
                continue;
            }
            let Some(view) = view(&self.calls, messages, at) else { continue };
            if state.pruned.contains_key(view.call_id) || !prunable::listable(&view, rules, listing, self.current) {
                continue;
            }
            let approx = super::approx_tokens(view.output());
            let line = prunable::item(&view, state, listing).line();
            self.listed.push(Listed { call: at, line, approx });
            self.text = None;
        }
        let window = self.window.start;
        let before = self.listed.len();
        self.listed.retain(|l| l.call >= window);
        if self.listed.len() != before {
            self.text = None;
        }
        if self.listed.is_empty() {
            return None;
        }
        let listed = &self.listed;
        Some(self.text.get_or_insert_with(|| texts::prunable_list(listed.iter().map(|l| l.line.as_str()))))
    }

    /// The number of calls on the list, and their approximate output tokens.
    pub fn listed(&self) -> (usize, u64) {
        (self.listed.len(), self.listed.iter().map(|l| l.approx).sum())
    }

    /// The approximate output tokens of the calls on the list after call `after` (all of
    /// them for `None`), and the last call on the list: what a list adds to one sent before.
    pub fn listed_after(&self, after: Option<usize>) -> (u64, Option<usize>) {
        let fresh = self.listed.iter().filter(|l| after.is_none_or(|a| l.call > a)).map(|l| l.approx).sum();
        (fresh, self.listed.last().map(|l| l.call))
    }
}

impl Cursor {
    /// This cursor, or `other` if it starts later: a narrower window never starts before a
    /// wider one.
    fn max_start(self, other: Cursor) -> Cursor {
        // `max_by_key` returns its second argument on a tie: this cursor.
        std::cmp::max_by_key(other, self, |c| c.start)
    }
}

/// The view of call `at` over `messages`, if its part is still there.
fn view<'a>(calls: &'a [Call], messages: &'a [Message], at: usize) -> Option<ToolCall<'a>> {
    let call = &calls[at];
    let part = messages.get(call.message)?.parts.get(call.facts.part)?;
    Some(ToolCall::from_facts(call.message, &call.facts, part, call.turn))
}
