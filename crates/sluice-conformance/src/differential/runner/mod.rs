//! Runs one scenario against one engine (one or more nodes) and its own copy of the model,
//! comparing every answer and, after every step, every message, every queue's stats and
//! every dead-letter summary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::audit::{AuditEvent, AuditKind, AuditQuery};
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
use super::model::{Filter, Model, Place, bad_consumer, has_nul};
use super::ops::{
    AUDIT_ACTIONS, AUDIT_ACTORS, BodySpec, ControlSpec, GroupBySpec, MsgSpec, Op, PatchSpec,
    queue_name,
};

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
        rate_limit: p.rate_limit.map(|l| {
            l.map(|limit| sluice_core::config::RateLimit {
                limit,
                period: dur(crate::differential::ops::RATE_PERIOD_MS),
                burst: p.rate_burst,
            })
        }),
        default_priority: p.default_priority,
        key_weights: p
            .key_weights
            .map(|w| w.map(|w| [("k1".to_owned(), w)].into()).unwrap_or_default()),
        key_limits: p.key_limits.map(|l| {
            let rate = |limit| sluice_core::config::RateLimit {
                limit,
                period: dur(crate::differential::ops::RATE_PERIOD_MS),
                burst: None,
            };
            l.map(|max| sluice_core::fair::KeyLimits {
                max_in_flight: (max > 0).then_some(max),
                rate_limit: p.key_rate.map(rate),
                overrides: [(
                    "k1".to_owned(),
                    sluice_core::fair::KeyLimit {
                        max_in_flight: (max > 0).then_some(max + 1),
                        rate_limit: p.key_rate.map(|r| rate(r + 1)),
                    },
                )]
                .into(),
            })
        }),
        breaker: p.breaker.map(|b| {
            b.map(|per_key| sluice_core::adaptive::BreakerConfig {
                min_calls: sluice_core::adaptive::limits::MAX_MIN_CALLS,
                scope: if per_key {
                    sluice_core::adaptive::FlowScope::Key
                } else {
                    sluice_core::adaptive::FlowScope::Queue
                },
                ..sluice_core::adaptive::BreakerConfig::default()
            })
        }),
        adaptive: p.adaptive.map(|a| {
            a.map(|per_key| {
                let most = sluice_core::adaptive::limits::MAX_PER_MIN;
                let mut rate = sluice_core::adaptive::AdaptiveRate::new(most, most);
                if per_key {
                    rate.scope = sluice_core::adaptive::FlowScope::Key;
                    rate.key_idle_ms = Some(60_000);
                }
                rate
            })
        }),
        ..QueueConfigPatch::default()
    }
}

/// The trace context a [`MsgSpec`] draws: one trace, a span per drawn byte.
fn trace_context((span, with_state): (u8, bool)) -> sluice_core::TraceContext {
    sluice_core::TraceContext::new(
        format!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033{span:02x}-01"),
        with_state.then(|| format!("sluice=s{span}")),
    )
    .expect("a valid trace context")
}

fn new_message(m: &MsgSpec) -> NewMessage {
    NewMessage {
        trace: m.trace.map(trace_context),
        body: body(&m.body),
        attributes: m.attributes.iter().cloned().collect(),
        delay: m.delay_ms.map(dur),
        dedup_id: m.dedup_id.clone(),
        group: m
            .group
            .as_ref()
            .and_then(|g| GroupName::new(g.clone()).ok()),
        key: m
            .key
            .as_ref()
            .and_then(|k| sluice_core::MessageKey::new(k.clone()).ok()),
        priority: m.priority,
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
    /// Each job as the engine last answered it: what a restart must give back.
    jobs_seen: Vec<sluice_core::redrive::RedriveJob>,
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
            jobs_seen: Vec::new(),
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
        match op {
            Op::PutQueue { .. }
            | Op::CreateQueue { .. }
            | Op::DeleteQueue { .. }
            | Op::Purge { .. }
            | Op::ForceKeyBreaker { .. }
            | Op::Send { .. }
            | Op::Receive { .. }
            | Op::ConcurrentReceive { .. }
            | Op::ConcurrentDedupSend { .. } => self.apply_queue_op(op).await?,
            Op::Ack { .. }
            | Op::Nack { .. }
            | Op::Reject { .. }
            | Op::Move { .. }
            | Op::Extend { .. }
            | Op::Release { .. }
            | Op::DeleteMessage { .. }
            | Op::Cancel { .. } => self.apply_settle_op(op).await?,
            Op::Summarize { .. }
            | Op::Keys { .. }
            | Op::CreateRedrive { .. }
            | Op::RedriveStep { .. }
            | Op::ControlRedrive { .. }
            | Op::PutSchedule { .. }
            | Op::DeleteSchedule { .. }
            | Op::StepSchedule { .. }
            | Op::IdemPut { .. }
            | Op::IdemClaim { .. }
            | Op::IdemRelease { .. }
            | Op::IdemGet { .. }
            | Op::AuditAppend { .. }
            | Op::AuditQuery { .. } => self.apply_record_op(op).await?,
            Op::Advance { ms } => self.clock.advance(dur(*ms)),
            Op::Restart => {
                self.target.restart().await;
                self.forget_claims();
                self.check_jobs_kept().await?;
            }
            Op::Compact => {
                self.target.compact().await;
                self.forget_claims();
                self.check_jobs_kept().await?;
            }
            Op::Crash { junk } => {
                self.target.crash(junk).await;
                self.forget_claims();
                self.check_jobs_kept().await?;
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
        if error.as_deref().is_some_and(has_nul) || consumer.as_deref().is_some_and(bad_consumer) {
            return Some(Err(ErrorCode::InvalidArgument));
        }
        if !self.model.queues.contains_key(q.as_str()) {
            return Some(Err(ErrorCode::QueueNotFound));
        }
        let del = self.model.deliveries[d].clone();
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

mod checks;
mod queues;
mod records;
mod settle;
