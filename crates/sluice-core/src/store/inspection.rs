//! [`Inspection`]: looking at what a queue holds without leasing it.

use async_trait::async_trait;

use super::{BrowsePage, BrowseRequest};
use crate::error::StoreError;
use crate::key_stats::{KeysPage, KeysRequest};
use crate::message::{Message, MessageId};
use crate::name::QueueName;
use crate::stats::QueueStats;
use crate::summary::{Summary, SummaryRequest};

/// Reading a queue's messages and numbers as they are — for operators, dashboards and the
/// broker's samplers — and removing one message found that way. Nothing here leases.
#[async_trait]
pub trait Inspection: Send + Sync + 'static {
    /// Gauges and counters of one queue.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError>;

    /// Gauges and counters of several queues (at most
    /// [`MAX_QUEUE_PAGE`](super::MAX_QUEUE_PAGE)) in one call, in the order asked: `None` for
    /// a queue that does not exist. For readers of the whole broker — `/metrics`, the stats
    /// sampler, the overview — which would otherwise ask once per queue and, on a database,
    /// pay a round trip each. An engine may answer from what it has stored without first
    /// bringing each queue up to now: a lease that ran out, or a message that passed its
    /// retention, since the engine's last maintenance round may still count as it was.
    ///
    /// The default asks [`stats`](Inspection::stats) for each queue.
    ///
    /// # Errors
    /// `InvalidArgument` for more than `MAX_QUEUE_PAGE` queues; `Unavailable`.
    async fn stats_many(
        &self,
        queues: &[QueueName],
    ) -> Result<Vec<Option<QueueStats>>, StoreError> {
        let mut out = Vec::with_capacity(queues.len());
        for q in queues {
            match self.stats(q).await {
                Ok(s) => out.push(Some(s)),
                Err(StoreError::QueueNotFound(_)) => out.push(None),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

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

    /// What each key of a queue holds — visible, delayed, in flight, its oldest visible
    /// message and its deliveries in the last minute — one page in the request's order
    /// ([`crate::key_stats::page`] orders and pages the numbers, so every engine lists alike).
    /// Only keys with messages waiting or in flight are listed; the implicit key (messages
    /// without one) is `key: None`. Reads every message of the queue, as a summary does.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` for a bad limit or cursor.
    async fn keys(&self, queue: &QueueName, req: KeysRequest) -> Result<KeysPage, StoreError>;

    /// Every message of a queue (any queue, typically a DLQ) that passes the request's filter,
    /// counted by the request's key (see [`crate::summary`] for the rules). Answered from an
    /// index: the cost grows with the number of messages, never with their bodies.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` for a limit out of range.
    async fn summarize(
        &self,
        queue: &QueueName,
        req: SummaryRequest,
    ) -> Result<Summary, StoreError>;
}
