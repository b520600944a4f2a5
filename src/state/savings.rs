//! What reached the model: a session's running figures, request by request, behind the
//! savings `dcp stats` and `dcp report` show.
//!
//! A prune recorded is not a prune sent: its rewrite may wait for the policy, and a waiting
//! prune keeps nothing out of any request. So the sidecar adds up, as it answers each request,
//! what it removed from that request net of what it added (its instructions and tools at the
//! head, the prunable list and the message id tags), and what the request would have cost
//! with and without dcp under the prompt-cache model `dcp replay` bills with (the prefix shared
//! with the last request read at the session's cache-read price, the rest written at its
//! cache-write price: 0.1x and 1.25x the input price on Anthropic's 5-minute cache). Sizes are
//! tokens, costs tokens at the base input price. The policy's ledger weighs the same things
//! to decide, but in the mirror's unit (characters / 4) for what is in force, which for dense
//! outputs (code, CSV) runs well under their tokens: its balance is the policy's, not a
//! figure to report. The state file keeps the sums in its `stats` object (flat, beside DCP's
//! keys, so the all-time report reads them from a file's head) and each request's context
//! size with and without dcp in `dcp.trail`.

use crate::prices::Rates;

/// A session's running savings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Savings {
    /// Requests dcp answered.
    pub requests: u64,
    /// Tokens kept out of those requests, net of what dcp added (below 0 when what it added
    /// weighed more).
    pub kept_out_tokens: i64,
    /// What the requests would have cost without dcp, in tokens at the base input price.
    pub cost_without: f64,
    /// What dcp saved of it: the same requests' cost without dcp minus their cost with it.
    pub cost_saved: f64,
    /// The last request's size without dcp and as sent (the prefixes the provider cached).
    pub last_context: u64,
    pub last_sent: u64,
    /// Each request's context with and without dcp.
    pub trail: Vec<Point>,
}

/// One request's context size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// When it was made (ms).
    pub time: i64,
    pub without: u64,
    pub with: u64,
    /// What dcp saved on it, in tokens at the base input price, rounded.
    pub saved: i64,
    pub mark: Mark,
}

/// What happened to the history on a request besides new messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    None,
    /// dcp applied waiting rewrites.
    Rewrite,
    /// OpenCode compacted the session since the last request.
    Compaction,
}

impl Mark {
    fn letter(self) -> char {
        match self {
            Mark::None => '-',
            Mark::Rewrite => 'r',
            Mark::Compaction => 'c',
        }
    }

    fn from_letter(c: &str) -> Option<Mark> {
        match c {
            "-" => Some(Mark::None),
            "r" => Some(Mark::Rewrite),
            "c" => Some(Mark::Compaction),
            _ => None,
        }
    }
}

impl Point {
    /// The point as `dcp.trail` holds it: `"<time> <without> <with> <saved> <mark>"`, one
    /// short line per request in a pretty-printed file.
    pub fn to_line(self) -> String {
        format!("{} {} {} {} {}", self.time, self.without, self.with, self.saved, self.mark.letter())
    }

    pub fn from_line(line: &str) -> Option<Point> {
        let mut fields = line.split(' ');
        let time = fields.next()?.parse().ok()?;
        let without = fields.next()?.parse().ok()?;
        let with = fields.next()?.parse().ok()?;
        let saved = fields.next()?.parse().ok()?;
        let mark = Mark::from_letter(fields.next()?)?;
        fields.next().is_none().then_some(Point { time, without, with, saved, mark })
    }
}

/// One request's figures, as the sidecar answers it, in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestFigures {
    pub time: i64,
    /// The request's size without dcp: the history as OpenCode sent it, and OpenCode's own
    /// system prompt and tools.
    pub without: u64,
    /// Tokens dcp removed from it, and tokens it added: its head (instructions and tools, in
    /// front of everything when `offered`), the message id tags, and `appended` after the
    /// history (the prunable list).
    pub removed: u64,
    pub added: u64,
    pub appended: u64,
    /// Tokens dcp appended after the last request's history, which were never part of the
    /// prefix this request shares with it.
    pub appended_before: u64,
    /// dcp's head came or went since the last request: nothing of it stays cached.
    pub head_moved: bool,
    /// Tokens every request starts with, whether or not dcp prunes (OpenCode's system prompt
    /// and tools): a compaction keeps them cached.
    pub fixed: u64,
    /// Whether the provider's cache had gone cold.
    pub cold: bool,
    /// When a rewrite applied on this request changed what was sent before: the tokens of the
    /// prompt in front of the first part it changed, which the provider still has cached.
    pub rewritten: Option<u64>,
    pub mark: Mark,
    /// The session's cache prices.
    pub rates: Rates,
}

impl Savings {
    /// Adds one answered request. Its cost with and without dcp is the replay's prompt-cache
    /// model (`crate::replay::cost`): the prefix the last request shares with this one is read
    /// from the cache, the rest is written.
    pub fn add(&mut self, r: &RequestFigures) {
        self.requests += 1;
        self.kept_out_tokens += r.removed as i64 - r.added as i64;
        let with = (r.without + r.added).saturating_sub(r.removed);
        let compacted = r.mark == Mark::Compaction;
        let shared_without = match (r.cold, compacted || r.without < self.last_context) {
            (true, _) => 0,
            (false, true) => r.fixed,
            (false, false) => self.last_context,
        };
        let shared_with = match (r.cold, compacted, r.head_moved) {
            (true, _, _) | (false, _, true) => 0,
            (false, true, false) => r.fixed,
            (false, false, false) => {
                let history = self.last_sent.saturating_sub(r.appended_before);
                r.rewritten.unwrap_or(history).min(history).min(with)
            }
        };
        let p = r.rates;
        let cost = |size: u64, cached: u64| p.read * cached as f64 + p.write * size.saturating_sub(cached) as f64;
        let (without_cost, with_cost) = (cost(r.without, shared_without), cost(with, shared_with));
        self.cost_without += without_cost;
        self.cost_saved += without_cost - with_cost;
        self.last_context = r.without;
        self.last_sent = with;
        let saved = (without_cost - with_cost).round() as i64;
        self.trail.push(Point { time: r.time, without: r.without, with, saved, mark: r.mark });
    }

    /// The share of what the requests would have cost without dcp that dcp saved (below 0 when
    /// it cost more).
    pub fn cost_saved_share(&self) -> f64 {
        if self.cost_without <= 0.0 {
            return 0.0;
        }
        self.cost_saved / self.cost_without
    }
}

/// One prune or active compressed range as the savings count it: the strategy it is counted
/// under, whether requests carry it yet, and the tokens it takes out of each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub strategy: super::Strategy,
    pub applied: bool,
    pub tokens: u64,
}

impl super::SessionState {
    /// Every prune and every active compressed range, as [`Cut`]s: the one source of the
    /// figures in force and waiting, in total (`/dcp stats`) and by strategy (`dcp report`).
    /// A prune of an action a newer dcp recorded is none: this version does not make it.
    pub fn cuts(&self) -> impl Iterator<Item = Cut> + '_ {
        let made = self.pruned.values().filter(|r| r.action != super::Action::Unknown);
        let records = made.map(|r| Cut { strategy: r.strategy, applied: r.applied, tokens: r.tokens });
        let blocks = self.blocks.active().map(|b| Cut {
            strategy: b.origin.strategy(),
            applied: b.applied,
            tokens: b.net_tokens(),
        });
        records.chain(blocks)
    }

    /// Tokens the prunes and compressed ranges in force take out of each request, and those
    /// of the ones still waiting for the policy. DCP's one-time figure for both.
    pub fn in_force_and_waiting(&self) -> (u64, u64) {
        let (mut in_force, mut waiting) = (0u64, 0u64);
        for cut in self.cuts() {
            let sum = if cut.applied { &mut in_force } else { &mut waiting };
            *sum = sum.saturating_add(cut.tokens);
        }
        (in_force, waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_round_trips_through_its_line_and_a_bad_line_is_refused() {
        let p = Point { time: 1_790_000_000_000, without: 12_000, with: 9_000, saved: -40, mark: Mark::Rewrite };
        assert_eq!(Point::from_line(&p.to_line()), Some(p));
        for bad in ["", "1 2 3 4", "1 2 3 4 x", "1 2 3 4 r 5", "a 2 3 4 -", "1 -2 3 4 -"] {
            assert_eq!(Point::from_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_request_without_pruning_in_force_saves_nothing_and_costs_what_dcp_added() {
        let mut s = Savings::default();
        let r = RequestFigures {
            time: 0,
            without: 1_000,
            removed: 0,
            added: 50,
            appended: 20,
            appended_before: 0,
            head_moved: false,
            fixed: 500,
            cold: false,
            rewritten: None,
            mark: Mark::None,
            rates: Rates::default(),
        };
        s.add(&r);
        assert_eq!((s.requests, s.kept_out_tokens, s.last_context, s.last_sent), (1, -50, 1_000, 1_050));
        assert_eq!((s.cost_without, s.cost_saved), (1_250.0, -62.5));
        assert!(s.cost_saved_share() < 0.0);
        // The next request reads the last one from the cache (but for what was appended after
        // its history) and writes what is new.
        s.add(&RequestFigures { time: 1, without: 1_200, removed: 300, appended_before: 20, ..r });
        assert_eq!(s.kept_out_tokens, 200);
        assert_eq!(s.cost_without, 1_250.0 + 100.0 + 250.0);
        // What was sent before is all cached: the 950 tokens sent now are inside it.
        let with_cost = 0.1 * 950.0;
        assert!((s.cost_saved - (-62.5 + 350.0 - with_cost)).abs() < 1e-9, "{}", s.cost_saved);
        assert_eq!(s.trail[1].with, 950);
    }
}
