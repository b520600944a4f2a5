//! The control group's comparison (`holdout`, see `crate::state::trial`): the sessions dcp
//! pruned against those it sent unpruned, on three measures per session, each with a 95%
//! confidence interval for the difference of the arms' means by Welch's t (unequal variances,
//! Welch-Satterthwaite degrees of freedom):
//! - the bill per request the provider reported (tokens at the input price of the session's
//!   sheet: uncached input 1x, cache reads and writes at the sheet's rates, output at its
//!   output price's share where known), over the sessions whose usage it reported;
//! - requests per user prompt;
//! - the session's length in requests.
//!
//! While either arm has fewer than [`MIN_PER_ARM`] sessions with a measure, that measure says
//! "too few sessions" and gives no interval.

use serde::Serialize;

use crate::prices::Sheet;
use crate::state::trial::Arm;
use crate::state::SessionState;

/// The fewest sessions per arm a measure is compared on.
pub const MIN_PER_ARM: usize = 5;

/// What the interval is.
pub const METHOD: &str = "Welch's t, 95% interval for the difference of the means (pruned minus unpruned)";

/// One session of the trial, as the comparison measures it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub arm: Arm,
    /// The provider's bill per request, when it reported the session's usage.
    pub bill_per_request: Option<f64>,
    pub requests_per_prompt: Option<f64>,
    pub requests: u64,
}

/// Session `state`'s measures, priced at `sheet`; `None` outside the trial or before its
/// first request.
pub fn measured(state: &SessionState, sheet: &Sheet) -> Option<Measured> {
    let trial = state.trial?;
    let requests = state.savings.requests;
    if requests == 0 {
        return None;
    }
    let requests_per_prompt = (trial.prompts > 0).then(|| requests as f64 / trial.prompts as f64);
    Some(Measured { arm: trial.arm, bill_per_request: reported_bill(state, sheet), requests_per_prompt, requests })
}

/// The provider's reported bill per request of `state`, priced at `sheet`; `None` while it
/// reported none.
fn reported_bill(state: &SessionState, sheet: &Sheet) -> Option<f64> {
    let (bill, requests) = super::reported::bill(&state.savings, sheet, super::reported::Outputs::Counted);
    (requests > 0).then(|| bill / requests as f64)
}

/// The comparison, as `dcp stats --json` and `dcp report` give it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Comparison {
    /// Sessions in each arm.
    pub pruned: u64,
    pub unpruned: u64,
    pub method: &'static str,
    pub min_per_arm: usize,
    /// `too few sessions` while no measure has enough sessions in both arms, else `compared`.
    pub verdict: &'static str,
    pub measures: Vec<Measure>,
}

/// One measure compared.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Measure {
    pub name: &'static str,
    pub pruned: Side,
    pub unpruned: Side,
    /// `too few sessions`, or `compared`.
    pub verdict: &'static str,
    /// Pruned minus unpruned, and its interval; `None` with too few sessions.
    pub difference: Option<f64>,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

/// One arm's sessions on a measure.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Side {
    pub sessions: usize,
    pub mean: Option<f64>,
}

pub const TOO_FEW: &str = "too few sessions";
const COMPARED: &str = "compared";

/// Compares the arms of `sessions`.
pub fn compare(sessions: &[Measured]) -> Comparison {
    let count = |arm| sessions.iter().filter(|s| s.arm == arm).count() as u64;
    let measures = vec![
        measure("bill_per_request", sessions, |s| s.bill_per_request),
        measure("requests_per_prompt", sessions, |s| s.requests_per_prompt),
        measure("requests", sessions, |s| Some(s.requests as f64)),
    ];
    let verdict = if measures.iter().any(|m| m.verdict == COMPARED) { COMPARED } else { TOO_FEW };
    Comparison {
        pruned: count(Arm::Pruned),
        unpruned: count(Arm::Unpruned),
        method: METHOD,
        min_per_arm: MIN_PER_ARM,
        verdict,
        measures,
    }
}

fn measure(name: &'static str, sessions: &[Measured], value: impl Fn(&Measured) -> Option<f64>) -> Measure {
    let of = |arm| sessions.iter().filter(|s| s.arm == arm).filter_map(&value).collect::<Vec<f64>>();
    let (pruned, unpruned) = (of(Arm::Pruned), of(Arm::Unpruned));
    let arm = |xs: &[f64]| Side { sessions: xs.len(), mean: mean(xs) };
    let mut m = Measure {
        name,
        pruned: arm(&pruned),
        unpruned: arm(&unpruned),
        verdict: TOO_FEW,
        difference: None,
        low: None,
        high: None,
    };
    if pruned.len() >= MIN_PER_ARM && unpruned.len() >= MIN_PER_ARM {
        let (d, half) = welch(&pruned, &unpruned);
        (m.verdict, m.difference, m.low, m.high) = (COMPARED, Some(d), Some(d - half), Some(d + half));
    }
    m
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The difference of the means of `a` and `b` (two or more each) and the half-width of its 95%
/// interval by Welch's t.
pub fn welch(a: &[f64], b: &[f64]) -> (f64, f64) {
    let stats = |xs: &[f64]| {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
        (n, m, var / n)
    };
    let ((na, ma, va), (nb, mb, vb)) = (stats(a), stats(b));
    let se2 = va + vb;
    if se2 <= 0.0 {
        return (ma - mb, 0.0);
    }
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    (ma - mb, t975(df) * se2.sqrt())
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (Cornish-Fisher's expansion
/// around the normal's, within 0.004 from 3 degrees of freedom on, 0.001 from 4).
pub fn t975(df: f64) -> f64 {
    let z: f64 = 1.959_963_984_540_054;
    let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
    let v = df.max(1.0);
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v.powi(3))
        + (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / (92_160.0 * v.powi(4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(arm: Arm, requests: u64, prompts: u64) -> Measured {
        Measured { arm, bill_per_request: None, requests_per_prompt: Some(requests as f64 / prompts as f64), requests }
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, t) in [(3.0, 3.182), (4.0, 2.776), (10.0, 2.228), (30.0, 2.042), (1e9, 1.960)] {
            assert!((t975(df) - t).abs() < 0.004, "df {df}: {} against {t}", t975(df));
        }
    }

    #[test]
    fn welch_s_interval_matches_a_worked_example() {
        // Two samples whose interval R's t.test(a, b) gives as -3.44 .. -0.56 (difference -2).
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [3.0, 4.0, 5.0, 6.0, 7.0];
        let (d, half) = welch(&a, &b);
        assert_eq!(d, -2.0);
        // s² = 2.5 each, se = 1, df = 8: t = 2.306.
        assert!((half - 2.306).abs() < 0.003, "{half}");
    }

    #[test]
    fn fewer_than_five_sessions_in_an_arm_are_too_few_to_tell() {
        let mut sessions: Vec<Measured> = (0..6).map(|i| session(Arm::Pruned, 10 + i, 2)).collect();
        sessions.extend((0..4).map(|i| session(Arm::Unpruned, 12 + i, 2)));
        let c = compare(&sessions);
        assert_eq!((c.verdict, c.pruned, c.unpruned), (TOO_FEW, 6, 4));
        assert!(c.measures.iter().all(|m| m.verdict == TOO_FEW && m.low.is_none()));
        sessions.push(session(Arm::Unpruned, 20, 2));
        let c = compare(&sessions);
        assert_eq!(c.verdict, "compared");
        let requests = c.measures.iter().find(|m| m.name == "requests").unwrap();
        assert_eq!((requests.pruned.sessions, requests.unpruned.sessions), (6, 5));
        let (low, high) = (requests.low.unwrap(), requests.high.unwrap());
        assert!(low < requests.difference.unwrap() && requests.difference.unwrap() < high);
        let bill = c.measures.iter().find(|m| m.name == "bill_per_request").unwrap();
        assert_eq!(bill.verdict, TOO_FEW, "no session reported its usage");
    }
}
