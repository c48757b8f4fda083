//! Queues: create or update, read, list, delete, purge.

use sluice_core::{
    PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueInfo, QueueName, QueuePage,
    QueuePageRequest, StoreError, Timestamp,
};
use tokio_postgres::types::Json;

use crate::db::catalog::config;
use crate::error::{corrupt, db};
use crate::store::Inner;

fn info_of(r: &tokio_postgres::Row) -> Result<QueueInfo, StoreError> {
    let name: String = r.try_get(0).map_err(corrupt)?;
    let cfg: Json<QueueConfig> = r.try_get(1).map_err(corrupt)?;
    Ok(QueueInfo {
        name: QueueName::new(name).map_err(corrupt)?,
        config: cfg.0,
        created_at: Timestamp(r.try_get(2).map_err(corrupt)?),
    })
}

/// One queue.
pub(crate) async fn info(inner: &Inner, name: &QueueName) -> Result<QueueInfo, StoreError> {
    let row = inner
        .conn()
        .await?
        .query_opt(
            "SELECT name, config, created_at FROM queues WHERE name = $1",
            &[&name.as_str()],
        )
        .await
        .map_err(|e| db(&e))?
        .ok_or_else(|| StoreError::QueueNotFound(name.to_string()))?;
    info_of(&row)
}

/// Every queue, by name (bytewise, as the embedded engine orders them).
pub(crate) async fn list(inner: &Inner) -> Result<Vec<QueueInfo>, StoreError> {
    inner
        .conn()
        .await?
        .query(
            r#"SELECT name, config, created_at FROM queues ORDER BY name COLLATE "C""#,
            &[],
        )
        .await
        .map_err(|e| db(&e))?
        .iter()
        .map(info_of)
        .collect()
}

/// One page of queues: names compare bytewise (`COLLATE "C"`, whatever the database's
/// collation, so both engines page alike), and the range is read through the index in that
/// order (`queues_name_bytes`) for at most `limit + 1` rows.
pub(crate) async fn page(inner: &Inner, req: &QueuePageRequest) -> Result<QueuePage, StoreError> {
    let range = req.range()?;
    // Every name is after the empty string: no cursor, no lower bound but the prefix.
    let after = range.after.as_ref().map_or("", QueueName::as_str);
    let limit = i64::try_from(range.limit + 1).unwrap_or(i64::MAX);
    let conn = inner.conn().await?;
    let rows = match range.prefix_end() {
        Some(end) => {
            conn.query(
                r#"SELECT name, config, created_at FROM queues
                   WHERE name COLLATE "C" >= $1 AND name COLLATE "C" < $2
                     AND name COLLATE "C" > $3
                   ORDER BY name COLLATE "C" LIMIT $4"#,
                &[&range.prefix, &end, &after, &limit],
            )
            .await
        }
        None => {
            conn.query(
                r#"SELECT name, config, created_at FROM queues
                   WHERE name COLLATE "C" > $1
                   ORDER BY name COLLATE "C" LIMIT $2"#,
                &[&after, &limit],
            )
            .await
        }
    }
    .map_err(|e| db(&e))?;
    let found = rows.iter().map(info_of).collect::<Result<Vec<_>, _>>()?;
    Ok(range.page(found))
}

/// For each name, whether some queue dead-letters into it (one indexed query).
pub(crate) async fn dead_letter_queues_among(
    inner: &Inner,
    names: &[QueueName],
) -> Result<Vec<bool>, StoreError> {
    let asked: Vec<&str> = names.iter().map(QueueName::as_str).collect();
    let conn = inner.conn().await?;
    let rows = conn
        .query(
            "SELECT DISTINCT dlq FROM queues WHERE dlq = ANY($1)",
            &[&asked],
        )
        .await
        .map_err(|e| db(&e))?;
    let targets = rows
        .iter()
        .map(|r| r.try_get::<_, String>(0).map_err(corrupt))
        .collect::<Result<std::collections::HashSet<_>, _>>()?;
    Ok(asked.iter().map(|n| targets.contains(*n)).collect())
}

/// Creates or updates a queue; creates its dead-letter queue when that is missing. With
/// `create_only`, an existing queue is refused (under the same lock as the write).
pub(crate) async fn put(
    inner: &Inner,
    name: &QueueName,
    patch: &QueueConfigPatch,
    create_only: bool,
) -> Result<PutQueueOutcome, StoreError> {
    let now = inner.now();
    let mut conn = inner.conn().await?;
    let (existing, row, warnings, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        // Two nodes creating the same queue at once: the second waits and then updates.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('sluice-queue:' || $1))",
            &[&name.as_str()],
        )
        .await
        .map_err(|e| db(&e))?;
        let existing = match config(tx, name.as_str(), true).await {
            Ok(c) => Some(c),
            Err(StoreError::QueueNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        if create_only && existing.is_some() {
            return Err(StoreError::queue_exists(name.as_str()));
        }
        let current = existing
            .clone()
            .unwrap_or_else(|| QueueConfig::defaults_for(name));
        let cfg = current.apply(name, patch)?;
        let mut warnings = Vec::new();
        if cfg.max_receive_count == 0 && (existing.is_none() || patch.max_receive_count == Some(0))
        {
            warnings.push(sluice_core::lifecycle::unlimited_attempts_warning(
                name.as_str(),
            ));
        }
        if let Some(dlq) = &cfg.dead_letter_queue {
            let dl = QueueConfig::dead_letter_defaults(dlq);
            tx.execute(
                "INSERT INTO queues (name, config, dlq, created_at) VALUES ($1, $2, NULL, $3)
                 ON CONFLICT (name) DO NOTHING",
                &[&dlq.as_str(), &Json(&dl), &now],
            )
            .await
            .map_err(|e| db(&e))?;
        }
        let dlq = cfg.dead_letter_queue.as_ref().map(QueueName::as_str);
        let row = tx
            .query_one(
                "INSERT INTO queues (name, config, dlq, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, dlq = EXCLUDED.dlq
                 RETURNING name, config, created_at",
                &[&name.as_str(), &Json(&cfg), &dlq, &now],
            )
            .await
            .map_err(|e| db(&e))?;
        // A governed queue's learned state moves into its new bounds (under the lock of the
        // queue's row taken above), audited with the change.
        let mut fx = crate::db::effects::Effects::default();
        crate::flow::reconfigure(tx, name.as_str(), existing.as_ref(), &cfg, now, &mut fx).await?;
        if existing.as_ref().is_some_and(|e| {
            e.default_priority != cfg.default_priority || e.key_weights != cfg.key_weights
        }) {
            // Messages without a priority of their own move to the new default; keys weigh
            // anew. Under the queue's row lock, as every ranking.
            crate::hot::ranks::rerank(tx, name.as_str()).await?;
        }
        if existing
            .as_ref()
            .is_some_and(|e| e.key_limits != cfg.key_limits)
        {
            crate::hot::key_rates::reconfigure(tx, name.as_str(), cfg.key_limits.as_ref()).await?;
        }
        if existing.as_ref().is_some_and(|e| {
            e.adaptive != cfg.adaptive
                || e.breaker != cfg.breaker
                || e.rate_limit != cfg.rate_limit
                || e.key_limits != cfg.key_limits
        }) {
            crate::hot::key_flows::reconfigure(tx, name.as_str(), &cfg, now).await?;
        }
        fx.write(tx).await?;
        Ok((existing, row, warnings, fx))
    })
    .await?;
    fx.after_commit(inner);
    if let Some(local) = inner.locals.get(name.as_str()) {
        local.forget_config();
    }
    // Waiting receives on every node re-check: the change may resume the queue, lift a
    // limit, or end it.
    inner.wake(name.as_str());
    Ok(PutQueueOutcome {
        queue: info_of(&row)?,
        created: existing.is_none(),
        warnings,
    })
}

/// Deletes a queue with its messages, counters, history and governed state.
pub(crate) async fn delete(inner: &Inner, name: &QueueName) -> Result<u64, StoreError> {
    let mut conn = inner.conn().await?;
    let held = crate::db::tx::transaction(&mut conn, async |tx| {
        config(tx, name.as_str(), true).await?;
        if let Some(user) = tx
            .query_opt(
                "SELECT name FROM queues WHERE dlq = $1 AND name <> $1 ORDER BY name LIMIT 1",
                &[&name.as_str()],
            )
            .await
            .map_err(|e| db(&e))?
        {
            let user: String = user.get(0);
            return Err(StoreError::dead_letter_queue_in_use(name.as_str(), &user));
        }
        tx.batch_execute("SET LOCAL lock_timeout = '10s'")
            .await
            .map_err(|e| db(&e))?;
        let held: i64 = tx
            .query_one(
                "SELECT (SELECT count(*) FROM messages WHERE queue = $1 AND state < 2)
                      + (SELECT coalesce(sum(pending), 0) FROM packs WHERE queue = $1 AND state < 2)",
                &[&name.as_str()],
            )
            .await
            .map_err(|e| db(&e))?
            .try_get(0)
            .map_err(crate::error::corrupt)?;
        for sql in [
            "DELETE FROM messages WHERE queue = $1",
            "DELETE FROM packs WHERE queue = $1",
            "DELETE FROM counters WHERE queue = $1",
            "DELETE FROM dedup WHERE queue = $1",
            "DELETE FROM rate_events WHERE queue = $1",
            "DELETE FROM rate_paces WHERE queue = $1",
            "DELETE FROM key_tallies WHERE queue = $1",
            "DELETE FROM key_rate_events WHERE queue = $1",
            "DELETE FROM key_paces WHERE queue = $1",
            "DELETE FROM key_flow WHERE queue = $1",
            "DELETE FROM queue_flow WHERE queue = $1",
            "DELETE FROM stats_history WHERE queue = $1",
            "DELETE FROM queues WHERE name = $1",
        ] {
            tx.execute(sql, &[&name.as_str()])
                .await
                .map_err(|e| db(&e))?;
        }
        Ok(u64::try_from(held).unwrap_or(0))
    })
    .await?;
    // Everything this node remembers of the queue goes with it. Waiting receives on every
    // node re-check, and find the queue gone; this node's wait on what it forgot.
    match inner.locals.forget(name.as_str()) {
        Some(local) => inner.wake_local(&local, usize::MAX),
        None => inner.wake(name.as_str()),
    }
    Ok(held)
}

/// Removes every message of a queue (not its completed records).
pub(crate) async fn purge(inner: &Inner, queue: &QueueName) -> Result<u64, StoreError> {
    let mut conn = inner.conn().await?;
    let n = crate::db::tx::transaction(&mut conn, async |tx| {
        crate::db::catalog::config(tx, queue.as_str(), false).await?;
        crate::hot::packs::unpack_queue(tx, queue).await?;
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
    if let Some(local) = inner.locals.get(queue.as_str()) {
        local.read_ahead.clear();
    }
    Ok(n)
}
