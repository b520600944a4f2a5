//! What follows a request's answer, off the caller's path: the save of what it changed, and
//! counting the request, at once or once its upstream has answered it.
//!
//! A request adds to the session's running figures (the policy's ledger: the warm run, the
//! last request's time and the balance; the baseline the loss bound is a share of; the
//! request count) and to its savings figures. `dcp serve` counts it at once ([`Count::Now`]):
//! the plugin never learns whether the model answered. The proxy does, so its engine
//! transforms with [`Count::Later`]: the figures as they were before the request are kept
//! with it ([`WaitingRequest`]), and its savings are counted when [`Server::settle`] is told that the
//! upstream answered it, or when the session's next request comes first (the history the
//! count needs is still the mirror's then). Told that it failed (no answer, or an error
//! status), the figures are put back: nothing reached the model. Only the price of a rewrite
//! the request applied stays charged ([`crate::policy::carried`]): the next request finds those
//! prunes in force, and the provider bills the rewritten tail then. A conversation too big
//! for the proxy to keep is forgotten once its request is settled ([`Server::forget`]).

pub(super) mod waiting;

use self::waiting::{FiguresBefore, WaitingRequest};
use super::laps::Laps;
use super::live::LiveSession;
use super::mirror::Mirror;
use super::protocol::{RpcError, Transformed};
use super::request::{RequestContext, RequestFacts};
use super::{savings, Server};
use crate::state::Ledger;

/// When a transform's request is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Now,
    /// When its answer is known: [`Server::settle`] with this number.
    Later(u64),
}

/// Whether the upstream answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamOutcome {
    Answered,
    Failed,
}

/// A request's answer and whether it changed the session's state, as the transform gave it.
pub(super) struct After<'r> {
    pub result: &'r Result<Transformed, RpcError>,
    pub changed: bool,
    pub facts: RequestFacts,
    pub count: Count,
    pub before: FiguresBefore,
}

impl Server {
    /// What follows a request's answer: the save of what it changed, and counting the request
    /// now or keeping it until its answer is known.
    pub(super) fn after_answer(
        &mut self,
        session: &mut LiveSession,
        sid: &str,
        mirror: &Mirror,
        after: After<'_>,
        laps: &mut Laps,
    ) {
        if after.changed {
            self.save(session, sid);
        }
        laps.lap("save");
        let answer = after.result.as_ref().ok().filter(|a| a.seq.is_some());
        match after.count {
            Count::Now => {
                if let Some(answer) = answer {
                    if let Ok(mut cx) = self.request_context(session, sid, mirror, after.facts) {
                        count_savings(&mut cx, answer);
                    }
                }
            }
            Count::Later(number) => {
                let count = answer.map(|a| (after.facts, a.clone()));
                let (before, carried) = (after.before, session.totals.carried());
                session.pending = Some(WaitingRequest { number, before, count, carried });
            }
        }
        laps.lap("savings");
        if laps.on() {
            tracing::debug!(session = sid, "transform {laps}");
        }
    }

    /// Drops what the server holds of session `sid` in memory (its mirror of the history, its
    /// index, its running figures), its state handed to the saver first when it has changes:
    /// its next request reads its history whole, as after a restart. The proxy does this for
    /// a conversation too big to keep.
    pub fn forget(&mut self, sid: &str) {
        let Some(session) = self.sessions.get(sid) else { return };
        if session.saves.waiting() || self.store.dirty().iter().any(|d| d == sid) {
            self.save_now(sid);
        }
        self.sessions.remove(sid);
    }

    /// Counts request `number` of session `sid` when its upstream answered it, or takes back
    /// what it added when it failed. A request already counted (the session's next one came
    /// first) is left as it is.
    pub fn settle(&mut self, sid: &str, number: u64, outcome: UpstreamOutcome) {
        let waiting = self.sessions.get(sid).and_then(|s| s.pending.as_ref()).is_some_and(|p| p.number == number);
        if waiting {
            self.with_session(sid, |server, session| server.settle_pending(session, sid, outcome));
        }
    }

    /// Settles the session's request that waits for its answer, if one does.
    pub(super) fn settle_pending(&mut self, session: &mut LiveSession, sid: &str, outcome: UpstreamOutcome) {
        let Some(pending) = session.pending.take() else { return };
        match outcome {
            UpstreamOutcome::Answered => {
                let Some((facts, answer)) = pending.count else { return };
                let mirror = std::mem::take(&mut session.history.mirror);
                if let Ok(mut cx) = self.request_context(session, sid, &mirror, facts) {
                    count_savings(&mut cx, &answer);
                }
                session.history.mirror = mirror;
            }
            UpstreamOutcome::Failed => self.take_back(session, sid, &pending),
        }
    }

    /// Puts back the figures a request that never reached the model changed.
    fn take_back(&mut self, session: &mut LiveSession, sid: &str, pending: &WaitingRequest) {
        let before = pending.before;
        // What the last request's rewrite costs the next stays charged.
        session.totals.put_back(before.totals);
        let answer = pending.count.as_ref().map(|(_, answer)| answer);
        session.savings.unsent(answer, session.history.mirror.messages().len());
        let Some(ledger) = before.ledger else { return };
        let Ok(slot) = self.store.slot(sid) else { return };
        if slot.put_back_ledger(Ledger { banked: ledger.banked + pending.carried, ..ledger }) {
            self.save(session, sid);
        }
    }
}

/// Adds the request `answer` answered to the session's savings (see [`savings`]).
fn count_savings(cx: &mut RequestContext, answer: &Transformed) {
    let offered = cx.offered();
    let head = if offered { cx.head_tokens() } else { 0 };
    let (session, facts) = (&mut *cx.session, &cx.facts);
    let counting = savings::Counting {
        slot: cx.slot,
        meter: &mut session.savings,
        spans: &mut session.caches.spans,
        index: &session.history.index,
        saves: &mut session.saves,
        mirror: cx.mirror,
        views: cx.views,
        facts,
        offered,
        head,
    };
    savings::record(counting, answer);
}
