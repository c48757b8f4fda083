//! `PostgresStore`: the node's shared state and the contract's concern traits, each call
//! handed to its operation in `ops`. The stateless checks of the arguments have run before,
//! in [`sluice_core::Checked`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use sluice_core::schedule::{Schedule, ScheduleName, ScheduleSpec};
use sluice_core::stats::StatsSample;
use sluice_core::store::{
    AckOverlap, ClaimOutcome, Hints, IdempotencyClaim, IdempotentResponse, Inspection, LeaseState,
    Messaging, QueueAdmin, Records, Redrives, ScheduleStep, Schedules, StepOutcome,
};
use sluice_core::{
    AckRequest, AuditEvent, AuditQuery, BrowsePage, BrowseRequest, Clock, Delivery, Failure,
    Message, MessageId, NackOutcome, NewMessage, Progress, PutQueueOutcome, QueueConfig,
    QueueConfigPatch, QueueInfo, QueueName, QueuePage, QueuePageRequest, QueueStats, Receipt,
    ReceiveRequest, RedriveId, RedriveJob, RedriveSpec, RedriveStep, SendOutcome, StoreError,
    Timestamp,
};

use crate::db::ids::Ids;
use crate::error::pool;
use crate::hot::wake::Wakers;
use crate::local::{Locals, QueueLocal};

/// The PostgreSQL engine. [`PostgresStore::open`] hands it out inside
/// [`sluice_core::Checked`], the contract's checking layer. Cloning is cheap and shares the
/// pool; background work stops when the last clone is dropped.
#[derive(Clone)]
pub struct PostgresStore {
    /// What the clones share.
    pub(crate) inner: Arc<Inner>,
}

/// What every call of this node shares: the pools, the clock, the schema, the node's name
/// and ids, each queue's node-local memories and the wake-ups across nodes.
pub(crate) struct Inner {
    /// Connections for everything but leases and small acks.
    pub(crate) pool: Pool,
    /// Connections whose commits do not wait for the WAL flush, for leases only.
    pub(crate) lease_pool: Pool,
    /// Connections that plan each statement once and never scan a table sequentially, for
    /// the ack statements written for that (see `hot/ack_combine.rs`).
    pub(crate) ack_pool: Pool,
    /// Where time comes from ([`crate::PostgresOptions::clock`]).
    pub(crate) clock: Arc<dyn Clock>,
    /// The schema holding Sluice's tables.
    pub(crate) schema: String,
    /// The NOTIFY channel of the schema.
    pub(crate) channel: String,
    /// Whether other nodes' wake-ups arrive, and waking this node's receives by queue name.
    pub(crate) wakers: Arc<Wakers>,
    /// Queues whose changes are to be announced to other nodes.
    pub(crate) announce: tokio::sync::mpsc::UnboundedSender<String>,
    /// The block of message and job ids this node draws from.
    pub(crate) ids: Ids,
    /// The node's hot-path counts not yet written, for all queues: flushed together.
    pub(crate) pending: std::sync::Mutex<crate::db::counters::Counts>,
    /// Held while pending counts are on their way to the database, so a reader that flushes
    /// before reading totals waits for a flush already under way instead of reading without
    /// the counts it took.
    pub(crate) flushing: tokio::sync::Mutex<()>,
    /// Held (shared) by a hot path from before its change commits until it has counted it,
    /// and (exclusive) by a flush that must include every change committed before it
    /// (`crate::coverage`).
    pub(crate) counting: tokio::sync::RwLock<()>,
    /// Other nodes' coverage requests and answers (`crate::coverage`).
    pub(crate) coverage: Arc<crate::coverage::Signals>,
    /// This store's origin on the wake-up channel.
    pub(crate) origin: u64,
    /// Each queue's node-local memories.
    pub(crate) locals: Arc<Locals>,
    /// Outcomes of governed queues' deliveries counted on this node, not yet handed to the
    /// queues' shared state (`crate::flow`).
    pub(crate) flow: crate::flow::Pending,
    /// This node's name in redrive ownership.
    pub(crate) node: String,
    /// [`crate::PostgresOptions::pack_min`].
    pub(crate) pack_min: usize,
}

impl Inner {
    /// The node's hot-path counts not yet written.
    pub(crate) fn pending(&self) -> std::sync::MutexGuard<'_, crate::db::counters::Counts> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `n` to a hot-path counter of `queue` (written by the next flush).
    pub(crate) fn tally(&self, queue: &str, counter: crate::db::counters::Counter, n: i64) {
        self.pending().add(queue, counter, n);
    }

    /// A queue's configuration for the hot paths: from the queue's memory, taking a
    /// connection only when it must read the database.
    pub(crate) async fn config(&self, queue: &QueueLocal) -> Result<QueueConfig, StoreError> {
        if let Some(cfg) = queue.cached_config() {
            return Ok(cfg);
        }
        let conn = self.conn().await?;
        // Another call may have read it meanwhile.
        if let Some(cfg) = queue.cached_config() {
            return Ok(cfg);
        }
        let cfg = crate::db::catalog::config(&**conn, queue.name.as_str(), false).await?;
        queue.keep_config(&cfg);
        Ok(cfg)
    }

    /// The store clock's now, in ms.
    pub(crate) fn now(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Wakes receives waiting on `queue`: this node's at once, other nodes' through a NOTIFY
    /// sent after the change committed (when there may be other nodes).
    pub(crate) fn wake(&self, queue: &str) {
        self.wake_some(queue, usize::MAX);
    }

    /// As [`Inner::wake`] after `n` messages became visible: at most `n` local waiters.
    pub(crate) fn wake_some(&self, queue: &str, n: usize) {
        self.wakers.wake_some(queue, n);
        self.announce(queue);
    }

    /// As [`Inner::wake_some`], for a queue whose memories the caller holds.
    pub(crate) fn wake_local(&self, queue: &QueueLocal, n: usize) {
        queue.waker.wake_some(n);
        self.announce(queue.name.as_str());
    }

    /// Names `queue` to other nodes' wake-ups, when there may be other nodes.
    fn announce(&self, queue: &str) {
        if self.wakers.others_may_listen() {
            let _ = self.announce.send(queue.to_string());
        }
    }

    /// A connection of the general pool; `unavailable` when none comes in time.
    pub(crate) async fn conn(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| pool(&e))
    }
}

impl Drop for Inner {
    /// Writes the counts still pending, so a store closed on purpose (a broker shutting down,
    /// a restart) loses none. Needs a multi-threaded Tokio runtime; elsewhere they are lost.
    /// The write runs on a thread of its own and is waited for at most
    /// [`CLOSE_FLUSH_WAIT`]: a store dropped while its runtime shuts down (its last handle
    /// held by a task being cancelled) cannot reach the database any more, and must not hang.
    fn drop(&mut self) {
        let pending = std::mem::take(&mut *self.pending());
        if pending.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let pool = self.pool.clone();
        let (done, written) = std::sync::mpsc::channel();
        let flush = std::thread::Builder::new()
            .name("sluice-close-counts".into())
            .spawn(move || {
                let out = handle.block_on(async move {
                    let conn = pool.get().await.map_err(|e| crate::error::pool(&e))?;
                    pending.flush(&**conn).await
                });
                let _ = done.send(out);
            });
        let out = match flush {
            Ok(_) => written
                .recv_timeout(CLOSE_FLUSH_WAIT)
                .map_err(|_| StoreError::unavailable("the runtime is shutting down")),
            Err(e) => Err(StoreError::unavailable(e.to_string())),
        }
        .and_then(|r| r);
        if let Err(e) = out {
            tracing::warn!(error = %e, "counters of the last moments before closing were not written");
        }
    }
}

/// How long a store being dropped waits to write its last counts.
const CLOSE_FLUSH_WAIT: Duration = Duration::from_secs(5);

#[async_trait]
impl QueueAdmin for PostgresStore {
    async fn put_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::ops::queues::put(&self.inner, name, patch, false).await
    }

    async fn create_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::ops::queues::put(&self.inner, name, patch, true).await
    }

    async fn get_queue(&self, name: &QueueName) -> Result<QueueInfo, StoreError> {
        crate::ops::queues::info(&self.inner, name).await
    }

    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        crate::ops::queues::list(&self.inner).await
    }

    async fn list_queues_page(&self, req: QueuePageRequest) -> Result<QueuePage, StoreError> {
        crate::ops::queues::page(&self.inner, &req).await
    }

    async fn dead_letter_queues_among(&self, names: &[QueueName]) -> Result<Vec<bool>, StoreError> {
        crate::ops::queues::dead_letter_queues_among(&self.inner, names).await
    }

    async fn force_breaker(
        &self,
        queue: &QueueName,
        force: sluice_core::adaptive::BreakerForce,
    ) -> Result<sluice_core::adaptive::FlowStats, StoreError> {
        crate::flow::force(&self.inner, queue, force).await
    }

    async fn force_key_breaker(
        &self,
        queue: &QueueName,
        key: Option<&sluice_core::MessageKey>,
        force: sluice_core::adaptive::BreakerForce,
    ) -> Result<sluice_core::adaptive::KeyFlowStats, StoreError> {
        crate::hot::key_flows::force_key(&self.inner, queue, key, force).await
    }

    async fn delete_queue(&self, name: &QueueName) -> Result<u64, StoreError> {
        crate::ops::queues::delete(&self.inner, name).await
    }

    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError> {
        crate::ops::queues::purge(&self.inner, queue).await
    }
}

#[async_trait]
impl Messaging for PostgresStore {
    async fn send(
        &self,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        crate::ops::send::send(&self.inner, queue, messages).await
    }

    async fn receive(
        &self,
        queue: &QueueName,
        req: ReceiveRequest,
    ) -> Result<Vec<Delivery>, StoreError> {
        crate::ops::receive::receive(&self.inner, queue, req).await
    }

    async fn ack(
        &self,
        queue: &QueueName,
        acks: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        crate::ops::ack::ack(&self.inner, queue, acks).await
    }

    async fn nack(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        failure: Failure,
    ) -> Result<NackOutcome, StoreError> {
        crate::ops::nack::nack(&self.inner, queue, receipt, delay, failure).await
    }

    async fn reject(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        failure: Failure,
    ) -> Result<QueueName, StoreError> {
        crate::ops::nack::reject(&self.inner, queue, receipt, failure).await
    }

    async fn move_message(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        to: &QueueName,
        failure: Failure,
    ) -> Result<(), StoreError> {
        crate::ops::nack::move_to(&self.inner, queue, receipt, to, failure).await
    }

    async fn release(&self, queue: &QueueName, receipt: Receipt) -> Result<(), StoreError> {
        crate::ops::nack::release(&self.inner, queue, receipt).await
    }

    async fn extend(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Result<LeaseState, StoreError> {
        crate::ops::tasks::extend(&self.inner, queue, receipt, visibility).await
    }

    async fn progress(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        progress: Progress,
    ) -> Result<LeaseState, StoreError> {
        crate::ops::tasks::progress(&self.inner, queue, receipt, progress).await
    }

    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError> {
        crate::ops::tasks::cancel(&self.inner, id).await
    }

    /// Whether a lease may overlap an ack depends on the queue (its `max_in_flight`): see
    /// [`AckOverlap::PerQueue`].
    fn hints(&self) -> Hints {
        Hints {
            ack_overlap: AckOverlap::PerQueue,
            groups: true,
        }
    }

    async fn lease_may_overlap_ack(&self, queue: &QueueName) -> bool {
        crate::ops::ack::may_overlap_lease(&self.inner, queue).await
    }

    /// Commits a one-row write: it fails on a standby (read only) and waits, as every send
    /// would, on a primary that cannot commit (its synchronous standby gone), so that
    /// readiness says what a send would meet.
    async fn writable(&self) -> Result<(), StoreError> {
        let conn = self.inner.conn().await?;
        conn.batch_execute("UPDATE readiness SET checked_at = now() WHERE id = 1")
            .await
            .map_err(|e| crate::error::db(&e))
    }

    async fn close(&self) {
        crate::hot::read_ahead::release_all(&self.inner).await;
        // Outcomes of governed queues counted here go to their shared state now rather than
        // with a flush that will not come.
        if let Err(e) = crate::flow::flush(&self.inner).await {
            tracing::debug!(error = %e, "outcomes of governed queues counted before closing were not handed over");
        }
    }
}

#[async_trait]
impl Redrives for PostgresStore {
    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
        crate::ops::redrive::create(&self.inner, spec).await
    }

    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError> {
        crate::ops::redrive::get(&self.inner, id).await
    }

    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError> {
        crate::ops::redrive::list(&self.inner).await
    }

    async fn control_redrive(
        &self,
        id: RedriveId,
        control: sluice_core::RedriveControl,
    ) -> Result<RedriveJob, StoreError> {
        crate::ops::redrive::control(&self.inner, id, &control).await
    }

    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError> {
        crate::ops::redrive::step(&self.inner, id, max).await
    }
}

#[async_trait]
impl Schedules for PostgresStore {
    async fn put_schedule(
        &self,
        name: &ScheduleName,
        spec: ScheduleSpec,
    ) -> Result<(Schedule, bool), StoreError> {
        crate::ops::schedules::put(&self.inner, name, spec).await
    }

    async fn get_schedule(&self, name: &ScheduleName) -> Result<Schedule, StoreError> {
        crate::ops::schedules::get(&self.inner, name).await
    }

    async fn list_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        crate::ops::schedules::list(&self.inner).await
    }

    async fn delete_schedule(&self, name: &ScheduleName) -> Result<(), StoreError> {
        crate::ops::schedules::delete(&self.inner, name).await
    }

    async fn step_schedule(
        &self,
        name: &ScheduleName,
        step: ScheduleStep,
    ) -> Result<StepOutcome, StoreError> {
        crate::ops::schedules::step(&self.inner, name, step).await
    }
}

#[async_trait]
impl Records for PostgresStore {
    async fn record_stats(&self, samples: Vec<(QueueName, StatsSample)>) -> Result<(), StoreError> {
        crate::ops::records::record_stats(&self.inner, samples).await
    }

    async fn audit_append(&self, events: Vec<AuditEvent>) -> Result<(), StoreError> {
        crate::ops::records::audit_append(&self.inner, &events).await
    }

    async fn audit_query(&self, query: AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        crate::ops::records::audit_query(&self.inner, query).await
    }

    async fn stats_history(
        &self,
        queue: &QueueName,
        since: Timestamp,
    ) -> Result<Vec<StatsSample>, StoreError> {
        crate::ops::records::stats_history(&self.inner, queue, since).await
    }

    async fn stats_history_many(
        &self,
        queues: &[QueueName],
        since: Timestamp,
    ) -> Result<Vec<Vec<StatsSample>>, StoreError> {
        crate::ops::records::stats_history_many(&self.inner, queues, since).await
    }

    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        crate::ops::records::idempotency_get(&self.inner, key).await
    }

    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        crate::ops::records::idempotency_put(&self.inner, key, response).await
    }

    async fn idempotency_claim(
        &self,
        key: &str,
        claim: IdempotencyClaim,
    ) -> Result<ClaimOutcome, StoreError> {
        crate::ops::records::idempotency_claim(&self.inner, key, claim).await
    }

    async fn idempotency_release(&self, key: &str, token: u64) -> Result<bool, StoreError> {
        crate::ops::records::idempotency_release(&self.inner, key, token).await
    }
}

#[async_trait]
impl Inspection for PostgresStore {
    async fn browse(
        &self,
        queue: &QueueName,
        req: BrowseRequest,
    ) -> Result<BrowsePage, StoreError> {
        crate::ops::browse::browse(&self.inner, queue, req).await
    }

    async fn keys(
        &self,
        queue: &QueueName,
        req: sluice_core::key_stats::KeysRequest,
    ) -> Result<sluice_core::key_stats::KeysPage, StoreError> {
        crate::ops::keys::keys(&self.inner, queue, &req).await
    }

    async fn get_message(&self, id: MessageId) -> Result<Message, StoreError> {
        crate::ops::browse::get_message(&self.inner, id).await
    }

    async fn delete_message(&self, id: MessageId) -> Result<(), StoreError> {
        crate::ops::browse::delete_message(&self.inner, id).await
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        crate::ops::stats::stats(&self.inner, queue).await
    }

    async fn stats_many(
        &self,
        queues: &[QueueName],
    ) -> Result<Vec<Option<QueueStats>>, StoreError> {
        crate::ops::stats::stats_many(&self.inner, queues).await
    }

    async fn summarize(
        &self,
        queue: &QueueName,
        req: sluice_core::summary::SummaryRequest,
    ) -> Result<sluice_core::summary::Summary, StoreError> {
        crate::ops::summary::summarize(&self.inner, queue, req).await
    }
}
