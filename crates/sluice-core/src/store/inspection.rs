//! [`Inspection`]: looking at what a queue holds without leasing it.

use async_trait::async_trait;

use super::{BrowsePage, BrowseRequest};
use crate::error::StoreError;
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
