//! The one way a saving is said: what dcp kept out and saved, or, while what it adds (its
//! tools' definitions, the list, the message tags) has cost more than pruning has won back,
//! what it added. Every surface that shows a session's or the all-time savings (`/dcp stats`,
//! `dcp stats`, the all-time view, `dcp report`'s page) takes its words and its sign from
//! [`Net`], so none shows a negative saving.

use super::Figures;

/// Which way a net figure went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Pruning kept out (or saved) this much, net of what dcp added.
    Saved,
    /// dcp added this much more than pruning has kept out yet.
    Added,
}

/// The net tokens and cost of some [`Figures`], as magnitudes with their direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Net {
    pub tokens: Direction,
    /// Tokens kept out, or added: never negative.
    pub token_count: u64,
    pub cost: Direction,
    /// The share of the cost without dcp saved, or added: never negative.
    pub cost_share: f64,
}

impl Net {
    /// The net of `f`. A cost share that rounds to 0.0% is said as saved, so no surface shows
    /// "0.0% added".
    pub fn of(f: &Figures) -> Net {
        let tokens = if f.kept_out_tokens < 0 { Direction::Added } else { Direction::Saved };
        let added = -f.cost_saved_share;
        let (cost, cost_share) =
            if added >= 0.0005 { (Direction::Added, added) } else { (Direction::Saved, f.cost_saved_share.max(0.0)) };
        Net { tokens, token_count: f.kept_out_tokens.unsigned_abs(), cost, cost_share }
    }

    /// `Kept out` or `Added`.
    pub fn tokens_label(&self) -> &'static str {
        match self.tokens {
            Direction::Saved => "Kept out",
            Direction::Added => "Added",
        }
    }

    /// What follows the token count: `tokens over 3 requests`, plus `(dcp's tools)` when added.
    pub fn tokens_note(&self, requests: u64) -> String {
        let over = crate::format::count(requests, "request");
        match self.tokens {
            Direction::Saved => format!("tokens over {over}"),
            Direction::Added => format!("tokens over {over} (dcp's tools)"),
        }
    }

    /// `Cost saved` or `Cost added`.
    pub fn cost_label(&self) -> &'static str {
        match self.cost {
            Direction::Saved => "Cost saved",
            Direction::Added => "Cost added",
        }
    }

    /// The cost share as a percentage: `12.3%`.
    pub fn cost_percent(&self) -> String {
        format!("{:.1}%", 100.0 * self.cost_share)
    }

    /// What follows the percentage: `of the cost without dcp` or `over the cost without dcp`.
    pub fn cost_note(&self) -> &'static str {
        match self.cost {
            Direction::Saved => "of the cost without dcp",
            Direction::Added => "over the cost without dcp",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(kept_out_tokens: i64, cost_saved: f64) -> Figures {
        let mut f = Figures { kept_out_tokens, requests: 3, ..Figures::default() };
        f.add(&Figures { cost_saved, cost_without: 1_000.0, ..Figures::default() });
        f
    }

    #[test]
    fn a_negative_net_is_said_as_added_with_its_magnitude() {
        let net = Net::of(&figures(-1_234, -12.0));
        assert_eq!((net.tokens, net.token_count, net.tokens_label()), (Direction::Added, 1_234, "Added"));
        assert_eq!(net.tokens_note(3), "tokens over 3 requests (dcp's tools)");
        assert_eq!(
            (net.cost_label(), net.cost_percent(), net.cost_note()),
            ("Cost added", "1.2%".into(), "over the cost without dcp")
        );
    }

    #[test]
    fn a_positive_net_is_said_as_kept_out_and_saved() {
        let net = Net::of(&figures(5_000, 250.0));
        assert_eq!(
            (net.tokens_label(), net.token_count, net.tokens_note(1)),
            ("Kept out", 5_000, "tokens over 1 request".into())
        );
        assert_eq!((net.cost_label(), net.cost_percent()), ("Cost saved", "25.0%".into()));
    }

    #[test]
    fn a_cost_added_that_rounds_to_nothing_is_said_as_nothing_saved() {
        let net = Net::of(&figures(0, -0.4));
        assert_eq!(
            (net.tokens_label(), net.cost_label(), net.cost_percent()),
            ("Kept out", "Cost saved", "0.0%".into())
        );
    }
}
