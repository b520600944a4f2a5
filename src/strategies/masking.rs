//! Observation masking: the outputs of tool calls beyond the most recent ones become a short
//! placeholder that names the call and tells the model it can run it again.
//!
//! Most of a long agent session is one-off reads and command outputs that no other rule
//! matches (nothing duplicates or supersedes them), and the model rarely looks back at them.
//! Masking them is the lever JetBrains measured on SWE-bench Verified ("The Complexity Trap":
//! half the cost, solve rate unchanged): keep the last few observations whole, replace older
//! ones by a line that says what they were.
//!
//! A call is *beyond the window* once `strategies.masking.keepLast` newer tool calls exist, or
//! `keepUserTurns` user turns began after it, or the newer outputs masking could take weigh
//! `keepTokens` (characters / 4): ten observations are the paper's window, but one OpenCode
//! `read` of a long file weighs as much as a hundred of SWE-agent's windowed views, so the
//! window is also held to what ten ordinary observations weigh. Calls of protected tools (the
//! default list and `strategies.masking.protectedTools`), of protected files, young calls
//! under turn protection, the outputs of the newest model step (the model has not answered them
//! yet), and outputs no longer than their placeholder are never masked.
//!
//! **Deeper when the prompt is written again.** A rewrite re-bills the prompt from its first
//! changed part on (all of it when the cache is cold); masking more outputs inside that tail
//! costs nothing extra on that request and saves on every later one. So when a rewrite goes,
//! it masks down to a narrower window, `strategies.masking.onRewrite` (the last 4 outputs,
//! 3,000 tokens): between rewrites the model sees the last `keepLast` outputs and more, right
//! after one at least the narrower window. Those outputs ride along ([`Window::OnRewrite`]):
//! they never start a rewrite of their own (`crate::policy::choose`), except the volatile ones
//! (below, "What goes first").
//!
//! **What an edit or write said.** `edit` and `write` are protected tools (their outputs are
//! short confirmations the model relies on), but their inputs are what they wrote: a file's
//! whole content, the old and the new text of an edit. Once done, their effect is on disk,
//! and the model reads the file if it needs it again. So beyond the same window (never for
//! the last calls) those long text arguments become a line saying so, their output and file
//! path stay (`strategies.masking.inputs`). Their size counts at half in a rewrite's gain
//! (`crate::policy::Pending::unsure`): such text runs cheaper in tokens than characters / 4.
//!
//! **The working set.** Age is a poor guide to what the agent will quote again: the file it is
//! editing was often read well before the edits that change it, and an edit's `oldString`
//! must match what that read showed. So the latest `read` of a file edited or written within
//! the last `strategies.masking.workingCalls` calls stays whole whatever its age ([`working`]);
//! once the edits stop (or a newer read supersedes it), it is masked like any other output.
//! Edits count in the user turn they were made in: once the person has sent a new prompt, the
//! file the agent was editing is its material again only if it reads or edits it again, and a
//! view carried on into later turns leaves the window only after they have re-billed it.
//! A read of part of a file (`offset`, `limit`) supersedes no read of the whole: the agent
//! looks again at a few lines and goes on editing from the file it saw whole; a write
//! supersedes every read before it (the agent edits the file it wrote, not the one it read).
//! Everything else (earlier views of a file, searches, listings, command outputs) leaves at
//! the window's edge, which lets the window itself be narrow.
//!
//! **What the next steps need** ([`needed`], `crate::strategies::keep`). Two more signals keep
//! an output whole whatever its age: for `strategies.masking.keepNamed` steps after a
//! prompt, the latest views of the files it names (a file's latest whole read or write, and
//! the edits after it; the session's first prompt names only by a path); and a listing, search or written file that one of the
//! agent's last `strategies.masking.keepQuoted` steps quoted.
//!
//! **What goes first.** The outputs the agent quotes again (an edit's `oldString`, a new
//! file built from an old one) are overwhelmingly the latest view of a file; a command's
//! output (a test run, a build log) is read once and acted on, and a view the agent has
//! replaced by a newer call of the same tool on the same file or command line says what is no
//! longer so. Those *volatile* outputs ([`volatile`]) leave at the narrower window
//! (`onRewrite`) and may start a rewrite there; the latest views of files only ride along
//! with a rewrite that goes anyway, and otherwise stay for the whole kept window.
//!
//! **Views of the current turn.** The reads, searches and listings the agent made since the
//! person's latest prompt are what it edits and answers from next ([`VIEW_TOOLS`]): a rewrite
//! that spends the bank leaves them (`crate::policy`, "Spending the bank"), while one that
//! pays or a cold cache takes them like any other output.
//!
//! **A call OpenCode could not run** (its `invalid` stand-in: a tool that was not offered,
//! arguments it refused) says nothing once the model has moved on, and its input repeats the
//! error its output holds: masked, both go, and the placeholder names the tool it asked for.
//!
//! Unlike the other strategies, masking does not record a decision as soon as a call leaves
//! the window: a masked call is recorded only when the cache-aware policy applies it (see
//! `crate::policy`), so the rewrites come in batches that pay for the prompt tail they
//! re-bill, and the state file holds no masking that the model never saw.

use super::{keep, open_in, pruned_ids, Decision, Rules};
use crate::session::{slim, starts_turn, turn_start, History, Message, Node, Object, ToolCall, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::texts::placeholders;
use crate::tokens::TokenCounter;

/// Longest key argument the placeholder quotes, in characters.
const KEY_CHARS: usize = 60;

/// Tools whose text arguments masking takes: what they did is on disk.
const INPUT_TOOLS: &[&str] = &["edit", "write"];
pub use crate::texts::placeholders::MASKED_INPUT as INPUT_PLACEHOLDER;
/// OpenCode's stand-in for a call it could not run (a tool that is not offered, bad
/// arguments): its input holds the tool named and the error its output repeats.
pub const INVALID: &str = "invalid";
use crate::texts::placeholders::MASKED_INVALID_INPUT as INVALID_INPUT_PLACEHOLDER;

/// What a masked output becomes: the call, named by its tool and key argument, and how to
/// get the output back, in as few words as say it (a long session carries dozens). The call's
/// whole input is sent right before it, so a file is named by its name alone and a longer
/// argument is cut. Derived from the part alone, so every request rewrites it to the same
/// bytes.
pub fn placeholder(part: &Node) -> String {
    let call = ToolCall::from_part(0, 0, part, 0);
    let tool = call.as_ref().map_or("tool", |c| c.tool);
    if tool == INVALID {
        let named = call.as_ref().and_then(|c| c.input().get("tool")?.as_str()).map(|t| one_line(t, KEY_CHARS));
        return placeholders::masked_invalid(named.as_deref().unwrap_or("?"));
    }
    let key = call.as_ref().and_then(|c| {
        let key = c.key_argument()?;
        let name = (c.file_path() == Some(key)).then(|| file_name(key)).flatten();
        Some(one_line(name.unwrap_or(key), KEY_CHARS))
    });
    placeholders::masked_output(tool, key.as_deref())
}

/// A call by its tool and key argument, cut to `max` characters, where no input goes with it.
pub fn call_label(call: &ToolCall<'_>, max: usize) -> String {
    let key = call.key_argument().map(|key| one_line(key, max));
    match key {
        Some(key) => format!("{} `{key}`", call.tool),
        None => call.tool.to_string(),
    }
}

/// The last component of `path`, if it has a non-empty one.
fn file_name(path: &str) -> Option<&str> {
    path.trim_end_matches(['/', '\\']).rsplit(['/', '\\']).next().filter(|n| !n.is_empty())
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max).collect();
    cut.push('…');
    cut
}

/// Whether `call` may be masked at all, wherever it stands: completed, not cleared by
/// OpenCode, and of no protected tool or file.
pub fn eligible(call: &ToolCall<'_>, rules: &Rules) -> bool {
    maskable(call, rules) && !rules.config().masking_protects(call.tool)
}

/// What both of masking's takings ask of a call: completed, not cleared by OpenCode, of no
/// protected file.
fn maskable(call: &ToolCall<'_>, rules: &Rules) -> bool {
    call.status == ToolStatus::Completed && !call.compacted && !rules.protects_file(call)
}

/// Whether masking may take `call`'s text arguments wherever it stands: an `edit` or `write`
/// that is [`maskable`] and not named in `strategies.masking.protectedTools`, with
/// `strategies.masking.inputs` on. (Edits and writes are protected by default, but that
/// guards their outputs; only a tool the user named keeps its inputs.)
pub fn inputs_eligible(call: &ToolCall<'_>, rules: &Rules) -> bool {
    let m = &rules.config().strategies.masking;
    m.inputs
        && INPUT_TOOLS.contains(&call.tool)
        && !m.protected_tools.iter().any(|t| t == call.tool)
        && maskable(call, rules)
}

/// The fields of a `tool` input that masking replaces, and what each becomes: the text
/// arguments of an edit or write (a write's content, an edit's old and new text), the error an
/// `invalid` call's output repeats; only those longer than their placeholder (a slimmed
/// string counts as the original it stands for).
pub fn masked_inputs<'a>(tool: &str, input: Option<&'a Object>) -> impl Iterator<Item = (&'a str, &'static str)> {
    let (fields, placeholder): (&[&str], &str) = match tool {
        "edit" => (&["oldString", "newString"], INPUT_PLACEHOLDER),
        "write" => (&["content"], INPUT_PLACEHOLDER),
        INVALID => (&["error"], INVALID_INPUT_PLACEHOLDER),
        _ => (&[], ""),
    };
    let longer = move |v: &Node| v.as_str().is_some_and(|s| slim::chars(s) > placeholder.chars().count());
    input
        .into_iter()
        .flat_map(|i| i.iter())
        .filter(move |(k, v)| fields.contains(k) && longer(v))
        .map(move |(k, _)| (k, placeholder))
}

/// Where a call stands against the window: how many tool calls and user prompts came after
/// it, and how many model steps ago it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Age {
    pub newer_calls: usize,
    pub newer_prompts: u32,
    /// Approximate tokens of the newer outputs masking could take ([`weight`]).
    pub newer_tokens: u64,
    pub steps: u32,
}

/// Which window of recent outputs a call is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The outputs that stay whole between rewrites: `keepLast`, `keepTokens`.
    Kept,
    /// The narrower window a rewrite masks down to when it goes anyway: beyond the kept window
    /// or beyond `onRewrite`'s.
    OnRewrite,
}

/// Whether a call of this age is beyond `window`. A call of the newest model step never is:
/// the model has not answered its output yet (`crate::session::starts_turn`).
pub fn beyond_window(age: Age, rules: &Rules, window: Window) -> bool {
    let m = &rules.config().strategies.masking;
    let beyond = |keep_last: u32, keep_tokens: u32| {
        age.newer_calls >= keep_last as usize || (keep_tokens > 0 && age.newer_tokens >= u64::from(keep_tokens))
    };
    let mut old =
        beyond(m.keep_last, m.keep_tokens) || (m.keep_user_turns > 0 && age.newer_prompts >= m.keep_user_turns);
    if window == Window::OnRewrite {
        old = old || beyond(m.on_rewrite.keep_last, m.on_rewrite.keep_tokens);
    }
    m.enabled && old && age.steps >= rules.turns().max(1)
}

/// What `call`'s output weighs against `keepTokens`: its approximate tokens if masking could
/// take it, else nothing (a protected output stays whatever the budget).
pub fn weight(call: &ToolCall<'_>, rules: &Rules) -> u64 {
    if eligible(call, rules) {
        super::approx_tokens(call.output())
    } else {
        0
    }
}

/// What masking takes of `call` once it is beyond the window, if anything: its output, or the
/// text arguments of an edit or write, when what replaces them is shorter.
pub fn prune(call: &ToolCall<'_>, rules: &Rules, counter: &mut TokenCounter) -> Option<Decision> {
    if eligible(call, rules) {
        Decision::honest(call, Strategy::Masking, Action::Mask, counter)
    } else if inputs_eligible(call, rules) {
        Decision::honest(call, Strategy::Masking, Action::MaskInputs, counter)
    } else {
        None
    }
}

/// The index of the first call of `history` inside `window`: calls before it are beyond it
/// (none when masking is off).
pub fn window_start(history: &History<'_>, rules: &Rules, window: Window) -> usize {
    let prompts = prompts_from(history.messages);
    let calls = &history.calls;
    // Tokens of the outputs after each call, counted from the end.
    let mut newer = vec![0u64; calls.len()];
    let mut sum = 0u64;
    for (i, call) in calls.iter().enumerate().rev() {
        newer[i] = sum;
        sum += weight(call, rules);
    }
    calls
        .iter()
        .enumerate()
        .position(|(i, call)| !beyond_window(age_of(history, &prompts, i, call, newer[i]), rules, window))
        .unwrap_or(calls.len())
}

/// Whether an output of `tool` is no working material once the agent has moved past it (see
/// the module header, "What goes first"): a view `superseded` by a newer call of the same tool
/// on the same key argument (a file read again, a command run again), or a command's output.
pub fn volatile(tool: &str, superseded: bool) -> bool {
    superseded || COMMAND_TOOLS.contains(&tool)
}

/// Tools whose output is a command's: what the agent reads once and acts on, and runs again
/// for a fresh one ([`volatile`]).
pub const COMMAND_TOOLS: &[&str] = &["bash"];

/// Tools whose output is a view of files (a file's text, a search's matches, a listing): what
/// the agent works from while the turn that made it lasts, which a rewrite that spends the bank
/// leaves (`crate::policy::Pending::current_view`).
pub const VIEW_TOOLS: &[&str] = &["read", "grep", "glob", "list"];

/// Whether an output of `tool` is a view of files ([`VIEW_TOOLS`]).
pub fn is_view(tool: &str) -> bool {
    VIEW_TOOLS.contains(&tool)
}

/// Tools whose calls change a file, for the working set ([`working`]).
pub const EDIT_TOOLS: &[&str] = &["edit", "write", "multiedit", "patch"];

/// The most files `strategies.masking.workingFiles` counts.
pub const MAX_WORKING_FILES: usize = 32;

/// Which of `calls` are the agent's working material (see the module header, "The working
/// set"): the view of each file edited or written within the last `workingCalls` calls of the
/// current user turn, or among the last `workingFiles` distinct files read, edited or written,
/// when that view is a read; and what the next steps need ([`needed`]).
pub fn working(history: &History<'_>, rules: &Rules) -> Vec<bool> {
    let (m, calls) = (&rules.config().strategies.masking, &history.calls);
    let mut out = needed(history, rules);
    let recent = calls.len().saturating_sub(m.working_calls as usize);
    let touched = |c: &&ToolCall<'_>| c.status == ToolStatus::Completed && c.file_path().is_some();
    // Edits made before the person's latest prompt belong to a turn that is over.
    let turn_start = turn_start(history.messages).unwrap_or(0);
    let edited: std::collections::HashSet<&str> = calls[recent..]
        .iter()
        .filter(touched)
        .filter(|c| EDIT_TOOLS.contains(&c.tool) && c.message > turn_start)
        .filter_map(|c| c.file_path())
        .collect();
    let files = (m.working_files as usize).min(MAX_WORKING_FILES);
    let mut latest_files: Vec<&str> = Vec::new();
    for path in calls.iter().rev().filter(touched).filter(|c| c.tool == "read" || EDIT_TOOLS.contains(&c.tool)) {
        let path = path.file_path().unwrap_or_default();
        if latest_files.len() == files {
            break;
        }
        if !latest_files.contains(&path) {
            latest_files.push(path);
        }
    }
    for (path, view) in views(calls) {
        let working = edited.contains(path) || latest_files.contains(&path);
        out[view.at] |= calls[view.at].tool == "read" && working;
    }
    out
}

/// Which of `history`'s calls the next steps need now (see the module header, "What the next
/// steps need"): the views of files the latest prompt names, and the outputs in use.
/// The sidecar's index keeps the same incrementally.
pub fn needed(history: &History<'_>, rules: &Rules) -> Vec<bool> {
    let m = &rules.config().strategies.masking;
    let mut signals = keep::Signals::default();
    signals.set_cache(keep::PromptCache::of(rules.sheet()));
    let mut calls = history.calls.iter().peekable();
    for (mi, message) in history.messages.iter().enumerate() {
        signals.message(message);
        while let Some(call) = calls.next_if(|c| c.message == mi) {
            signals.call(call.key_argument(), given_text(call).as_deref());
        }
    }
    let views = views(&history.calls);
    let named = |c: &ToolCall<'_>, at| {
        c.file_path().is_some_and(|p| signals.named_call(at, p, m.keep_named) && shows_file(views.get(p), at, c.tool))
    };
    let calls = history.calls.iter().enumerate();
    calls.map(|(at, c)| named(c, at) || signals.in_use(at, c.tool, m.keep_quoted)).collect()
}

/// Each file's view among `calls` ([`FileView`]).
pub fn views<'a>(calls: &[ToolCall<'a>]) -> std::collections::HashMap<&'a str, FileView> {
    let mut views = std::collections::HashMap::new();
    let done = calls.iter().enumerate().filter(|(_, c)| c.status == ToolStatus::Completed);
    for (i, call) in done.filter(|(_, c)| c.tool == "read" || c.tool == "write") {
        let Some(path) = call.file_path() else { continue };
        views.insert(path, FileView::after(views.get(path), i, call));
    }
    views
}

/// Whether call `at`, of `tool`, shows its file as the agent knows it, given the file's
/// `view`: it is the view, or an edit made after it.
pub fn shows_file(view: Option<&FileView>, at: usize, tool: &str) -> bool {
    let edit = EDIT_TOOLS.contains(&tool) && tool != "write";
    view.is_some_and(|v| v.at == at) || (edit && view.is_none_or(|v| v.at < at))
}

/// The text `call` gave the agent: its output, or an edit's or write's text arguments; `None`
/// when not completed or not known (a slimmed string stands for it).
pub fn given_text(call: &ToolCall<'_>) -> Option<String> {
    let known = |s: &&str| slim::marker(s).is_none();
    if call.status != ToolStatus::Completed {
        return None;
    }
    if !EDIT_TOOLS.contains(&call.tool) {
        return call.output().filter(known).map(str::to_string);
    }
    let input = call.input().as_object()?;
    let fields = ["content", "oldString", "newString"].iter().filter_map(|k| input.get(k)?.as_str());
    Some(fields.filter(known).collect::<Vec<_>>().join("\n"))
}

/// A file's view in the working set ([`working`]): the read or write of it the agent works from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileView {
    /// The call's place among the calls.
    pub at: usize,
    /// Whether the call showed the whole file: a write, or a read without `offset` or `limit`.
    pub whole: bool,
}

impl FileView {
    /// The file's view once `call`, at `at`, has read or written it, given its view `before`:
    /// the latest, but a read of part of the file leaves an earlier whole view.
    pub fn after(before: Option<&FileView>, at: usize, call: &ToolCall<'_>) -> FileView {
        let read_whole = call.tool == "read" && ["offset", "limit"].iter().all(|k| call.input().get(k).is_none());
        let whole = call.tool == "write" || read_whole;
        match before {
            Some(&view) if view.whole && !whole => view,
            _ => FileView { at, whole },
        }
    }
}

/// User prompts at or after each message, counted from the end (one more slot for the end).
fn prompts_from(messages: &[Message]) -> Vec<u32> {
    let mut out = vec![0u32; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        out[i] = out[i + 1] + u32::from(starts_turn(messages, i));
    }
    out
}

fn age_of(history: &History<'_>, prompts: &[u32], i: usize, call: &ToolCall<'_>, newer_tokens: u64) -> Age {
    Age {
        newer_calls: history.calls.len() - 1 - i,
        newer_prompts: prompts[call.message + 1],
        newer_tokens,
        steps: history.current.saturating_sub(call.turn),
    }
}

/// Every call of `history` that masking would take now, ignoring when the rewrite pays: what
/// `dcp context` shows. The sidecar keeps the same rule incrementally
/// (`crate::strategies::incremental`) and leaves the timing to the policy.
pub fn decide_over_history(
    history: &History<'_>,
    state: &SessionState,
    rules: &Rules,
    counter: &mut TokenCounter,
) -> Vec<Decision> {
    if !rules.config().strategies.masking.enabled {
        return Vec::new();
    }
    let pruned = pruned_ids(state);
    let window = window_start(history, rules, Window::Kept);
    let working = working(history, rules);
    // Younger calls are younger by every measure: the window is a suffix.
    history.calls[..window]
        .iter()
        .zip(&working)
        .filter(|(call, working)| !**working && open_in(call, &pruned))
        .map(|(call, _)| call)
        .filter_map(|call| prune(call, rules, counter))
        .collect()
}

#[cfg(test)]
mod tests;
