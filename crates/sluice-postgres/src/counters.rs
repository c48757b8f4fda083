//! Event counters per queue (SPEC §5 totals), one row per queue and database connection.
//!
//! A counter row is locked by the statement that bumps it until its transaction commits, WAL
//! flush included. Were rows shared, writers would queue behind each other's flushes and lose
//! the group commit; keyed by the connection's backend pid (mod 256), two concurrent writers
//! practically never meet on one row. A queue's totals are the sum of its rows.

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

/// Which counter (the index of its column; `sent`, `received` and `acked` are bumped by the
/// send, receive and ack statements themselves).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
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

/// The totals of `queue`.
pub(crate) async fn totals(c: &impl GenericClient, queue: &str) -> Result<Totals, StoreError> {
    let r = c
        .query_one(
            "SELECT coalesce(sum(sent), 0)::bigint, coalesce(sum(received), 0)::bigint,
                    coalesce(sum(acked), 0)::bigint, coalesce(sum(nacked), 0)::bigint,
                    coalesce(sum(dead_lettered), 0)::bigint, coalesce(sum(redriven), 0)::bigint,
                    coalesce(sum(expired), 0)::bigint
             FROM counters WHERE queue = $1",
            &[&queue],
        )
        .await
        .map_err(|e| db(&e))?;
    let get = |i: usize| -> Result<u64, StoreError> {
        let v: i64 = r.try_get(i).map_err(corrupt)?;
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
