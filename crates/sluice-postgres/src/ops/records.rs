//! Rows kept beside the messages: stats history, the audit table, idempotency responses.

use sluice_core::audit::{AuditKind, BROKER_ACTOR};
use sluice_core::stats::{HISTORY_HEARTBEAT, HISTORY_KEPT, StatsSample};
use sluice_core::store::{ClaimOutcome, IDEMPOTENCY_TTL, IdempotencyClaim, IdempotentResponse};
use sluice_core::{AuditEvent, AuditQuery, QueueName, StoreError, Timestamp};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::error::{corrupt, db};
use crate::store::Inner;

/// Appends audit events, on a connection of their own.
pub(crate) async fn audit_append(inner: &Inner, events: &[AuditEvent]) -> Result<(), StoreError> {
    audit_insert(&**inner.conn().await?, events).await
}

/// Appends audit entries (in the caller's transaction when it has one).
pub(crate) async fn audit_insert(
    c: &impl GenericClient,
    events: &[AuditEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let at: Vec<i64> = events.iter().map(|e| e.at.as_millis()).collect();
    let queues: Vec<Option<&str>> = events.iter().map(|e| e.queue.as_deref()).collect();
    let json: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::to_value(e).map_err(corrupt))
        .collect::<Result<_, _>>()?;
    c.execute(
        "INSERT INTO audit (at, queue, event)
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::jsonb[])",
        &[&at, &queues, &json],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// The newest matching audit entries, oldest first.
pub(crate) async fn audit_query(
    inner: &Inner,
    q: AuditQuery,
) -> Result<Vec<AuditEvent>, StoreError> {
    let limit = i64::try_from(q.limit.clamp(1, 10_000)).unwrap_or(10_000);
    let since = q.since.map(Timestamp::as_millis);
    let until = q.until.map(Timestamp::as_millis);
    let kind = q.kind.map(AuditKind::as_str);
    let conn = inner.conn().await?;
    // The kind is `AuditEvent::kind`: the actor first, then the action's prefix.
    let rows = conn
        .query(
            "SELECT event FROM audit
             WHERE (cardinality($1::text[]) = 0 OR queue = ANY($1))
               AND ($2::bigint IS NULL OR at >= $2) AND ($4::bigint IS NULL OR at <= $4)
               AND (cardinality($5::text[]) = 0 OR event->>'action' = ANY($5))
               AND ($6::text IS NULL OR event->>'actor' = $6)
               AND ($7::text IS NULL OR $7 = CASE
                     WHEN event->>'actor' <> $8 THEN 'operator'
                     WHEN event->>'action' LIKE 'message.%' THEN 'message'
                     ELSE 'broker' END)
             ORDER BY seq DESC LIMIT $3",
            &[
                &q.queues,
                &since,
                &limit,
                &until,
                &q.actions,
                &q.actor,
                &kind,
                &BROKER_ACTOR,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    let mut out = rows
        .iter()
        .map(|r| {
            r.try_get::<_, Json<AuditEvent>>(0)
                .map(|j| j.0)
                .map_err(corrupt)
        })
        .collect::<Result<Vec<_>, _>>()?;
    out.reverse();
    Ok(out)
}

/// Stores one history point per queue and moment; the first node to store a moment wins.
pub(crate) async fn record_stats(
    inner: &Inner,
    samples: Vec<(QueueName, StatsSample)>,
) -> Result<(), StoreError> {
    let Some(newest) = samples.iter().map(|(_, s)| s.at).max() else {
        return Ok(());
    };
    let queues: Vec<&str> = samples.iter().map(|(q, _)| q.as_str()).collect();
    let at: Vec<i64> = samples.iter().map(|(_, s)| s.at.as_millis()).collect();
    let json: Vec<serde_json::Value> = samples
        .iter()
        .map(|(_, s)| serde_json::to_value(s).map_err(corrupt))
        .collect::<Result<_, _>>()?;
    let mut conn = inner.conn().await?;
    let () = crate::db::tx::transaction(&mut conn, async |tx| {
        // A point older than the newest kept for its queue is late (a slow node): skip it, so
        // each queue's history stays in time order.
        // A point that repeats the queue's latest numbers is left out while that one is
        // younger than the heartbeat (StatsSample::worth_storing_after).
        let heartbeat = i64::try_from(HISTORY_HEARTBEAT.as_millis()).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO stats_history (queue, at, sample)
             SELECT u.q, u.at, u.s FROM unnest($1::text[], $2::bigint[], $3::jsonb[]) AS u(q, at, s)
             LEFT JOIN LATERAL (SELECT h.at, h.sample FROM stats_history h
                                WHERE h.queue = u.q ORDER BY h.at DESC LIMIT 1) last ON true
             WHERE EXISTS (SELECT 1 FROM queues WHERE name = u.q)
               AND (last.at IS NULL
                    OR (last.at < u.at
                        AND ((last.sample - 'at') IS DISTINCT FROM (u.s - 'at')
                             OR last.at <= u.at - $4)))
             ON CONFLICT (queue, at) DO NOTHING",
            &[&queues, &at, &json, &heartbeat],
        )
        .await
        .map_err(|e| db(&e))?;
        let keep_from = newest.as_millis() - i64::try_from(HISTORY_KEPT.as_millis()).unwrap_or(0);
        // Through the primary key, queue by queue: a scan of every queue's points per call
        // would grow with the number of queues.
        tx.execute(
            "DELETE FROM stats_history WHERE queue = ANY($1) AND at < $2",
            &[&queues, &keep_from],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(())
    })
    .await?;
    Ok(())
}

/// A queue's history points at or after `since`, oldest first, after the latest one before it.
pub(crate) async fn stats_history(
    inner: &Inner,
    queue: &QueueName,
    since: Timestamp,
) -> Result<Vec<StatsSample>, StoreError> {
    let conn = inner.conn().await?;
    crate::db::catalog::config(&**conn, queue.as_str(), false).await?;
    let rows = conn
        .query(
            // From the latest point before `since`: it holds the numbers at `since`.
            "SELECT sample FROM stats_history WHERE queue = $1
               AND at >= coalesce((SELECT max(at) FROM stats_history
                                   WHERE queue = $1 AND at < $2), $2)
             ORDER BY at",
            &[&queue.as_str(), &since.as_millis()],
        )
        .await
        .map_err(|e| db(&e))?;
    rows.iter()
        .map(|r| {
            r.try_get::<_, Json<StatsSample>>(0)
                .map(|j| j.0)
                .map_err(corrupt)
        })
        .collect()
}

/// [`stats_history`] of several queues in one query, in the order asked.
pub(crate) async fn stats_history_many(
    inner: &Inner,
    queues: &[QueueName],
    since: Timestamp,
) -> Result<Vec<Vec<StatsSample>>, StoreError> {
    let names: Vec<&str> = queues.iter().map(QueueName::as_str).collect();
    let conn = inner.conn().await?;
    let rows = conn
        .query(
            "SELECT h.queue, h.sample FROM unnest($1::text[]) AS q(name)
             JOIN stats_history h ON h.queue = q.name
              AND h.at >= coalesce((SELECT max(at) FROM stats_history p
                                    WHERE p.queue = q.name AND p.at < $2), $2)
             ORDER BY h.queue, h.at",
            &[&names, &since.as_millis()],
        )
        .await
        .map_err(|e| db(&e))?;
    let mut by_queue: std::collections::HashMap<String, Vec<StatsSample>> =
        std::collections::HashMap::new();
    for r in &rows {
        let q: String = r.try_get(0).map_err(corrupt)?;
        let sample = r.try_get::<_, Json<StatsSample>>(1).map_err(corrupt)?.0;
        by_queue.entry(q).or_default().push(sample);
    }
    Ok(names
        .iter()
        .map(|q| by_queue.remove(*q).unwrap_or_default())
        .collect())
}

fn response_of(r: &tokio_postgres::Row) -> Result<IdempotentResponse, StoreError> {
    let fingerprint: Vec<u8> = r.try_get(0).map_err(corrupt)?;
    let status: i32 = r.try_get(1).map_err(corrupt)?;
    let body: Vec<u8> = r.try_get(2).map_err(corrupt)?;
    Ok(IdempotentResponse {
        fingerprint: fingerprint
            .try_into()
            .map_err(|_| corrupt("idempotency fingerprint is not 32 bytes"))?,
        status: u16::try_from(status).map_err(corrupt)?,
        body: body.into(),
        created_at: Timestamp(r.try_get(3).map_err(corrupt)?),
    })
}

/// The response kept under `key`, while it is kept.
pub(crate) async fn idempotency_get(
    inner: &Inner,
    key: &str,
) -> Result<Option<IdempotentResponse>, StoreError> {
    let conn = inner.conn().await?;
    conn.query_opt(
        "SELECT fingerprint, status, body, created_at FROM idempotency
         WHERE key = $1 AND until > $2 AND claim IS NULL",
        &[&key, &inner.now()],
    )
    .await
    .map_err(|e| db(&e))?
    .as_ref()
    .map(response_of)
    .transpose()
}

/// Remembers `response` under `key` unless one is kept already (then returns that one).
pub(crate) async fn idempotency_put(
    inner: &Inner,
    key: &str,
    response: IdempotentResponse,
) -> Result<Option<IdempotentResponse>, StoreError> {
    let now = inner.now();
    let until = Timestamp(now).plus(IDEMPOTENCY_TTL).as_millis();
    let conn = inner.conn().await?;
    // Insert, or replace an answer that ran out or a claim (anyone's: the key is answered
    // now); a live answer is left as it is.
    let stored = conn
        .query_opt(
            "INSERT INTO idempotency AS i (key, fingerprint, status, body, created_at, until)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                 status = EXCLUDED.status, body = EXCLUDED.body,
                 created_at = EXCLUDED.created_at, until = EXCLUDED.until,
                 claim = NULL, claim_until = NULL
                 WHERE i.claim IS NOT NULL OR i.until <= $7
             RETURNING key",
            &[
                &key,
                &response.fingerprint.as_slice(),
                &i32::from(response.status),
                &response.body.as_ref(),
                &response.created_at.as_millis(),
                &until,
                &now,
            ],
        )
        .await
        .map_err(|e| db(&e))?;
    if stored.is_some() {
        return Ok(None);
    }
    conn.query_opt(
        "SELECT fingerprint, status, body, created_at FROM idempotency
         WHERE key = $1 AND claim IS NULL",
        &[&key],
    )
    .await
    .map_err(|e| db(&e))?
    .as_ref()
    .map(response_of)
    .transpose()
}

/// Claims `key` for `claim.token` unless it is answered or claimed by another token whose
/// lease has not ended (see `Records::idempotency_claim`).
///
/// One `INSERT … ON CONFLICT DO UPDATE … WHERE`: the key's row is locked while the statement
/// decides, so of concurrent claims on any nodes exactly one inserts or takes over the row.
/// When it did not, the row is read back; should it vanish in between (released, or swept
/// as run out), the claim is tried again.
pub(crate) async fn idempotency_claim(
    inner: &Inner,
    key: &str,
    claim: IdempotencyClaim,
) -> Result<ClaimOutcome, StoreError> {
    // The token as stored: the same 64 bits.
    let token = claim.token as i64;
    let lease = i64::try_from(claim.lease.as_millis()).unwrap_or(i64::MAX);
    let conn = inner.conn().await?;
    loop {
        let now = inner.now();
        let claimed = conn
            .query_opt(
                "INSERT INTO idempotency AS i
                     (key, fingerprint, status, body, created_at, until, claim, claim_until)
                 VALUES ($1, $2, 0, ''::bytea, $3, $3, $4, $5)
                 ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                     status = 0, body = ''::bytea, created_at = EXCLUDED.created_at,
                     until = EXCLUDED.until, claim = EXCLUDED.claim,
                     claim_until = EXCLUDED.claim_until
                     WHERE (i.claim IS NULL AND i.until <= $3)
                        OR (i.claim IS NOT NULL AND (i.claim_until <= $3 OR i.claim = $4))
                 RETURNING key",
                &[
                    &key,
                    &claim.fingerprint.as_slice(),
                    &now,
                    &token,
                    &now.saturating_add(lease),
                ],
            )
            .await
            .map_err(|e| db(&e))?;
        if claimed.is_some() {
            return Ok(ClaimOutcome::Claimed);
        }
        let Some(row) = conn
            .query_opt(
                "SELECT fingerprint, status, body, created_at, claim_until FROM idempotency
                 WHERE key = $1",
                &[&key],
            )
            .await
            .map_err(|e| db(&e))?
        else {
            continue;
        };
        let held: Option<i64> = row.try_get(4).map_err(corrupt)?;
        let kept = response_of(&row)?;
        return Ok(match held {
            None => ClaimOutcome::Answered(kept),
            Some(until) => ClaimOutcome::Pending {
                fingerprint: kept.fingerprint,
                until: Timestamp(until),
            },
        });
    }
}

/// Deletes `token`'s live claim on `key`; true when there was one.
pub(crate) async fn idempotency_release(
    inner: &Inner,
    key: &str,
    token: u64,
) -> Result<bool, StoreError> {
    let token = token as i64;
    let conn = inner.conn().await?;
    let n = conn
        .execute(
            "DELETE FROM idempotency WHERE key = $1 AND claim = $2 AND claim_until > $3",
            &[&key, &token, &inner.now()],
        )
        .await
        .map_err(|e| db(&e))?;
    Ok(n > 0)
}
