//! The backoff: a session whose agent fetched again what dcp had hidden keeps more from then
//! on.
//!
//! A miss seen live (a re-fetch or a restore, `crate::state::misses`) says that this agent, on
//! this work, goes back to older outputs more than masking's defaults assume. Each one widens
//! masking's windows by a step, up to [`MAX_LEVEL`]: two more of the latest outputs kept
//! whole and half the default budget of kept tokens again, in the window between rewrites and
//! in the narrower one a rewrite masks down to; five more calls in which a file being edited
//! keeps its latest read whole. From the second miss on, a finished turn's calls also stay
//! (no collapse into one line): what a follow-up prompt asks about is often what the turn
//! read. What is hidden already stays hidden (a rewrite that brought it back would re-bill the
//! prompt from there on); the agent restores what it needs.

use crate::config::Masking;

/// The most steps a session backs off: past three misses, keeping still more would rarely pay.
pub const MAX_LEVEL: u32 = 3;

/// How far a session with `misses` seen live backs off: one step per miss, up to
/// [`MAX_LEVEL`].
pub fn backoff_level(misses: u64) -> u32 {
    misses.min(u64::from(MAX_LEVEL)) as u32
}

/// Masking's settings for a session backed off `level` steps from `base`.
pub fn backed_off(base: &Masking, level: u32) -> Masking {
    let level = level.min(MAX_LEVEL);
    if level == 0 {
        return base.clone();
    }
    let widen = |n: u32, by: u32| n.saturating_add(by.saturating_mul(level));
    // A budget of 0 is no budget: it stays none.
    let budget = |t: u32| if t == 0 { 0 } else { widen(t, t / 2) };
    let mut out = base.clone();
    out.keep_last = widen(base.keep_last, 2);
    out.keep_tokens = budget(base.keep_tokens);
    out.on_rewrite.keep_last = widen(base.on_rewrite.keep_last, 2);
    out.on_rewrite.keep_tokens = budget(base.on_rewrite.keep_tokens);
    out.working_calls = widen(base.working_calls, 5);
    out.collapse_turns &= level < 2;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_misses_keeps_masking_s_settings() {
        let base = Masking::default();
        assert_eq!(backoff_level(0), 0);
        assert_eq!(backed_off(&base, 0), base);
    }

    #[test]
    fn each_miss_widens_the_windows_a_step_up_to_three() {
        let base = Masking::default();
        let one = backed_off(&base, backoff_level(1));
        assert_eq!((one.keep_last, one.keep_tokens), (8, 15_000));
        assert_eq!((one.on_rewrite.keep_last, one.on_rewrite.keep_tokens), (6, 4_500));
        assert_eq!(one.working_calls, 15);
        assert!(one.collapse_turns, "one miss leaves finished turns collapsing");
        let three = backed_off(&base, backoff_level(3));
        assert_eq!((three.keep_last, three.keep_tokens, three.on_rewrite.keep_last), (12, 25_000, 10));
        assert!(!three.collapse_turns, "from the second miss on, a finished turn's calls stay");
        assert_eq!(backed_off(&base, backoff_level(50)), three, "no further than three steps");
    }

    #[test]
    fn backing_off_never_keeps_less_and_leaves_no_budget_unbounded() {
        let mut base = Masking { keep_tokens: 0, ..Masking::default() };
        base.on_rewrite.keep_tokens = 0;
        for level in 0..=MAX_LEVEL {
            let m = backed_off(&base, level);
            assert_eq!((m.keep_tokens, m.on_rewrite.keep_tokens), (0, 0), "0 is no budget, at level {level}");
            assert!(m.keep_last >= base.keep_last && m.working_calls >= base.working_calls);
        }
        let max = Masking { keep_last: u32::MAX, ..Masking::default() };
        assert_eq!(backed_off(&max, 3).keep_last, u32::MAX, "saturates");
    }
}
