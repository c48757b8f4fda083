//! A queue's gauges and counters.

use std::time::Duration;

use sluice_core::{QueueName, QueueStats, StoreError, Timestamp};

use crate::db::effects::Effects;
use crate::error::{corrupt, db};
use crate::expiry::{expire_queue, expire_with_sources};
use crate::store::Inner;

/// Gauges and counters of one queue.
pub(crate) async fn stats(inner: &Inner, queue: &QueueName) -> Result<QueueStats, StoreError> {
    // This node's own recent sends, receives and acks are in the totals it answers.
    crate::db::counters::flush_pending(inner).await?;
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (r, packs, dead_letter_depth, totals, fx, now) =
        crate::db::tx::transaction(&mut conn, async |tx| {
            let cfg = crate::db::catalog::config(tx, q, false).await?;
            let now = inner.now();
            let mut fx = Effects::default();
            expire_queue(tx, q, &cfg, now, &mut fx).await?;
            let dead_letter_depth = match &cfg.dead_letter_queue {
                Some(dlq) => match crate::db::catalog::config(tx, dlq.as_str(), false).await {
                    Ok(dcfg) => {
                        expire_with_sources(tx, dlq.as_str(), &dcfg, now, &mut fx).await?;
                        let r = tx
                            .query_one(crate::hot::packs::DEPTH_SQL, &[&dlq.as_str()])
                            .await
                            .map_err(|e| db(&e))?;
                        u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)
                    }
                    Err(StoreError::QueueNotFound(_)) => 0,
                    Err(e) => return Err(e),
                },
                None => 0,
            };
            let r = tx
                .query_one(
                    "SELECT count(*) FILTER (WHERE state = 0 AND visible_at <= $2),
                        count(*) FILTER (WHERE state = 0 AND visible_at > $2),
                        count(*) FILTER (WHERE state = 1),
                        count(*) FILTER (WHERE state = 2 AND keep_until > $2),
                        min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2)
                 FROM messages WHERE queue = $1",
                    &[&q, &now],
                )
                .await
                .map_err(|e| db(&e))?;
            let packs = tx
                .query_one(crate::hot::packs::STATS_SQL, &[&q, &now])
                .await
                .map_err(|e| db(&e))?;
            // The expiry passes above counted what they did; the totals include it.
            fx.write(tx).await?;
            let totals = crate::db::counters::totals(tx, q).await?;
            Ok((r, packs, dead_letter_depth, totals, fx, now))
        })
        .await?;
    fx.wake(inner);
    let n = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
    let p = |i: usize| u64::try_from(packs.get::<_, i64>(i)).unwrap_or(0);
    let oldest_row: Option<i64> = r.try_get(4).map_err(corrupt)?;
    let oldest_pack: Option<i64> = packs.try_get(3).map_err(corrupt)?;
    let oldest = oldest_row.into_iter().chain(oldest_pack).min();
    Ok(QueueStats {
        visible: n(0) + p(0),
        delayed: n(1),
        in_flight: n(2) + p(1),
        dead_letter_depth,
        oldest_visible_age: oldest.map_or(Duration::ZERO, |at| Timestamp(now).since(Timestamp(at))),
        completed: n(3) + p(2),
        totals,
    })
}
