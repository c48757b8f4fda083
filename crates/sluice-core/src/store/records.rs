//! [`Records`]: what the broker keeps beside the queues — stats history, the audit log and
//! idempotent responses.

use async_trait::async_trait;

use super::{ClaimOutcome, IdempotencyClaim, IdempotentResponse};
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
    /// ([`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL) after it was stored). A key that is only
    /// claimed ([`idempotency_claim`](Records::idempotency_claim)) has none.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError>;

    /// Remembers `response` under `key` for [`IDEMPOTENCY_TTL`](super::IDEMPOTENCY_TTL),
    /// durably, unless a response is already kept under it: then nothing changes and the kept
    /// one is returned (first writer wins, so concurrent duplicates on several broker nodes
    /// agree). A pending claim on `key`, whoever holds it, ends: the key is answered.
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

    /// Claims `key` for one request before it runs, atomically across every broker node
    /// sharing the store, so that a key has one effect whatever the timing:
    /// - a response kept under `key` is returned ([`ClaimOutcome::Answered`]);
    /// - else a claim by another token whose lease has not ended is returned
    ///   ([`ClaimOutcome::Pending`], with the holder's fingerprint and lease end);
    /// - else the key is claimed for `claim.token` until now + `claim.lease` with
    ///   `claim.fingerprint` ([`ClaimOutcome::Claimed`]). This takes over a claim whose lease
    ///   has ended (its request is taken to have died), and renews the caller's own claim.
    ///
    /// The holder then stores its answer ([`idempotency_put`](Records::idempotency_put)) or
    /// gives the key up ([`idempotency_release`](Records::idempotency_release)) so that a
    /// retry runs again. Among concurrent claims of a free key exactly one is `Claimed`.
    ///
    /// A claim is not an answer: [`idempotency_get`](Records::idempotency_get) does not see
    /// it. Whether a claim outlives a restart of the store is the engine's: the embedded
    /// engine (one process) keeps claims in memory, since every request holding one ends
    /// with the process; PostgreSQL keeps them in the database until their lease ends, since
    /// the holder may be another node that is still running.
    ///
    /// # Errors
    /// `InvalidArgument` for a key over
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`](super::MAX_IDEMPOTENCY_KEY_BYTES) bytes or a lease
    /// outside 1 ms – [`MAX_IDEMPOTENCY_CLAIM_LEASE`](super::MAX_IDEMPOTENCY_CLAIM_LEASE);
    /// `Unavailable` when storage cannot be written (the claim may or may not be held; a
    /// retry with the same token settles it).
    async fn idempotency_claim(
        &self,
        key: &str,
        claim: IdempotencyClaim,
    ) -> Result<ClaimOutcome, StoreError>;

    /// Gives up the claim `token` holds on `key` (its request failed without an answer to
    /// remember), so that the next request with the key runs. Returns whether a claim was
    /// released: nothing changes (false) when the key is answered, free, claimed by another
    /// token, or `token`'s claim has run out (an ended claim is free already).
    ///
    /// # Errors
    /// `InvalidArgument` for a key over
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`](super::MAX_IDEMPOTENCY_KEY_BYTES) bytes; `Unavailable`
    /// when storage cannot be written.
    async fn idempotency_release(&self, key: &str, token: u64) -> Result<bool, StoreError>;
}
