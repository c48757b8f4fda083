//! `keys`: what each key of a queue holds, counted by one grouped pass over the queue's rows,
//! and its deliveries from the per-minute tallies the lease by rank keeps (`key_tallies`).

use std::collections::HashMap;

use sluice_core::key_stats::{self, KeyStats, KeysPage, KeysRequest, MinuteTally};
use sluice_core::{MessageKey, QueueName, StoreError, Timestamp};

use crate::db::effects::Effects;
use crate::error::{corrupt, db};
use crate::expiry::expire_queue;
use crate::store::Inner;

/// Each key's messages: `''` is the implicit key (no key can be empty).
const KEYS_SQL: &str = "SELECT coalesce(fkey, ''),
        count(*) FILTER (WHERE state = 0 AND visible_at <= $2),
        count(*) FILTER (WHERE state = 0 AND visible_at > $2),
        count(*) FILTER (WHERE state = 1),
        min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2)
     FROM messages WHERE queue = $1 AND state < 2 GROUP BY 1";

/// The deliveries of each key in the current minute (`$2`) and the one before.
const TALLIES_SQL: &str = "SELECT fkey, minute, n FROM key_tallies
     WHERE queue = $1 AND minute >= $2::bigint - 1";

/// One page of queue `queue`'s keys, brought up to now.
pub(crate) async fn keys(
    inner: &Inner,
    queue: &QueueName,
    req: &KeysRequest,
) -> Result<KeysPage, StoreError> {
    let q = queue.as_str();
    // This node's outcomes first, so that a key's state shows what its deliveries did.
    crate::flow::flush_queue(inner, q).await?;
    let mut conn = inner.conn().await?;
    let (rows, packs, tallies, flows, fx, now) =
        crate::db::tx::transaction(&mut conn, async |tx| {
            let cfg = crate::db::catalog::config(tx, q, false).await?;
            let now = inner.now();
            let mut fx = Effects::default();
            expire_queue(tx, q, &cfg, now, &mut fx).await?;
            let rows = tx.query(KEYS_SQL, &[&q, &now]).await.map_err(|e| db(&e))?;
            // Packs hold only messages without a key.
            let packs = tx
                .query_one(crate::hot::packs::STATS_SQL, &[&q, &now])
                .await
                .map_err(|e| db(&e))?;
            let minute = MinuteTally::minute_of(now);
            let tallies = tx
                .query(TALLIES_SQL, &[&q, &minute])
                .await
                .map_err(|e| db(&e))?;
            // Each listed key's own rate and breaker, on a queue that governs keys.
            let flows = if sluice_core::adaptive::governs_keys(&cfg) {
                let mut keys: Vec<String> = Vec::with_capacity(rows.len() + 1);
                for r in &rows {
                    keys.push(r.try_get(0).map_err(corrupt)?);
                }
                keys.push(String::new());
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                crate::hot::key_flows::stats(tx, q, &cfg, &keys, now).await?
            } else {
                HashMap::new()
            };
            fx.write(tx).await?;
            Ok((rows, packs, tallies, flows, fx, now))
        })
        .await?;
    fx.after_commit(inner);

    let minute = MinuteTally::minute_of(now);
    let mut delivered: HashMap<String, (u64, u64)> = HashMap::new();
    for r in &tallies {
        let key: String = r.try_get(0).map_err(corrupt)?;
        let m: i64 = r.try_get(1).map_err(corrupt)?;
        let n = u64::try_from(r.try_get::<_, i64>(2).map_err(corrupt)?).unwrap_or(0);
        let e = delivered.entry(key).or_default();
        if m == minute {
            e.0 += n;
        } else {
            e.1 += n;
        }
    }
    let count = |r: &tokio_postgres::Row, i: usize| -> Result<u64, StoreError> {
        Ok(u64::try_from(r.try_get::<_, i64>(i).map_err(corrupt)?).unwrap_or(0))
    };
    let mut all: Vec<KeyStats> = Vec::with_capacity(rows.len() + 1);
    let mut implicit = None;
    for r in &rows {
        let key: String = r.try_get(0).map_err(corrupt)?;
        let oldest: Option<i64> = r.try_get(4).map_err(corrupt)?;
        let tally = delivered.get(&key).copied();
        let stats = KeyStats {
            key: None,
            visible: count(r, 1)?,
            delayed: count(r, 2)?,
            in_flight: count(r, 3)?,
            oldest_visible_at: oldest.map(Timestamp),
            delivered_1m: Some(tally.map_or(0, |(c, p)| MinuteTally::estimate(now, c, p))),
            flow: flows.get(&key).cloned(),
        };
        if key.is_empty() {
            implicit = Some(stats);
        } else {
            all.push(KeyStats {
                key: Some(MessageKey::new(key).map_err(corrupt)?),
                ..stats
            });
        }
    }
    let (pv, pf) = (count(&packs, 0)?, count(&packs, 1)?);
    let pack_oldest: Option<i64> = packs.try_get(3).map_err(corrupt)?;
    if implicit.is_some() || pv + pf > 0 {
        let mut k = implicit.unwrap_or(KeyStats {
            key: None,
            visible: 0,
            delayed: 0,
            in_flight: 0,
            oldest_visible_at: None,
            delivered_1m: Some(0),
            flow: flows.get("").cloned(),
        });
        k.visible += pv;
        k.in_flight += pf;
        k.oldest_visible_at = [k.oldest_visible_at, pack_oldest.map(Timestamp)]
            .into_iter()
            .flatten()
            .min();
        // Deliveries of messages without a key are counted only by the lease by rank: on a
        // queue that has not held keys or priorities this minute or the last, not at all.
        if !delivered.contains_key("") && all.is_empty() {
            k.delivered_1m = None;
        }
        all.push(k);
    }
    Ok(key_stats::page(all, req))
}
