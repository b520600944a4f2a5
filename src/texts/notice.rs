//! The notice of one request's prunes, shown in the session once the turn ends and never sent
//! to the model: what is in force or waiting, by strategy, and at the detailed level the calls
//! the agent chose to prune itself, named by their tool and key argument, with the summary it
//! kept of each it distilled. The user sees the agent call `discard`; the notice says what
//! went and what stands in its place. The ranges dcp makes of finished turns on its own are
//! named as such, apart from the agent's `compress`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::config::Notification;
use crate::format;
use crate::state::blocks::{Block, Origin};
use crate::state::store::SaveNews;
use crate::state::{Action, PruneRecord, Strategy};

/// What stays "applied when it pays" until a rewrite pays for the prompt cache.
const LATER: &str = "applied when it pays";

/// Calls named under one strategy's line; more are counted.
const MAX_NAMED: usize = 5;

/// The longest summary a notice row shows, in characters; a longer one is cut at a word.
const MAX_SUMMARY_CHARS: usize = 100;

/// The prunes of one request, as the notice tells them.
#[derive(Default)]
pub struct Notice<'a> {
    /// Prunes the request carries: call ids and their records.
    pub applied: Vec<(&'a str, &'a PruneRecord)>,
    /// Compressed ranges the request carries.
    pub ranges: Vec<Block>,
    /// Prunes recorded now whose rewrite waits until it pays for the prompt cache.
    pub waiting: Vec<(&'a str, &'a PruneRecord)>,
    /// Prunes recorded earlier that still wait.
    pub older_waiting: usize,
    /// The key argument (a path, a command) of the calls the agent pruned, by call id.
    pub keys: HashMap<&'a str, &'a str>,
    /// What the session has saved so far, in money where its prices are known
    /// (`crate::stats::money::so_far`).
    pub so_far: Option<String>,
}

/// The notification for `notice`'s prunes, of which at least one is applied or waiting.
/// `level` is never `Off`; it would read as `Minimal`.
pub fn notification(level: Notification, notice: &Notice<'_>) -> String {
    let now = !notice.applied.is_empty() || !notice.ranges.is_empty();
    let shown = if now { &notice.applied } else { &notice.waiting };
    let range_tokens: u64 = notice.ranges.iter().map(Block::net_tokens).sum();
    // A waiting prune has kept nothing out of any request yet: it is never shown as removed.
    let mut text = match now {
        true => format!("▣ DCP | in force: -{} tokens", format::compact(tokens(shown) + range_tokens)),
        false => format!("▣ DCP | waiting: {} tokens", format::compact(tokens(shown))),
    };
    if !shown.is_empty() {
        let _ = write!(text, ", {}", format::count(shown.len() as u64, "tool"));
    }
    let (agent, turns): (Vec<&Block>, Vec<&Block>) = notice.ranges.iter().partition(|b| b.origin == Origin::Agent);
    if !agent.is_empty() {
        let _ = write!(text, ", {} compressed", format::count(agent.len() as u64, "range"));
    }
    match turns.len() {
        0 => {}
        1 => text.push_str(", calls of 1 finished turn in one line"),
        n => {
            let _ = write!(text, ", calls of {n} finished turns in one line each");
        }
    }
    if !now {
        let _ = write!(text, ", {LATER}");
    }
    if let Some(so_far) = &notice.so_far {
        let _ = write!(text, " · {so_far}");
    }
    if level != Notification::Detailed {
        return text;
    }
    by_strategy(&mut text, shown, &notice.keys);
    for b in agent.iter().chain(&turns) {
        let by = if b.origin == Origin::Agent { "compress" } else { "finished turn" };
        let _ = write!(
            text,
            "\n→ {by} b{}: {} ({})",
            b.id,
            format::tokens(b.net_tokens()),
            format::count(b.effective_messages.len() as u64, "message")
        );
    }
    let more = if now { notice.waiting.len() + notice.older_waiting } else { notice.older_waiting };
    if more > 0 {
        let tools = if more == 1 { "tool" } else { "tools" };
        let _ = write!(text, "\n→ {more} more {tools} waiting, {LATER}");
    }
    format::terminal(&text, format::Lines::Keep).into_owned()
}

fn tokens(of: &[(&str, &PruneRecord)]) -> u64 {
    of.iter().map(|(_, r)| r.tokens).sum()
}

/// One line per strategy with its tokens and calls; under the agent's own `discard` and
/// `extract`, a row per call naming it.
fn by_strategy(text: &mut String, shown: &[(&str, &PruneRecord)], keys: &HashMap<&str, &str>) {
    for strategy in Strategy::ALL {
        let of: Vec<_> = shown.iter().filter(|(_, r)| r.strategy == strategy).copied().collect();
        if of.is_empty() {
            continue;
        }
        let calls = format::count(of.len() as u64, "tool");
        let _ = write!(text, "\n→ {}: {} ({calls})", strategy.name(), format::tokens(tokens(&of)));
        if !matches!(strategy, Strategy::Discard | Strategy::Extract) {
            continue;
        }
        for (id, record) in of.iter().take(MAX_NAMED) {
            text.push_str("\n  ");
            text.push_str(&record.tool);
            if let Some(key) = keys.get(id) {
                let _ = write!(text, " {}", format::shorten(key, 60));
            }
            if let Action::Distill { distillation } = &record.action {
                let _ = write!(text, ", kept as \"{}\"", summary(distillation));
            }
        }
        if of.len() > MAX_NAMED {
            let _ = write!(text, "\n  and {} more", of.len() - MAX_NAMED);
        }
    }
}

/// A summary on one row: its whitespace runs as single spaces, cut at the last word that fits
/// [`MAX_SUMMARY_CHARS`] with `…`.
fn summary(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_SUMMARY_CHARS {
        return flat;
    }
    let head: String = flat.chars().take(MAX_SUMMARY_CHARS - 1).collect();
    // A head that ends where a word does keeps that word.
    let whole = flat[head.len()..].starts_with(' ');
    let cut = head.rfind(' ').filter(|&at| !whole && at > head.len() / 2).unwrap_or(head.len());
    format!("{}…", head[..cut].trim_end())
}

/// What the user is told while the session's state file cannot be read: the session's pruning
/// starts afresh, and the next save sets the file aside rather than write over it.
pub fn corrupt_state(path: &Path) -> String {
    let shown = format::field(&path.display().to_string(), 400);
    format!(
        "▣ DCP | this session's state file could not be read: it is set aside as \
         {shown}.corrupt-<time> (nothing of it is lost) and this session's pruning starts afresh"
    )
}

/// What the user is told with this answer of the session's state file, if anything, from
/// the slot's news of it (`crate::state::store::Slot::file_news`): that the file at `corrupt`
/// could not be read ([`corrupt_state`]), and what became of its saves since the last answer
/// (`news`, [`save_news`]).
pub fn state_file((corrupt, news): (Option<&Path>, Option<SaveNews>)) -> Option<String> {
    joined(corrupt.map(corrupt_state), news.as_ref().map(save_news))
}

/// What the user is told when the session's saves start to fail, or work again after they
/// were told so. The failure names what failed, the path and the cause (see
/// `crate::state::persist::Cause`); a save that works again is told, so that the user does not
/// go on believing the session's pruning is lost on a restart.
pub fn save_news(news: &SaveNews) -> String {
    match news {
        SaveNews::Failing(error) => format!(
            "▣ DCP | this session's pruning cannot be saved: {}. It goes on in memory but is lost \
             when OpenCode restarts; dcp retries the save, and `dcp doctor` checks the state dir",
            format::field(error, 800)
        ),
        SaveNews::SavedAgain => {
            "▣ DCP | this session's pruning is saved again: a restart no longer loses it".to_string()
        }
    }
}

/// Two notices, either of which may be absent, as one.
pub fn joined(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(strategy: Strategy, tokens: u64) -> PruneRecord {
        PruneRecord { strategy, action: Action::Output, tokens, tool: "read".into(), applied: false }
    }

    #[test]
    fn a_notification_says_waiting_or_in_force_and_never_counts_a_waiting_prune_as_removed() {
        let dedup = record(Strategy::Deduplication, 805);
        let one = vec![("call_1", &dedup)];
        let waiting = Notice { waiting: one.clone(), ..Notice::default() };
        assert_eq!(
            notification(Notification::Minimal, &waiting),
            "▣ DCP | waiting: 805 tokens, 1 tool, applied when it pays"
        );
        let applied = Notice { applied: one, older_waiting: 2, ..Notice::default() };
        assert_eq!(
            notification(Notification::Detailed, &applied),
            "▣ DCP | in force: -805 tokens, 1 tool\n→ deduplication: ~805 (1 tool)\n→ 2 more tools waiting, applied when it pays"
        );
        let write = record(Strategy::SupersedeWrites, 1_250);
        let two = Notice { applied: vec![("call_1", &dedup), ("call_2", &write)], ..Notice::default() };
        assert_eq!(
            notification(Notification::Detailed, &two),
            "▣ DCP | in force: -2.1K tokens, 2 tools\n→ deduplication: ~805 (1 tool)\n→ supersede-writes: ~1.3K (1 tool)"
        );
    }

    /// The bug: the notice of an agent's `discard` with a distillation read "→ extract: ~55
    /// (1 tool)", naming neither the call nor the summary that stands in its place.
    #[test]
    fn an_agent_discard_with_a_distillation_is_named_in_the_notice_with_the_summary_it_kept() {
        let summary = "config.txt: mode=fast,\nretries=3 \u{1b}[31m";
        let extract =
            PruneRecord { action: Action::Distill { distillation: summary.into() }, ..record(Strategy::Extract, 55) };
        let discard = PruneRecord { tool: "bash".into(), ..record(Strategy::Discard, 1_200) };
        let notice = Notice {
            applied: vec![("call_1", &extract), ("call_2", &discard)],
            keys: HashMap::from([("call_1", "config.txt"), ("call_2", "ls -R")]),
            ..Notice::default()
        };
        assert_eq!(
            notification(Notification::Detailed, &notice),
            "▣ DCP | in force: -1.3K tokens, 2 tools\n→ discard: ~1.2K (1 tool)\n  bash ls -R\n→ extract: ~55 (1 tool)\n  read config.txt, kept as \"config.txt: mode=fast, retries=3 \\x1b[31m\""
        );
        assert_eq!(notification(Notification::Minimal, &notice), "▣ DCP | in force: -1.3K tokens, 2 tools");
    }

    /// The bug: a summary whose first 99 characters end with a whole word lost that word too.
    #[test]
    fn a_notice_says_what_the_session_saved_so_far_when_it_saved_something() {
        let dedup = record(Strategy::Deduplication, 1_700);
        let one = vec![("call_1", &dedup)];
        let so_far = Some("saved so far: $0.012".to_string());
        let notice = Notice { applied: one, so_far, ..Notice::default() };
        assert_eq!(
            notification(Notification::Minimal, &notice),
            "▣ DCP | in force: -1.7K tokens, 1 tool · saved so far: $0.012"
        );
    }

    #[test]
    fn a_summary_cut_where_a_word_ends_keeps_that_word() {
        let long = format!("{} {}", "x".repeat(MAX_SUMMARY_CHARS - 6), "tail next words");
        assert_eq!(summary(&long), format!("{} tail…", "x".repeat(MAX_SUMMARY_CHARS - 6)));
        let wide = format!("{} é{}", "é".repeat(MAX_SUMMARY_CHARS - 3), "é".repeat(9));
        assert_eq!(summary(&wide), format!("{}…", "é".repeat(MAX_SUMMARY_CHARS - 3)));
    }

    #[test]
    fn a_long_summary_is_cut_at_a_word_and_many_calls_are_counted_past_five() {
        let long = "word ".repeat(40);
        let cut = summary(&long);
        assert!(cut.ends_with("word…") && cut.chars().count() <= MAX_SUMMARY_CHARS, "{cut}");
        let discard = record(Strategy::Discard, 10);
        let ids = ["c1", "c2", "c3", "c4", "c5", "c6", "c7"];
        let notice = Notice { applied: ids.iter().map(|id| (*id, &discard)).collect(), ..Notice::default() };
        let text = notification(Notification::Detailed, &notice);
        assert_eq!(text.matches("\n  read").count(), MAX_NAMED, "{text}");
        assert!(text.ends_with("\n  and 2 more"), "{text}");
    }

    /// The bug: a request that carried dcp's line of a finished turn was noticed as "1 range
    /// compressed", as if the agent had called `compress`.
    #[test]
    fn a_finished_turn_is_noticed_as_dcp_s_and_an_agent_range_as_compressed() {
        let range = |id, origin| Block { id, origin, compressed_tokens: 900, summary_tokens: 100, ..Block::default() };
        let turns = Notice { ranges: vec![range(1, Origin::FinishedTurn)], ..Notice::default() };
        assert_eq!(
            notification(Notification::Detailed, &turns),
            "▣ DCP | in force: -800 tokens, calls of 1 finished turn in one line\n→ finished turn b1: ~800 (0 messages)"
        );
        let both = Notice {
            ranges: vec![range(1, Origin::FinishedTurn), range(2, Origin::Agent), range(3, Origin::FinishedTurn)],
            ..Notice::default()
        };
        assert_eq!(
            notification(Notification::Minimal, &both),
            "▣ DCP | in force: -2.4K tokens, 1 range compressed, calls of 2 finished turns in one line each"
        );
    }
}
