//! [`QueueAdmin`]: creating, configuring, listing, deleting and emptying queues.

use async_trait::async_trait;

use crate::config::{PutQueueOutcome, QueueConfigPatch, QueueInfo};
use crate::error::StoreError;
use crate::name::QueueName;
use crate::store::{QueuePage, QueuePageRequest};

/// The queues themselves: what an operator (or a declared config) creates, changes and
/// removes. Every check here needs the queue's current config, so the engine makes them.
#[async_trait]
pub trait QueueAdmin: Send + Sync + 'static {
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

    /// Creates the queue as [`QueueAdmin::put_queue`] does, but only when it does not exist
    /// yet: an existing queue is left as it is. The check and the creation are one step, so of
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

    /// All queues, by name. Its cost grows with the number of queues: what answers a client
    /// uses [`QueueAdmin::list_queues_page`].
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError>;

    /// One page of queues in bytewise name order: those whose name starts with `req.prefix`,
    /// after the queue `req.cursor` names, at most `req.limit`, with a `next_cursor` while
    /// more remain. It costs in proportion to the page, not to the number of queues. Following
    /// `next_cursor` to the end returns every queue that exists throughout the walk exactly
    /// once; one created or deleted meanwhile may or may not appear, and never twice.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad limit, prefix or cursor ([`QueuePageRequest::range`]);
    /// `Unavailable` when storage cannot be read.
    async fn list_queues_page(&self, req: QueuePageRequest) -> Result<QueuePage, StoreError>;

    /// For each of several names (at most [`MAX_QUEUE_PAGE`](super::MAX_QUEUE_PAGE)), in the
    /// order asked, whether some queue names it as its dead-letter queue — what a page of an
    /// overview marks without reading every queue's configuration.
    ///
    /// The default reads [`list_queues`](QueueAdmin::list_queues).
    ///
    /// # Errors
    /// `InvalidArgument` for more than `MAX_QUEUE_PAGE` names; `Unavailable`.
    async fn dead_letter_queues_among(&self, names: &[QueueName]) -> Result<Vec<bool>, StoreError> {
        let targets: std::collections::HashSet<QueueName> = self
            .list_queues()
            .await?
            .into_iter()
            .filter_map(|q| q.config.dead_letter_queue)
            .collect();
        Ok(names.iter().map(|n| targets.contains(n)).collect())
    }

    /// An operator's order to a queue's circuit breaker: `Open` keeps it open (no probes)
    /// until ordered `Closed`; `Closed` closes it with an empty window, automatic from then on.
    /// Kept durably before it answers; the transition is written to the audit log. Returns
    /// the queue's adaptive state afterwards.
    ///
    /// # Errors
    /// `QueueNotFound`; `Conflict` when the queue has no `breaker`.
    async fn force_breaker(
        &self,
        queue: &QueueName,
        force: crate::adaptive::BreakerForce,
    ) -> Result<crate::adaptive::FlowStats, StoreError>;

    /// An operator's order to the breaker of one key (`None`: the implicit key) of a queue
    /// whose breaker is per key (`"scope": "key"`), as [`Admin::force_breaker`] orders a
    /// queue's: kept durably before it answers, the transition written to the audit log.
    /// Returns the key's rate and breaker afterwards.
    ///
    /// # Errors
    /// `QueueNotFound`; `Conflict` when the queue has no per-key breaker.
    async fn force_key_breaker(
        &self,
        queue: &QueueName,
        key: Option<&crate::MessageKey>,
        force: crate::adaptive::BreakerForce,
    ) -> Result<crate::adaptive::KeyFlowStats, StoreError>;

    /// Deletes a queue and every message in it. Returns how many messages it held (visible,
    /// delayed and in flight; completed records not counted), for the audit log. Messages
    /// that left it earlier (dead-lettered, moved) stay where they are.
    ///
    /// # Errors
    /// `QueueNotFound`; `Conflict` while another queue names it as its dead-letter queue.
    async fn delete_queue(&self, name: &QueueName) -> Result<u64, StoreError>;

    /// Removes every message of a queue (not its completed records). Returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError>;
}
