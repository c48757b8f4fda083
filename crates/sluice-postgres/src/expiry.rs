//! Expiry: the changes time makes by itself. Leases that ran out end (retry or dead letter),
//! messages past retention leave (dead letter, or dropped with an audit entry), and kept
//! records past their time are forgotten. (Delayed messages need no change: a waiting row is
//! visible once its `visible_at` has passed.)
//!
//! A queue is brought up to `now` lazily by the first call that looks at it, inside that
//! call's transaction, and by each node's background round ([`run`]). Rows are taken with
//! `SKIP LOCKED`, so nodes expiring the same queue at once share the work instead of waiting.

use std::sync::Weak;
use std::time::Duration;

use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::stats::HISTORY_KEPT;
use sluice_core::{
    AttemptOutcome, AuditEvent, DeadLetterReason, MessageId, QueueConfig, StoreError, Timestamp,
};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::db::counters::Counter;
use crate::db::effects::Effects;
use crate::db::row::{LEASED, ROW_COLS, Row, WAITING, write_back};
use crate::error::{corrupt, db};
use crate::ops::lifecycle::{dead_letter, end_cancelled};
use crate::store::Inner;

/// Most rows one expiry pass changes, to bound a call's transaction.
const EXPIRY_BATCH: i64 = 1000;

/// Messages of a queue that entered it before this moment (ms) are past its retention.
pub(crate) fn retention_cutoff(cfg: &QueueConfig, now: i64) -> i64 {
    now.saturating_sub(i64::try_from(cfg.retention.as_millis()).unwrap_or(i64::MAX))
}

/// Expires what is due in `queue`: ends its leases that ran out (retry or dead letter) and
/// its messages past retention (dead letter, or drop with an audit entry when it has no DLQ).
/// `queue` is a name as stored: callers read it back from rows as often as from a request.
pub(crate) async fn expire_queue(
    c: &impl GenericClient,
    queue: &str,
    cfg: &QueueConfig,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let cutoff = retention_cutoff(cfg, now);
    crate::hot::packs::unpack_due(c, queue, cfg, now, cutoff).await?;
    let rows = c
        .query(
            &format!(
                "SELECT {ROW_COLS} FROM messages
                 WHERE queue = $1 AND ((state = 1 AND visible_at <= $2)
                                       OR (state = 0 AND entered_at <= $3))
                 ORDER BY id LIMIT {EXPIRY_BATCH} FOR UPDATE SKIP LOCKED"
            ),
            &[&queue, &now, &cutoff],
        )
        .await
        .map_err(|e| db(&e))?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut changed = Vec::with_capacity(rows.len());
    let mut dropped = Vec::new();
    // Leases that ran out: failures, for a governed queue's breaker and rate.
    let mut failures = 0u32;
    for r in &rows {
        let mut row = Row::from_pg(r)?;
        if row.state == LEASED {
            if row.cancel_requested {
                end_cancelled(c, row.id, cfg, now).await?;
                continue;
            }
            failures += 1;
            fx.key_outcome(
                cfg,
                queue,
                row.fkey.as_deref(),
                sluice_core::adaptive::Outcome::Failure,
                now,
            );
            // Settled by nobody: it names its receiver, and ended at its deadline.
            let attempt = lifecycle::ended_attempt(
                Timestamp(row.visible_at),
                AttemptOutcome::LeaseExpired,
                None,
                None,
                Some(&row.holder),
            );
            lifecycle::record_failure(&mut row.attempts, &mut row.last_error, attempt);
            match lifecycle::after_lease_expiry(cfg, row.receive_count) {
                AfterFailure::Retry(_) => {
                    row.state = WAITING;
                    row.visible_at = now;
                    row.token = None;
                    fx.wake.insert(queue.to_string());
                }
                AfterFailure::DeadLetter(reason) => {
                    dead_letter(c, &mut row, cfg, reason, now, fx).await?;
                }
            }
            changed.push(row);
        } else if cfg.dead_letter_queue.is_some() {
            dead_letter(c, &mut row, cfg, DeadLetterReason::Expired, now, fx).await?;
            fx.counts.add(queue, Counter::Expired, 1);
            changed.push(row);
        } else {
            fx.counts.add(queue, Counter::Expired, 1);
            let mut e = AuditEvent::by_broker(Timestamp(now), "message.expired");
            e.queue = Some(queue.to_string());
            e.message_id = Some(MessageId(row.id as u64).to_string());
            e.details.insert(
                "outcome".into(),
                "dropped: the queue has no dead-letter queue".into(),
            );
            fx.audit.push(e);
            if row.grp.is_some() {
                // It left its group's line: the next member may go.
                fx.wake.insert(queue.to_string());
            }
            dropped.push(row.id);
        }
    }
    if crate::flow::governed(cfg) {
        fx.outcome(
            queue,
            sluice_core::adaptive::Outcome::Failure,
            failures,
            now,
        );
    }
    if !dropped.is_empty() {
        tracing::info!(
            queue,
            count = dropped.len(),
            "dropping messages past retention (queue has no dead-letter queue)"
        );
        c.execute("DELETE FROM messages WHERE id = ANY($1)", &[&dropped])
            .await
            .map_err(|e| db(&e))?;
    }
    write_back(c, &changed).await
}

/// Expires `queue` and every queue that dead-letters into it, so a DLQ shows messages whose
/// last lease ran out even when nobody touched their source queue since.
pub(crate) async fn expire_with_sources(
    c: &impl GenericClient,
    queue: &str,
    cfg: &QueueConfig,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let sources = c
        .query(
            "SELECT name, config FROM queues WHERE dlq = $1 AND name <> $1",
            &[&queue],
        )
        .await
        .map_err(|e| db(&e))?;
    for s in &sources {
        let name: String = s.get(0);
        let scfg: tokio_postgres::types::Json<QueueConfig> =
            s.try_get(1).map_err(crate::error::corrupt)?;
        expire_queue(c, &name, &scfg.0, now, fx).await?;
    }
    expire_queue(c, queue, cfg, now, fx).await
}

/// Most expired rows of each kind one round deletes, to keep transactions short.
const PRUNE_BATCH: i64 = 10_000;

/// One background round: expires every queue, forgets kept records past their time, and
/// moves governed queues' breakers on in time.
pub(crate) async fn round(inner: &Inner) -> Result<(), StoreError> {
    let now = inner.now();
    let mut conn = inner.conn().await?;
    let queues = conn
        .query("SELECT name, config FROM queues", &[])
        .await
        .map_err(|e| db(&e))?;
    for q in &queues {
        let name: String = q.get(0);
        let cfg: Json<sluice_core::QueueConfig> = q.try_get(1).map_err(corrupt)?;
        let fx = crate::db::tx::transaction(&mut conn, async |tx| {
            let mut fx = Effects::default();
            expire_queue(tx, &name, &cfg.0, now, &mut fx).await?;
            fx.write(tx).await?;
            Ok(fx)
        })
        .await?;
        fx.after_commit(inner);
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
                 (SELECT ctid FROM idempotency WHERE until <= $1
                  AND (claim_until IS NULL OR claim_until <= $1) LIMIT $2)",
            now,
        ),
        (
            "DELETE FROM stats_history WHERE ctid IN
                 (SELECT ctid FROM stats_history WHERE at < $1 LIMIT $2)",
            history_from,
        ),
        (
            "DELETE FROM key_tallies WHERE ctid IN
                 (SELECT ctid FROM key_tallies WHERE minute < $1 LIMIT $2)",
            sluice_core::key_stats::MinuteTally::minute_of(now) - 1,
        ),
    ] {
        conn.execute(sql, &[&at, &PRUNE_BATCH])
            .await
            .map_err(|e| db(&e))?;
    }
    crate::hot::key_rates::prune(&**conn, now, PRUNE_BATCH).await?;
    crate::hot::key_flows::prune(&**conn, now, PRUNE_BATCH).await?;
    // The ticks lock queues on connections of their own: this one goes back first, so a
    // pool of one connection does not wait on itself.
    drop(conn);
    crate::flow::tick_all(inner).await
}

/// Runs [`round`] every `every` while the store lives.
pub(crate) async fn run(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        match round(&inner).await {
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
