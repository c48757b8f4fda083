//! Runs one scenario against one engine (one or more nodes) and its own copy of the model,
//! comparing every answer and, after every step, every message, every queue's stats and
//! every dead-letter summary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::config::QueueConfigPatch;
use sluice_core::error::{ErrorCode, StoreError};
use sluice_core::group::GroupName;
use sluice_core::message::{Body, DeadLetterReason, MessageId, MessageState, NewMessage};
use sluice_core::name::QueueName;
use sluice_core::receipt::Receipt;
use sluice_core::redrive::{RedriveControl, RedriveFilter, RedriveId, RedriveSpec, RedriveState};
use sluice_core::schedule::{CatchUp, ScheduleName, ScheduleSpec, TriggerSpec};
use sluice_core::store::{
    AckRequest, BrowseRequest, BrowseState, Failure, IdempotentResponse, NackOutcome,
    ReceiveRequest, ScheduleStep, StepOutcome, Store,
};
use sluice_core::summary::{GroupBy, SummaryRequest};
use sluice_core::time::{Clock, ManualClock, Timestamp};

use super::compare::{Ids, diff, view_of};
use super::model::{Model, Place, has_nul};
use super::ops::{BodySpec, ControlSpec, GroupBySpec, MsgSpec, Op, PatchSpec, queue_name};

/// An engine under test, opened for one scenario.
#[async_trait]
pub trait Target: Send {
    /// The store of node `n` (modulo the number of nodes).
    fn store(&self, n: usize) -> Arc<dyn Store>;
    /// How many nodes share the data (1, or 2 for two PostgreSQL stores on one schema).
    fn nodes(&self) -> usize;
    /// Drops every store and opens the same data again, as after a restart.
    async fn restart(&mut self);
    /// Runs the engine's compaction (a restart where there is none).
    async fn compact(&mut self);
    /// Kills the store and recovers; `junk` is a torn record the engine may find past the end
    /// of its log.
    async fn crash(&mut self, junk: &[u8]);
    /// Whether pending claims on idempotency keys outlive a restart: kept in the database
    /// by PostgreSQL, in memory by the embedded engine (every request holding one dies with
    /// the process).
    fn claims_survive_restart(&self) -> bool {
        true
    }
}

fn qn(i: u8) -> QueueName {
    QueueName::new(queue_name(i)).expect("valid queue name")
}

fn dur(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn body(b: &BodySpec) -> Body {
    match b {
        BodySpec::Json(n) => Body::json(format!("{{\"n\":{n}}}")),
        BodySpec::Text(s) => Body::text(s.clone()),
        BodySpec::Binary(v) => Body::binary(v.clone()),
    }
}

fn patch(p: &PatchSpec) -> QueueConfigPatch {
    QueueConfigPatch {
        visibility_timeout: p.visibility_ms.map(dur),
        max_receive_count: p.max_receive_count,
        dead_letter_queue: p.dead_letter_queue.map(|d| d.map(qn)),
        delay: p.delay_ms.map(dur),
        dedup_window: p.dedup_window_ms.map(dur),
        result_ttl: p.result_ttl_ms.map(dur),
        paused: p.paused,
        max_depth: p.max_depth,
        max_in_flight: p.max_in_flight,
        max_message_bytes: p.max_message_bytes,
        max_in_flight_per_group: p.max_in_flight_per_group,
        ..QueueConfigPatch::default()
    }
}

fn new_message(m: &MsgSpec) -> NewMessage {
    NewMessage {
        body: body(&m.body),
        attributes: m.attributes.iter().cloned().collect(),
        delay: m.delay_ms.map(dur),
        dedup_id: m.dedup_id.clone(),
        group: m
            .group
            .as_ref()
            .and_then(|g| GroupName::new(g.clone()).ok()),
    }
}

/// The error code of a refused message field, the U+0000 decision included.
fn message_refusal(m: &NewMessage) -> Option<ErrorCode> {
    if let Err(e) = m.validate() {
        return Some(e.code());
    }
    let nul = m.attributes.iter().any(|(k, v)| has_nul(k) || has_nul(v))
        || m.dedup_id.as_deref().is_some_and(has_nul);
    nul.then_some(ErrorCode::InvalidArgument)
}

fn code<T>(r: &Result<T, StoreError>) -> Option<ErrorCode> {
    r.as_ref().err().map(StoreError::code)
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// Checks an answer's error code against the model's, for calls whose Ok value is checked
/// separately (or not at all).
fn same_code<T: std::fmt::Debug>(
    what: &str,
    got: &Result<T, StoreError>,
    want: Option<ErrorCode>,
) -> Result<(), String> {
    ensure!(
        code(got) == want,
        "{what}: engine answered {got:?}, model expects {}",
        want.map_or("Ok".to_owned(), |c| format!("error {c}"))
    );
    Ok(())
}

/// The state of one run: the engine, its model, and the tables that translate between them.
pub struct Run<'a> {
    target: &'a mut dyn Target,
    clock: ManualClock,
    model: Model,
    ids: Ids,
    /// Receipts by model delivery.
    receipts: Vec<Receipt>,
    /// Engine job ids by model job.
    jobs: Vec<RedriveId>,
    /// The step counter, which also picks the node a call goes to.
    step: usize,
}

impl<'a> Run<'a> {
    /// A run of a fresh (empty) target on `clock`.
    pub fn new(target: &'a mut dyn Target, clock: ManualClock) -> Self {
        Run {
            target,
            clock,
            model: Model::default(),
            ids: Ids::default(),
            receipts: Vec::new(),
            jobs: Vec::new(),
            step: 0,
        }
    }

    fn now(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// The node taking this step's calls: nodes take calls in turn.
    fn s(&self) -> Arc<dyn Store> {
        self.target.store(self.step)
    }

    /// Runs every operation, comparing after each.
    ///
    /// # Errors
    /// The first disagreement, naming the step.
    pub async fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for (i, op) in ops.iter().enumerate() {
            self.step = i;
            let now = self.now();
            self.model.settle(now);
            self.apply(op)
                .await
                .map_err(|e| format!("step {i} {op:?}: {e}"))?;
            let now = self.now();
            self.model.settle(now);
            self.compare()
                .await
                .map_err(|e| format!("after step {i} {op:?}: {e}"))?;
        }
        Ok(())
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match op {
            Op::PutQueue { queue, patch: p } | Op::CreateQueue { queue, patch: p } => {
                let create_only = matches!(op, Op::CreateQueue { .. });
                let name = qn(*queue);
                let pt = patch(p);
                let got = if create_only {
                    self.s().create_queue(&name, &pt).await
                } else {
                    self.s().put_queue(&name, &pt).await
                };
                let mut after = self.model.clone();
                let want = after.put_queue(&name, &pt, create_only, now);
                same_code("put_queue", &got, want.err())?;
                if let (Ok(out), Ok(created)) = (&got, want) {
                    ensure!(
                        out.created == created,
                        "created {} but model {created}",
                        out.created
                    );
                    let cfg = &after.queues[name.as_str()].config;
                    ensure!(
                        &out.queue.config == cfg,
                        "config {:?}, model {cfg:?}",
                        out.queue.config
                    );
                    self.model = after;
                }
            }
            Op::DeleteQueue { queue } => {
                let name = qn(*queue);
                let got = self.s().delete_queue(&name).await;
                let held = self.model.in_queue(name.as_str()).len() as u64;
                let mut after = self.model.clone();
                let want = after.delete_queue(name.as_str());
                same_code("delete_queue", &got, want.err())?;
                if want.is_ok() {
                    ensure!(
                        got.as_ref().ok() == Some(&held),
                        "delete_queue answered {got:?}, model drops {held}"
                    );
                    self.model = after;
                }
            }
            Op::Purge { queue } => {
                let name = qn(*queue);
                let got = self.s().purge(&name).await;
                if !self.model.queues.contains_key(name.as_str()) {
                    return same_code("purge", &got, Some(ErrorCode::QueueNotFound));
                }
                let ids = self.model.in_queue(name.as_str());
                ensure!(
                    got.as_ref().ok() == Some(&(ids.len() as u64)),
                    "purge answered {got:?}, model removes {}",
                    ids.len()
                );
                for id in ids {
                    self.model.msgs[id] = None;
                }
            }
            Op::Send { queue, messages } => self.send(*queue, messages).await?,
            Op::Receive {
                queue,
                max,
                visibility_ms,
                consumer,
            } => {
                let req = ReceiveRequest {
                    max: *max,
                    wait: Duration::ZERO,
                    visibility: visibility_ms.map(dur),
                    consumer: consumer.clone(),
                };
                let got = self.s().receive(&qn(*queue), req).await;
                self.follow_receive(*queue, *max, *visibility_ms, consumer, got, true)?;
            }
            Op::ConcurrentReceive { queue, max } => {
                let (a, b) = (self.target.store(0), self.target.store(1));
                let q = qn(*queue);
                // A lease long enough to overlap the other receive (a zero-length one is
                // over before it, and may then be leased again).
                const VISIBILITY_MS: u64 = 30_000;
                let req = ReceiveRequest {
                    max: *max,
                    visibility: Some(dur(VISIBILITY_MS)),
                    ..ReceiveRequest::default()
                };
                let (ra, rb) = futures::join!(a.receive(&q, req.clone()), b.receive(&q, req));
                let exists = self.model.queues.contains_key(q.as_str());
                let limit = if exists {
                    self.model.receive_count_now(q.as_str(), max * 2, now)
                } else {
                    0
                };
                let mut all = Vec::new();
                for r in [ra, rb] {
                    match r {
                        Ok(ds) => all.extend(ds),
                        Err(e) => {
                            ensure!(
                                !exists && e.code() == ErrorCode::QueueNotFound,
                                "concurrent receive failed: {e:?}"
                            );
                        }
                    }
                }
                let distinct: BTreeSet<MessageId> = all.iter().map(|d| d.id).collect();
                ensure!(
                    distinct.len() == all.len(),
                    "one message leased twice by concurrent receives: {:?}",
                    all.iter().map(|d| d.id).collect::<Vec<_>>()
                );
                ensure!(
                    all.len() <= limit,
                    "concurrent receives leased {}, at most {limit} allowed",
                    all.len()
                );
                if exists {
                    self.follow_deliveries(*queue, Some(VISIBILITY_MS), &None, all)?;
                }
            }
            Op::ConcurrentDedupSend { queue, dedup_id } => {
                let (a, b) = (self.target.store(0), self.target.store(1));
                let q = qn(*queue);
                let m = MsgSpec {
                    body: BodySpec::Json(7),
                    attributes: vec![],
                    delay_ms: None,
                    dedup_id: Some(dedup_id.clone()),
                    group: None,
                };
                let nm = new_message(&m);
                let (ra, rb) =
                    futures::join!(a.send(&q, vec![nm.clone()]), b.send(&q, vec![nm.clone()]));
                let want = self.expect_send(*queue, std::slice::from_ref(&m));
                let window_off = self
                    .model
                    .queues
                    .get(q.as_str())
                    .is_some_and(|mq| mq.config.dedup_window.is_zero());
                if window_off {
                    // Without a dedup window the id dedups nothing: two sends, in either order.
                    let mut results = [ra, rb];
                    results.sort_by_key(|r| r.as_ref().ok().map_or(u64::MAX, |o| o[0].id.0));
                    let [first, second] = results;
                    for (which, got) in [("first", first), ("second", second)] {
                        let want = self.expect_send(*queue, std::slice::from_ref(&m));
                        match (got, want) {
                            (Ok(out), Ok(_)) => {
                                ensure!(
                                    !out[0].duplicate,
                                    "a send without a dedup window answered a duplicate"
                                );
                                self.follow_send(*queue, std::slice::from_ref(&m), &out)?;
                            }
                            (got, want) => {
                                same_code(&format!("concurrent send ({which})"), &got, want.err())?
                            }
                        }
                    }
                    return Ok(());
                }
                match (ra, rb, want) {
                    (Ok(x), Ok(y), Ok(_)) => {
                        ensure!(
                            x[0].id == y[0].id,
                            "concurrent sends of one dedup id stored two messages: {x:?} {y:?}"
                        );
                        let firsts = usize::from(!x[0].duplicate) + usize::from(!y[0].duplicate);
                        let known = self.ids.model.contains_key(&x[0].id);
                        ensure!(
                            firsts == usize::from(!known),
                            "concurrent dedup sends: duplicate flags {} / {}",
                            x[0].duplicate,
                            y[0].duplicate
                        );
                        let first = if x[0].duplicate { &y } else { &x };
                        self.follow_send(*queue, std::slice::from_ref(&m), first)?;
                    }
                    (ra, rb, want) => {
                        let w = want.err();
                        same_code("concurrent send (first)", &ra, w)?;
                        same_code("concurrent send (second)", &rb, w)?;
                    }
                }
            }
            Op::Ack { pick, result } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let res = result.as_ref().map(body);
                let got = self
                    .s()
                    .ack(
                        &q,
                        vec![AckRequest {
                            receipt: self.receipts[d],
                            result: res.clone(),
                        }],
                    )
                    .await;
                if !self.model.queues.contains_key(q.as_str()) {
                    return same_code("ack", &got, Some(ErrorCode::QueueNotFound));
                }
                let items = got.map_err(|e| format!("ack call failed: {e:?}"))?;
                ensure!(items.len() == 1, "ack answered {items:?}");
                let live = self.model.is_live(d)
                    && self
                        .model
                        .live(del.msg)
                        .is_some_and(|m| m.queue == q.as_str());
                let too_big = res.as_ref().is_some_and(|b| {
                    b.len() > self.model.queues[q.as_str()].config.max_message_bytes as usize
                });
                let want = match (live, too_big) {
                    (false, _) => Some(ErrorCode::ReceiptStale),
                    (true, true) => Some(ErrorCode::PayloadTooLarge),
                    (true, false) => None,
                };
                same_code("ack item", &items[0], want)?;
                if want.is_none() {
                    self.model.ack(del.msg, res, now);
                }
            }
            Op::Nack {
                pick,
                delay_ms,
                error,
                consumer,
            } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let failure = Failure {
                    error: error.clone(),
                    consumer: consumer.clone(),
                    retry_after: false,
                };
                let got = self
                    .s()
                    .nack(&q, self.receipts[d], Some(dur(*delay_ms)), failure)
                    .await;
                let Some(want) = self.settle_check(d, &q, error, consumer) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("nack", &got, Some(c));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return expect_ok(
                        "nack",
                        got,
                        NackOutcome {
                            state: Some(MessageState::Completed),
                            queue: q,
                        },
                    );
                }
                self.model
                    .queues
                    .get_mut(q.as_str())
                    .expect("q")
                    .totals
                    .nacked += 1;
                self.model
                    .fail(del.msg, "Nacked", error.clone(), consumer.clone(), now);
                let cfg = &self.model.queues[q.as_str()].config;
                let exhausted =
                    sluice_core::lifecycle::is_exhausted(cfg.max_receive_count, m.receive_count);
                if exhausted {
                    if !self.model.has_dlq(q.as_str()) {
                        return same_code("nack", &got, Some(ErrorCode::Conflict));
                    }
                    let dlq = cfg.dead_letter_queue.clone().expect("dlq");
                    self.model
                        .dead_letter(del.msg, DeadLetterReason::Exhausted, now);
                    return expect_ok(
                        "nack",
                        got,
                        NackOutcome {
                            state: None,
                            queue: dlq,
                        },
                    );
                }
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                mm.place = Place::Waiting {
                    at: now + i64::try_from(*delay_ms).unwrap_or(0),
                };
                let state = if *delay_ms == 0 {
                    MessageState::Visible
                } else {
                    MessageState::Delayed
                };
                expect_ok(
                    "nack",
                    got,
                    NackOutcome {
                        state: Some(state),
                        queue: q,
                    },
                )?;
            }
            Op::Reject { pick, error } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let failure = Failure {
                    error: error.clone(),
                    ..Failure::default()
                };
                let got = self.s().reject(&q, self.receipts[d], failure).await;
                let Some(want) = self.settle_check(d, &q, error, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("reject", &got, Some(c));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return expect_ok("reject", got, q);
                }
                if !self.model.has_dlq(q.as_str()) {
                    return same_code("reject", &got, Some(ErrorCode::Conflict));
                }
                let dlq = self.model.queues[q.as_str()]
                    .config
                    .dead_letter_queue
                    .clone()
                    .expect("dlq");
                self.model
                    .fail(del.msg, "Rejected", error.clone(), None, now);
                self.model
                    .dead_letter(del.msg, DeadLetterReason::Rejected, now);
                expect_ok("reject", got, dlq)?;
            }
            Op::Move { pick, to, error } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let to = qn(*to);
                let failure = Failure {
                    error: error.clone(),
                    ..Failure::default()
                };
                let got = self
                    .s()
                    .move_message(&q, self.receipts[d], &to, failure)
                    .await;
                if to == q {
                    if error.as_deref().is_some_and(has_nul) {
                        return same_code("move", &got, Some(ErrorCode::InvalidArgument));
                    }
                    return same_code("move", &got, Some(ErrorCode::Conflict));
                }
                let Some(want) = self.settle_check(d, &q, error, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("move", &got, Some(c));
                }
                if !self.model.queues.contains_key(to.as_str()) {
                    return same_code("move", &got, Some(ErrorCode::QueueNotFound));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return same_code("move", &got, None);
                }
                same_code("move", &got, None)?;
                self.model.fail(del.msg, "Moved", error.clone(), None, now);
                self.model.move_to(del.msg, to.as_str(), now);
            }
            Op::Extend {
                pick,
                visibility_ms,
            } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let got = self
                    .s()
                    .extend(&q, self.receipts[d], dur(*visibility_ms))
                    .await;
                let Some(want) = self.settle_check(d, &q, &None, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("extend", &got, Some(c));
                }
                let until = now + i64::try_from(*visibility_ms).unwrap_or(0);
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                let cancelled = mm.cancelled;
                mm.place = Place::InFlight { until, delivery: d };
                let l = got.map_err(|e| format!("extend refused: {e:?}"))?;
                ensure!(
                    l.deadline == Timestamp(until) && l.cancel_requested == cancelled,
                    "extend answered {l:?}, model deadline {until} cancelled {cancelled}"
                );
            }
            Op::Release { pick } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d];
                let q = qn(del.queue);
                let got = self.s().release(&q, self.receipts[d]).await;
                let Some(want) = self.settle_check(d, &q, &None, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("release", &got, Some(c));
                }
                same_code("release", &got, None)?;
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                if mm.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return Ok(());
                }
                mm.receive_count = mm.receive_count.saturating_sub(1);
                mm.place = Place::Waiting { at: now };
            }
            Op::DeleteMessage { msg } => {
                let Some((mid, eid)) = self.msg_pick(*msg) else {
                    return Ok(());
                };
                let got = self.s().delete_message(eid).await;
                let exists = self.model.msgs[mid].is_some();
                same_code(
                    "delete_message",
                    &got,
                    (!exists).then_some(ErrorCode::MessageNotFound),
                )?;
                self.model.msgs[mid] = None;
            }
            Op::Cancel { msg } => {
                let Some((mid, eid)) = self.msg_pick(*msg) else {
                    return Ok(());
                };
                let Some(m) = self.model.msgs[mid].clone() else {
                    let got = self.s().cancel(eid).await;
                    return same_code("cancel", &got, Some(ErrorCode::MessageNotFound));
                };
                if m.dead_letter.is_some() {
                    // What cancelling a dead letter does is not settled by the contract.
                    return Ok(());
                }
                let got = self.s().cancel(eid).await;
                match m.place {
                    Place::Waiting { .. } => self.model.end_cancelled(mid, now),
                    Place::InFlight { .. } => {
                        self.model.msgs[mid].as_mut().expect("message").cancelled = true;
                    }
                    Place::Completed { .. } => {}
                }
                if self.model.view(mid, now).is_none() {
                    // Cancelled without a record kept (`result_ttl` 0): the message is gone,
                    // and so is what the call would answer.
                    return same_code("cancel", &got, Some(ErrorCode::MessageNotFound));
                }
                let got = got.map_err(|e| format!("cancel refused: {e:?}"))?;
                match self.model.view(mid, now) {
                    Some(want) => {
                        let v = view_of(&self.ids, &got, want.attempts.is_some())?;
                        ensure!(
                            super::compare::same(&v, &want),
                            "cancel answered: {}",
                            diff(&v, &want)
                        );
                    }
                    None => ensure!(
                        got.state == MessageState::Completed && got.cancelled,
                        "cancel answered {got:?} for a record not kept"
                    ),
                }
            }
            Op::Summarize {
                queue,
                group_by,
                error_contains,
            } => {
                let q = qn(*queue);
                let req = SummaryRequest {
                    group_by: match group_by {
                        GroupBySpec::Error => GroupBy::Error,
                        GroupBySpec::Reason => GroupBy::Reason,
                        GroupBySpec::Source => GroupBy::Source,
                        GroupBySpec::Attribute(a) => GroupBy::Attribute(a.clone()),
                    },
                    filter: RedriveFilter {
                        error_contains: error_contains.clone(),
                        ..RedriveFilter::default()
                    },
                    limit: 100,
                };
                let got = self.s().summarize(&q, req.clone()).await;
                if error_contains.as_deref().is_some_and(has_nul) {
                    return same_code("summarize", &got, Some(ErrorCode::InvalidArgument));
                }
                self.check_summary(&q, &req, got)?;
            }
            Op::CreateRedrive {
                source,
                destination,
                limit,
                error_contains,
                reset_receive_count,
                dry_run,
            } => {
                let spec = RedriveSpec {
                    source: qn(*source),
                    destination: destination.map(qn),
                    limit: *limit,
                    rate: None,
                    filter: RedriveFilter {
                        error_contains: error_contains.clone(),
                        ..RedriveFilter::default()
                    },
                    reset_receive_count: *reset_receive_count,
                    dry_run: *dry_run,
                    guard: None,
                };
                let got = self.s().create_redrive(spec.clone()).await;
                let want = if error_contains.as_deref().is_some_and(has_nul) {
                    Some(ErrorCode::InvalidArgument)
                } else if !self.model.queues.contains_key(spec.source.as_str())
                    || spec
                        .destination
                        .as_ref()
                        .is_some_and(|d| !self.model.queues.contains_key(d.as_str()))
                {
                    Some(ErrorCode::QueueNotFound)
                } else if self.model.jobs.iter().any(|j| {
                    j.source == spec.source.as_str()
                        && matches!(j.state, RedriveState::Running | RedriveState::Paused)
                }) {
                    Some(ErrorCode::Conflict)
                } else {
                    None
                };
                same_code("create_redrive", &got, want)?;
                if let Ok(job) = got {
                    ensure!(
                        job.state == RedriveState::Running && job.moved == 0,
                        "new job {job:?}"
                    );
                    self.jobs.push(job.id);
                    self.model.jobs.push(super::model::Job {
                        source: spec.source.to_string(),
                        destination: spec.destination.as_ref().map(ToString::to_string),
                        limit: *limit,
                        error_contains: error_contains.clone(),
                        reset: *reset_receive_count,
                        dry_run: *dry_run,
                        state: RedriveState::Running,
                        moved: 0,
                    });
                }
            }
            Op::RedriveStep { job, max } => {
                if self.jobs.is_empty() {
                    return Ok(());
                }
                let j = job % self.jobs.len();
                let got = self.s().redrive_step(self.jobs[j], *max).await;
                self.follow_redrive_step(j, *max, got)?;
            }
            Op::ControlRedrive { job, control } => {
                if self.jobs.is_empty() {
                    return Ok(());
                }
                let j = job % self.jobs.len();
                let c = match control {
                    ControlSpec::Cancel => RedriveControl::Cancel,
                    ControlSpec::Pause(r) => RedriveControl::Pause { reason: r.clone() },
                    ControlSpec::Resume => RedriveControl::Resume,
                };
                let got = self.s().control_redrive(self.jobs[j], c).await;
                let mj = &mut self.model.jobs[j];
                let finished =
                    matches!(mj.state, RedriveState::Completed | RedriveState::Cancelled);
                let want = match control {
                    ControlSpec::Pause(r) if has_nul(r) => Some(ErrorCode::InvalidArgument),
                    ControlSpec::Cancel => None,
                    _ if finished => Some(ErrorCode::Conflict),
                    _ => None,
                };
                same_code("control_redrive", &got, want)?;
                if want.is_none() {
                    mj.state = match control {
                        ControlSpec::Cancel if finished => mj.state,
                        ControlSpec::Cancel => RedriveState::Cancelled,
                        ControlSpec::Pause(_) => RedriveState::Paused,
                        ControlSpec::Resume => RedriveState::Running,
                    };
                    let job = got.map_err(|e| e.to_string())?;
                    ensure!(
                        job.state == mj.state && job.moved == mj.moved,
                        "control answered state {:?} moved {}, model {:?} {}",
                        job.state,
                        job.moved,
                        mj.state,
                        mj.moved
                    );
                }
            }
            Op::PutSchedule {
                name,
                every_ms,
                queue,
                body: b,
                attributes,
            } => {
                self.put_schedule(*name, *every_ms, *queue, b, attributes)
                    .await?
            }
            Op::DeleteSchedule { name } => {
                let n = ScheduleName::new(super::ops::SCHEDULES[*name as usize % 2]).expect("name");
                let got = self.s().delete_schedule(&n).await;
                let want = self.model.schedules.remove(n.as_str());
                same_code(
                    "delete_schedule",
                    &got,
                    want.is_none().then_some(ErrorCode::NotFound),
                )?;
            }
            Op::StepSchedule {
                name,
                ahead_ms,
                fire,
                missed,
                stale,
            } => {
                self.step_schedule(*name, *ahead_ms, *fire, *missed, *stale)
                    .await?
            }
            Op::IdemPut { key, body: b } => {
                let resp = IdempotentResponse {
                    fingerprint: [7; 32],
                    status: 201,
                    body: b.clone().into(),
                    created_at: Timestamp(now),
                };
                let got = self.s().idempotency_put(key, resp).await;
                if has_nul(key) || key.is_empty() {
                    return same_code("idempotency_put", &got, Some(ErrorCode::InvalidArgument));
                }
                let kept = self.model.idem.get(key).map(|(b, _)| b.clone());
                let got = got.map_err(|e| format!("idempotency_put refused: {e:?}"))?;
                ensure!(
                    got.as_ref().map(|r| r.body.to_vec()) == kept,
                    "idempotency_put answered {got:?}, model kept {kept:?}"
                );
                if kept.is_none() {
                    let ttl = i64::try_from(sluice_core::store::IDEMPOTENCY_TTL.as_millis())
                        .unwrap_or(i64::MAX);
                    self.model.idem.insert(key.clone(), (b.clone(), now + ttl));
                    // A stored answer ends any claim on the key, whoever holds it.
                    self.model.claims.remove(key);
                }
            }
            Op::IdemClaim {
                key,
                token,
                lease_ms,
            } => {
                let fp = u8::try_from(*token).unwrap_or(u8::MAX);
                let claim = sluice_core::store::IdempotencyClaim {
                    fingerprint: [fp; 32],
                    token: *token,
                    lease: dur(*lease_ms),
                };
                let got = self.s().idempotency_claim(key, claim).await;
                if has_nul(key) || key.is_empty() || *lease_ms == 0 {
                    return same_code("idempotency_claim", &got, Some(ErrorCode::InvalidArgument));
                }
                let got = got.map_err(|e| format!("idempotency_claim refused: {e:?}"))?;
                let live = self
                    .model
                    .claims
                    .get(key)
                    .copied()
                    .filter(|(_, _, until)| *until > now);
                use sluice_core::store::ClaimOutcome;
                match (self.model.idem.get(key), live) {
                    (Some((kept, _)), _) => ensure!(
                        matches!(&got, ClaimOutcome::Answered(r) if r.body.to_vec() == *kept),
                        "idempotency_claim answered {got:?}, model kept the answer {kept:?}"
                    ),
                    (None, Some((holder, hfp, until))) if holder != *token => ensure!(
                        got == ClaimOutcome::Pending {
                            fingerprint: [hfp; 32],
                            until: Timestamp(until),
                        },
                        "idempotency_claim answered {got:?}, model: held by {holder} until {until}"
                    ),
                    (None, _) => {
                        ensure!(
                            got == ClaimOutcome::Claimed,
                            "idempotency_claim answered {got:?}, model: free"
                        );
                        let until = now + i64::try_from(*lease_ms).unwrap_or(i64::MAX);
                        self.model.claims.insert(key.clone(), (*token, fp, until));
                    }
                }
            }
            Op::IdemRelease { key, token } => {
                let got = self.s().idempotency_release(key, *token).await;
                if has_nul(key) || key.is_empty() {
                    return same_code(
                        "idempotency_release",
                        &got,
                        Some(ErrorCode::InvalidArgument),
                    );
                }
                let got = got.map_err(|e| format!("idempotency_release refused: {e:?}"))?;
                let held = self
                    .model
                    .claims
                    .get(key)
                    .is_some_and(|(t, _, until)| t == token && *until > now);
                ensure!(
                    got == held,
                    "idempotency_release answered {got}, model: {held}"
                );
                if held {
                    self.model.claims.remove(key);
                }
            }
            Op::IdemGet { key } => {
                let got = self.s().idempotency_get(key).await;
                if has_nul(key) {
                    return same_code("idempotency_get", &got, Some(ErrorCode::InvalidArgument));
                }
                let kept = self.model.idem.get(key).map(|(b, _)| b.clone());
                let got = got.map_err(|e| format!("idempotency_get refused: {e:?}"))?;
                ensure!(
                    got.as_ref().map(|r| r.body.to_vec()) == kept,
                    "idempotency_get answered {got:?}, model kept {kept:?}"
                );
            }
            Op::Advance { ms } => self.clock.advance(dur(*ms)),
            Op::Restart => {
                self.target.restart().await;
                self.forget_claims();
            }
            Op::Compact => {
                self.target.compact().await;
                self.forget_claims();
            }
            Op::Crash { junk } => {
                self.target.crash(junk).await;
                self.forget_claims();
            }
        }
        Ok(())
    }

    /// After a restart of an engine that keeps claims in memory, the model's are gone too.
    fn forget_claims(&mut self) {
        if !self.target.claims_survive_restart() {
            self.model.claims.clear();
        }
    }

    /// For a call that settles delivery `d` in `q`: `None` when the call is not checked
    /// further; `Some(Err(code))` for the error the engine must answer; `Some(Ok(()))` when
    /// the delivery is live and the call goes ahead.
    fn settle_check(
        &self,
        d: usize,
        q: &QueueName,
        error: &Option<String>,
        consumer: &Option<String>,
    ) -> Option<Result<(), ErrorCode>> {
        if error.as_deref().is_some_and(has_nul) || consumer.as_deref().is_some_and(has_nul) {
            return Some(Err(ErrorCode::InvalidArgument));
        }
        if !self.model.queues.contains_key(q.as_str()) {
            return Some(Err(ErrorCode::QueueNotFound));
        }
        let del = self.model.deliveries[d];
        let live = self.model.is_live(d)
            && self
                .model
                .live(del.msg)
                .is_some_and(|m| m.queue == q.as_str());
        Some(if live {
            Ok(())
        } else {
            Err(ErrorCode::ReceiptStale)
        })
    }

    fn msg_pick(&self, n: usize) -> Option<(usize, MessageId)> {
        if self.ids.engine.is_empty() {
            return None;
        }
        let mid = n % self.ids.engine.len();
        Some((mid, self.ids.engine[mid]))
    }

    /// What a send of `messages` to queue `queue` must answer: per message, `Some(model
    /// id)` for a duplicate of a kept one and `None` for a new one; or the error.
    fn expect_send(
        &self,
        queue: u8,
        messages: &[MsgSpec],
    ) -> Result<Vec<Option<usize>>, ErrorCode> {
        let name = queue_name(queue);
        let news: Vec<NewMessage> = messages.iter().map(new_message).collect();
        if let Some(c) = news.iter().find_map(message_refusal) {
            return Err(c);
        }
        let Some(q) = self.model.queues.get(name) else {
            return Err(ErrorCode::QueueNotFound);
        };
        if news
            .iter()
            .any(|m| m.body.len() > q.config.max_message_bytes as usize)
        {
            return Err(ErrorCode::PayloadTooLarge);
        }
        let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
        let mut out = Vec::new();
        let mut fresh = 0usize;
        for m in &news {
            // A queue without a dedup window dedups nothing, even ids sent while it had one.
            let window_on = q.config.dedup_window > Duration::ZERO;
            let dup = m.dedup_id.as_deref().filter(|_| window_on).and_then(|d| {
                if let Some((id, _)) = q.dedup.get(d) {
                    return Some(Some(*id));
                }
                (q.config.dedup_window > Duration::ZERO && seen.contains_key(d)).then_some(None)
            });
            match dup {
                Some(Some(id)) => out.push(Some(id)),
                Some(None) => out.push(Some(usize::MAX)),
                None => {
                    if let Some(d) = m.dedup_id.as_deref() {
                        seen.insert(d, ());
                    }
                    fresh += 1;
                    out.push(None);
                }
            }
        }
        if let Some(max) = q.config.max_depth
            && (self.model.depth(name) + fresh) as u64 > max
        {
            return Err(ErrorCode::QueueFull);
        }
        Ok(out)
    }

    async fn send(&mut self, queue: u8, messages: &[MsgSpec]) -> Result<(), String> {
        let news: Vec<NewMessage> = messages.iter().map(new_message).collect();
        let got = self.s().send(&qn(queue), news).await;
        let want = self.expect_send(queue, messages);
        same_code("send", &got, want.as_ref().err().copied())?;
        if let Ok(out) = got {
            self.follow_send(queue, messages, &out)?;
        }
        Ok(())
    }

    fn follow_send(
        &mut self,
        queue: u8,
        messages: &[MsgSpec],
        out: &[sluice_core::store::SendOutcome],
    ) -> Result<(), String> {
        let now = self.now();
        let want = self
            .expect_send(queue, messages)
            .map_err(|c| format!("send succeeded, model expects {c}"))?;
        ensure!(out.len() == messages.len(), "send answered {out:?}");
        let name = queue_name(queue);
        let mut batch_ids: BTreeMap<String, usize> = BTreeMap::new();
        for ((m, o), w) in messages.iter().zip(out).zip(want) {
            match w {
                Some(first) => {
                    let first = if first == usize::MAX {
                        batch_ids[m.dedup_id.as_deref().unwrap_or_default()]
                    } else {
                        first
                    };
                    ensure!(
                        o.duplicate && self.ids.of(o.id)? == first,
                        "duplicate send answered {o:?}, model: duplicate of {first}"
                    );
                }
                None => {
                    ensure!(!o.duplicate, "send answered duplicate {o:?}, model: new");
                    let mid = self.ids.push(o.id)?;
                    let nm = new_message(m);
                    let delay = nm.delay.unwrap_or(self.model.queues[name].config.delay);
                    let got = self.model.store_message(
                        name,
                        nm.body,
                        nm.attributes,
                        i64::try_from(delay.as_millis()).unwrap_or(0),
                        nm.dedup_id.clone(),
                        nm.group.map(|g| g.to_string()),
                        now,
                    );
                    ensure!(got == mid, "model id {got} for engine's {mid}");
                    if let Some(d) = nm.dedup_id {
                        batch_ids.insert(d, mid);
                    }
                }
            }
        }
        Ok(())
    }

    fn follow_receive(
        &mut self,
        queue: u8,
        max: u32,
        visibility_ms: Option<u64>,
        consumer: &Option<String>,
        got: Result<Vec<sluice_core::message::Delivery>, StoreError>,
        exact: bool,
    ) -> Result<(), String> {
        let name = queue_name(queue);
        if consumer.as_deref().is_some_and(has_nul) {
            return same_code("receive", &got, Some(ErrorCode::InvalidArgument));
        }
        if !self.model.queues.contains_key(name) {
            return same_code("receive", &got, Some(ErrorCode::QueueNotFound));
        }
        let ds = got.map_err(|e| format!("receive refused: {e:?}"))?;
        let want = self.model.receive_count_now(name, max, self.now());
        if exact {
            ensure!(
                ds.len() == want,
                "receive returned {} messages, model allows exactly {want} (eligible {:?})",
                ds.len(),
                self.model.eligible(name, self.now())
            );
        }
        self.follow_deliveries(queue, visibility_ms, consumer, ds)
    }

    fn follow_deliveries(
        &mut self,
        queue: u8,
        visibility_ms: Option<u64>,
        _consumer: &Option<String>,
        ds: Vec<sluice_core::message::Delivery>,
    ) -> Result<(), String> {
        let now = self.now();
        let name = queue_name(queue);
        let eligible = self.model.eligible(name, now);
        let cfg = self.model.queues[name].config.clone();
        let vis = visibility_ms
            .map(|v| i64::try_from(v).unwrap_or(0))
            .unwrap_or(i64::try_from(cfg.visibility_timeout.as_millis()).unwrap_or(0));
        for d in ds {
            let mid = self.ids.of(d.id)?;
            ensure!(
                eligible.contains(&mid),
                "delivered message {mid} which may not be delivered now (eligible {eligible:?})"
            );
            let m = self.model.live(mid).expect("live").clone();
            let until = now + vis;
            let want = (
                &m.body,
                &m.attributes,
                m.receive_count + 1,
                cfg.max_receive_count,
                m.enqueued_at,
                &m.last_error,
                until,
                m.group.clone(),
            );
            let seen = (
                &d.body,
                &d.attributes,
                d.receive_count,
                d.max_receive_count,
                d.enqueued_at.as_millis(),
                &d.last_error,
                d.lease_deadline.as_millis(),
                d.group.as_ref().map(ToString::to_string),
            );
            ensure!(
                seen == want,
                "delivery of {mid} (body, attributes, receive_count, max_receive_count, \
                 enqueued_at, last_error, lease_deadline, group): engine {seen:?}, model {want:?}"
            );
            let del = self.model.lease(mid, queue, until);
            ensure!(del == self.receipts.len(), "delivery tables out of step");
            self.receipts.push(d.receipt);
        }
        Ok(())
    }

    fn follow_redrive_step(
        &mut self,
        j: usize,
        max: u32,
        got: Result<sluice_core::redrive::RedriveStep, StoreError>,
    ) -> Result<(), String> {
        let now = self.now();
        let mj = self.model.jobs[j].clone();
        if mj.state != RedriveState::Running {
            return same_code("redrive_step", &got, Some(ErrorCode::Conflict));
        }
        let step = got.map_err(|e| format!("redrive_step refused: {e:?}"))?;
        let Some(_) = self.model.queues.get(&mj.source) else {
            ensure!(
                step.moved_now == 0 && step.job.state == RedriveState::Completed,
                "step of a job whose source is gone: {step:?}"
            );
            self.model.jobs[j].state = RedriveState::Completed;
            return Ok(());
        };
        let done = mj.moved;
        let want_max = mj.limit.map_or(u64::from(max), |l| {
            u64::from(max).min(l.saturating_sub(done))
        });
        ensure!(
            step.moved_now <= want_max,
            "step moved {} (limit {want_max})",
            step.moved_now
        );
        if mj.dry_run {
            ensure!(
                step.moved_now == 0 && step.moved_ids.is_empty(),
                "a dry run moved: {step:?}"
            );
        }
        for id in &step.moved_ids {
            let mid = self.ids.of(*id)?;
            let m = self
                .model
                .live(mid)
                .ok_or_else(|| format!("redrive moved {mid}, which is gone"))?
                .clone();
            ensure!(
                m.queue == mj.source && Model::matches(&m, mj.error_contains.as_deref()),
                "redrive moved {mid} from {} (error {:?}), which the job does not match",
                m.queue,
                m.last_error
            );
            ensure!(
                !matches!(m.place, Place::InFlight { .. }),
                "redrive moved {mid}, which is leased"
            );
            let to = mj
                .destination
                .clone()
                .or(m.source_queue.clone())
                .ok_or_else(|| format!("redrive moved {mid}, which has nowhere to go"))?;
            ensure!(
                self.model.queues.contains_key(&to),
                "redrive moved {mid} to {to}, which does not exist"
            );
            self.model.redrive(mid, &to, mj.reset, now);
        }
        let mj = &mut self.model.jobs[j];
        if !mj.dry_run {
            mj.moved += step.moved_now;
        }
        ensure!(
            step.job.moved == mj.moved,
            "job moved {} in all, model {}",
            step.job.moved,
            mj.moved
        );
        // Whether a step that found nothing left completes at once is the engine's choice.
        mj.state = step.job.state;
        Ok(())
    }

    async fn put_schedule(
        &mut self,
        name: u8,
        every_ms: u64,
        queue: u8,
        b: &BodySpec,
        attributes: &[(String, String)],
    ) -> Result<(), String> {
        let now = self.now();
        let n = ScheduleName::new(super::ops::SCHEDULES[name as usize % 2]).expect("name");
        let spec = ScheduleSpec {
            trigger: TriggerSpec::Every { every_ms },
            queue: qn(queue),
            body: body(b),
            attributes: attributes.iter().cloned().collect(),
            catch_up: CatchUp::None,
            paused: false,
        };
        let got = self.s().put_schedule(&n, spec.clone()).await;
        let probe = NewMessage {
            attributes: spec.attributes.clone(),
            ..NewMessage::new(spec.body.clone())
        };
        let reserved = spec.attributes.contains_key("schedule")
            || spec.attributes.contains_key("scheduled_for");
        let want = if message_refusal(&probe).is_some() || reserved {
            Some(ErrorCode::InvalidArgument)
        } else if let Some(q) = self.model.queues.get(spec.queue.as_str()) {
            (spec.body.len() > q.config.max_message_bytes as usize)
                .then_some(ErrorCode::PayloadTooLarge)
        } else {
            Some(ErrorCode::QueueNotFound)
        };
        same_code("put_schedule", &got, want)?;
        let Ok((s, created)) = got else {
            return Ok(());
        };
        let prev = self.model.schedules.get(n.as_str()).cloned();
        ensure!(
            created == prev.is_none(),
            "created {created}, model {}",
            prev.is_none()
        );
        let sched = match prev {
            Some(p) if p.every_ms == every_ms => super::model::Sched {
                queue: spec.queue.to_string(),
                body: spec.body.clone(),
                attributes: spec.attributes.clone(),
                updated_at: now,
                ..p
            },
            p => super::model::Sched {
                every_ms,
                queue: spec.queue.to_string(),
                body: spec.body.clone(),
                attributes: spec.attributes.clone(),
                created_at: p.as_ref().map_or(now, |p| p.created_at),
                updated_at: now,
                anchor: now,
                last_fired: None,
                fired: p.as_ref().map_or(0, |p| p.fired),
                missed: p.as_ref().map_or(0, |p| p.missed),
            },
        };
        let seen = (
            s.spec == spec,
            s.created_at.as_millis(),
            s.updated_at.as_millis(),
            s.anchor.as_millis(),
            s.last_fired.map(Timestamp::as_millis),
            s.fired,
            s.missed,
        );
        let want = (
            true,
            sched.created_at,
            sched.updated_at,
            sched.anchor,
            sched.last_fired,
            sched.fired,
            sched.missed,
        );
        ensure!(
            seen == want,
            "schedule (spec same, created_at, updated_at, anchor, last_fired, fired, missed): \
             engine {seen:?}, model {want:?}"
        );
        self.model.schedules.insert(n.to_string(), sched);
        Ok(())
    }

    async fn step_schedule(
        &mut self,
        name: u8,
        ahead_ms: u64,
        fire: bool,
        missed: u64,
        stale: bool,
    ) -> Result<(), String> {
        let now = self.now();
        let n = ScheduleName::new(super::ops::SCHEDULES[name as usize % 2]).expect("name");
        let sched = self.model.schedules.get(n.as_str()).cloned();
        let current = sched.as_ref().and_then(|s| s.last_fired);
        let expected = if stale {
            Some(Timestamp(current.unwrap_or(now) - 1))
        } else {
            current.map(Timestamp)
        };
        let base = sched
            .as_ref()
            .map_or(now, |s| s.last_fired.unwrap_or(s.anchor).max(s.anchor));
        let through = Timestamp(base + i64::try_from(ahead_ms).unwrap_or(1));
        let step = ScheduleStep {
            expected,
            through,
            fire,
            missed,
        };
        let got = self.s().step_schedule(&n, step).await;
        let Some(sched) = sched else {
            return same_code("step_schedule", &got, Some(ErrorCode::NotFound));
        };
        if expected.is_some_and(|e| through <= e) {
            return same_code("step_schedule", &got, Some(ErrorCode::InvalidArgument));
        }
        if expected.map(Timestamp::as_millis) != sched.last_fired {
            return expect_ok("step_schedule", got, StepOutcome::Stale);
        }
        let qname = sched.queue.clone();
        let advance = |m: &mut Model, fired: bool| {
            let s = m.schedules.get_mut(n.as_str()).expect("schedule");
            s.last_fired = Some(through.as_millis());
            s.missed += missed;
            if fired {
                s.fired += 1;
            }
        };
        // A skip step enqueues nothing, so whether the queue exists does not matter to it.
        if !fire {
            advance(&mut self.model, false);
            return expect_ok("step_schedule", got, StepOutcome::Skipped);
        }
        if !self.model.queues.contains_key(&qname) {
            let out = expect_ok("step_schedule", got, StepOutcome::QueueMissing);
            advance(&mut self.model, false);
            let s = self.model.schedules.get_mut(n.as_str()).expect("schedule");
            s.missed += 1;
            return out;
        }
        // The firing's message, as `Schedule::message` makes it.
        let mut attributes = sched.attributes.clone();
        attributes.insert("schedule".into(), n.to_string());
        attributes.insert("scheduled_for".into(), sluice_core::time::rfc3339(through));
        let dedup = format!("schedule:{}:at:{}", n, through.as_millis());
        let q = &self.model.queues[&qname];
        if let Some((first, _)) = q.dedup.get(&dedup) {
            let first = self.ids.engine[*first];
            advance(&mut self.model, true);
            return expect_ok("step_schedule", got, StepOutcome::Fired { id: first });
        }
        if sched.body.len() > q.config.max_message_bytes as usize {
            return same_code("step_schedule", &got, Some(ErrorCode::PayloadTooLarge));
        }
        if q.config
            .max_depth
            .is_some_and(|m| self.model.depth(&qname) as u64 >= m)
        {
            return same_code("step_schedule", &got, Some(ErrorCode::QueueFull));
        }
        let out = got.map_err(|e| format!("step_schedule refused: {e:?}"))?;
        let StepOutcome::Fired { id } = out else {
            return Err(format!("step_schedule answered {out:?}, model: fired"));
        };
        let mid = self.ids.push(id)?;
        let got_mid = self.model.store_message(
            &qname,
            sched.body.clone(),
            attributes,
            0,
            Some(dedup),
            None,
            now,
        );
        ensure!(got_mid == mid, "model id {got_mid} for engine's {mid}");
        advance(&mut self.model, true);
        Ok(())
    }

    fn check_summary(
        &self,
        q: &QueueName,
        req: &SummaryRequest,
        got: Result<sluice_core::summary::Summary, StoreError>,
    ) -> Result<(), String> {
        let now = self.now();
        if !self.model.queues.contains_key(q.as_str()) {
            return same_code("summarize", &got, Some(ErrorCode::QueueNotFound));
        }
        let s = got.map_err(|e| format!("summarize {q} refused: {e:?}"))?;
        let mut groups: BTreeMap<Option<String>, (u64, i64, i64, usize)> = BTreeMap::new();
        for id in self.model.in_queue(q.as_str()) {
            let v = self.model.view(id, now).expect("view");
            let m = self.model.live(id).expect("live");
            if !Model::matches(m, req.filter.error_contains.as_deref()) {
                continue;
            }
            let key = match &req.group_by {
                GroupBy::Error => v.last_error.clone(),
                GroupBy::Reason => v.dead_letter.map(|(r, _)| r.to_owned()),
                GroupBy::Source => v.source_queue.clone(),
                GroupBy::Attribute(a) => v.attributes.get(a).cloned(),
            };
            let at = v.dead_letter.map_or(v.enqueued_at, |(_, at)| at);
            let g = groups.entry(key).or_insert((0, at, at, id));
            g.0 += 1;
            g.1 = g.1.min(at);
            g.2 = g.2.max(at);
            g.3 = g.3.min(id);
        }
        let total: u64 = groups.values().map(|g| g.0).sum();
        let mut seen = BTreeMap::new();
        for g in &s.groups {
            seen.insert(
                g.key.clone(),
                (
                    g.count,
                    g.first_at.as_millis(),
                    g.last_at.as_millis(),
                    self.ids.of(g.sample_id)?,
                ),
            );
        }
        ensure!(
            s.total == total && s.group_count == groups.len() as u64 && seen == groups,
            "summary of {q} by {}: engine total {} groups {seen:?}, model total {total} groups \
             {groups:?}",
            req.group_by,
            s.total
        );
        Ok(())
    }

    /// Compares every message, every queue's stats, and the dead-letter summaries.
    async fn compare(&self) -> Result<(), String> {
        let now = self.now();
        let store = self.s();
        // Every message ever sent, by get_message.
        for (mid, eid) in self.ids.engine.iter().enumerate() {
            let got = store.get_message(*eid).await;
            match self.model.view(mid, now) {
                None => same_code(
                    &format!("get_message of {mid}"),
                    &got,
                    Some(ErrorCode::MessageNotFound),
                )?,
                Some(want) => {
                    let m = got
                        .map_err(|e| format!("get_message of {mid}: {e:?}, model has {want:?}"))?;
                    let v = view_of(&self.ids, &m, want.attempts.is_some())?;
                    ensure!(
                        super::compare::same(&v, &want),
                        "message {mid}: {}",
                        diff(&v, &want)
                    );
                }
            }
        }
        // Every queue: its listing, a browse of all its messages, its stats.
        let listed = store
            .list_queues()
            .await
            .map_err(|e| format!("list_queues: {e:?}"))?;
        let names: Vec<String> = listed.iter().map(|q| q.name.to_string()).collect();
        let want_names: Vec<String> = self.model.queues.keys().cloned().collect();
        ensure!(
            names == want_names,
            "queues {names:?}, model {want_names:?}"
        );
        for info in &listed {
            let want = &self.model.queues[info.name.as_str()];
            ensure!(
                info.config == want.config && info.created_at.as_millis() == want.created_at,
                "queue {}: engine {info:?}, model config {:?} created {}",
                info.name,
                want.config,
                want.created_at
            );
        }
        for name in self.model.queues.keys() {
            let q = QueueName::new(name.clone()).map_err(|e| e.to_string())?;
            self.compare_queue(&store, &q, now).await?;
        }
        Ok(())
    }

    async fn compare_queue(
        &self,
        store: &Arc<dyn Store>,
        q: &QueueName,
        now: i64,
    ) -> Result<(), String> {
        let mut msgs = Vec::new();
        let mut cursor = None;
        loop {
            let page = store
                .browse(
                    q,
                    BrowseRequest {
                        state: BrowseState::All,
                        limit: 3,
                        cursor: cursor.take(),
                    },
                )
                .await
                .map_err(|e| format!("browse {q}: {e:?}"))?;
            msgs.extend(page.messages);
            match page.next_cursor {
                Some(c) if msgs.len() < 10_000 => cursor = Some(c),
                _ => break,
            }
        }
        let mut seen = BTreeSet::new();
        for m in &msgs {
            let mid = self.ids.of(m.id)?;
            ensure!(seen.insert(mid), "browse of {q} lists {mid} twice");
            let want = self
                .model
                .view(mid, now)
                .filter(|v| v.state != "completed")
                .ok_or_else(|| {
                    format!("browse of {q} lists {mid}, which the model does not have there")
                })?;
            let v = view_of(&self.ids, m, want.attempts.is_some())?;
            ensure!(
                super::compare::same(&v, &want),
                "browse of {q}, message {mid}: {}",
                diff(&v, &want)
            );
        }
        let want: BTreeSet<usize> = self.model.in_queue(q.as_str()).into_iter().collect();
        ensure!(
            seen == want,
            "browse of {q}: engine {seen:?}, model {want:?}"
        );
        // Stats.
        let s = store
            .stats(q)
            .await
            .map_err(|e| format!("stats {q}: {e:?}"))?;
        let mq = &self.model.queues[q.as_str()];
        let mut counts = [0u64; 3];
        let mut oldest: Option<i64> = None;
        let mut completed = 0u64;
        for m in self
            .model
            .msgs
            .iter()
            .flatten()
            .filter(|m| m.queue == q.as_str())
        {
            match Model::state_of(m, now) {
                "visible" => {
                    counts[0] += 1;
                    if let Place::Waiting { at } = m.place {
                        oldest = Some(oldest.map_or(at, |o: i64| o.min(at)));
                    }
                }
                "delayed" => counts[1] += 1,
                "in_flight" => counts[2] += 1,
                _ => completed += 1,
            }
        }
        let dld = mq
            .config
            .dead_letter_queue
            .as_ref()
            .map_or(0, |d| self.model.in_queue(d.as_str()).len() as u64);
        // With several nodes, a node's send, receive and ack counts reach the others' stats
        // within the PostgreSQL engine's flush interval (a documented lag): there they are
        // compared once the counts are at least in flight, i.e. never above the model's.
        let (mut got_totals, mut want_totals) = (s.totals, mq.totals);
        if self.target.nodes() > 1 {
            ensure!(
                got_totals.sent <= want_totals.sent
                    && got_totals.received <= want_totals.received
                    && got_totals.acked <= want_totals.acked,
                "stats of {q}: hot-path totals above the model's: engine {got_totals:?}, model {want_totals:?}"
            );
            for t in [&mut got_totals, &mut want_totals] {
                (t.sent, t.received, t.acked) = (0, 0, 0);
            }
        }
        let seen = (
            s.visible,
            s.delayed,
            s.in_flight,
            s.dead_letter_depth,
            s.completed,
            u64::try_from(s.oldest_visible_age.as_millis()).unwrap_or(u64::MAX),
            got_totals,
        );
        let want = (
            counts[0],
            counts[1],
            counts[2],
            dld,
            completed,
            oldest.map_or(0, |o| u64::try_from(now - o).unwrap_or(0)),
            want_totals,
        );
        ensure!(
            seen == want,
            "stats of {q} (visible, delayed, in_flight, dead_letter_depth, completed, \
             oldest_visible_age_ms, totals): engine {seen:?}, model {want:?}"
        );
        // The dead-letter summary of a dead-letter queue, by reason and by source.
        if q.as_str().ends_with("dlq") || q.as_str() == "dl" {
            for group_by in [GroupBy::Reason, GroupBy::Source, GroupBy::Error] {
                let req = SummaryRequest {
                    group_by,
                    filter: RedriveFilter::default(),
                    limit: 100,
                };
                let got = store.summarize(q, req.clone()).await;
                self.check_summary(q, &req, got)?;
            }
        }
        Ok(())
    }
}

fn expect_ok<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: Result<T, StoreError>,
    want: T,
) -> Result<(), String> {
    match got {
        Ok(v) if v == want => Ok(()),
        other => Err(format!(
            "{what}: engine answered {other:?}, model expects Ok({want:?})"
        )),
    }
}
