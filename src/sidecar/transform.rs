//! `transform`: what the model sees on a request.
//!
//! A transform ([`Server::decide_request`], the per-request entry) records the automatic
//! strategies' decisions, applies pending rewrites (masking's: [`masking_candidates`]) when the
//! cache-aware [`policy`] says they pay, answers with the edits the plugin lacks
//! ([`edits`](super::edits); the message id tags among them, see [`ranges`]), and appends the
//! `<prunable-tools>` list (and a nudge when due) when what it names anew pays for it and the
//! session's budget allows ([`list`]). A compaction's copy gets the edits in force. The
//! per-request functions take the request's one [`RequestContext`]. What follows the answer
//! (the save of what changed, the request's savings) runs after it is handed out, off the
//! caller's path; the stages are timed in the debug log ([`super::laps`]).

use rustc_hash::FxHashSet as HashSet;
use std::collections::HashMap;

use super::edits::{answer_edits, edits_for, Handles};
use super::holdout;
use super::in_force::Sources;
use super::laps::Laps;
use super::mirror::Mirror;
use super::pending::waiting::FiguresBefore;
use super::pending::{After, Count, UpstreamOutcome};
use super::protocol::{AppliedRewrites, EditsAnswer, RpcError, TransformParams, Transformed};
use super::request::{RequestContext, RequestFacts};
use super::{internal, masking_candidates, now_ms, validate_session_id, LiveSession, Server};
use super::{list, ranges, rewind};
use crate::config::Notification;
use crate::policy;
use crate::session::{History, Node};
use crate::state::store::Slot;
use crate::state::trial::Arm;
use crate::state::{Ledger, PruneRecord, Strategy};
use crate::strategies::{compress, prunable};
use crate::texts;

/// Who is handed a transform's answer as soon as it is decided (see
/// [`Server::transform_answering`]).
pub type Answered<'a> = &'a mut dyn FnMut(&Result<Transformed, RpcError>);

impl Server {
    pub(super) fn transform(&mut self, p: TransformParams) -> Result<Transformed, RpcError> {
        self.transform_answering(p, &mut |_| {}, Count::Now)
    }

    /// A `transform` for a caller in this process (the proxy's engine): `answered` is handed
    /// the answer as soon as it is decided, and the request's savings (which tokenize its new
    /// messages) are counted after it, off the caller's path, now or when `count` says (see
    /// [`super::pending`]). The answer is returned too; an error before the decision, or a
    /// compaction, is only returned.
    pub fn transform_answering(
        &mut self,
        p: TransformParams,
        answered: Answered<'_>,
        count: Count,
    ) -> Result<Transformed, RpcError> {
        let sid = p.session_id.clone();
        validate_session_id(&sid)?;
        self.with_session(&sid, |server, session| server.transform_session(session, p, (answered, count)))
    }

    fn transform_session(
        &mut self,
        session: &mut LiveSession,
        p: TransformParams,
        (answered, count): (Answered<'_>, Count),
    ) -> Result<Transformed, RpcError> {
        let sid = p.session_id;
        // The last request, still uncounted, is counted before this one changes the history.
        self.settle_pending(session, &sid, UpstreamOutcome::Answered);
        let now = p.now.unwrap_or_else(now_ms);
        if let Some(parent) = p.parent_id {
            session.about.parent = Some(parent.is_some());
        }
        self.look_up_session(session, &sid);
        let named = super::sheet::Named { sheet: p.sheet.clone(), model: p.model.as_ref(), messages: &p.messages };
        self.pick_sheet(session, &sid, named);
        if p.compaction {
            return self.compaction(session, &sid, p.messages);
        }
        self.load_state(session, &sid);
        // The policy's ledger is the state's: a session dcp leaves alone keeps none.
        let skips = self.skips(Some(session));
        let mut ledger = if skips { None } else { self.store.slot(&sid).ok().map(|slot| slot.ledger_mut()) };
        let before = FiguresBefore::of(session.totals, ledger.as_deref());
        let idle_seconds = ledger.as_ref().and_then(|l| l.idle_seconds(now));
        session.resume(ledger.as_deref());
        session.totals.request();
        session.saves.request();
        let mut facts = RequestFacts::new(&self.rules, session.priced_by(&self.rules), idle_seconds);
        // A warm run starts with the session's first request and after every idle gap that
        // let the provider's cache go cold.
        let warm = ledger.as_mut().map_or(1, |l| l.request(now, facts.cold_start));
        (facts.have, facts.warm) = (p.have, warm);
        facts.context_limit = p.context_limit;
        // Take the mirror out while the history is borrowed from it, instead of cloning the
        // history on every request. A failed resolve leaves it empty: the plugin resyncs.
        let mut laps = Laps::start();
        let mut mirror = std::mem::take(&mut session.history.mirror);
        let decided = match mirror.resolve(p.base, p.messages) {
            Ok(_) => {
                laps.lap("resolve");
                count_unpruned(session, &mirror, &facts);
                self.decide_request(session, &sid, &mirror, facts)
            }
            Err(e) => Err(e),
        };
        laps.lap("decide");
        let (result, changed) = match decided {
            Ok((answer, changed)) => (Ok(answer), changed),
            Err(e) => (Err(e), Changed::No),
        };
        answered(&result);
        laps.lap("answered");
        let after = After { result: &result, changed: changed == Changed::Yes, facts, count, before };
        self.after_answer(session, &sid, &mirror, after, &mut laps);
        session.history.precounted = session.history.precounted.min(mirror.kept());
        session.history.mirror = mirror;
        result
    }

    /// The summariser sees the history as the model does, but this is no request: no
    /// counting, no policy, no list. It is not the next request's history either, so the
    /// mirror is left as it is.
    fn compaction(&mut self, session: &LiveSession, sid: &str, wire: Vec<Node>) -> Result<Transformed, RpcError> {
        let mut scratch = Mirror::default();
        let messages = scratch.resolve(0, wire)?;
        if self.skips(Some(session)) {
            return Ok(Transformed::unchanged());
        }
        let via = self.restore_via(session, self.store.loaded(sid).map(|slot| slot.ledger()));
        let slot = self.store.slot(sid).map_err(internal)?;
        let positions: HashMap<&str, (usize, usize)> =
            History::new(messages).calls.iter().map(|c| (c.call_id, (c.message, c.part))).collect();
        let position = |id: &str| positions.get(id).copied();
        let handles = Handles { state: slot.state(), via };
        let edits = edits_for(messages, position, slot.state().pruned.iter(), handles, &mut HashSet::default());
        let spans = compress::spans(messages, &slot.state().blocks, |b| b.applied);
        let replace = ranges::replacements(sid, messages, &slot.state().blocks, spans);
        Ok(Transformed {
            seq: None,
            edits: EditsAnswer::Full(edits),
            replace,
            append: Vec::new(),
            notify: None,
            applied: None,
        })
    }

    /// Decides what the model sees for one request of session `sid`: records the automatic
    /// strategies' decisions, applies what the policy allows, and lists what the agent may
    /// prune. Says whether the session's state changed, which a save must then write.
    fn decide_request(
        &mut self,
        session: &mut LiveSession,
        sid: &str,
        mirror: &Mirror,
        facts: RequestFacts,
    ) -> Result<(Transformed, Changed), RpcError> {
        if self.skips(Some(session)) {
            return Ok((Transformed::unchanged(), Changed::No));
        }
        let observed =
            self.store.observe_newest(sid, mirror.newest_compaction()).map_err(|e| RpcError::params(e.to_string()))?;
        self.back_off(session, sid);
        let arm = self.arm(session, sid);
        let mut cx = self.request_context(session, sid, mirror, facts).map_err(internal)?;
        cx.session.savings.seed(cx.slot);
        holdout::note_prompts(&mut cx);
        if arm == Some(Arm::Unpruned) {
            // Its first request saves the arm it was just given.
            let first = cx.slot.state().savings.requests == 0;
            return Ok((holdout::answer(&mut cx), if first { Changed::Yes } else { Changed::No }));
        }
        Ok(answer_request(&mut cx, observed.compacted))
    }
}

/// Whether answering a request changed the session's state, which a save must then write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changed {
    Yes,
    No,
}

/// The params of a `transform`. The messages, which the request holds apart from its params,
/// are moved in as they are: decoding them again would rebuild every node of a long history.
pub(super) fn params(params: serde_json::Value, messages: Option<Vec<Node>>) -> Result<TransformParams, RpcError> {
    let mut p: TransformParams = super::protocol::params("transform", params)?;
    p.messages = messages.unwrap_or_default();
    Ok(p)
}

/// The answer to one request: records the automatic strategies' decisions, applies what the
/// policy allows, and lists what the agent may prune. `compacted`: the state was just cleared
/// for a newer compaction.
fn answer_request(cx: &mut RequestContext, compacted: bool) -> (Transformed, Changed) {
    let mut laps = Laps::start();
    cx.slot.name_if_unnamed(cx.session.about.title.as_deref());
    // The index reads only what is new since the last request, and hands over the calls
    // that became prunable.
    rewind::sync(cx);
    let (rules, messages, slot) = (cx.rules, cx.mirror.messages(), &mut *cx.slot);
    let index = &mut cx.session.history.index;
    let (state, tokens) = slot.state_and_tokens();
    let decided = index.decisions(messages, state, rules, tokens).into_iter();
    let recorded_now: Vec<String> =
        decided.filter_map(|d| slot.record(&d.call_id, d.record).then_some(d.call_id)).collect();
    laps.lap("decisions");
    let (caches, history) = (&mut cx.session.caches, &cx.session.history);
    let refetched = super::refetch::observe(&mut caches.refetches, &history.index, cx.slot, cx.mirror.messages()) > 0;
    let session = &mut *cx.session;
    let sources =
        Sources { slot: cx.slot, index: &session.history.index, mirror: cx.mirror, sizes: &mut session.caches.sizes };
    session.caches.in_force.update(sources, cx.views);
    let in_force = session.caches.in_force.approx();
    laps.lap("in_force");
    let collapsed = ranges::collapse_turn(cx);
    let applied_now = apply_pending(cx);
    laps.lap("apply");
    // An unreadable state file is set aside by the save a change brings.
    let corrupt = cx.slot.corrupt().is_some();
    let changed = corrupt || compacted || collapsed || refetched || !recorded_now.is_empty() || applied_now.is_some();
    let applied = applied_now.as_ref().map(|a| AppliedRewrites {
        reason: a.reason,
        calls: a.calls.len(),
        ranges: a.blocks.len(),
    });
    let offered = cx.offered();
    let (seq, edits) = answer_edits(cx, ranges::tags(rules, offered, cx.mirror.sizes()));
    laps.lap("edits");
    let replace = ranges::applied(cx);
    let recorded = cx.slot.take_recorded();
    let append = if offered { list::tail_message(cx, &recorded) } else { Vec::new() };
    laps.lap("tail");
    let balance = policy::Charges {
        in_force,
        applied: applied_now.as_ref().map_or(0, |a| a.tokens),
        tail: applied_now.as_ref().map_or(0, |a| a.tail),
        head: if offered { cx.head_tokens() } else { 0 },
        appended: append.iter().flat_map(|m| &m.parts).map(|p| cx.slot.tokens.count(&p.text)).sum(),
        ..cx.facts.request()
    };
    // The ledger goes to the state file with the next save (see `Server::save_dirty`).
    charge(cx.session, cx.slot.ledger_mut(), &balance);
    let told = texts::notice::state_file(cx.slot.file_news());
    let notify = texts::notice::joined(told, notification(cx, applied_now.as_ref(), &recorded_now));
    // What changed was noted by the slot's operations; a file to set aside asks for a save.
    cx.slot.set_aside_due();
    let answer = Transformed { seq: Some(seq), edits, replace, append, notify, applied };
    laps.lap("notify");
    if laps.on() {
        tracing::debug!(session = cx.sid, "answer {laps}");
    }
    (answer, if changed { Changed::Yes } else { Changed::No })
}

/// Adds what this request would cost without pruning to the session's baseline, which the
/// loss bound is a share of (`crate::policy::allowance`).
fn count_unpruned(session: &mut LiveSession, mirror: &Mirror, facts: &RequestFacts) {
    session.totals.count_unpruned(facts.rates, mirror.total(), facts.cold_start);
}

/// Adds one request's balance against no pruning to the session's, and the price of dcp's
/// own additions to what they have cost (`crate::policy::additions`); the ledger keeps the
/// totals and the lists sent, which a new sidecar goes on from.
fn charge(session: &mut LiveSession, ledger: &mut Ledger, request: &policy::Charges) {
    ledger.banked += policy::balance(request);
    session.totals.charge(request);
    session.totals.keep(ledger);
    session.lists.keep(ledger);
}

/// What a pending rewrite changes: one call's fields, or a range of messages.
enum Target<'a> {
    Call(&'a str),
    Block(u32),
    /// A masking, recorded only when it is applied.
    Mask(String, PruneRecord),
}

/// The cache-aware policy: applies the pending rewrites together, when it pays. Returns the
/// calls and ranges whose rewrites it applied, or `None` when it waits.
fn apply_pending(cx: &mut RequestContext) -> Option<AppliedNow> {
    let mirror = cx.mirror;
    // The waiting prunes of calls in the history, the waiting ranges and the calls masking
    // would take, in history order.
    let masking = masking_candidates::mask_pending(cx);
    let (rules, slot, session, request) = (cx.rules, &mut *cx.slot, &mut *cx.session, &cx.facts);
    // Where each waiting prune's call is and what its rewrite removes were found when the
    // view took it in.
    let mut pending: Vec<((usize, usize), Target, policy::Pending)> = session
        .caches
        .in_force
        .waiting()
        .map(|(id, w)| {
            let pending = policy::Pending { tokens: w.approx, tail: mirror.tail(w.at.0), ..Default::default() };
            (w.at, Target::Call(id), pending)
        })
        .collect();
    let waiting = session.caches.spans.spans(mirror, (&slot.state().blocks, slot.resets()), cx.views, |b| !b.applied);
    let blocks = ranges::pending(waiting, &slot.state().blocks, mirror);
    pending.extend(blocks.into_iter().map(|(from, id, p)| ((from, 0), Target::Block(id), p)));
    pending.extend(masking.into_iter().map(|(at, id, record, p)| (at, Target::Mask(id, record), p)));
    pending.sort_by_key(|(at, _, _)| *at);
    let base = policy::Inputs {
        context: mirror.total(),
        banked: slot.ledger().banked,
        baseline: session.totals.baseline(),
        added: session.totals.added(),
        ..request.inputs()
    };
    let costs: Vec<policy::Pending> = pending.iter().map(|(_, _, p)| *p).collect();
    let (cut, reason) = policy::choose(&rules.config().rewrite, &base, &costs)?;
    let tokens = costs[cut..].iter().filter(|p| policy::takes(reason, p)).map(|p| p.tokens).sum::<u64>();
    tracing::debug!(
        session = cx.sid,
        ?reason,
        cut,
        pending = pending.len(),
        tokens,
        tail = costs[cut].tail,
        context = base.context,
        warm = base.warm,
        banked = base.banked,
        baseline = base.baseline,
        added = base.added,
        "applying pending rewrites"
    );
    let mut applied = AppliedNow { reason, calls: Vec::new(), blocks: Vec::new(), tokens, tail: costs[cut].tail };
    for (_, target, _) in pending[cut..].iter().filter(|(_, _, p)| policy::takes(reason, p)) {
        mark_applied(slot, target, &mut applied);
    }
    Some(applied)
}

/// Marks one pending rewrite applied, and adds it to what this request applied.
fn mark_applied(slot: &mut Slot, target: &Target, applied: &mut AppliedNow) {
    match target {
        Target::Mask(id, record) => {
            slot.record(id, PruneRecord { applied: true, ..record.clone() });
            applied.calls.push(id.clone());
        }
        Target::Call(id) => {
            slot.apply(id);
            applied.calls.push(id.to_string());
        }
        Target::Block(id) => {
            slot.apply_block(*id);
            applied.blocks.push(*id);
        }
    }
}

/// The rewrites a request applied, and why.
#[derive(Debug)]
struct AppliedNow {
    reason: policy::Trigger,
    calls: Vec<String>,
    blocks: Vec<u32>,
    /// Tokens the rewrites remove, and the tail of the prompt they re-bill.
    tokens: u64,
    tail: u64,
}

/// The notification of this request's prunes, at the configured level: the rewrites applied
/// to it (compressed ranges among them), and the prunes recorded now whose rewrite waits.
fn notification(cx: &RequestContext, applied_now: Option<&AppliedNow>, recorded_now: &[String]) -> Option<String> {
    let (level, slot) = (cx.rules.config().prune_notification, &*cx.slot);
    if level == Notification::Off {
        return None;
    }
    let pruned = &slot.state().pruned;
    let records = |ids: &[String]| -> Vec<(&str, &PruneRecord)> {
        ids.iter().filter_map(|id| pruned.get_key_value(id).map(|(k, r)| (k.as_str(), r))).collect()
    };
    let blocks = applied_now.map(|a| a.blocks.as_slice()).unwrap_or_default();
    let mut notice = texts::Notice {
        applied: applied_now.map(|a| records(&a.calls)).unwrap_or_default(),
        ranges: blocks.iter().filter_map(|id| slot.state().blocks.by_id.get(id).cloned()).collect(),
        waiting: records(recorded_now).into_iter().filter(|(_, r)| !r.applied).collect(),
        ..texts::Notice::default()
    };
    if notice.applied.is_empty() && notice.ranges.is_empty() && notice.waiting.is_empty() {
        return None;
    }
    notice.older_waiting = slot.state().pruned.values().filter(|r| !r.applied).count() - notice.waiting.len()
        + slot.state().blocks.active().filter(|b| !b.applied).count();
    if level == Notification::Detailed {
        notice.keys = agent_keys(cx, &notice);
    }
    notice.so_far = crate::stats::money::so_far(slot.state(), cx.rules.config());
    Some(texts::notification(level, &notice))
}

/// The key argument of each call the agent pruned itself (`discard`, `extract`) that `notice`
/// shows, by call id, as the prunable list shows it ([`prunable::shown_key`]): the detailed
/// notice names them.
fn agent_keys<'a>(cx: &RequestContext<'a>, notice: &texts::Notice<'a>) -> HashMap<&'a str, &'a str> {
    let messages = cx.mirror.messages();
    let chosen = notice.applied.iter().chain(&notice.waiting);
    let chosen = chosen.filter(|(_, r)| matches!(r.strategy, Strategy::Discard | Strategy::Extract));
    let key = |id: &str| -> Option<&'a str> {
        let (at, _) = cx.session.history.index.position(id)?;
        let calls = crate::session::tool_calls(std::slice::from_ref(messages.get(at)?));
        let key = calls.into_iter().find(|c| c.call_id == id)?.key_argument()?;
        Some(prunable::shown_key(key, cx.project))
    };
    chosen.filter_map(|(id, _)| Some((*id, key(id)?))).collect()
}
