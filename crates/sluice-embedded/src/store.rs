//! [`EmbeddedStore`]: the contract's concern traits on the local log. Each method is one call
//! into [`crate::ops`], where the verbs live, grouped as in the PostgreSQL engine. The
//! stateless checks of the arguments have run before, in [`sluice_core::Checked`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::schedule::{Schedule, ScheduleName, ScheduleSpec};
use sluice_core::store::{
    ClaimOutcome, Hints, IdempotencyClaim, IdempotentResponse, Inspection, LeaseState, Messaging,
    QueueAdmin, Records, Redrives, ScheduleStep, Schedules, StepOutcome,
};
use sluice_core::{
    AckRequest, BrowsePage, BrowseRequest, Delivery, Failure, Message, MessageId, NackOutcome,
    NewMessage, Progress, PutQueueOutcome, QueueConfigPatch, QueueInfo, QueueName, QueuePage,
    QueuePageRequest, QueueStats, Receipt, ReceiveRequest, RedriveId, RedriveJob, RedriveSpec,
    RedriveStep, SendOutcome, StoreError, Timestamp,
};

use crate::core::Inner;
use crate::ops;

/// The default storage engine: a data directory on local disk. [`EmbeddedStore::open`] hands
/// it out inside [`sluice_core::Checked`], the contract's checking layer.
///
/// Cloning is cheap and shares the store. The background maintenance task stops when the
/// last clone is dropped, and the data directory is released then.
#[derive(Clone)]
pub struct EmbeddedStore {
    pub(crate) inner: Arc<Inner>,
}

impl EmbeddedStore {
    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Runs one round of background maintenance now (lease expiry, retention, compaction),
    /// after any compaction already running.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be written.
    pub async fn maintain(&self) -> Result<(), StoreError> {
        crate::maintenance::round(&self.inner, true).await
    }

    /// Live messages in the index (all queues), for capacity planning: each costs about
    /// 160 bytes of RAM besides its body (see `docs/architecture.md`).
    pub fn index_len(&self) -> usize {
        self.inner.lock().state.msgs.len()
    }
}

#[async_trait]
impl QueueAdmin for EmbeddedStore {
    async fn put_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        ops::queues::put(&self.inner, name, patch, false)
    }

    async fn create_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        ops::queues::put(&self.inner, name, patch, true)
    }

    async fn get_queue(&self, name: &QueueName) -> Result<QueueInfo, StoreError> {
        ops::queues::get(&self.inner, name)
    }

    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        ops::queues::list(&self.inner)
    }

    async fn list_queues_page(&self, req: QueuePageRequest) -> Result<QueuePage, StoreError> {
        ops::queues::page(&self.inner, &req)
    }

    async fn force_breaker(
        &self,
        queue: &QueueName,
        force: sluice_core::adaptive::BreakerForce,
    ) -> Result<sluice_core::adaptive::FlowStats, StoreError> {
        let mut core = self.inner.lock();
        let now = self.inner.now();
        let qid = core.qid(queue)?;
        core.flow_force(qid, force, now)
    }

    async fn force_key_breaker(
        &self,
        queue: &QueueName,
        key: Option<&sluice_core::MessageKey>,
        force: sluice_core::adaptive::BreakerForce,
    ) -> Result<sluice_core::adaptive::KeyFlowStats, StoreError> {
        let mut core = self.inner.lock();
        let now = self.inner.now();
        let qid = core.qid(queue)?;
        core.force_key_breaker(
            qid,
            key.map(|k| std::sync::Arc::from(k.as_str())),
            force,
            now,
        )
    }

    async fn dead_letter_queues_among(&self, names: &[QueueName]) -> Result<Vec<bool>, StoreError> {
        Ok(ops::queues::dead_letter_queues_among(&self.inner, names))
    }

    async fn delete_queue(&self, name: &QueueName) -> Result<u64, StoreError> {
        ops::queues::delete(&self.inner, name)
    }

    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError> {
        ops::queues::purge(&self.inner, queue).await
    }
}

#[async_trait]
impl Messaging for EmbeddedStore {
    async fn send(
        &self,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        ops::send::send(&self.inner, queue, messages).await
    }

    async fn receive(
        &self,
        queue: &QueueName,
        req: ReceiveRequest,
    ) -> Result<Vec<Delivery>, StoreError> {
        ops::receive::receive(&self.inner, queue, req).await
    }

    async fn ack(
        &self,
        queue: &QueueName,
        acks: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        ops::ack::ack(&self.inner, queue, acks).await
    }

    async fn nack(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        failure: Failure,
    ) -> Result<NackOutcome, StoreError> {
        ops::nack::nack(&self.inner, queue, receipt, delay, failure).await
    }

    async fn reject(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        failure: Failure,
    ) -> Result<QueueName, StoreError> {
        ops::nack::reject(&self.inner, queue, receipt, failure).await
    }

    async fn move_message(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        to: &QueueName,
        failure: Failure,
    ) -> Result<(), StoreError> {
        ops::nack::move_message(&self.inner, queue, receipt, to, failure).await
    }

    async fn extend(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Result<LeaseState, StoreError> {
        ops::tasks::extend(&self.inner, queue, receipt, visibility).await
    }

    async fn release(&self, queue: &QueueName, receipt: Receipt) -> Result<(), StoreError> {
        ops::nack::release(&self.inner, queue, receipt).await
    }

    async fn progress(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        progress: Progress,
    ) -> Result<LeaseState, StoreError> {
        ops::tasks::progress(&self.inner, queue, receipt, progress)
    }

    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError> {
        ops::tasks::cancel(&self.inner, id).await
    }

    fn hints(&self) -> Hints {
        Hints {
            ack_overlap: ops::ack::ACK_OVERLAP,
            groups: true,
        }
    }

    async fn writable(&self) -> Result<(), StoreError> {
        self.inner.lock().log.writable()
    }
}

#[async_trait]
impl Inspection for EmbeddedStore {
    async fn browse(
        &self,
        queue: &QueueName,
        req: BrowseRequest,
    ) -> Result<BrowsePage, StoreError> {
        ops::browse::browse(&self.inner, queue, req)
    }

    async fn keys(
        &self,
        queue: &QueueName,
        req: sluice_core::key_stats::KeysRequest,
    ) -> Result<sluice_core::key_stats::KeysPage, StoreError> {
        ops::keys::keys(&self.inner, queue, &req)
    }

    async fn get_message(&self, id: MessageId) -> Result<Message, StoreError> {
        ops::browse::get_message(&self.inner, id)
    }

    async fn delete_message(&self, id: MessageId) -> Result<(), StoreError> {
        ops::browse::delete_message(&self.inner, id).await
    }

    async fn summarize(
        &self,
        queue: &QueueName,
        req: sluice_core::summary::SummaryRequest,
    ) -> Result<sluice_core::summary::Summary, StoreError> {
        ops::summary::summarize(&self.inner, queue, &req).await
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        ops::stats::stats(&self.inner, queue)
    }

    async fn stats_many(
        &self,
        queues: &[QueueName],
    ) -> Result<Vec<Option<QueueStats>>, StoreError> {
        ops::stats::stats_many(&self.inner, queues)
    }
}

#[async_trait]
impl Redrives for EmbeddedStore {
    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
        ops::redrive::create(&self.inner, spec).await
    }

    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError> {
        ops::redrive::get(&self.inner, id)
    }

    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError> {
        ops::redrive::list(&self.inner)
    }

    async fn control_redrive(
        &self,
        id: RedriveId,
        control: sluice_core::RedriveControl,
    ) -> Result<RedriveJob, StoreError> {
        ops::redrive::control(&self.inner, id, control).await
    }

    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError> {
        ops::redrive::step(&self.inner, id, max).await
    }
}

#[async_trait]
impl Records for EmbeddedStore {
    async fn record_stats(
        &self,
        samples: Vec<(QueueName, sluice_core::stats::StatsSample)>,
    ) -> Result<(), StoreError> {
        ops::records::record_stats(&self.inner, samples).await
    }

    async fn audit_append(&self, events: Vec<sluice_core::AuditEvent>) -> Result<(), StoreError> {
        ops::records::audit_append(&self.inner, events)
    }

    async fn audit_query(
        &self,
        query: sluice_core::AuditQuery,
    ) -> Result<Vec<sluice_core::AuditEvent>, StoreError> {
        ops::records::audit_query(&self.inner, query)
    }

    async fn stats_history(
        &self,
        queue: &QueueName,
        since: Timestamp,
    ) -> Result<Vec<sluice_core::stats::StatsSample>, StoreError> {
        ops::records::stats_history(&self.inner, queue, since)
    }

    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        ops::records::idempotency_get(&self.inner, key)
    }

    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        ops::records::idempotency_put(&self.inner, key, response).await
    }

    async fn idempotency_claim(
        &self,
        key: &str,
        claim: IdempotencyClaim,
    ) -> Result<ClaimOutcome, StoreError> {
        ops::records::idempotency_claim(&self.inner, key, claim)
    }

    async fn idempotency_release(&self, key: &str, token: u64) -> Result<bool, StoreError> {
        Ok(ops::records::idempotency_release(&self.inner, key, token))
    }
}

#[async_trait]
impl Schedules for EmbeddedStore {
    async fn put_schedule(
        &self,
        name: &ScheduleName,
        spec: ScheduleSpec,
    ) -> Result<(Schedule, bool), StoreError> {
        ops::schedules::put(&self.inner, name, spec).await
    }

    async fn get_schedule(&self, name: &ScheduleName) -> Result<Schedule, StoreError> {
        ops::schedules::get(&self.inner, name)
    }

    async fn list_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        Ok(ops::schedules::list(&self.inner))
    }

    async fn delete_schedule(&self, name: &ScheduleName) -> Result<(), StoreError> {
        ops::schedules::delete(&self.inner, name).await
    }

    async fn step_schedule(
        &self,
        name: &ScheduleName,
        step: ScheduleStep,
    ) -> Result<StepOutcome, StoreError> {
        ops::schedules::step(&self.inner, name, step).await
    }
}
