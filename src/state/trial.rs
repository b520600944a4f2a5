//! The control group (`holdout` in `dcp.jsonc`): which arm a session was put in when it
//! started, kept in its state file (`dcp.holdout`) so that a restart, another OpenCode window
//! or the CLI keep it there.
//!
//! A session is assigned once, at its first request (or the first user turn, whichever dcp sees
//! first), and only while `holdout` is above 0: a share of the new sessions goes to the
//! `unpruned` arm, which dcp answers unchanged (no prunes, no tools, no list) while its meter
//! still counts every request; the rest to `pruned`. A session that started before, or with
//! `holdout` at 0, is in neither arm and counts in no comparison (`crate::stats::trial`).
//! Beside the arm the state keeps the prompts the session had, which the comparison divides
//! its requests by.

use serde_json::{json, Value};

/// Which arm of the comparison a session is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// dcp prunes it as usual.
    Pruned,
    /// dcp sends it unpruned: the control group.
    Unpruned,
}

impl Arm {
    pub fn key(self) -> &'static str {
        match self {
            Arm::Pruned => "pruned",
            Arm::Unpruned => "unpruned",
        }
    }

    fn from_key(key: &str) -> Option<Arm> {
        match key {
            "pruned" => Some(Arm::Pruned),
            "unpruned" => Some(Arm::Unpruned),
            _ => None,
        }
    }

    /// The arm a new session draws when `holdout` is the share sent unpruned and `draw` a
    /// number uniform in [0, 1).
    pub fn drawn(holdout: f64, draw: f64) -> Arm {
        if draw < holdout {
            Arm::Unpruned
        } else {
            Arm::Pruned
        }
    }
}

/// A session's place in the control group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trial {
    pub arm: Arm,
    /// The user prompts the session had at its last request.
    pub prompts: u64,
}

impl Trial {
    /// `dcp.holdout` as the state file holds it.
    pub fn to_value(self) -> Value {
        json!({ "arm": self.arm.key(), "prompts": self.prompts })
    }

    /// `dcp.holdout` read back; `None` for anything else, which the caller names.
    pub fn from_value(value: &Value) -> Option<Trial> {
        let arm = Arm::from_key(value.get("arm")?.as_str()?)?;
        let prompts = match value.get("prompts") {
            None => 0,
            Some(p) => p.as_u64()?,
        };
        Some(Trial { arm, prompts })
    }

    /// Two processes' records of one session: the arm first recorded stays, the prompts are
    /// the most either saw.
    pub fn merged(disk: Option<Trial>, mine: Option<Trial>) -> Option<Trial> {
        match (disk, mine) {
            (Some(d), Some(m)) => Some(Trial { arm: d.arm, prompts: d.prompts.max(m.prompts) }),
            (d, m) => d.or(m),
        }
    }
}

/// A number uniform in [0, 1) from the system's random source (the draw of a new session's
/// arm); 0.5 if the source fails, which puts it in the pruned arm under any `holdout` < 0.5.
pub fn draw() -> f64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_round_trips_and_a_bad_one_is_refused() {
        let t = Trial { arm: Arm::Unpruned, prompts: 3 };
        assert_eq!(Trial::from_value(&t.to_value()), Some(t));
        for bad in [json!(null), json!({"arm": "maybe"}), json!({"arm": "pruned", "prompts": -1}), json!("pruned")] {
            assert_eq!(Trial::from_value(&bad), None, "{bad}");
        }
    }

    #[test]
    fn the_draw_puts_the_holdout_s_share_in_the_unpruned_arm() {
        assert_eq!(
            (Arm::drawn(0.1, 0.05), Arm::drawn(0.1, 0.1), Arm::drawn(0.0, 0.0)),
            (Arm::Unpruned, Arm::Pruned, Arm::Pruned)
        );
        assert_eq!(Arm::drawn(1.0, 0.999), Arm::Unpruned);
        let unpruned = (0..2_000).filter(|_| Arm::drawn(0.25, draw()) == Arm::Unpruned).count();
        assert!((350..650).contains(&unpruned), "{unpruned} of 2,000 drawn unpruned at 0.25");
        let kept = Trial { arm: Arm::Pruned, prompts: 2 };
        let other = Trial { arm: Arm::Unpruned, prompts: 5 };
        assert_eq!(Trial::merged(Some(kept), Some(other)), Some(Trial { arm: Arm::Pruned, prompts: 5 }));
        assert_eq!(Trial::merged(None, Some(other)), Some(other));
    }
}
