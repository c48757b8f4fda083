//! [`Records`]: what the broker keeps beside the queues — stats history, the audit log and
//! idempotent responses.

use async_trait::async_trait;

use super::IdempotentResponse;
use crate::audit::{AuditEvent, AuditQuery};
use crate::error::StoreError;
use crate::name::QueueName;
use crate::stats::StatsSample;
use crate::time::Timestamp;

/// The broker's own records, kept by the store so that every node sharing it sees them:
/// history points for rates and trends, the audit log, and responses remembered under
/// idempotency keys.
#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// Stores one history point per queue, taken at `at` (a multiple of
    /// [`SAMPLE_INTERVAL`](crate::stats::SAMPLE_INTERVAL)). A point already stored for a queue
    /// at `at` is kept (several broker nodes may sample the same moment). A point no newer than
    /// the queue's latest, or repeating its numbers while that one is younger than
    /// [`HISTORY_HEARTBEAT`](crate::stats::HISTORY_HEARTBEAT), is not stored
    /// ([`StatsSample::worth_storing_after`]): an idle queue costs a point an hour. Points older
    /// than [`HISTORY_KEPT`](crate::stats::HISTORY_KEPT) are forgotten.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be written.
    async fn record_stats(&self, samples: Vec<(QueueName, StatsSample)>) -> Result<(), StoreError>;

    /// A queue's history points at or after `since`, oldest first, preceded by the latest
    /// point before `since` when one is kept: points that repeat the one before are not
    /// stored, so that one holds the queue's numbers at `since`
    /// ([`StatsSample::fill`] puts back a point at every slot).
    ///
    /// # Errors
    /// `QueueNotFound`.
    async fn stats_history(
        &self,
        queue: &QueueName,
        since: Timestamp,
    ) -> Result<Vec<StatsSample>, StoreError>;

    /// The history points of several queues (at most
    /// [`MAX_QUEUE_PAGE`](super::MAX_QUEUE_PAGE)) as [`stats_history`](Records::stats_history)
    /// answers them, in the order asked; a queue that does not exist has none. For the overview, which draws every
    /// queue's trend.
    ///
    /// The default asks [`stats_history`](Records::stats_history) for each queue.
    ///
    /// # Errors
    /// `InvalidArgument` for more than `MAX_QUEUE_PAGE` queues; `Unavailable`.
    async fn stats_history_many(
        &self,
        queues: &[QueueName],
        since: Timestamp,
    ) -> Result<Vec<Vec<StatsSample>>, StoreError> {
        let mut out = Vec::with_capacity(queues.len());
        for q in queues {
            match self.stats_history(q, since).await {
                Ok(h) => out.push(h),
                Err(StoreError::QueueNotFound(_)) => out.push(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Appends entries to the audit log, durably. Engines also append their own dead-letter
    /// and expiry events.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be written.
    async fn audit_append(&self, events: Vec<AuditEvent>) -> Result<(), StoreError>;

    /// The newest audit entries matching `query`, oldest first.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be read.
    async fn audit_query(&self, query: AuditQuery) -> Result<Vec<AuditEvent>, StoreError>;

    /// The response remembered under an idempotency key, while it is kept
    /// ([`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL) after it was stored).
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError>;

    /// Remembers `response` under `key` for [`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL),
    /// durably, unless a response is already kept under it: then nothing changes and the kept
    /// one is returned (first writer wins, so concurrent duplicates on several broker nodes
    /// agree).
    ///
    /// # Errors
    /// `InvalidArgument` for a key over
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`](super::MAX_IDEMPOTENCY_KEY_BYTES) bytes or a response over
    /// 1 MiB; `Unavailable` when storage cannot be written.
    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError>;
}
