//! What reached the model: a session's running figures, request by request, behind the
//! savings `dcp stats` and `dcp report` show, and what the provider reported it billed.
//!
//! A prune recorded is not a prune sent: its rewrite may wait for the policy, and a waiting
//! prune keeps nothing out of any request. So the sidecar counts, as it answers each request,
//! what it sent (the history with its edits and ranges, its head, what it appended) beside
//! what OpenCode would have sent without dcp, and what each would have cost under the
//! prompt-cache model `dcp replay` bills with (the prefix the provider still has cached read at
//! the session's cache-read price, the rest written at its cache-write price: 0.1x and 1.25x
//! the input price on Anthropic's 5-minute cache); see `crate::sidecar::savings`. Sizes are
//! tokens, costs tokens at the base input price. The policy's ledger weighs the same things
//! to decide, but in the mirror's unit (characters / 4) for what is in force, which for dense
//! outputs (code, CSV) runs well under their tokens: its balance is the policy's, not a
//! figure to report. The state file keeps the sums in its `stats` object (flat, beside DCP's
//! keys, so the all-time report reads them from a file's head), each request's context size
//! with and without dcp in `dcp.trail`, and, for the requests whose usage the provider
//! reported (OpenCode's tokens per step, the upstream's `usage` through the proxy), that
//! usage in `dcp.reported`, raw, for the price sheets to price.

mod usage;

pub use self::usage::{Model, ModelPrices, Reported, Usage};
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
    /// The last request's size without dcp and as sent (the prefixes the provider cached),
    /// and what dcp appended after its history, which the next request does not share.
    pub last_context: u64,
    pub last_sent: u64,
    pub last_appended: u64,
    /// Each request's context with and without dcp.
    pub trail: Vec<Point>,
    /// What the provider reported for the requests whose usage dcp learned, by request, in
    /// order: the bill beside what dcp counted; and the models they went to.
    pub reported: Vec<Reported>,
    pub models: Vec<Model>,
}

/// How long after the request it produced an assistant message may have been created: the
/// message is created right before its request is sent.
const PRODUCED_WITHIN_MS: i64 = 60_000;

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
    /// The request's size without dcp (the history as OpenCode sent it, but for dcp's agent
    /// calls, and OpenCode's own system prompt and tools) and as dcp sent it (its edits and
    /// ranges applied, its head and what it appended).
    pub without: u64,
    pub with: u64,
    /// Tokens dcp appended after the history (the prunable list): never part of the prefix the
    /// next request shares with this one.
    pub appended: u64,
    /// The tokens at the start of each request that the provider still had cached from the
    /// request before: 0 after an idle gap that let the cache go cold.
    pub cached_without: u64,
    pub cached_with: u64,
    pub mark: Mark,
    /// The session's cache prices.
    pub rates: Rates,
}

/// What one request cost, without dcp and with it, in tokens at the base input price.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Billed {
    pub without: f64,
    pub with: f64,
}

/// A request that turned out to be made only because dcp offered its tools (the model step
/// it produced called nothing but them): without dcp it would not have been made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unmade {
    /// Its number among the session's requests, from 1.
    pub request: u64,
    /// Its size without dcp, and what it cost without dcp and with it.
    pub without: u64,
    pub billed: Billed,
    /// The size without dcp of the request before it, which the next request's prefix
    /// without dcp is shared with.
    pub context_before: u64,
}

impl Savings {
    /// Adds one answered request and returns what it cost. Its cost with and without dcp is
    /// the replay's prompt-cache model (`crate::replay::cost`): the prefix the provider still
    /// has cached is read at the sheet's read price, the rest written at its write price.
    pub fn add(&mut self, r: &RequestFigures) -> Billed {
        self.requests += 1;
        self.kept_out_tokens += r.without as i64 - r.with as i64;
        let cost = |size: u64, cached: u64| {
            let cached = cached.min(size);
            r.rates.read * cached as f64 + r.rates.write * (size - cached) as f64
        };
        let billed = Billed { without: cost(r.without, r.cached_without), with: cost(r.with, r.cached_with) };
        self.cost_without += billed.without;
        self.cost_saved += billed.without - billed.with;
        self.last_context = r.without;
        self.last_sent = r.with;
        self.last_appended = r.appended;
        let saved = (billed.without - billed.with).round() as i64;
        self.trail.push(Point { time: r.time, without: r.without, with: r.with, saved, mark: r.mark });
        billed
    }

    /// Takes a request that dcp's tools alone made out of what the session would have cost
    /// without dcp: what it cost with dcp stays, as what dcp added. Its point keeps its
    /// context without dcp (the history it carried) and says what it cost. Nothing is done
    /// when the request is not the last one added.
    pub fn unmade(&mut self, u: &Unmade) {
        if u.request != self.requests {
            return;
        }
        let Some(point) = self.trail.last_mut() else { return };
        self.kept_out_tokens -= u.without as i64;
        self.cost_without -= u.billed.without;
        self.cost_saved -= u.billed.without;
        point.saved = (-u.billed.with).round() as i64;
        self.last_context = u.context_before;
    }

    /// The request that a model step created at `created` (ms) was produced by: the first one
    /// made at or after that time, within a minute (OpenCode creates a step's message right
    /// before it sends the step's request). `None` when dcp answered no such request.
    pub fn request_at(&self, created: i64) -> Option<u64> {
        let at = self.trail.partition_point(|p| p.time < created);
        self.trail.get(at).filter(|p| p.time - created <= PRODUCED_WITHIN_MS)?;
        Some(at as u64 + 1)
    }

    /// Records what the provider reported for `request` (from 1), and the model it went to,
    /// replacing what was recorded for it before. Returns whether anything changed.
    pub fn report(&mut self, request: u64, usage: Usage, model: Option<&Model>) -> bool {
        if request == 0 || request > self.requests || usage.is_empty() {
            return false;
        }
        let model = model.map(|m| self.model_index(m));
        let entry = Reported { request, usage, model };
        let at = self.reported.partition_point(|r| r.request < request);
        match self.reported.get_mut(at).filter(|r| r.request == request) {
            Some(r) if *r == entry => false,
            Some(r) => {
                *r = entry;
                true
            }
            None => {
                self.reported.insert(at, entry);
                true
            }
        }
    }

    /// Keeps `model` among the session's models (the sheet of a later process's first request
    /// is its); returns whether it is new.
    pub fn remember(&mut self, model: &Model) -> bool {
        let known = self.models.len();
        self.model_index(model);
        self.models.len() > known
    }

    /// The model the session names last: the one of its last reported usage, else the last
    /// it learnt.
    pub fn last_model(&self) -> Option<&Model> {
        let reported = self.reported.iter().rev().find_map(|r| r.model);
        reported.and_then(|i| self.models.get(i as usize)).or_else(|| self.models.last())
    }

    /// The model the session knows by `provider` and `id`, the newest with prices first.
    pub fn known_model(&self, provider: &str, id: &str) -> Option<&Model> {
        let same = |m: &&Model| m.provider == provider && m.id == id;
        let priced = self.models.iter().rev().filter(same).find(|m| m.prices.is_some());
        priced.or_else(|| self.models.iter().rev().find(same))
    }

    /// The index of `model` in [`Savings::models`], added when new.
    fn model_index(&mut self, model: &Model) -> u32 {
        match self.models.iter().position(|m| m == model) {
            Some(i) => i as u32,
            None => {
                self.models.push(model.clone());
                (self.models.len() - 1) as u32
            }
        }
    }

    /// The usage the provider reported for every request dcp learned it of, summed, and how
    /// many requests that is.
    pub fn reported_total(&self) -> (Usage, u64) {
        let mut total = Usage::default();
        self.reported.iter().for_each(|r| total.add(&r.usage));
        (total, self.reported.len() as u64)
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

    fn figures(without: u64, with: u64) -> RequestFigures {
        RequestFigures {
            time: 0,
            without,
            with,
            appended: 20,
            cached_without: 0,
            cached_with: 0,
            mark: Mark::None,
            rates: Rates::default(),
        }
    }

    #[test]
    fn a_request_is_billed_on_what_each_side_had_cached() {
        let mut s = Savings::default();
        let billed = s.add(&figures(1_000, 1_050));
        assert_eq!((s.requests, s.kept_out_tokens, s.last_context, s.last_sent), (1, -50, 1_000, 1_050));
        assert_eq!(billed, Billed { without: 1_250.0, with: 1_312.5 });
        assert!(s.cost_saved_share() < 0.0);
        // The next request reads what each side had cached and writes the rest; a cached
        // prefix past the request's size is read as the whole request.
        let next = RequestFigures { cached_without: 1_000, cached_with: 2_000, ..figures(1_200, 950) };
        let billed = s.add(&next);
        assert_eq!(s.kept_out_tokens, 200);
        assert!((billed.without - (100.0 + 250.0)).abs() < 1e-9, "{billed:?}");
        assert!((billed.with - 95.0).abs() < 1e-9, "{billed:?}");
        assert_eq!(s.cost_without, 1_250.0 + 350.0);
        assert_eq!((s.trail[1].with, s.trail[1].saved, s.last_appended), (950, 255, 20));
    }

    #[test]
    fn a_request_dcp_s_tools_alone_made_counts_only_what_it_cost_with_dcp() {
        let mut s = Savings::default();
        s.add(&figures(1_000, 900));
        let context_before = s.last_context;
        let billed = s.add(&RequestFigures { cached_without: 1_000, cached_with: 900, ..figures(1_100, 950) });
        let unmade = Unmade { request: 2, without: 1_100, billed, context_before };
        s.unmade(&unmade);
        // Without dcp, only the first request was made: 1,000 tokens at the write price.
        assert_eq!(s.kept_out_tokens, 100 - 950);
        assert_eq!(s.cost_without, 1_250.0);
        assert!((s.cost_saved - (1_250.0 - 1_125.0 - billed.with)).abs() < 1e-9, "{}", s.cost_saved);
        assert_eq!((s.trail[1].without, s.trail[1].saved, s.last_context), (1_100, -billed.with.round() as i64, 1_000));
        // Only the last request can be taken out, once.
        let before = s.clone();
        s.unmade(&Unmade { request: 1, ..unmade });
        assert_eq!(s, before);
    }

    #[test]
    fn a_step_s_usage_goes_to_the_request_made_right_after_it_was_created() {
        let mut s = Savings::default();
        for time in [1_000, 5_000, 9_000] {
            s.add(&RequestFigures { time, ..figures(10, 10) });
        }
        assert_eq!(s.request_at(4_990), Some(2));
        assert_eq!(s.request_at(5_000), Some(2));
        assert_eq!(s.request_at(9_001), None, "no request after it");
        assert_eq!(s.request_at(-70_000), None, "too long before the first request");
        let usage = Usage { input: 5, output: 2, ..Usage::default() };
        let model = Model { provider: "fake".into(), id: "fake-model".into(), ..Model::default() };
        assert!(s.report(3, usage, Some(&model)) && s.report(1, usage, None) && !s.report(3, usage, Some(&model)));
        assert!(!s.report(4, usage, None), "no fourth request");
        assert!(!s.report(2, Usage::default(), None), "nothing reported");
        let got: Vec<(u64, Option<u32>)> = s.reported.iter().map(|r| (r.request, r.model)).collect();
        assert_eq!(got, vec![(1, None), (3, Some(0))]);
        assert_eq!(s.models, vec![model]);
        assert_eq!(s.reported_total(), (Usage { input: 10, output: 4, ..Usage::default() }, 2));
    }
}
