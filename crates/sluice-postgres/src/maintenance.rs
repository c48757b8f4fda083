//! Each node's background work: settle every queue (so leases that ran out return to
//! waiting consumers on time) and forget what has outlived its keep time.

use std::sync::Weak;
use std::time::Duration;

use sluice_core::StoreError;
use sluice_core::stats::HISTORY_KEPT;
use tokio_postgres::types::Json;

use crate::error::{corrupt, db};
use crate::settle::{Effects, settle};
use crate::store::Inner;

/// Most expired rows of each kind one round deletes, to keep transactions short.
const PRUNE_BATCH: i64 = 10_000;

/// One round of maintenance.
pub(crate) async fn once(inner: &Inner) -> Result<(), StoreError> {
    let now = inner.now();
    let mut conn = inner.conn().await?;
    let queues = conn
        .query("SELECT name, config FROM queues", &[])
        .await
        .map_err(|e| db(&e))?;
    for q in &queues {
        let name: String = q.get(0);
        let cfg: Json<sluice_core::QueueConfig> = q.try_get(1).map_err(corrupt)?;
        let fx = crate::store::transaction(&mut conn, async |tx| {
            let mut fx = Effects::default();
            settle(tx, &name, &cfg.0, now, &mut fx).await?;
            fx.write(tx).await?;
            Ok(fx)
        })
        .await?;
        fx.wake(inner);
    }
    let history_from = now - i64::try_from(HISTORY_KEPT.as_millis()).unwrap_or(0);
    for (sql, at) in [
        (
            "DELETE FROM messages WHERE id IN (SELECT id FROM messages
                 WHERE state = 2 AND keep_until <= $1 LIMIT $2)",
            now,
        ),
        (
            "DELETE FROM packs WHERE id IN (SELECT id FROM packs
                 WHERE state = 2 AND keep_until <= $1 LIMIT $2)",
            now,
        ),
        (
            "DELETE FROM dedup WHERE ctid IN (SELECT ctid FROM dedup WHERE until <= $1 LIMIT $2)",
            now,
        ),
        (
            "DELETE FROM idempotency WHERE ctid IN
                 (SELECT ctid FROM idempotency WHERE until <= $1 LIMIT $2)",
            now,
        ),
        (
            "DELETE FROM stats_history WHERE ctid IN
                 (SELECT ctid FROM stats_history WHERE at < $1 LIMIT $2)",
            history_from,
        ),
    ] {
        conn.execute(sql, &[&at, &PRUNE_BATCH])
            .await
            .map_err(|e| db(&e))?;
    }
    Ok(())
}

/// Runs [`once`] every `every` while the store lives.
pub(crate) async fn run(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        match once(&inner).await {
            Ok(()) => {
                if failing {
                    tracing::info!("database reachable again; maintenance resumed");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "background maintenance failed; retrying");
                }
                failing = true;
            }
        }
    }
}
