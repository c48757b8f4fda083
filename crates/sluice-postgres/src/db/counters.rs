//! Event counters per queue (the totals of its stats), one row per queue and database
//! connection.
//!
//! A counter row is locked by the statement that bumps it until its transaction commits, WAL
//! flush included. Were rows shared, writers would queue behind each other's flushes and lose
//! the group commit; keyed by the connection's backend pid (mod 256), two concurrent writers
//! practically never meet on one row. A queue's totals are the sum of its rows.
//!
//! The hot paths (send, receive, ack) do not bump rows at all: each node adds their counts in
//! memory and writes them every [`FLUSH_EVERY`], before it answers a stats call, and when the
//! store is dropped. Bumping a row in every send halved unbatched throughput. The price: a
//! node that dies loses at most the last [`FLUSH_EVERY`] of its send/receive/ack counts. A
//! stats answer asks every node to write its counts first, so its totals never lag the
//! depths it shows (`crate::coverage`). Counts of rarer events (nack, dead letter,
//! redrive, expiry) are written in the transaction that made them.

use std::collections::BTreeMap;

use sluice_core::StoreError;
use sluice_core::stats::Totals;
use tokio_postgres::GenericClient;

use crate::error::{corrupt, db};

/// Increments to apply, per queue.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    by_queue: BTreeMap<String, [i64; 7]>,
}

/// How often a node writes the counts of its hot paths.
pub(crate) const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Which counter (the index of its column).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Sent = 0,
    Received = 1,
    Acked = 2,
    Nacked = 3,
    DeadLettered = 4,
    Redriven = 5,
    Expired = 6,
}

impl Counts {
    /// Adds `n` to `counter` of `queue`.
    pub(crate) fn add(&mut self, queue: &str, counter: Counter, n: i64) {
        if n != 0 {
            self.by_queue.entry(queue.to_string()).or_default()[counter as usize] += n;
        }
    }

    /// Adds every increment of `other`.
    pub(crate) fn merge(&mut self, other: Counts) {
        for (q, v) in other.by_queue {
            let mine = self.by_queue.entry(q).or_default();
            for (m, o) in mine.iter_mut().zip(v) {
                *m += o;
            }
        }
    }

    /// Nothing to write.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// Writes the increments, in the caller's transaction.
    pub(crate) async fn flush(&self, c: &impl GenericClient) -> Result<(), StoreError> {
        for (queue, v) in &self.by_queue {
            c.execute(
                "INSERT INTO counters AS c (queue, shard, sent, received, acked, nacked,
                     dead_lettered, redriven, expired)
                 VALUES ($1, (pg_backend_pid() % 256)::int2, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (queue, shard) DO UPDATE SET
                     sent = c.sent + EXCLUDED.sent, received = c.received + EXCLUDED.received,
                     acked = c.acked + EXCLUDED.acked, nacked = c.nacked + EXCLUDED.nacked,
                     dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered,
                     redriven = c.redriven + EXCLUDED.redriven, expired = c.expired + EXCLUDED.expired",
                &[
                    queue, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                ],
            )
            .await
            .map_err(|e| db(&e))?;
        }
        Ok(())
    }
}

/// The sums of every counter column, in [`totals_from`]'s order.
const SUMS: &str = "coalesce(sum(sent), 0)::bigint, coalesce(sum(received), 0)::bigint,
    coalesce(sum(acked), 0)::bigint, coalesce(sum(nacked), 0)::bigint,
    coalesce(sum(dead_lettered), 0)::bigint, coalesce(sum(redriven), 0)::bigint,
    coalesce(sum(expired), 0)::bigint";

/// The totals in the columns of `r` from `first` on (as [`SUMS`] selects them).
fn totals_from(r: &tokio_postgres::Row, first: usize) -> Result<Totals, StoreError> {
    let get = |i: usize| -> Result<u64, StoreError> {
        let v: i64 = r.try_get(first + i).map_err(corrupt)?;
        Ok(u64::try_from(v).unwrap_or(0))
    };
    Ok(Totals {
        sent: get(0)?,
        received: get(1)?,
        acked: get(2)?,
        nacked: get(3)?,
        dead_lettered: get(4)?,
        redriven: get(5)?,
        expired: get(6)?,
    })
}

/// The totals of `queue`.
pub(crate) async fn totals(c: &impl GenericClient, queue: &str) -> Result<Totals, StoreError> {
    let r = c
        .query_one(
            &format!("SELECT {SUMS} FROM counters WHERE queue = $1"),
            &[&queue],
        )
        .await
        .map_err(|e| db(&e))?;
    totals_from(&r, 0)
}

/// [`totals`] of several queues in one query, by name; a queue with no counts is absent.
pub(crate) async fn totals_many(
    c: &impl GenericClient,
    queues: &[&str],
) -> Result<std::collections::HashMap<String, Totals>, StoreError> {
    let rows = c
        .query(
            &format!("SELECT queue, {SUMS} FROM counters WHERE queue = ANY($1) GROUP BY queue"),
            &[&queues],
        )
        .await
        .map_err(|e| db(&e))?;
    rows.iter()
        .map(|r| Ok((r.try_get(0).map_err(corrupt)?, totals_from(r, 1)?)))
        .collect()
}

/// Writes the node's pending hot-path counts; on failure they stay pending.
pub(crate) async fn flush_pending(inner: &crate::store::Inner) -> Result<(), StoreError> {
    let _flushing = inner.flushing.lock().await;
    let pending = std::mem::take(&mut *inner.pending());
    write_pending(inner, pending).await
}

/// Writes `pending`, taken from the node's pending counts by a caller holding
/// [`Inner::flushing`](crate::store::Inner::flushing); on failure they go back.
pub(crate) async fn write_pending(
    inner: &crate::store::Inner,
    pending: Counts,
) -> Result<(), StoreError> {
    if pending.is_empty() {
        return Ok(());
    }
    let written = match inner.conn().await {
        Ok(conn) => pending.flush(&**conn).await,
        Err(e) => Err(e),
    };
    if let Err(e) = written {
        inner.pending().merge(pending);
        return Err(e);
    }
    Ok(())
}

/// Writes the pending counts every [`FLUSH_EVERY`] while the store lives.
pub(crate) async fn run(inner: std::sync::Weak<crate::store::Inner>) {
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = flush_pending(&inner).await {
            tracing::debug!(error = %e, "could not write counters; will retry");
        }
    }
}
