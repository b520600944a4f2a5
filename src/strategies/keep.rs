//! What the next steps are likely to need, read from what dcp knows when a rewrite is decided:
//! the files the person's latest prompt names, and the outputs the agent's latest steps quoted.
//! Masking leaves both whole (`crate::strategies::masking`, "What the next steps need"), and a
//! finished turn's line leaves the views of named files (`crate::strategies::turns`).
//!
//! **Named by the person.** A follow-up prompt (any prompt after the session's first) that
//! names a file, by its path or its name, or a directory, by two or more components of its
//! path, asks about those files: their latest views (a file's latest whole read or write, and
//! the edits after it) stay whole for that turn ([`Names`]). A directory keeps the views of
//! files at most [`DIR_DEPTH`] levels below it, so a prompt that names the project's root does
//! not keep every file the agent ever read. The session's first prompt counts only for the
//! files it names by a path of two or more components (`src/parser.py`, an absolute path): in
//! a continuous run it is the whole task, and its bare names and directories name most of what
//! the agent will read, which kept costs more than the misses it saves (docs/results/keep.md);
//! but a task that gives a file's path (a subagent told which files to change) sends the agent
//! back to that file's text for its first steps (docs/results/misses.md). A follow-up prompt
//! that invokes a slash command (`/build-with-claude ...`) names the files of that skill
//! (`skills/build-with-claude/...`) that an earlier turn read ([`Signals::named_call`]): the
//! agent goes back to the references it read when the skill last ran.
//!
//! **In use.** An output that one of the agent's last `strategies.masking.keepQuoted` steps
//! quoted (an edit's `oldString` taken from a read, a path taken from a listing, a file built
//! from another) is what the agent is working from: it is likely quoted again, and masking it
//! would make the agent fetch it back. Only the newest text that holds a quote counts as its
//! source (a newer read of the same lines is what the agent copied from), and an argument an
//! earlier call passed as its key argument (a path read again, a command run again) quotes no
//! output: the request carries it in that call's arguments, which are never masked. A command's output (`masking::COMMAND_TOOLS`) is
//! read once and acted on, and is run again for a fresh one, so it is never kept in use. A
//! read is kept in use only in the current turn of a session the person has prompted again
//! ([`Signals::in_use`]), and there from the first step that quotes it to the end of the turn:
//! the agent builds the next files from the one it just read (a new component, then the pages,
//! from the app they replace), with steps between that quote it not, while in a run of one
//! prompt a read kept while quoted costs more than it saves (docs/results/keep.md).
//!
//! **Without a prompt cache** ([`PromptCache::Off`]: a provider that re-bills every request
//! whole) the two rules that keep a text longest, a read in use to the end of its turn and a
//! follow-up slash command's skill files (which a finished turn's line then leaves out for
//! good), are off: there a kept text costs its whole size on every request and taking it
//! costs nothing, so keeping it pays only if it is quoted on the very next steps
//! (docs/results/misses.md).
//!
//! How quotes are found. Each text is normalised as `dcp replay` does for its misses (no
//! line-number prefixes, whitespace runs as one space), cut into [`WINDOW`]-character windows
//! and hashed. An output is *winnowed* ([`Prints::of`]): of every [`WINNOW`] consecutive
//! window hashes the smallest is kept, about `2 / (WINNOW + 1)` of them. A step's quotes keep
//! every window, so a quote that shares a run of `WINDOW + WINNOW - 1` characters with an
//! output holds a kept hash of it. The sidecar's mirror
//! slims outputs once counted (`crate::session::slim`), so the hashes of a call are taken
//! when it is first read and held only while it is among the last [`TRACK`] calls; a call
//! first read already slimmed (a history that arrived as one long line) is never in use.

use rustc_hash::FxHashSet;

use super::windows::normalise;
use crate::session::{is_prompt, slim, str_field, Message, Node, Role};

/// How many characters a quote must share with a text (as `dcp replay` counts misses).
pub use super::windows::WINDOW;

/// Window hashes winnowed together: a shared run of `WINDOW + WINNOW - 1` characters is found.
pub const WINNOW: usize = 16;

/// The calls whose hashes are held: a quote of an older output is not looked for.
pub const TRACK: usize = 40;

/// The most hashes held for one text (an output's smallest, a step's first): a long text is
/// sampled.
const MAX_PRINTS: usize = 1 << 15;

/// How many levels below a named directory its files count as named.
pub const DIR_DEPTH: usize = 2;

/// The tools whose text masking keeps while it is in use: listings and searches (the agent
/// walks through their paths and lines), and written files (the agent edits what it wrote).
/// A read is left out: it is most often big, and kept while it is quoted it stays deep in the
/// prompt, where taking it later re-bills all that follows (docs/results/keep.md); the file
/// being edited keeps its read through the working set (`crate::strategies::masking`). A
/// command's output is read once and acted on.
pub const IN_USE_TOOLS: &[&str] = &["glob", "grep", "list", "write"];

/// dcp's own tools: what the agent passes them quotes nothing it works from.
const DCP_TOOLS: &[&str] = &["discard", "extract", "compress"];

/// The files and directories a prompt names: words that look like a path or a file name, as
/// written (`~/` and `./` dropped), lower-cased.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    files: Vec<String>,
    dirs: Vec<String>,
    /// The skill directories of the slash commands it invokes (`/build-with-claude`:
    /// `skills/build-with-claude`), which name only files of earlier turns ([`Signals::named_call`]).
    skills: Vec<String>,
}

impl Names {
    /// What `text` names: a word whose last component has an extension is a file; a word of
    /// two or more path components without one is a directory.
    pub fn of(text: &str) -> Names {
        let mut names = Names::default();
        for word in text.split(|c: char| c.is_whitespace() || "`'\"()[]{}<>,;:!?*|=".contains(c)) {
            let word = word.trim_matches(|c: char| c == '.' || c == '-');
            let word = word.strip_prefix("~/").or_else(|| word.strip_prefix("./")).unwrap_or(word);
            if word.len() < 3 || word.contains("://") {
                continue;
            }
            let lower = comparable(word);
            let last = lower.rsplit('/').next().unwrap_or("");
            let (list, name) = if has_extension(last) {
                (&mut names.files, lower)
            } else {
                let dir = lower.trim_matches('/').to_string();
                match (dir.contains('/'), lower.starts_with('/') && !dir.is_empty()) {
                    (true, _) => (&mut names.dirs, dir),
                    // A slash command (`/build-with-claude`) names its skill's files.
                    (false, true) => (&mut names.skills, format!("skills/{dir}")),
                    (false, _) => continue,
                }
            };
            if !list.contains(&name) {
                list.push(name);
            }
        }
        names
    }

    /// What a session's first prompt names ([`Signals::named`]): only its files named by a
    /// path of two or more components.
    pub fn by_path(mut self) -> Names {
        self.files.retain(|f| f.contains('/'));
        self.dirs.clear();
        self.skills.clear();
        self
    }

    /// Whether `path` is named: a named file is the path or its last components (a file name
    /// alone names a file of that name anywhere), a named directory holds it at most
    /// [`DIR_DEPTH`] levels down.
    pub fn names(&self, path: &str) -> bool {
        let path = comparable(path);
        let ends = |n: &str| path == n || path.ends_with(&format!("/{n}"));
        self.files.iter().any(|n| ends(n)) || self.dirs.iter().any(|d| under(&path, d))
    }

    /// Whether `path` is a file of a skill the prompt invokes, at most [`DIR_DEPTH`] levels
    /// below its directory.
    pub fn in_skill(&self, path: &str) -> bool {
        let path = comparable(path);
        self.skills.iter().any(|d| under(&path, d))
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty() && self.skills.is_empty()
    }
}

/// `path` as names are compared with it: lower case, with `/` between its components.
fn comparable(path: &str) -> String {
    path.to_lowercase().replace('\\', "/")
}

/// Whether `path` lies in directory `dir` (whole components) at most [`DIR_DEPTH`] levels down.
fn under(path: &str, dir: &str) -> bool {
    let needle = format!("{dir}/");
    let mut from = 0;
    while let Some(found) = path[from..].find(&needle) {
        let at = from + found;
        if at == 0 || path[..at].ends_with('/') {
            return path[at + needle.len()..].matches('/').count() < DIR_DEPTH;
        }
        from = at + 1;
    }
    false
}

/// Whether `name` ends with an extension: a dot, then one to eight letters or digits, one a
/// letter (`v1.5` is no file).
fn has_extension(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else { return false };
    !stem.is_empty()
        && (1..=8).contains(&ext.len())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
        && ext.chars().any(|c| c.is_ascii_alphabetic())
}

/// A text's winnowed window hashes, sorted (see the module header).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prints(Box<[u32]>);

impl Prints {
    /// The prints of `text`.
    pub fn of(text: &str) -> Prints {
        let mut out = Vec::new();
        winnow(text, &mut out);
        out.sort_unstable();
        out.dedup();
        out.truncate(MAX_PRINTS);
        Prints(out.into_boxed_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What one step quotes: every window of its quotes, in order, and which are not yet traced to
/// the text they came from.
#[derive(Debug, Default)]
struct Quotes {
    windows: Vec<u32>,
    open: Vec<bool>,
    left: usize,
}

impl Quotes {
    /// The windows of `texts`, at most [`MAX_PRINTS`] of them.
    fn of<'a>(texts: impl IntoIterator<Item = &'a str>) -> Quotes {
        let mut windows: Vec<u32> = texts.into_iter().flat_map(all_windows).collect();
        windows.truncate(MAX_PRINTS);
        let left = windows.len();
        Quotes { open: vec![true; left], windows, left }
    }

    /// Traces to the text of `prints` the open windows it holds, and closes them with the
    /// windows around them, the rest of the run they share (a run's prints are at most
    /// [`WINNOW`] windows apart); whether it held any.
    fn trace(&mut self, prints: &Prints) -> bool {
        let n = self.windows.len();
        let held = |i: &usize| self.open[*i] && prints.0.binary_search(&self.windows[*i]).is_ok();
        let hits: Vec<usize> = (0..n).filter(held).collect();
        for &i in &hits {
            for j in i.saturating_sub(WINNOW - 1)..(i + WINNOW).min(n) {
                if std::mem::take(&mut self.open[j]) {
                    self.left -= 1;
                }
            }
        }
        !hits.is_empty()
    }
}

/// Every window hash of `text`.
fn all_windows(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    windows(&normalise(text), |h| out.push(h));
    out
}

/// Adds the winnowed window hashes of `text` to `out`.
fn winnow(text: &str, out: &mut Vec<u32>) {
    let mut hashes = Vec::new();
    windows(&normalise(text), |h| hashes.push(h));
    if hashes.len() <= WINNOW {
        out.extend(hashes.iter().min().copied());
        return;
    }
    let mut last = None;
    for (start, w) in hashes.windows(WINNOW).enumerate() {
        // The rightmost smallest hash of the window; each position is kept once.
        let Some((at, &h)) = w.iter().enumerate().rev().min_by_key(|(_, h)| **h) else { continue };
        if last != Some(start + at) {
            out.push(h);
        }
        last = Some(start + at);
    }
}

/// Calls `each` with a 32-bit hash of every [`WINDOW`]-character window of `chars`, in order:
/// the rolling hash `dcp replay` finds misses with ([`super::windows`]), folded.
fn windows(chars: &[char], mut each: impl FnMut(u32)) {
    super::windows::windows(chars, |h| each((h ^ (h >> 32)) as u32));
}

/// Whether the session's provider caches the prompt (`crate::prices::Sheet::caches`), for the
/// rules that keep a text for long (see the module header, "Without a prompt cache").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum PromptCache {
    #[default]
    On,
    Off,
}

impl PromptCache {
    /// The prompt cache of a session priced by `sheet`.
    pub fn of(sheet: &crate::prices::Sheet) -> PromptCache {
        if sheet.caches {
            PromptCache::On
        } else {
            PromptCache::Off
        }
    }
}

/// What one call says for the rules of this module.
#[derive(Debug, Default, Clone)]
struct Tracked {
    /// The latest step that quoted the call's text as its newest source (0: none).
    used: u32,
    /// Its output's prints (an edit's or write's text arguments), while among the last [`TRACK`].
    prints: Option<Prints>,
    /// The user prompts the session had had when the call was made: its user turn.
    prompts: u32,
    /// A hash of its key argument (a path, a command): in every request, so a step that
    /// passes it again uses no output.
    key: Option<u64>,
}

/// The signals, read message by message (the sidecar's index keeps one per session; the batch
/// masking builds one over a history): what the latest prompt names, and which calls the
/// latest steps used.
#[derive(Debug, Default)]
pub struct Signals {
    /// Assistant messages read: the current model step.
    step: u32,
    prompts: u32,
    /// The step of the latest prompt.
    prompt_step: u32,
    named: Names,
    calls: Vec<Tracked>,
    /// Set by the session's price sheet, not by its messages: a rewind leaves it.
    cache: PromptCache,
}

/// Where [`Signals`] stood when [`Signals::mark`] was taken.
#[derive(Debug)]
pub struct SignalsMark {
    step: u32,
    prompts: u32,
    prompt_step: u32,
    named: Names,
    calls: usize,
    tail: Vec<Tracked>,
}

impl Signals {
    /// Reads `message`, before its calls ([`Signals::call`]): a prompt's names, or the calls
    /// an agent's step quoted.
    pub fn message(&mut self, message: &Message) {
        if is_prompt(message) {
            self.prompts += 1;
            let named = Names::of(&prompt_text(message));
            self.named = if self.prompts == 1 { named.by_path() } else { named };
            self.prompt_step = self.step;
        }
        if message.role() == Role::Assistant {
            self.step += 1;
            self.attribute(message);
        }
    }

    /// Reads the next call, in history order: its key argument, and the text it gave the agent
    /// (`None` when it is not known: the call has not completed, or its text was slimmed).
    pub fn call(&mut self, key: Option<&str>, text: Option<&str>) {
        let at = self.calls.len();
        if let Some(old) = at.checked_sub(TRACK).and_then(|old| self.calls.get_mut(old)) {
            *old = Tracked { used: old.used, prompts: old.prompts, ..Tracked::default() };
        }
        let prints = text.map(Prints::of).filter(|p| !p.is_empty());
        self.calls.push(Tracked { used: 0, prints, prompts: self.prompts, key: key.map(hash) });
    }

    /// Sets the prompt cache of the session's provider (see the module header, "Without a
    /// prompt cache").
    pub fn set_cache(&mut self, cache: PromptCache) {
        self.cache = cache;
    }

    /// Whether call `at`, of `tool`, is in use: it is of [`IN_USE_TOOLS`] and one of the last
    /// `within` steps quoted it, or it is a read of the current turn, once the person has
    /// prompted again, that a step of the turn quoted (see the module header, "In use");
    /// `within` 0 turns both off.
    pub fn in_use(&self, at: usize, tool: &str, within: u32) -> bool {
        let Some(call) = self.calls.get(at) else { return false };
        let quoted = call.used > 0 && within > 0;
        if IN_USE_TOOLS.contains(&tool) {
            return quoted && self.step - call.used < within;
        }
        let this_turn = self.prompts >= 2 && call.prompts == self.prompts;
        quoted && tool == "read" && this_turn && self.cache == PromptCache::On
    }

    /// Whether the latest prompt, sent fewer than `within` steps ago, names `path` (the
    /// session's first prompt only by a path, [`Names::by_path`]).
    pub fn named(&self, path: &str, within: u32) -> bool {
        self.prompts >= 1 && self.step - self.prompt_step < within && self.named.names(path)
    }

    /// Whether the latest prompt names `path`, shown by call `at` ([`Signals::named`]), or,
    /// invoking a slash command, names the file of its skill that an earlier turn read: the
    /// agent goes back to the skill's references it read then (docs/results/misses.md), while
    /// those it reads in this turn are fresh anyway; not without a prompt cache.
    pub fn named_call(&self, at: usize, path: &str, within: u32) -> bool {
        let earlier = || self.calls.get(at).is_some_and(|c| c.prompts < self.prompts);
        let follow_up = self.prompts >= 2 && self.step - self.prompt_step < within && self.cache == PromptCache::On;
        self.named(path, within) || follow_up && self.named.in_skill(path) && earlier()
    }

    /// Where the signals stand now, to go back to ([`Signals::rewind`]): what reading more
    /// messages and calls changes, which is the counts, the latest prompt's names and the last
    /// [`TRACK`] calls (an older call's entry is never changed again).
    pub fn mark(&self) -> SignalsMark {
        let tail = self.calls[self.calls.len().saturating_sub(TRACK)..].to_vec();
        let (step, prompts, prompt_step) = (self.step, self.prompts, self.prompt_step);
        SignalsMark { step, prompts, prompt_step, named: self.named.clone(), calls: self.calls.len(), tail }
    }

    /// Goes back to where `mark` was taken, forgetting the messages and calls read since.
    pub fn rewind(&mut self, mark: SignalsMark) {
        self.calls.truncate(mark.calls);
        let from = mark.calls - mark.tail.len();
        self.calls.splice(from.., mark.tail);
        (self.step, self.prompts, self.prompt_step, self.named) =
            (mark.step, mark.prompts, mark.prompt_step, mark.named);
    }

    /// Marks the calls the step `message` quoted, each quote going to its newest source.
    fn attribute(&mut self, message: &Message) {
        let from = self.calls.len().saturating_sub(TRACK);
        let keys: FxHashSet<u64> = self.calls[from..].iter().filter_map(|c| c.key).collect();
        let mut quotes = Quotes::of(quotes_of(message).into_iter().filter(|q| !keys.contains(&hash(q))));
        for tracked in self.calls[from..].iter_mut().rev() {
            if quotes.left == 0 {
                break;
            }
            if tracked.prints.as_ref().is_some_and(|p| quotes.trace(p)) {
                tracked.used = self.step;
            }
        }
    }
}

/// A hash of a key argument ([`Tracked::key`]).
fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

/// The text a prompt says: its typed text parts.
fn prompt_text(message: &Message) -> String {
    let flag = |p: &Node, k: &str| p.get(k).and_then(Node::as_bool) == Some(true);
    let typed = |p: &&Node| str_field(*p, "type") == Some("text") && !flag(p, "synthetic") && !flag(p, "ignored");
    message.parts.iter().filter(typed).filter_map(|p| str_field(p, "text")).collect::<Vec<_>>().join("\n")
}

/// What an agent's step quotes: its text, and the string arguments of its calls (dcp's own
/// tools left out); slimmed strings are not known.
fn quotes_of(message: &Message) -> Vec<&str> {
    let mut out = Vec::new();
    for part in &message.parts {
        match str_field(part, "type") {
            Some("text") => out.extend(str_field(part, "text")),
            Some("tool") if !str_field(part, "tool").is_some_and(|t| DCP_TOOLS.contains(&t)) => {
                let input = part.get("state").and_then(|s| s.get("input")).and_then(Node::as_object);
                out.extend(input.into_iter().flat_map(|i| i.iter()).filter_map(|(_, v)| v.as_str()));
            }
            _ => {}
        }
    }
    out.retain(|s| slim::marker(s).is_none());
    out
}

#[cfg(test)]
mod tests;
