//! [`Checked`]: the one checking layer every engine is served through.
//!
//! Each method runs the contract's stateless checks of its arguments, then hands the same
//! values (moved, not copied) to the engine and returns the engine's own future: a call that
//! passes its checks costs no allocation beyond the engine's. A call refused here never
//! reaches the engine; its answer is a ready future.
//!
//! That is why the impls below spell out the boxed-future signatures `async_trait` generates
//! instead of using `#[async_trait]`: an `async fn` here would box a second future around the
//! engine's on every call of the hot path.
//!
//! The impls mirror the six contract traits method by method, each in that spelled-out form;
//! the list on [`Checked`] names every refusal the engines are spared, in the order of the
//! traits. `Messaging`, the hot path, has its own file (`checked/messaging.rs`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{
    AckOverlap, AckRequest, BrowsePage, BrowseRequest, Failure, Hints, IdempotentResponse,
    Inspection, LeaseState, Messaging, NackOutcome, QueueAdmin, QueuePage, QueuePageRequest,
    ReceiveRequest, Records, Redrives, ScheduleStep, Schedules, SendOutcome, StepOutcome,
    validate_ack_batch, validate_ack_results, validate_idempotent, validate_limit, validate_move,
    validate_nack_delay, validate_receive, validate_send_batch, validate_visibility,
};
use super::{ClaimOutcome, IdempotencyClaim, validate_claim, validate_idempotency_key};
use crate::audit::{AuditEvent, AuditQuery};
use crate::config::{PutQueueOutcome, QueueConfigPatch, QueueInfo};
use crate::error::StoreError;
use crate::message::{Delivery, Message, MessageId, NewMessage, Progress, clip_error};
use crate::name::QueueName;
use crate::receipt::Receipt;
use crate::redrive::{RedriveControl, RedriveId, RedriveJob, RedriveSpec, RedriveStep};
use crate::schedule::{Schedule, ScheduleName, ScheduleSpec, Trigger, validate_spec};
use crate::stats::{QueueStats, StatsSample};
use crate::summary::{Summary, SummaryRequest};
use crate::time::Timestamp;

/// An engine behind the contract's shared checks: the only kind of value that is a
/// [`Store`](super::Store), so the broker, the conformance suite and every other holder of a
/// `dyn Store` talk to an engine through these checks, whichever engine it is.
///
/// Checked here, once for every engine, before the engine is called:
/// - `send`: the batch (1–1000 messages, 16 MiB of bodies) and each message's own fields,
///   a JSON body's nesting included ([`validate_send_batch`]);
/// - `receive`: `max`, `wait` and `visibility` ([`validate_receive`]);
/// - `ack`: the batch size ([`validate_ack_batch`]) and the nesting of JSON results
///   ([`validate_ack_results`]);
/// - `nack`: the delay ([`validate_nack_delay`]); `move_message`: a move to the message's own
///   queue ([`validate_move`]); for `nack`, `reject` and `move_message`, the failure's error
///   is cut to [`MAX_ERROR_BYTES`](crate::config::limits::MAX_ERROR_BYTES) ([`clip_error`]);
/// - `extend`: the lease length ([`validate_visibility`]); `progress`: the report
///   ([`Progress::validate`]);
/// - `list_queues_page`: the limit, prefix and cursor ([`QueuePageRequest::range`]);
///   `dead_letter_queues_among`, `stats_many` and `stats_history_many`: at most a page of
///   queues;
/// - `browse`: the page size ([`validate_limit`]); `summarize`: the request
///   ([`SummaryRequest::validate`]);
/// - `create_redrive`: the spec ([`RedriveSpec::validate`]);
/// - `idempotency_put`: the key and the response's size ([`validate_idempotent`]);
///   `idempotency_claim`: the key and the lease ([`validate_claim`]); `idempotency_release`:
///   the key ([`validate_idempotency_key`]).
///
/// What needs the queue's state stays in the engine, which reads that state anyway and must
/// check against what it reads in the same step: a body or an ack's result against the
/// queue's `max_message_bytes` ([`validate_bodies_fit`](super::validate_bodies_fit)), a queue
/// config against its limits once the patch is laid over the current config, existence,
/// receipts, `max_depth`, pause, `rate_limit` and `max_in_flight`.
///
/// Engines hand out their stores already wrapped (their `open` returns `Checked<Engine>`);
/// the engine's own extras (maintenance, its directory or schema, the PostgreSQL engine's
/// transactional send) are reached through [`Checked::engine`]. There is deliberately no
/// `Deref` to the engine: a `&Checked<E>` never turns into a `&E` unnoticed, so a contract
/// call that skips the checks is always spelled out.
#[derive(Debug, Clone)]
pub struct Checked<S> {
    engine: S,
    hints: Hints,
}

impl<S: Messaging> Checked<S> {
    /// Wraps `engine`, reading its [`Hints`] once: they are fixed for the engine's life.
    pub fn new(engine: S) -> Self {
        let hints = engine.hints();
        Checked { engine, hints }
    }
}

impl<S> Checked<S> {
    /// The engine itself, for what it offers beside the contract (maintenance, its directory
    /// or schema, …). Calling the contract's methods on it skips the checks.
    pub fn engine(&self) -> &S {
        &self.engine
    }
}

/// The future a contract method returns (what `async_trait` makes of an `async fn`).
type Answer<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The answer to a call refused by a check: the engine is not called.
/// A call about several queues names at most a page of them.
fn validate_queue_count(n: usize) -> Result<(), StoreError> {
    if n > super::MAX_QUEUE_PAGE as usize {
        return Err(StoreError::invalid(format!(
            "at most {} queues per call, got {n}",
            super::MAX_QUEUE_PAGE
        )));
    }
    Ok(())
}

fn refused<'a, T: Send + 'a>(e: StoreError) -> Answer<'a, Result<T, StoreError>> {
    Box::pin(std::future::ready(Err(e)))
}

/// The rule for names of new queues ([`QueueName::check_new`]) on a queue and the
/// dead-letter queue its patch names, either of which a put may create.
fn new_names_check(name: &QueueName, patch: &QueueConfigPatch) -> Result<(), StoreError> {
    name.check_new()?;
    if let Some(Some(dlq)) = &patch.dead_letter_queue {
        dlq.check_new()?;
    }
    Ok(())
}

/// The naming rule's error when the queue it would create is missing, else what the engine
/// said.
fn rule_or(engine: StoreError, rule: StoreError) -> StoreError {
    match engine {
        StoreError::QueueNotFound(_) => rule,
        other => other,
    }
}

impl<S: QueueAdmin> Checked<S> {
    /// Ok when every name [`new_names_check`] refuses belongs to a queue that exists.
    async fn existing_names(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<(), StoreError> {
        if name.check_new().is_err() {
            self.engine.get_queue(name).await?;
        }
        if let Some(Some(dlq)) = &patch.dead_letter_queue
            && dlq.check_new().is_err()
        {
            self.engine.get_queue(dlq).await?;
        }
        Ok(())
    }
}

/// Refuses a failure whose texts cannot be stored ([`crate::text`]).
fn check_failure(failure: &Failure) -> Result<(), StoreError> {
    if let Some(e) = &failure.error {
        crate::text::refuse_nul("error", e)?;
    }
    if let Some(c) = &failure.consumer {
        super::validate_consumer(c)?;
    }
    Ok(())
}

/// Cuts a failure's error to the stored limit, in place.
fn clip(failure: &mut Failure) {
    failure.error = failure.error.take().map(clip_error);
}

impl<S: QueueAdmin> QueueAdmin for Checked<S> {
    fn put_queue<'s, 'n, 'p, 'a>(
        &'s self,
        name: &'n QueueName,
        patch: &'p QueueConfigPatch,
    ) -> Answer<'a, Result<PutQueueOutcome, StoreError>>
    where
        's: 'a,
        'n: 'a,
        'p: 'a,
        Self: 'a,
    {
        match new_names_check(name, patch) {
            Ok(()) => self.engine.put_queue(name, patch),
            // Only a queue that exists already may keep a name the rule for new queues
            // refuses (a rare path: one extra read).
            Err(e) => Box::pin(async move {
                self.existing_names(name, patch)
                    .await
                    .map_err(|x| rule_or(x, e))?;
                self.engine.put_queue(name, patch).await
            }),
        }
    }

    fn create_queue<'s, 'n, 'p, 'a>(
        &'s self,
        name: &'n QueueName,
        patch: &'p QueueConfigPatch,
    ) -> Answer<'a, Result<PutQueueOutcome, StoreError>>
    where
        's: 'a,
        'n: 'a,
        'p: 'a,
        Self: 'a,
    {
        match new_names_check(name, patch) {
            Ok(()) => self.engine.create_queue(name, patch),
            // The queue exists (`conflict`) or its dead-letter queue does: let the engine say.
            Err(e) => Box::pin(async move {
                self.existing_names(name, patch)
                    .await
                    .map_err(|x| rule_or(x, e))?;
                self.engine.create_queue(name, patch).await
            }),
        }
    }

    fn get_queue<'s, 'n, 'a>(
        &'s self,
        name: &'n QueueName,
    ) -> Answer<'a, Result<QueueInfo, StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        self.engine.get_queue(name)
    }

    fn list_queues<'s, 'a>(&'s self) -> Answer<'a, Result<Vec<QueueInfo>, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.list_queues()
    }

    fn list_queues_page<'s, 'a>(
        &'s self,
        req: QueuePageRequest,
    ) -> Answer<'a, Result<QueuePage, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        if let Err(e) = req.range() {
            return refused(e);
        }
        self.engine.list_queues_page(req)
    }

    fn dead_letter_queues_among<'s, 'n, 'a>(
        &'s self,
        names: &'n [QueueName],
    ) -> Answer<'a, Result<Vec<bool>, StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_queue_count(names.len()) {
            return refused(e);
        }
        self.engine.dead_letter_queues_among(names)
    }

    fn force_breaker<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        force: crate::adaptive::BreakerForce,
    ) -> Answer<'a, Result<crate::adaptive::FlowStats, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        self.engine.force_breaker(queue, force)
    }

    fn force_key_breaker<'s, 'q, 'k, 'a>(
        &'s self,
        queue: &'q QueueName,
        key: Option<&'k crate::MessageKey>,
        force: crate::adaptive::BreakerForce,
    ) -> Answer<'a, Result<crate::adaptive::KeyFlowStats, StoreError>>
    where
        's: 'a,
        'q: 'a,
        'k: 'a,
        Self: 'a,
    {
        self.engine.force_key_breaker(queue, key, force)
    }

    fn delete_queue<'s, 'n, 'a>(
        &'s self,
        name: &'n QueueName,
    ) -> Answer<'a, Result<u64, StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        self.engine.delete_queue(name)
    }

    fn purge<'s, 'q, 'a>(&'s self, queue: &'q QueueName) -> Answer<'a, Result<u64, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        self.engine.purge(queue)
    }
}

impl<S: Inspection> Inspection for Checked<S> {
    fn stats<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
    ) -> Answer<'a, Result<QueueStats, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        self.engine.stats(queue)
    }

    fn stats_many<'s, 'q, 'a>(
        &'s self,
        queues: &'q [QueueName],
    ) -> Answer<'a, Result<Vec<Option<QueueStats>>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_queue_count(queues.len()) {
            return refused(e);
        }
        self.engine.stats_many(queues)
    }

    fn browse<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        req: BrowseRequest,
    ) -> Answer<'a, Result<BrowsePage, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_limit(req.limit) {
            return refused(e);
        }
        self.engine.browse(queue, req)
    }

    fn keys<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        req: crate::key_stats::KeysRequest,
    ) -> Answer<'a, Result<crate::key_stats::KeysPage, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = crate::key_stats::validate(&req) {
            return refused(e);
        }
        self.engine.keys(queue, req)
    }

    fn get_message<'s, 'a>(&'s self, id: MessageId) -> Answer<'a, Result<Message, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.get_message(id)
    }

    fn delete_message<'s, 'a>(&'s self, id: MessageId) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.delete_message(id)
    }

    fn summarize<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        req: SummaryRequest,
    ) -> Answer<'a, Result<Summary, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = req.validate() {
            return refused(e);
        }
        self.engine.summarize(queue, req)
    }
}

impl<S: Redrives> Redrives for Checked<S> {
    fn create_redrive<'s, 'a>(
        &'s self,
        spec: RedriveSpec,
    ) -> Answer<'a, Result<RedriveJob, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        if let Err(e) = spec.validate() {
            return refused(e);
        }
        self.engine.create_redrive(spec)
    }

    fn get_redrive<'s, 'a>(&'s self, id: RedriveId) -> Answer<'a, Result<RedriveJob, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.get_redrive(id)
    }

    fn list_redrives<'s, 'a>(&'s self) -> Answer<'a, Result<Vec<RedriveJob>, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.list_redrives()
    }

    fn control_redrive<'s, 'a>(
        &'s self,
        id: RedriveId,
        control: RedriveControl,
    ) -> Answer<'a, Result<RedriveJob, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        if let RedriveControl::Pause { reason } = &control
            && let Err(e) = crate::text::refuse_nul("reason", reason)
        {
            return refused(e);
        }
        self.engine.control_redrive(id, control)
    }

    fn redrive_step<'s, 'a>(
        &'s self,
        id: RedriveId,
        max: u32,
    ) -> Answer<'a, Result<RedriveStep, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.redrive_step(id, max)
    }
}

impl<S: Records> Records for Checked<S> {
    fn record_stats<'s, 'a>(
        &'s self,
        samples: Vec<(QueueName, StatsSample)>,
    ) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.record_stats(samples)
    }

    fn stats_history<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        since: Timestamp,
    ) -> Answer<'a, Result<Vec<StatsSample>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        self.engine.stats_history(queue, since)
    }

    fn stats_history_many<'s, 'q, 'a>(
        &'s self,
        queues: &'q [QueueName],
        since: Timestamp,
    ) -> Answer<'a, Result<Vec<Vec<StatsSample>>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_queue_count(queues.len()) {
            return refused(e);
        }
        self.engine.stats_history_many(queues, since)
    }

    fn audit_append<'s, 'a>(&'s self, events: Vec<AuditEvent>) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.audit_append(events)
    }

    fn audit_query<'s, 'a>(
        &'s self,
        query: AuditQuery,
    ) -> Answer<'a, Result<Vec<AuditEvent>, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.audit_query(query)
    }

    fn idempotency_get<'s, 'k, 'a>(
        &'s self,
        key: &'k str,
    ) -> Answer<'a, Result<Option<IdempotentResponse>, StoreError>>
    where
        's: 'a,
        'k: 'a,
        Self: 'a,
    {
        if let Err(e) = crate::text::refuse_nul("idempotency key", key) {
            return refused(e);
        }
        self.engine.idempotency_get(key)
    }

    fn idempotency_put<'s, 'k, 'a>(
        &'s self,
        key: &'k str,
        response: IdempotentResponse,
    ) -> Answer<'a, Result<Option<IdempotentResponse>, StoreError>>
    where
        's: 'a,
        'k: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_idempotent(key, &response) {
            return refused(e);
        }
        self.engine.idempotency_put(key, response)
    }

    fn idempotency_claim<'s, 'k, 'a>(
        &'s self,
        key: &'k str,
        claim: IdempotencyClaim,
    ) -> Answer<'a, Result<ClaimOutcome, StoreError>>
    where
        's: 'a,
        'k: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_claim(key, &claim) {
            return refused(e);
        }
        self.engine.idempotency_claim(key, claim)
    }

    fn idempotency_release<'s, 'k, 'a>(
        &'s self,
        key: &'k str,
        token: u64,
    ) -> Answer<'a, Result<bool, StoreError>>
    where
        's: 'a,
        'k: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_idempotency_key(key) {
            return refused(e);
        }
        self.engine.idempotency_release(key, token)
    }
}

mod messaging;
#[cfg(test)]
mod tests;

impl<S: Schedules> Schedules for Checked<S> {
    fn put_schedule<'s, 'n, 'a>(
        &'s self,
        name: &'n ScheduleName,
        spec: ScheduleSpec,
    ) -> Answer<'a, Result<(Schedule, bool), StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_spec(&spec).and_then(|()| Trigger::parse(&spec.trigger).map(drop))
        {
            return refused(e);
        }
        self.engine.put_schedule(name, spec)
    }

    fn get_schedule<'s, 'n, 'a>(
        &'s self,
        name: &'n ScheduleName,
    ) -> Answer<'a, Result<Schedule, StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        self.engine.get_schedule(name)
    }

    fn list_schedules<'s, 'a>(&'s self) -> Answer<'a, Result<Vec<Schedule>, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.list_schedules()
    }

    fn delete_schedule<'s, 'n, 'a>(
        &'s self,
        name: &'n ScheduleName,
    ) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        self.engine.delete_schedule(name)
    }

    fn step_schedule<'s, 'n, 'a>(
        &'s self,
        name: &'n ScheduleName,
        step: ScheduleStep,
    ) -> Answer<'a, Result<StepOutcome, StoreError>>
    where
        's: 'a,
        'n: 'a,
        Self: 'a,
    {
        if step.expected.is_some_and(|e| step.through <= e) {
            return refused(StoreError::invalid(format!(
                "a schedule step must move forward: through {} is not after {}",
                step.through.as_millis(),
                step.expected.map_or(0, Timestamp::as_millis)
            )));
        }
        self.engine.step_schedule(name, step)
    }
}
