//! A queue's gauges and counters.

use std::time::Duration;

use sluice_core::{QueueName, QueueStats, StoreError, Timestamp};

use crate::db::effects::Effects;
use crate::error::{corrupt, db};
use crate::expiry::{expire_queue, expire_with_sources};
use crate::store::Inner;

/// Gauges and counters of one queue.
pub(crate) async fn stats(inner: &Inner, queue: &QueueName) -> Result<QueueStats, StoreError> {
    // The outcomes this node counted for a governed queue are in its state.
    let q = queue.as_str();
    crate::flow::flush_queue(inner, q).await?;
    let mut conn = inner.conn().await?;
    let (r, packs, dead_letter_depth, flow, fx, now) =
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
                        min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2),
                        count(DISTINCT fkey) FILTER (WHERE state < 2)
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
            let flow = crate::flow::stats(tx, q, &cfg, now).await?;
            let key_flows = crate::hot::key_flows::summaries(tx, &[q], now)
                .await?
                .remove(q);
            Ok((r, packs, dead_letter_depth, (flow, key_flows), fx, now))
        })
        .await?;
    fx.after_commit(inner);
    // The totals are read once every node has written the counts of what these depths show.
    // (A pool may hold one connection: this one goes back first.)
    drop(conn);
    crate::coverage::cover(inner).await?;
    let totals = crate::db::counters::totals(&**inner.conn().await?, q).await?;
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
        flow: flow.0,
        active_keys: n(5),
        key_flows: flow.1,
    })
}

/// Gauges and counters of several queues in a few grouped queries, whatever their number:
/// read as stored (this node's maintenance round brings leases and retention up to date every
/// half second or so), so a scrape of every queue costs queries per page, not per queue.
///
/// Long because its queries must share one snapshot to agree (the totals, read after every
/// node's counts are written, excepted: `crate::coverage`), and merging their rows by queue
/// name is what that snapshot is for; split, the transaction's results would travel as a
/// tuple of five.
pub(crate) async fn stats_many(
    inner: &Inner,
    queues: &[QueueName],
) -> Result<Vec<Option<QueueStats>>, StoreError> {
    use std::collections::HashMap;

    if queues.is_empty() {
        return Ok(Vec::new());
    }
    crate::flow::flush(inner).await?;
    let names: Vec<&str> = queues.iter().map(QueueName::as_str).collect();
    let mut conn = inner.conn().await?;
    let now = inner.now();
    // One snapshot for every query, so the numbers agree with each other.
    let (catalog, rows, packs, depths, flows) = crate::db::tx::transaction(&mut conn, async |tx| {
        let catalog = tx
            .query(
                "SELECT name, dlq FROM queues WHERE name = ANY($1)",
                &[&names],
            )
            .await
            .map_err(|e| db(&e))?;
        let rows = tx
            .query(
                "SELECT queue,
                        count(*) FILTER (WHERE state = 0 AND visible_at <= $2),
                        count(*) FILTER (WHERE state = 0 AND visible_at > $2),
                        count(*) FILTER (WHERE state = 1),
                        count(*) FILTER (WHERE state = 2 AND keep_until > $2),
                        min(visible_at) FILTER (WHERE state = 0 AND visible_at <= $2),
                        count(DISTINCT fkey) FILTER (WHERE state < 2)
                 FROM messages WHERE queue = ANY($1) GROUP BY queue",
                &[&names, &now],
            )
            .await
            .map_err(|e| db(&e))?;
        let packs = tx
            .query(crate::hot::packs::STATS_MANY_SQL, &[&names, &now])
            .await
            .map_err(|e| db(&e))?;
        let dlqs: Vec<String> = catalog
            .iter()
            .filter_map(|r| r.get::<_, Option<String>>(1))
            .collect();
        let depths = if dlqs.is_empty() {
            Vec::new()
        } else {
            tx.query(crate::hot::packs::DEPTH_MANY_SQL, &[&dlqs])
                .await
                .map_err(|e| db(&e))?
        };
        let flows = crate::flow::stats_many(tx, &names, now).await?;
        let keys = crate::hot::key_flows::summaries(tx, &names, now).await?;
        Ok((catalog, rows, packs, depths, (flows, keys)))
    })
    .await?;
    // The totals are read once every node has written the counts of what these depths show.
    drop(conn);
    crate::coverage::cover(inner).await?;
    let totals = crate::db::counters::totals_many(&**inner.conn().await?, &names).await?;

    let count = |r: &tokio_postgres::Row, i: usize| -> Result<u64, StoreError> {
        let v: i64 = r.try_get(i).map_err(corrupt)?;
        Ok(u64::try_from(v).unwrap_or(0))
    };
    let mut dlq_of: HashMap<String, Option<String>> = HashMap::with_capacity(catalog.len());
    for r in &catalog {
        dlq_of.insert(
            r.try_get(0).map_err(corrupt)?,
            r.try_get(1).map_err(corrupt)?,
        );
    }
    let mut depth: HashMap<String, u64> = HashMap::with_capacity(depths.len());
    for r in &depths {
        depth.insert(r.try_get(0).map_err(corrupt)?, count(r, 1)?);
    }
    let mut stats: HashMap<String, QueueStats> = HashMap::with_capacity(catalog.len());
    let mut oldest: HashMap<String, i64> = HashMap::new();
    for r in &rows {
        let q: String = r.try_get(0).map_err(corrupt)?;
        let s = stats.entry(q.clone()).or_default();
        s.visible += count(r, 1)?;
        s.delayed += count(r, 2)?;
        s.in_flight += count(r, 3)?;
        s.completed += count(r, 4)?;
        s.active_keys = count(r, 6)?;
        if let Some(at) = r.try_get::<_, Option<i64>>(5).map_err(corrupt)? {
            oldest.insert(q, at);
        }
    }
    for r in &packs {
        let q: String = r.try_get(0).map_err(corrupt)?;
        let s = stats.entry(q.clone()).or_default();
        s.visible += count(r, 1)?;
        s.in_flight += count(r, 2)?;
        s.completed += count(r, 3)?;
        if let Some(at) = r.try_get::<_, Option<i64>>(4).map_err(corrupt)? {
            let o = oldest.entry(q).or_insert(at);
            *o = (*o).min(at);
        }
    }
    let (mut totals, (mut flows, mut key_flows)) = (totals, flows);
    Ok(queues
        .iter()
        .map(|q| {
            let dlq = dlq_of.get(q.as_str())?;
            let mut s = stats.remove(q.as_str()).unwrap_or_default();
            s.dead_letter_depth = dlq
                .as_deref()
                .and_then(|d| depth.get(d).copied())
                .unwrap_or(0);
            s.oldest_visible_age = oldest
                .get(q.as_str())
                .map_or(Duration::ZERO, |at| Timestamp(now).since(Timestamp(*at)));
            s.totals = totals.remove(q.as_str()).unwrap_or_default();
            s.flow = flows.remove(q.as_str());
            s.key_flows = key_flows.remove(q.as_str());
            Some(s)
        })
        .collect())
}
