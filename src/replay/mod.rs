//! `dcp replay`: what pruning would have cost and saved on a recorded session.
//!
//! A recorded session ([`steps`]) is replayed request by request: for every model step, the
//! history OpenCode sent at that moment goes through the sidecar's own engine ([`engine`]:
//! the same `Server`, policy and state as `dcp serve`, with the recorded timestamps as its
//! clock), and what the model would have been sent is counted ([`pieces`]) and billed with
//! the lab's prompt-cache model ([`cost`]) at the session's price sheet ([`Prices`]: its own,
//! from its model and the usage it recorded, unless `--prices` says otherwise), which dcp's
//! policy decides with too. Each [`Mode`] is one run: no pruning, dcp as configured, and
//! variants of its config. [`report`] prints and aggregates the runs. [`misses`] finds the
//! steps that quoted text a run had hidden from their request, and the run's cost is also
//! given with each such miss charged. Where the session recorded the provider's usage,
//! [`calibrate`] fits the model to it and bills both runs as the provider would have.
//!
//! What is estimated: the system prompt and the tool definitions are not stored with a
//! session, so they count as a fixed number of tokens per request (OpenCode's, measured in
//! the lab, see [`OPENCODE_OVERHEAD`]), plus what dcp adds to them in the modes that offer
//! its tools (its system paragraph and tool descriptions, counted).

pub mod calibrate;
pub mod cli;
pub mod cost;
pub mod dump;
pub mod engine;
pub mod misses;
pub mod pieces;
pub mod report;
pub mod steps;

use serde::Serialize;

use self::calibrate::Calibration;
use self::cost::{Bill, Biller, Piece, Totals, Ttl};
pub use self::dump::{requests, requests_in, SentRequest};
use self::engine::{ReplayEngineError, ReplayRun, Setup};
use self::misses::{Checked, Miss, Misses, QuoteIndex};
use self::pieces::Pieces;
use self::steps::{edits_by_message, replaced, AgentTools, Recorded, RecordedRequest, Step, Timeline};
use crate::config::{Config, RewriteMode};
use crate::prices::{Override, Sheet};
use crate::session::Message;
use crate::state::Strategy;
use crate::tokens::{EstimatorChoice, TokenCounter};

pub use crate::measure::{OPENCODE_OVERHEAD, OPENCODE_OVERHEAD_CHARS};

/// One replayed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// No pruning: the session as it would have gone without dcp.
    None,
    /// dcp as configured.
    Dcp,
    /// dcp with `rewrite.mode: "immediate"`.
    Immediate,
    /// One automatic strategy alone, without the agent tools.
    Only(Strategy),
    /// The agent tools alone (`discard`, `compress`, and `extract` where it is enabled).
    AgentTools,
    /// dcp as configured, but a session that re-fetches keeps masking's windows
    /// (`strategies.masking.backoff` off): what the backoff does, from the same run.
    NoBackoff,
    /// dcp as configured, without `restore` (its tool, and the handles its placeholders name):
    /// what recoverable hiding costs, from the same run.
    NoRestore,
}

impl Mode {
    /// Every mode `--mode all` adds to `none` and `dcp`.
    pub const EXTRA: [Mode; 6] = [
        Mode::Immediate,
        Mode::Only(Strategy::Deduplication),
        Mode::Only(Strategy::SupersedeWrites),
        Mode::Only(Strategy::PurgeErrors),
        Mode::Only(Strategy::Masking),
        Mode::AgentTools,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Dcp => "dcp",
            Mode::Immediate => "immediate",
            Mode::Only(s) => s.name(),
            Mode::AgentTools => "agent-tools",
            Mode::NoBackoff => "no-backoff",
            Mode::NoRestore => "no-restore",
        }
    }

    /// The modes to compare dcp with its own parts off, named only: `--mode all` leaves them out.
    pub const PARTS: [Mode; 2] = [Mode::NoBackoff, Mode::NoRestore];

    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::None, Mode::Dcp].into_iter().chain(Mode::EXTRA).chain(Mode::PARTS).find(|m| m.name() == name)
    }

    /// The config of this run, from the user's, deciding with the session's price `sheet`.
    pub fn config(self, base: &Config, sheet: &Sheet) -> Config {
        let mut c = base.clone();
        c.prices = Override::exactly(sheet);
        let only = |c: &mut Config, keep: Option<Strategy>| {
            c.strategies.deduplication.enabled &= keep == Some(Strategy::Deduplication);
            c.strategies.supersede_writes.enabled &= keep == Some(Strategy::SupersedeWrites);
            c.strategies.purge_errors.enabled &= keep == Some(Strategy::PurgeErrors);
            c.strategies.masking.enabled &= keep == Some(Strategy::Masking);
        };
        match self {
            Mode::None | Mode::Dcp => {}
            Mode::Immediate => c.rewrite.mode = RewriteMode::Immediate,
            Mode::Only(s) => {
                only(&mut c, Some(s));
                c.tools.discard.enabled = false;
                c.tools.extract.enabled = false;
                c.tools.restore.enabled = false;
            }
            Mode::AgentTools => only(&mut c, None),
            Mode::NoBackoff => c.strategies.masking.backoff = false,
            Mode::NoRestore => c.tools.restore.enabled = false,
        }
        c
    }
}

/// Which price sheet each session is billed and decided with: its own (from its model and
/// the usage it recorded, [`calibrate::own_sheet`]), the user's `prices` over it, then these.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    /// `--prices`: a sheet or file, over the session's own.
    pub given: Override,
    /// `--cache-ttl`: every sheet's TTL.
    pub ttl: Option<Ttl>,
}

impl Prices {
    /// Anthropic's 5-minute sheet for every session, with `ttl`: how replay billed before
    /// price sheets.
    pub fn anthropic(ttl: Ttl) -> Prices {
        Prices {
            given: Override { sheet: Some(crate::prices::ANTHROPIC_5M.into()), ..Override::default() },
            ttl: Some(ttl),
        }
    }

    /// The sheet of a session whose own is `own`, under the user's `config`.
    pub fn sheet(&self, config: &Config, own: Sheet) -> Sheet {
        let sheet = config.sheet(own.clone()).unwrap_or(own);
        let sheet = self.given.apply(sheet.clone()).unwrap_or(sheet);
        match self.ttl {
            Some(ttl) => sheet.with_ttl(ttl),
            None => sheet,
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub modes: Vec<Mode>,
    pub prices: Prices,
    /// The model's context window, for the pressure rule.
    pub context_limit: Option<u64>,
    /// Tokens every request holds besides the history: system prompt and tool definitions.
    pub overhead: u64,
    /// The user's dcp config, which the dcp modes start from.
    pub config: Config,
    /// How the requests are counted: o200k tokens, or characters / 4 as the lab's
    /// `summarize.py` counts them (to compare with it).
    pub estimator: EstimatorChoice,
}

/// A session to replay.
pub struct RecordedSession<'a> {
    pub id: &'a str,
    pub parent_id: Option<&'a str>,
    /// The session's project dir (`session.directory`), when known.
    pub directory: Option<&'a std::path::Path>,
    pub messages: &'a [Message],
    /// The usage the session's own row holds, for logs that record only a run's totals
    /// (`Recorded::of` reads each message's).
    pub totals: Option<Recorded>,
}

/// One request of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RequestBill {
    pub message_id: String,
    pub time: i64,
    #[serde(flatten)]
    pub bill: Bill,
    /// Why the engine applied pending rewrites on this request, if it did.
    pub applied: Option<String>,
    /// Why this request changed what an earlier one had sent, if it did: the policy's
    /// reason, or `host`.
    pub rewrite: Option<String>,
    /// The step this request produced quoted text the request had hidden (see [`misses`]),
    /// and what that is charged.
    pub miss: Option<ChargedMiss>,
    /// The same under the re-read model: only hidden texts no earlier miss fetched.
    pub miss_reread: Option<ChargedMiss>,
    /// Under the re-read model, tokens of hidden texts earlier misses fetched, carried in this
    /// request's context and charged at the cache-read price in `cost_with_misses_reread`.
    pub carried: u64,
}

/// A miss and its charge.
#[derive(Debug, Clone, Serialize)]
pub struct ChargedMiss {
    #[serde(flatten)]
    pub miss: Miss,
    #[serde(serialize_with = "cost::round")]
    pub charge: f64,
}

/// One run of a session.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    #[serde(flatten)]
    pub totals: Totals,
    /// The agent's `discard`/`extract` calls replayed, and how many got an answer that did
    /// what the recorded one did (see [`outcome`]).
    pub agent_calls: u64,
    pub agent_calls_same: u64,
    pub per_request: Vec<RequestBill>,
}

/// A replayed session: its runs by mode, and the provider's own counts.
#[derive(Debug, Clone)]
pub struct SessionReplay {
    pub session_id: String,
    pub requests: usize,
    pub recorded: Option<Recorded>,
    /// The price sheet the runs were billed and decided with.
    pub sheet: Sheet,
    /// The model fitted to the provider's usage, and both runs billed by it (see
    /// [`calibrate`]); `None` where the session recorded none.
    pub calibration: Option<Calibration>,
    pub runs: Vec<(Mode, Run)>,
}

/// Replays `session` in every mode of `options`, `none` and `dcp` first.
pub fn replay(session: &RecordedSession<'_>, options: &ReplayOptions) -> Result<SessionReplay, ReplayEngineError> {
    let pieces = Pieces::new(TokenCounter::new(options.estimator));
    let plain = Timeline::new(session.messages, AgentTools::Offered);
    let (recorded, sheet) = priced(session, &plain, options);
    let mut shared = Shared { pieces, index: QuoteIndex::new(session.messages), sheet };
    let mut modes = vec![Mode::None, Mode::Dcp];
    for m in &options.modes {
        if !modes.contains(m) {
            modes.push(*m);
        }
    }
    let mut runs = Vec::new();
    for mode in modes {
        runs.push((mode, run(session, mode, options, &mut shared)?));
    }
    let fit =
        calibrate::Fit { timeline: &plain, overhead: options.overhead, sheet: &shared.sheet, totals: session.totals };
    let bills = |mode: Mode| -> Vec<(&str, Bill)> {
        let run = runs.iter().find(|(m, _)| *m == mode).map(|(_, r)| r.per_request.as_slice()).unwrap_or(&[]);
        run.iter().map(|r| (r.message_id.as_str(), r.bill)).collect()
    };
    let calibration = calibrate::calibrate(&fit, session.messages, (&bills(Mode::None), &bills(Mode::Dcp)));
    let (session_id, requests, sheet) = (session.id.to_string(), plain.requests().len(), shared.sheet);
    Ok(SessionReplay { session_id, requests, recorded, sheet, calibration, runs })
}

/// The usage `session` recorded (its messages', else its row's totals), and the price sheet
/// it is replayed with.
fn priced(session: &RecordedSession<'_>, plain: &Timeline, options: &ReplayOptions) -> (Option<Recorded>, Sheet) {
    let recorded = plain.requests().iter().filter_map(|r| r.recorded).reduce(Recorded::sum).or(session.totals);
    let own = calibrate::own_sheet(session.messages, recorded.as_ref());
    (recorded, options.prices.sheet(&options.config, own))
}

/// How many sidecar processes a replayed run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processes {
    /// One for the whole session, as `dcp replay` runs it.
    One,
    /// A new one at each prompt, as each `opencode run` of the lab starts one: it reads the
    /// session from the state file the last one saved, and must decide as one process does.
    PerPrompt,
}

/// Runs every request of `session` in `mode` through the engine (none for [`Mode::None`]),
/// handing each to `visit`, and replays the agent's tool calls after it. Returns what the
/// engine adds to the system prompt and tool definitions, and the agent calls' outcome
/// (replayed, answered as recorded).
fn drive(
    session: &RecordedSession<'_>,
    (mode, sheet, processes): (Mode, &Sheet, Processes),
    options: &ReplayOptions,
    mut visit: impl FnMut(&Step<'_>),
) -> Result<(Vec<String>, (u64, u64), u64), ReplayEngineError> {
    let config = mode.config(&options.config, sheet);
    let offered =
        mode != Mode::None && config.enabled && (config.tools.discard.enabled || config.tools.extract.enabled);
    let timeline = Timeline::new(session.messages, if offered { AgentTools::Offered } else { AgentTools::Absent });
    let Some(mut engine) = (mode != Mode::None)
        .then(|| {
            let (session_id, parent_id, project) = (session.id, session.parent_id, session.directory);
            let context_limit = options.context_limit;
            ReplayRun::start(&Setup { session_id, parent_id, context_limit, config: &config, project })
        })
        .transpose()?
    else {
        visit_plain(&timeline, visit);
        return Ok((Vec::new(), (0, 0), 0));
    };
    let additions = engine.additions()?;
    let mut calls = (0, 0);
    let (mut offered, mut after) = (false, None);
    for request in timeline.requests() {
        if turn_starts(&timeline, after, request) {
            offered = start_turn(&mut engine, processes, after.is_none(), request)?;
        }
        after = Some(request.message);
        let answer = engine.transform(&timeline, request)?;
        let append: Vec<Message> =
            answer.append.iter().filter_map(|m| serde_json::from_value(m.clone()).ok()).collect();
        let replace: Vec<(usize, usize, Message)> = answer
            .replace
            .iter()
            .filter_map(|(f, t, m)| Some((*f, *t, serde_json::from_value(m.clone()).ok()?)))
            .collect();
        let applied = answer.applied.as_deref();
        let step = Step {
            timeline: &timeline,
            request,
            edits: answer.edits,
            replace: &replace,
            append: &append,
            applied,
            offered,
        };
        visit(&step);
        // A call the model made when the engine would not have offered the tools could not
        // have been made: it prunes nothing (OpenCode answers it as an unavailable tool).
        for call in request.agent_calls.iter().filter(|_| offered) {
            let answer = engine.agent_call(call)?;
            calls.0 += 1;
            calls.1 += u64::from(call.answer.as_deref().map(outcome) == Some(outcome(&answer)));
        }
    }
    Ok((additions, calls, engine.misses().refetches))
}

/// Starts a user turn before `request` (in a new process when each prompt has one, but the
/// first): whether its requests carry dcp's head.
fn start_turn(
    engine: &mut ReplayRun,
    processes: Processes,
    first: bool,
    request: &RecordedRequest,
) -> Result<bool, ReplayEngineError> {
    if !first && processes == Processes::PerPrompt {
        engine.restart()?;
    }
    engine.turn(request)
}

/// Hands every request of `timeline` to `visit` as sent without dcp.
fn visit_plain(timeline: &Timeline, mut visit: impl FnMut(&Step<'_>)) {
    for request in timeline.requests() {
        let (edits, replace, append) = (&[], &[], &[]);
        visit(&Step { timeline, request, edits, replace, append, applied: None, offered: false });
    }
}

/// Whether `request` starts a user turn, after the request that produced message `after`:
/// OpenCode decides a turn's tools when the user's message is created (see `ReplayRun::turn`).
fn turn_starts(timeline: &Timeline, after: Option<usize>, request: &RecordedRequest) -> bool {
    let since = after.map_or(0, |m| m + 1);
    after.is_none() || timeline.messages()[since..request.message].iter().any(crate::session::is_prompt)
}

/// What an agent tool's answer says was done, without its token figures and ids: "Discarded
/// 2 tool outputs", "Compressed 4 messages into b1". Answers recorded by an older dcp word
/// their details differently (a prune's tokens are now what leaves minus what replaces it).
fn outcome(answer: &str) -> &str {
    // A refusal is worded differently since the tools forgive wrong ids; what it did is the same.
    if answer.contains("Nothing was pruned") {
        return "Nothing was pruned";
    }
    answer.split(" (").next().unwrap_or(answer)
}

/// A request counted, waiting to be billed.
struct Counted {
    time: i64,
    pieces: Vec<Piece>,
    /// How many of `pieces` are the history (the rest was appended).
    history: usize,
    message_id: String,
    applied: Option<String>,
    offered: bool,
    checked: Checked,
    carried: u64,
}

/// One run: every request of the session in `mode`, counted and billed.
/// What the runs of one session share: the pieces counted, the index of quotes and texts
/// that finds misses, and the price sheet.
struct Shared {
    pieces: Pieces,
    index: QuoteIndex,
    sheet: Sheet,
}

fn run(
    session: &RecordedSession<'_>,
    mode: Mode,
    options: &ReplayOptions,
    shared: &mut Shared,
) -> Result<Run, ReplayEngineError> {
    let Shared { pieces, index, sheet } = shared;
    let (mut meter, rates) = (Biller::new(sheet), sheet.rates);
    let mut per_request = Vec::new();
    let mut totals = Totals::default();
    // The dcp share of the system prompt and tools is known once the engine has started,
    // after the first request is visited: it is added to every request afterwards.
    let mut counted: Vec<Counted> = Vec::new();
    let mut misses = Misses::new(index);
    let (additions, (agent_calls, agent_calls_same), refetches) =
        drive(session, (mode, sheet, Processes::One), options, |step| {
            let mut request = Vec::new();
            let history = count_history(step, pieces, &mut request);
            for m in step.append {
                pieces.message(m, &[], &mut request);
            }
            let id = step.timeline.messages()[step.request.message].id().to_string();
            let applied = step.applied.map(str::to_string);
            let offered = step.offered;
            let carried = misses.carried();
            let checked = misses.check(step, pieces);
            let time = step.request.time;
            counted.push(Counted {
                time,
                pieces: request,
                history,
                message_id: id,
                applied,
                offered,
                checked,
                carried,
            });
        })?;
    let opencode = pieces.fixed("opencode", options.overhead);
    // The system paragraph and each tool's definition, its argument schema included.
    let dcp: u64 = additions.iter().map(|t| pieces.count(t)).sum();
    let head = (dcp > 0).then(|| pieces.fixed("dcp", dcp));
    for Counted { time, pieces: request, history, message_id, applied, offered, checked, carried } in counted {
        let fixed: Vec<Piece> = std::iter::once(opencode).chain(head.filter(|_| offered)).collect();
        let pieces: Vec<Piece> = fixed.iter().copied().chain(request).collect();
        let bill = meter.bill(time, pieces, history + fixed.len());
        // A rewrite the engine did not make is OpenCode's: a compaction, or outputs it cleared.
        let rewrite = bill.rewrite.then(|| applied.clone().unwrap_or_else(|| "host".to_string()));
        totals.add(&bill, rewrite.as_deref());
        totals.carry(rates, carried);
        let charge = |t: &mut Totals, m: &Miss| t.charge(rates, &bill, m.hidden_tokens);
        let miss = checked.miss.map(|miss| ChargedMiss { charge: charge(&mut totals, &miss), miss });
        let reread = |t: &mut Totals, m: &Miss| t.charge_reread(rates, &bill, m.hidden_tokens);
        let miss_reread = checked.reread.map(|miss| ChargedMiss { charge: reread(&mut totals, &miss), miss });
        per_request.push(RequestBill { message_id, time, bill, applied, rewrite, miss, miss_reread, carried });
    }
    totals.refetches = refetches;
    Ok(Run { totals, agent_calls, agent_calls_same, per_request })
}

/// Counts a step's history with its edits applied into `request`; returns the number of
/// pieces `request` then holds.
fn count_history(step: &Step<'_>, pieces: &mut Pieces, request: &mut Vec<Piece>) -> usize {
    let by_message = edits_by_message(step.edits);
    for (m, i) in step.timeline.range(step.request).enumerate() {
        match replaced(step, m) {
            Some(Some(summary)) => {
                pieces.message(summary, &[], request);
                continue;
            }
            Some(None) => continue,
            None => {}
        }
        let message = step.timeline.message_at(i, step.request.time);
        let mine = by_message.get(&m).map(Vec::as_slice).unwrap_or(&[]);
        pieces.message(&message, mine, request);
    }
    request.len()
}
