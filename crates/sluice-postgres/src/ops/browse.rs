//! Reading queues without leasing: browse, one message, stats; and removing: delete, purge.

use std::time::Duration;

use sluice_core::store::{BrowseCursor, validate_limit};
use sluice_core::{
    BrowsePage, BrowseRequest, BrowseState, Message, MessageId, QueueName, QueueStats, StoreError,
    Timestamp,
};

use crate::db::effects::Effects;
use crate::db::row::{FULL_COLS, message_of};
use crate::error::{corrupt, db};
use crate::expiry::{expire_queue, expire_with_sources};
use crate::store::Inner;

/// One page of a queue's messages in the requested states.
pub(crate) async fn browse(
    inner: &Inner,
    queue: &QueueName,
    req: BrowseRequest,
) -> Result<BrowsePage, StoreError> {
    validate_limit(req.limit)?;
    let after = req
        .cursor
        .as_deref()
        .map(str::parse::<BrowseCursor>)
        .transpose()?
        .map(|c| (c.part, c.at, c.id as i64));
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (mut found, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::ops::queues::config(tx, q, false).await?;
        let now = inner.now();
        let mut fx = Effects::default();
        expire_with_sources(tx, q, &cfg, now, &mut fx).await?;
        // Browsing pages through rows: the queue's packs become rows first.
        crate::hot::packs::unpack_queue(tx, q).await?;
        let tags: &[u8] = match req.state {
            BrowseState::InFlight => &[0],
            BrowseState::Visible => &[1],
            BrowseState::Delayed => &[2],
            BrowseState::All => &[0, 1, 2],
        };
        let want = i64::from(req.limit) + 1;
        let mut found: Vec<(u8, i64, Message)> = Vec::new();
        for &tag in tags {
            let (from_at, from_id) = match after {
                Some((t, at, id)) if t == tag => (at, id),
                Some((t, _, _)) if t > tag => continue,
                _ => (i64::MIN, i64::MIN),
            };
            let cond = match tag {
                0 => "state = 1",
                1 => "state = 0 AND visible_at <= $2",
                _ => "state = 0 AND visible_at > $2",
            };
            let rows = tx
                .query(
                    &format!(
                        "SELECT {FULL_COLS} FROM messages
                         WHERE queue = $1 AND {cond} AND $2::bigint IS NOT NULL
                               AND (visible_at, id) > ($3, $4)
                         ORDER BY visible_at, id LIMIT $5"
                    ),
                    &[&q, &now, &from_at, &from_id, &(want - found.len() as i64)],
                )
                .await
                .map_err(|e| db(&e))?;
            for r in &rows {
                let m = message_of(r, now)?;
                let at: i64 = r.try_get(3).map_err(corrupt)?;
                found.push((tag, at, m));
            }
            if found.len() as i64 >= want {
                break;
            }
        }
        fx.write(tx).await?;
        Ok((found, fx))
    })
    .await?;
    fx.wake(inner);
    let limit = req.limit as usize;
    let next_cursor = if found.len() > limit {
        found.get(limit - 1).map(|(part, at, m)| {
            BrowseCursor {
                part: *part,
                at: *at,
                id: m.id.0,
            }
            .to_string()
        })
    } else {
        None
    };
    found.truncate(limit);
    Ok(BrowsePage {
        messages: found.into_iter().map(|(_, _, m)| m).collect(),
        next_cursor,
    })
}

/// One message wherever it is, including completed records still kept.
pub(crate) async fn get(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let mut conn = inner.conn().await?;
    let (row, fx, now) = crate::db::tx::transaction(&mut conn, async |tx| {
        let now = inner.now();
        let key = id.0 as i64;
        crate::hot::packs::unpack_member(tx, key).await?;
        let found = tx
            .query_opt("SELECT queue FROM messages WHERE id = $1", &[&key])
            .await
            .map_err(|e| db(&e))?;
        let Some(found) = found else {
            return Err(StoreError::MessageNotFound(id));
        };
        let queue: String = found.get(0);
        let mut fx = Effects::default();
        if let Ok(cfg) = crate::ops::queues::config(tx, &queue, false).await {
            expire_queue(tx, &queue, &cfg, now, &mut fx).await?;
        }
        let row = tx
            .query_opt(
                &format!(
                    "SELECT {FULL_COLS} FROM messages
                     WHERE id = $1 AND NOT (state = 2 AND keep_until <= $2)"
                ),
                &[&key, &now],
            )
            .await
            .map_err(|e| db(&e))?;
        fx.write(tx).await?;
        Ok((row, fx, now))
    })
    .await?;
    fx.wake(inner);
    match row {
        Some(r) => message_of(&r, now),
        None => Err(StoreError::MessageNotFound(id)),
    }
}

/// Removes one message or completed record.
pub(crate) async fn delete(inner: &Inner, id: MessageId) -> Result<(), StoreError> {
    let mut conn = inner.conn().await?;
    let n = crate::db::tx::transaction(&mut conn, async |tx| {
        crate::hot::packs::unpack_member(tx, id.0 as i64).await?;
        tx.execute(
            "DELETE FROM messages WHERE id = $1 AND NOT (state = 2 AND keep_until <= $2)",
            &[&(id.0 as i64), &inner.now()],
        )
        .await
        .map_err(|e| db(&e))
    })
    .await?;
    if n == 0 {
        return Err(StoreError::MessageNotFound(id));
    }
    inner.read_ahead.forget_message(id);
    Ok(())
}

/// Removes every message of a queue (not its completed records).
pub(crate) async fn purge(inner: &Inner, queue: &QueueName) -> Result<u64, StoreError> {
    let mut conn = inner.conn().await?;
    let n = crate::db::tx::transaction(&mut conn, async |tx| {
        crate::ops::queues::config(tx, queue.as_str(), false).await?;
        crate::hot::packs::unpack_queue(tx, queue.as_str()).await?;
        let n = tx
            .execute(
                "DELETE FROM messages WHERE queue = $1 AND state < 2",
                &[&queue.as_str()],
            )
            .await
            .map_err(|e| db(&e))?;
        Ok(n)
    })
    .await?;
    // Their rows are gone with the rest.
    inner.read_ahead.forget(queue);
    Ok(n)
}

/// Gauges and counters of one queue.
pub(crate) async fn stats(inner: &Inner, queue: &QueueName) -> Result<QueueStats, StoreError> {
    // This node's own recent sends, receives and acks are in the totals it answers.
    crate::db::counters::flush_pending(inner).await?;
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (r, packs, dead_letter_depth, totals, fx, now) =
        crate::db::tx::transaction(&mut conn, async |tx| {
            let cfg = crate::ops::queues::config(tx, q, false).await?;
            let now = inner.now();
            let mut fx = Effects::default();
            expire_queue(tx, q, &cfg, now, &mut fx).await?;
            let dead_letter_depth = match &cfg.dead_letter_queue {
                Some(dlq) => match crate::ops::queues::config(tx, dlq.as_str(), false).await {
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
