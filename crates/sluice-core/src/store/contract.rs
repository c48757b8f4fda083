//! The [`Store`] trait, compiled with the feature `store` (on by default).

use async_trait::async_trait;

use super::{
    AckRequest, BrowsePage, BrowseRequest, Failure, IdempotentResponse, LeaseState, NackOutcome,
    ReceiveRequest, SendOutcome,
};
use crate::config::{PutQueueOutcome, QueueConfigPatch, QueueInfo};
use crate::error::StoreError;
use crate::message::{Delivery, Message, MessageId, NewMessage};
use crate::name::QueueName;
use crate::receipt::Receipt;
use crate::redrive::{RedriveId, RedriveJob, RedriveSpec, RedriveStep};
use crate::stats::QueueStats;
use std::time::Duration;

/// The storage engine contract.
///
/// All methods are cancel-safe in the sense that matters for a queue: dropping the future of
/// a write either leaves the write fully applied (and durable) or not applied at all.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates the queue with the defaults overlaid by `patch`, or updates its config.
    /// Creating a queue also creates its dead-letter queue when that does not exist.
    ///
    /// # Errors
    /// `InvalidArgument` for a field out of range.
    async fn put_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError>;

    /// Creates the queue as [`Store::put_queue`] does, but only when it does not exist yet:
    /// an existing queue is left as it is. The check and the creation are one step, so of
    /// two creates of one name at once exactly one succeeds.
    ///
    /// # Errors
    /// `Conflict` ([`StoreError::queue_exists`]) when the queue exists; `InvalidArgument` for
    /// a field out of range.
    async fn create_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError>;

    /// One queue.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn get_queue(&self, name: &QueueName) -> Result<QueueInfo, StoreError>;

    /// All queues, by name.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError>;

    /// Deletes a queue and every message in it.
    ///
    /// # Errors
    /// `QueueNotFound`; `Conflict` while another queue names it as its dead-letter queue.
    async fn delete_queue(&self, name: &QueueName) -> Result<(), StoreError>;

    /// Sends a batch (1–1000 messages, 16 MiB in all); all or nothing.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` (batch size, attributes, delay); `PayloadTooLarge`
    /// (body over the queue's `max_message_bytes`, batch over 16 MiB); `QueueFull`.
    async fn send(
        &self,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError>;

    /// Leases up to `max` visible messages, waiting up to `wait` for the first one.
    /// Honours pause, `rate_limit` and `max_in_flight`; may return fewer than `max`, or none.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` for `max` or durations out of range.
    async fn receive(
        &self,
        queue: &QueueName,
        req: ReceiveRequest,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Acknowledges a batch; each receipt succeeds or fails on its own.
    ///
    /// # Errors
    /// The outer error for the whole call (`QueueNotFound`, `InvalidArgument` for an empty or
    /// oversized batch); per item `ReceiptStale` or `PayloadTooLarge` for a result.
    async fn ack(
        &self,
        queue: &QueueName,
        acks: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError>;

    /// Whether a receive of `queue` that carries acks may lease while those acks are still
    /// being made durable, instead of after. It may when [`Store::ack`] applies its change
    /// before its future first waits (a lease started after the ack future was polled once
    /// sees the acks), or when nothing a lease of this queue decides depends on them (no
    /// `max_in_flight`). The broker polls the ack first either way. The default, `false`,
    /// finishes the acks before leasing.
    async fn lease_may_overlap_ack(&self, queue: &QueueName) -> bool {
        let _ = queue;
        false
    }

    /// Hands back, before the process stops, what the store holds for this process alone
    /// and others would otherwise wait for (the PostgreSQL engine's messages leased ahead of
    /// its receives). Called once the broker has stopped serving; the store stays usable.
    /// The default has nothing to hand back.
    async fn close(&self) {}

    /// Returns a message for another attempt, or dead-letters it when its attempts are used up.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound`; `InvalidArgument` for a delay over 7 days.
    async fn nack(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        failure: Failure,
    ) -> Result<NackOutcome, StoreError>;

    /// Dead-letters a message now, whatever its count. Returns the DLQ.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound`; `Conflict` when the queue has no dead-letter queue.
    async fn reject(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        failure: Failure,
    ) -> Result<QueueName, StoreError>;

    /// Moves a leased message to queue `to`, atomically, as a fresh visible message there.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound` for either queue.
    async fn move_message(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        to: &QueueName,
        failure: Failure,
    ) -> Result<(), StoreError>;

    /// Hands a delivery back without counting it as an attempt: the message is visible again
    /// at once with the receive count it had before this delivery. For a worker shutting down
    /// with work it did not start or finish — that is not the message's failure, and on its
    /// last attempt a nack would dead-letter it. A cancelled task ends cancelled instead.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound`.
    async fn release(&self, queue: &QueueName, receipt: Receipt) -> Result<(), StoreError>;

    /// Sets the lease of a delivery to end `visibility` from now. Returns the new deadline and
    /// whether the task was cancelled meanwhile.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound`; `InvalidArgument` for a duration over 12 h.
    async fn extend(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Result<LeaseState, StoreError>;

    /// Records the progress of a running task (the lease is not extended). Progress is
    /// advisory: an engine may keep it in memory only.
    ///
    /// # Errors
    /// `ReceiptStale`; `QueueNotFound`; `InvalidArgument` for a bad percentage or detail.
    async fn progress(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        progress: crate::message::Progress,
    ) -> Result<LeaseState, StoreError>;

    /// Cancels a task: a waiting one is removed at once and recorded as cancelled;
    /// a running one is flagged, its handler learns it at its next extension or progress
    /// report, and whatever it reports afterwards ends the task cancelled. A finished task is
    /// left as it is. Returns the message as it is afterwards.
    ///
    /// # Errors
    /// `MessageNotFound`.
    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError>;

    /// Creates a redrive job, running. The broker's job runner then calls
    /// [`Store::redrive_step`] at the job's rate.
    ///
    /// # Errors
    /// `QueueNotFound` for the source or destination; `Conflict` while another job of the same
    /// source runs; `InvalidArgument` for a bad spec.
    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError>;

    /// One job.
    ///
    /// # Errors
    /// `RedriveNotFound` (code `message_not_found`) for an unknown id.
    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError>;

    /// All jobs kept (running ones and the most recent finished ones), newest first.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError>;

    /// Cancels, pauses or resumes a job (see [`RedriveJob::control`]); moves already made
    /// stay. A control that changes nothing returns the job as it is.
    ///
    /// # Errors
    /// `RedriveNotFound` for an unknown id; `Conflict` for pausing or resuming a finished job.
    async fn control_redrive(
        &self,
        id: RedriveId,
        control: crate::redrive::RedriveControl,
    ) -> Result<RedriveJob, StoreError>;

    /// Moves up to `max` (1–1000) matching dead letters of a running job, atomically with the
    /// job's progress: a crash between steps never moves a message twice or loses one. Stops
    /// early (setting `blocked`) when the next message's destination is paused or at its
    /// `max_in_flight`. Completes the job when its limit is reached or no match is left.
    ///
    /// # Errors
    /// `RedriveNotFound` for an unknown id; `Conflict` when the job is not running.
    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError>;

    /// Stores one history point per queue, taken at `at` (a multiple of
    /// [`SAMPLE_INTERVAL`](crate::stats::SAMPLE_INTERVAL)). A point already stored for a queue
    /// at `at` is kept (several broker nodes may sample the same moment). Points older than
    /// [`HISTORY_KEPT`](crate::stats::HISTORY_KEPT) are forgotten.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be written.
    async fn record_stats(
        &self,
        samples: Vec<(QueueName, crate::stats::StatsSample)>,
    ) -> Result<(), StoreError>;

    /// Appends entries to the audit log, durably. Engines also append their own dead-letter
    /// and expiry events.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be written.
    async fn audit_append(&self, events: Vec<crate::audit::AuditEvent>) -> Result<(), StoreError>;

    /// The newest audit entries matching `query`, oldest first.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be read.
    async fn audit_query(
        &self,
        query: crate::audit::AuditQuery,
    ) -> Result<Vec<crate::audit::AuditEvent>, StoreError>;

    /// A queue's history points at or after `since`, oldest first.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn stats_history(
        &self,
        queue: &QueueName,
        since: crate::time::Timestamp,
    ) -> Result<Vec<crate::stats::StatsSample>, StoreError>;

    /// Lists messages of a queue without leasing them.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` for a bad cursor or limit.
    async fn browse(&self, queue: &QueueName, req: BrowseRequest)
    -> Result<BrowsePage, StoreError>;

    /// One message, wherever it is, including completed records still kept.
    ///
    /// # Errors
    /// `MessageNotFound`.
    async fn get_message(&self, id: MessageId) -> Result<Message, StoreError>;

    /// Removes one message (or completed record), whatever its state.
    ///
    /// # Errors
    /// `MessageNotFound`.
    async fn delete_message(&self, id: MessageId) -> Result<(), StoreError>;

    /// Removes every message of a queue (not its completed records). Returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError>;

    /// Gauges and counters of one queue.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError>;

    /// Every message of a queue (any queue, typically a DLQ) that passes the request's filter,
    /// counted by the request's key (see [`crate::summary`] for the rules). Answered from an
    /// index: the cost grows with the number of messages, never with their bodies.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` for a limit out of range.
    async fn summarize(
        &self,
        queue: &QueueName,
        req: crate::summary::SummaryRequest,
    ) -> Result<crate::summary::Summary, StoreError>;

    /// The response remembered under an idempotency key, while it is kept
    /// ([`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL) after it was stored).
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError>;

    /// Remembers `response` under `key` for [`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL), durably, unless a response is
    /// already kept under it: then nothing changes and the kept one is returned (first writer
    /// wins, so concurrent duplicates on several broker nodes agree).
    ///
    /// # Errors
    /// `InvalidArgument` for a key over [`MAX_IDEMPOTENCY_KEY_BYTES`](super::MAX_IDEMPOTENCY_KEY_BYTES) bytes or a response
    /// over 1 MiB; `Unavailable` when storage cannot be written.
    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError>;
}
