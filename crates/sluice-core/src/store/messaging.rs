//! [`Messaging`]: the hot path — send, receive, and everything a consumer does with a
//! delivery — and the engine's [`Hints`] about it.

use std::time::Duration;

use async_trait::async_trait;

use super::SendOutcome;
use super::{AckOverlap, AckRequest, Failure, Hints, LeaseState, NackOutcome, ReceiveRequest};
use crate::error::StoreError;
use crate::message::{Delivery, Message, MessageId, NewMessage, Progress};
use crate::name::QueueName;
use crate::receipt::Receipt;

/// Messages in and out of queues: producers send, consumers receive and settle, running
/// tasks report. Every call that names a receipt fails `ReceiptStale` once that delivery is
/// over.
#[async_trait]
pub trait Messaging: Send + Sync + 'static {
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
    /// `ReceiptStale`; `QueueNotFound` for either queue; `InvalidArgument` when `to` is the
    /// message's own queue.
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
        progress: Progress,
    ) -> Result<LeaseState, StoreError>;

    /// Cancels a task: a waiting one is removed at once and recorded as cancelled;
    /// a running one is flagged, its handler learns it at its next extension or progress
    /// report, and whatever it reports afterwards ends the task cancelled. A finished task is
    /// left as it is. Returns the message as it is afterwards.
    ///
    /// # Errors
    /// `MessageNotFound`.
    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError>;

    /// What the engine says about how it works, fixed for its life (read once, when the
    /// checking layer wraps it). The default promises nothing.
    fn hints(&self) -> Hints {
        Hints::default()
    }

    /// Whether a receive of `queue` that carries acks may lease while those acks are still
    /// being made durable, instead of after. It may when [`Messaging::ack`] applies its
    /// change before its future first waits (a lease started after the ack future was polled
    /// once sees the acks), or when nothing a lease of this queue decides depends on them (no
    /// `max_in_flight`). The broker polls the ack first either way.
    ///
    /// The answer follows [`Hints::ack_overlap`]: the default reads it, and only an engine
    /// that declares [`AckOverlap::PerQueue`] answers here itself, from the queue's state.
    async fn lease_may_overlap_ack(&self, queue: &QueueName) -> bool {
        let _ = queue;
        self.hints().ack_overlap == AckOverlap::Always
    }

    /// Hands back, before the process stops, what the store holds for this process alone
    /// and others would otherwise wait for (the PostgreSQL engine's messages leased ahead of
    /// its receives). Called once the broker has stopped serving; the store stays usable.
    /// The default has nothing to hand back.
    ///
    /// A method, not a hint: it does work (a write per queue holding such messages) that only
    /// the engine can do.
    async fn close(&self) {}

    /// Whether the store takes every kind of write now, for readiness probes: `Unavailable`,
    /// saying why, while it refuses some (e.g. new messages on an almost full disk) or all.
    /// Reads may still work. The default is always writable.
    async fn writable(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
