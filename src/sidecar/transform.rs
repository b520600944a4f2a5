//! `transform`: what the model sees on a request.
//!
//! A transform ([`Server::decide_request`], the per-request entry) records the automatic
//! strategies' decisions, applies pending rewrites (masking's: [`masking_candidates`]) when the
//! cache-aware [`policy`] says they pay, answers with the edits the plugin lacks (the message
//! id tags among them, see [`ranges`]), and appends the `<prunable-tools>` list ([`list`]). A
//! compaction's copy gets the edits in force.

use rustc_hash::FxHashSet as HashSet;
use std::collections::HashMap;

use super::mirror::Mirror;
use super::protocol::{Applied, Edit, Edits, RpcError, TransformParams, Transformed};
use super::ranges;
use super::{head, internal, list, masking_candidates, now_ms, validate_session_id, Server, Session};
use crate::config::Notification;
use crate::policy;
use crate::session::{History, Message, Node};
use crate::state::blocks::Block;
use crate::state::store::Slot;
use crate::state::{Ledger, PruneRecord, SessionState};
use crate::strategies::{self, Rules};
use crate::texts;

/// What the plugin holds of a session's edits: the number of the last answer whose edits
/// it may keep, what they were computed from, and the calls they cover.
#[derive(Debug, Default)]
pub(super) struct EditsSent {
    seq: u64,
    basis: Option<EditsBasis>,
    calls: HashSet<String>,
    /// The messages whose id tags were sent (see [`ranges`]).
    tags: usize,
}

/// What a set of edits was computed from: the slot's revision and resets, the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EditsBasis {
    revision: u64,
    resets: u64,
    messages: usize,
}

/// What a transform knows about the request besides the history.
struct RequestInfo {
    have: Option<u64>,
    requests: u32,
    /// Requests since the cache was last cold, this one included.
    warm: u32,
    idle_seconds: Option<u64>,
    context_limit: Option<u64>,
}

impl Server {
    pub(super) fn transform(&mut self, p: TransformParams) -> Result<Transformed, RpcError> {
        let sid = p.session_id.clone();
        validate_session_id(&sid)?;
        self.with_session(&sid, |server, session| server.transform_session(session, p))
    }

    fn transform_session(&mut self, session: &mut Session, p: TransformParams) -> Result<Transformed, RpcError> {
        let sid = p.session_id;
        let now = p.now.unwrap_or_else(now_ms);
        if let Some(parent) = p.parent_id {
            session.parent = Some(parent.is_some());
        }
        self.look_up_session(session, &sid);
        if p.compaction {
            return self.compaction(session, &sid, p.messages);
        }
        if session.last_request_ms.is_none() {
            self.resume_ledger(session, &sid);
        }
        let idle_seconds = session.last_request_ms.map(|t| (now.saturating_sub(t) / 1000).max(0) as u64);
        session.last_request_ms = Some(now);
        session.requests += 1;
        // A warm run starts with the session's first request and after every idle gap that
        // let the provider's cache go cold.
        if idle_seconds.is_none_or(|s| s >= self.rules.config().rewrite.cold_cache_seconds) {
            session.warm = 0;
        }
        session.warm += 1;
        let request = RequestInfo {
            have: p.have,
            requests: session.requests,
            warm: session.warm,
            idle_seconds,
            context_limit: p.context_limit,
        };
        // Take the mirror out while the history is borrowed from it, instead of cloning the
        // history on every request. A failed resolve leaves it empty: the plugin resyncs.
        let mut mirror = std::mem::take(&mut session.mirror);
        let result = match mirror.resolve(p.base, p.messages) {
            Ok(_) => {
                count_unpruned(&self.rules, session, &mirror, &request);
                self.decide_request(session, &sid, &mirror, request)
            }
            Err(e) => Err(e),
        };
        if let Some(answer) = result.as_ref().ok().filter(|a| a.seq.is_some()) {
            self.record_savings(session, &sid, &mirror, answer, idle_seconds);
        }
        session.precounted = session.precounted.min(mirror.kept());
        session.mirror = mirror;
        result
    }

    /// The summariser sees the history as the model does, but this is no request: no
    /// counting, no policy, no list. It is not the next request's history either, so the
    /// mirror is left as it is.
    fn compaction(&mut self, session: &Session, sid: &str, wire: Vec<Node>) -> Result<Transformed, RpcError> {
        let mut scratch = Mirror::default();
        let messages = scratch.resolve(0, wire)?;
        if self.skips(Some(session)) {
            return Ok(Transformed::unchanged());
        }
        let (slot, _) = self.store.slot(sid).map_err(internal)?;
        let positions: HashMap<&str, (usize, usize)> =
            History::new(messages).calls.iter().map(|c| (c.call_id, (c.message, c.part))).collect();
        let position = |id: &str| positions.get(id).copied();
        let edits = edits_for(messages, position, &slot.state, &mut HashSet::default());
        let replace = ranges::replacements(sid, messages, &slot.state.blocks);
        Ok(Transformed {
            seq: None,
            edits: Edits::Full(edits),
            replace,
            append: Vec::new(),
            notify: None,
            applied: None,
        })
    }

    /// Decides what the model sees for one request of session `sid`: records the automatic
    /// strategies' decisions, applies what the policy allows, and lists what the agent may prune.
    fn decide_request(
        &mut self,
        session: &mut Session,
        sid: &str,
        mirror: &Mirror,
        request: RequestInfo,
    ) -> Result<Transformed, RpcError> {
        if self.skips(Some(session)) {
            return Ok(Transformed::unchanged());
        }
        let observed =
            self.store.observe_newest(sid, mirror.newest_compaction()).map_err(|e| RpcError::params(e.to_string()))?;
        let (slot, _) = self.store.slot(sid).map_err(internal)?;
        if slot.state.session_name.is_none() {
            slot.state.session_name = session.title.clone();
        }
        let mut dirty = observed.compacted;
        // The index reads only what is new since the last request, and hands over the calls
        // that became prunable.
        let messages = mirror.messages();
        let index = &mut session.index;
        if index.sync(messages, mirror.kept(), slot.resets, &self.rules) {
            tracing::debug!(session = sid, rebuilds = index.rebuilds(), "index rebuilt: what it had read changed");
        }
        let mut recorded_now = Vec::new();
        for d in index.decisions(messages, &slot.state, &self.rules, &mut slot.tokens) {
            if slot.record(&d.call_id, d.record) {
                recorded_now.push(d.call_id);
            }
        }
        dirty |= !recorded_now.is_empty();
        let in_force = masking_candidates::in_force(slot, &session.index, mirror);
        let applied_now = apply_pending(&self.rules, slot, session, sid, mirror, &request);
        dirty |= applied_now.is_some();
        let applied =
            applied_now.as_ref().map(|a| Applied { reason: a.reason, calls: a.calls.len(), ranges: a.blocks.len() });
        let offered = head::offered(&self.rules, session);
        let tags = ranges::tags(&self.rules, offered, mirror.sizes());
        let (seq, edits) = answer_edits(session, slot, mirror, request.have, tags);
        let replace = ranges::replacements(sid, messages, &slot.state.blocks);
        let project = self.options.project.as_ref().and_then(|p| p.to_str());
        let append = list::tail_message(&self.rules, project, session, slot, sid, messages, offered);
        let balance = policy::Request {
            cold: request.idle_seconds.is_some_and(|s| s >= self.rules.config().rewrite.cold_cache_seconds),
            in_force,
            applied: applied_now.as_ref().map_or(0, |a| a.tokens),
            tail: applied_now.as_ref().map_or(0, |a| a.tail),
            head: if offered { head::tokens(&mut self.head, &self.rules, &slot.tokens) } else { 0 },
            appended: append.iter().flat_map(|m| &m.parts).map(|p| slot.tokens.count(&p.text)).sum(),
        };
        charge(session, &balance);
        // The ledger goes to the state file with the next save (see `Server::save_dirty`).
        slot.state.ledger = ledger(session);
        let notify = notification(self.rules.config().prune_notification, slot, applied_now.as_ref(), &recorded_now);
        if dirty {
            slot.dirty = true;
            self.save(session, sid);
        }
        Ok(Transformed { seq: Some(seq), edits, replace, append, notify, applied })
    }

    /// Picks up the policy's ledger where the session's state file left it: a restarted
    /// sidecar goes on with the same warm run and balance.
    pub(super) fn resume_ledger(&mut self, session: &mut Session, sid: &str) {
        if self.skips(Some(session)) {
            return;
        }
        if let Ok((slot, _)) = self.store.slot(sid) {
            let l = slot.state.ledger;
            (session.banked, session.warm, session.last_request_ms) = (l.banked, l.warm, l.last_request);
            session.offered = l.offered;
        }
    }
}

/// Adds what this request would cost without pruning to the session's baseline, which the
/// loss bound is a share of (`crate::policy::allowance`).
fn count_unpruned(rules: &Rules, session: &mut Session, mirror: &Mirror, request: &RequestInfo) {
    let cold = request.idle_seconds.is_none_or(|s| s >= rules.config().rewrite.cold_cache_seconds);
    let unpruned = mirror.sizes().iter().sum();
    session.baseline += policy::unpruned_cost(session.unpruned, unpruned, cold);
    session.unpruned = Some(unpruned);
}

/// Adds one request's balance against no pruning to the session's, and the price of dcp's
/// own additions to what they have cost (`crate::policy::additions`).
fn charge(session: &mut Session, request: &policy::Request) {
    session.banked += policy::balance(request);
    session.added += policy::additions(request);
}

/// The session's ledger as the state file keeps it.
pub(super) fn ledger(session: &Session) -> Ledger {
    Ledger {
        banked: session.banked,
        warm: session.warm,
        last_request: session.last_request_ms,
        offered: session.offered,
    }
}

/// What a pending rewrite changes: one call's fields, or a range of messages.
enum Target {
    Call(String),
    Block(u32),
    /// A masking, recorded only when it is applied.
    Mask(String, PruneRecord),
}

/// The cache-aware policy: applies the pending rewrites together, when it pays. Returns the
/// calls and ranges whose rewrites it applied, or `None` when it waits. Each assistant
/// message in the history was one request, so the session's request count survives restarts.
fn apply_pending(
    rules: &Rules,
    slot: &mut Slot,
    session: &mut Session,
    sid: &str,
    mirror: &Mirror,
    request: &RequestInfo,
) -> Option<AppliedNow> {
    let tails = tails(mirror.sizes());
    // The waiting prunes of calls in the history, the waiting ranges and the calls masking
    // would take, in history order.
    let masking = masking_candidates::mask_pending(rules, slot, &mut session.index, mirror, &tails);
    let index = &session.index;
    let mut pending: Vec<((usize, usize), Target, policy::Pending)> = slot
        .state
        .pruned
        .iter()
        .filter(|(_, r)| !r.applied)
        .filter_map(|(id, r)| {
            let at = index.position(id)?;
            let tokens = masking_candidates::approx_saving(mirror, at, &r.action);
            Some((at, Target::Call(id.clone()), policy::Pending { tokens, tail: tails[at.0], ..Default::default() }))
        })
        .collect();
    let blocks = ranges::pending(mirror.messages(), &slot.state.blocks, &tails);
    pending.extend(blocks.into_iter().map(|(from, id, p)| ((from, 0), Target::Block(id), p)));
    pending.extend(masking.into_iter().map(|(at, id, record, p)| (at, Target::Mask(id, record), p)));
    pending.sort_by_key(|(at, _, _)| *at);
    let requests = request.requests.max(index.current() + 1);
    let base = policy::Inputs {
        context: tails[0],
        tail: 0,
        pending: 0,
        requests,
        warm: request.warm,
        idle_seconds: request.idle_seconds,
        context_limit: request.context_limit,
        banked: session.banked,
        baseline: session.baseline,
        added: session.added,
    };
    let costs: Vec<policy::Pending> = pending.iter().map(|(_, _, p)| *p).collect();
    let (cut, reason) = policy::choose(&rules.config().rewrite, &base, &costs)?;
    tracing::debug!(session = sid, ?reason, cut, pending = pending.len(), "applying pending rewrites");
    let (tokens, tail) = (costs[cut..].iter().map(|p| p.tokens).sum(), costs[cut].tail);
    let mut applied = AppliedNow { reason, calls: Vec::new(), blocks: Vec::new(), tokens, tail };
    for (_, target, _) in &pending[cut..] {
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
            if let Some(r) = slot.state.pruned.get_mut(id) {
                r.applied = true;
            }
            applied.calls.push(id.clone());
        }
        Target::Block(id) => {
            let hidden = slot.state.blocks.by_id.get_mut(id).map(|b| {
                b.applied = true;
                b.effective_tools.clone()
            });
            slot.hide(hidden.unwrap_or_default());
            applied.blocks.push(*id);
        }
    }
    slot.revision += 1;
}

/// The size of the history from each message on to its end, and 0 after the last.
fn tails(sizes: &[u64]) -> Vec<u64> {
    let mut tails = vec![0u64; sizes.len() + 1];
    for i in (0..sizes.len()).rev() {
        tails[i] = tails[i + 1] + sizes[i];
    }
    tails
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

/// The edits of this answer, and its number. The plugin keeps the edits of the last answer
/// it got. If it has those of the last answer sent, no prune was dropped since and the
/// messages they point at were kept, only new edits are sent, or none. With `tags` (the first
/// message to tag, [`ranges::tags`]), every message from it on gets its id tag (see
/// [`ranges`]), once.
fn answer_edits(
    session: &mut Session,
    slot: &Slot,
    mirror: &Mirror,
    have: Option<u64>,
    tags: Option<usize>,
) -> (u64, Edits) {
    let messages = mirror.messages();
    let basis = EditsBasis { revision: slot.revision, resets: slot.resets, messages: messages.len() };
    let sent = &mut session.edits;
    let follows =
        have == Some(sent.seq) && sent.basis.is_some_and(|b| b.resets == basis.resets && mirror.kept() >= b.messages);
    let sent_tags = if follows { sent.tags.min(messages.len()) } else { 0 };
    let tags_from = tags.map_or(messages.len(), |first| sent_tags.max(first));
    let new_tags = tags_from < messages.len();
    if follows && !new_tags && sent.basis.is_some_and(|b| b.revision == basis.revision) {
        return (sent.seq, Edits::Same);
    }
    if !follows {
        sent.calls.clear();
    }
    let index = &session.index;
    let mut edits = edits_for(messages, |id| index.position(id), &slot.state, &mut sent.calls);
    if tags.is_some() {
        edits.extend(ranges::tag_edits(messages, tags_from));
        sent.tags = messages.len();
    }
    sent.seq += 1;
    sent.basis = Some(basis);
    (sent.seq, if follows { Edits::Add(edits) } else { Edits::Full(edits) })
}

/// The notification of this request's prunes, at the configured level: the rewrites applied
/// to it (compressed ranges among them), and the prunes recorded now whose rewrite waits.
fn notification(
    level: Notification,
    slot: &Slot,
    applied_now: Option<&AppliedNow>,
    recorded_now: &[String],
) -> Option<String> {
    if level == Notification::Off {
        return None;
    }
    let pruned = &slot.state.pruned;
    let records = |ids: &[String]| -> Vec<(&str, &PruneRecord)> {
        ids.iter().filter_map(|id| pruned.get_key_value(id).map(|(k, r)| (k.as_str(), r))).collect()
    };
    let applied = applied_now.map(|a| records(&a.calls)).unwrap_or_default();
    let blocks = applied_now.map(|a| a.blocks.as_slice()).unwrap_or_default();
    let ranges: Vec<Block> = blocks.iter().filter_map(|id| slot.state.blocks.by_id.get(id).cloned()).collect();
    let waiting: Vec<_> = records(recorded_now).into_iter().filter(|(_, r)| !r.applied).collect();
    if applied.is_empty() && ranges.is_empty() && waiting.is_empty() {
        return None;
    }
    let older = slot.state.pruned.values().filter(|r| !r.applied).count() - waiting.len()
        + slot.state.blocks.active().filter(|b| !b.applied).count();
    Some(texts::notification(level, &applied, &ranges, &waiting, older))
}

/// The edits that bring `messages` to what the model should see, for every applied prune
/// whose call is not in `sent` yet; `sent` gains them. With an empty `sent`, every prune in
/// force. `position` finds a call's message and part. Edits come in history order.
fn edits_for(
    messages: &[Message],
    position: impl Fn(&str) -> Option<(usize, usize)>,
    state: &SessionState,
    sent: &mut HashSet<String>,
) -> Vec<Edit> {
    let mut new: Vec<((usize, usize), &str, &PruneRecord)> = Vec::new();
    for (id, record) in state.pruned.iter().filter(|(_, r)| r.applied) {
        if sent.contains(id.as_str()) {
            continue;
        }
        // A prune of a call not in the history has no edit; it is not looked for again.
        sent.insert(id.clone());
        if let Some(at) = position(id) {
            new.push((at, id, record));
        }
    }
    new.sort_unstable_by_key(|(at, _, _)| *at);
    let mut edits = Vec::new();
    for ((m, p), _, record) in new {
        let Some(part) = messages.get(m).and_then(|msg| msg.parts.get(p)) else { continue };
        for e in strategies::field_edits(part, &record.action) {
            edits.push(Edit { m, p, path: e.path, value: Some(e.value), append: None });
        }
    }
    edits
}
