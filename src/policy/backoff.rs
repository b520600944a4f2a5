//! The backoff: a session whose agent fetched again what dcp had hidden keeps more from then
//! on.
//!
//! A miss seen live (`crate::state::misses`) says that this agent, on this work, goes back to
//! older outputs more than masking's defaults assume. A restore says so for certain: the agent
//! asked for the hidden text itself. A re-fetch says so less surely: an agent runs a command
//! again, or reads a file again, for reasons of its own too (on recordings of agents that ran
//! without dcp, most re-fetches are such: `docs/results/misses.md`). So each restore is a step
//! of backoff and every fifth re-fetch is one ([`backoff_level`], [`REFETCHES_PER_STEP`]), up to [`MAX_LEVEL`]. Each
//! step widens masking's windows ([`backed_off`]): two more of the latest outputs kept whole,
//! and half the default budget of kept tokens again, in the window between rewrites and in the
//! narrower one a rewrite masks down to. What is hidden already stays hidden (a rewrite that
//! brought it back would re-bill the prompt from there on); the agent restores what it needs.

use crate::config::Masking;

/// The most steps a session backs off: past three, keeping still more would rarely pay.
pub const MAX_LEVEL: u32 = 3;

/// Re-fetches that make one step of backoff: five. On recordings, where every re-fetch is the
/// agent's own doing, one to ten per step save no miss on the corpus, the held-out set or the
/// generated suite, and the fewer a step takes the more it costs (the suite's total cost with
/// misses 0.441 at one, 0.440 at three, 0.434 at five, 0.431 at ten: docs/results/misses.md);
/// five keeps a session that re-fetches again and again backing off within a few dozen steps.
pub const REFETCHES_PER_STEP: u64 = 5;

/// How far a session whose agent re-fetched `refetches` hidden outputs and restored
/// `restores` backs off: a step per restore and per [`REFETCHES_PER_STEP`] re-fetches, up to
/// [`MAX_LEVEL`].
pub fn backoff_level(refetches: u64, restores: u64) -> u32 {
    restores.saturating_add(refetches / REFETCHES_PER_STEP).min(u64::from(MAX_LEVEL)) as u32
}

/// Masking's settings for a session backed off `level` steps from `base`.
pub fn backed_off(base: &Masking, level: u32) -> Masking {
    let level = level.min(MAX_LEVEL);
    let widen = |n: u32, by: u32| n.saturating_add(by.saturating_mul(level));
    // A budget of 0 is no budget: it stays none.
    let budget = |t: u32| if t == 0 { 0 } else { widen(t, t / 2) };
    let mut out = base.clone();
    out.keep_last = widen(base.keep_last, 2);
    out.keep_tokens = budget(base.keep_tokens);
    out.on_rewrite.keep_last = widen(base.on_rewrite.keep_last, 2);
    out.on_rewrite.keep_tokens = budget(base.on_rewrite.keep_tokens);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_misses_keeps_masking_s_settings() {
        let base = Masking::default();
        assert_eq!(backoff_level(0, 0), 0);
        assert_eq!(backoff_level(4, 0), 0, "four re-fetches may be the agent's own doing");
        assert_eq!(backed_off(&base, 0), base);
    }

    #[test]
    fn a_restore_or_five_re_fetches_widen_the_windows_a_step_up_to_three() {
        let base = Masking::default();
        assert_eq!(backoff_level(0, 1), 1, "a restore is a miss for certain");
        assert_eq!(backoff_level(5, 0), 1);
        assert_eq!(backoff_level(9, 1), 2);
        let one = backed_off(&base, 1);
        assert_eq!((one.keep_last, one.keep_tokens), (8, 15_000));
        assert_eq!((one.on_rewrite.keep_last, one.on_rewrite.keep_tokens), (6, 4_500));
        assert_eq!((one.working_calls, one.collapse_turns), (base.working_calls, base.collapse_turns));
        let three = backed_off(&base, backoff_level(0, 3));
        assert_eq!((three.keep_last, three.keep_tokens, three.on_rewrite.keep_last), (12, 25_000, 10));
        assert_eq!(backed_off(&base, backoff_level(50, 50)), three, "no further than three steps");
    }

    #[test]
    fn backing_off_never_keeps_less_and_leaves_no_budget_unbounded() {
        let mut base = Masking { keep_tokens: 0, ..Masking::default() };
        base.on_rewrite.keep_tokens = 0;
        for level in 0..=MAX_LEVEL {
            let m = backed_off(&base, level);
            assert_eq!((m.keep_tokens, m.on_rewrite.keep_tokens), (0, 0), "0 is no budget, at level {level}");
            assert!(m.keep_last >= base.keep_last && m.on_rewrite.keep_last >= base.on_rewrite.keep_last);
        }
        let max = Masking { keep_last: u32::MAX, ..Masking::default() };
        assert_eq!(backed_off(&max, 3).keep_last, u32::MAX, "saturates");
    }
}
