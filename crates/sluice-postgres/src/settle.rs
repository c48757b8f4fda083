//! Bringing a queue up to `now`: leases that ran out and messages past retention.
//!
//! Time-driven changes are applied lazily by the first call that looks at a queue (and by each
//! node's background maintenance), inside that call's transaction. Rows are taken with
//! `SKIP LOCKED`, so nodes settling the same queue at once share the work instead of waiting.
//! Also here: dead-lettering and ending cancelled tasks, which several calls share.

use std::collections::BTreeSet;

use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::{
    Attempt, AttemptOutcome, AuditEvent, DeadLetter, DeadLetterReason, MessageId, QueueConfig,
    StoreError, Timestamp,
};
use tokio_postgres::GenericClient;

use crate::counters::{Counter, Counts};
use crate::error::db;
use crate::row::{LEASED, ROW_COLS, Row, WAITING, write_back};
use crate::store::Inner;

/// Most rows one settle pass changes, to bound a call's transaction.
const SETTLE_BATCH: i64 = 1000;

/// What a transaction did besides its rows: counters, audit entries, queues to wake.
#[derive(Default)]
pub(crate) struct Effects {
    pub counts: Counts,
    pub audit: Vec<AuditEvent>,
    pub wake: BTreeSet<String>,
}

impl Effects {
    /// Writes counters and audit entries, in the transaction.
    pub(crate) async fn write(&self, c: &impl GenericClient) -> Result<(), StoreError> {
        self.counts.flush(c).await?;
        crate::records::audit_insert(c, &self.audit).await
    }

    /// Wakes the waiters of every queue named, on every node, after the commit.
    pub(crate) fn wake(&self, inner: &Inner) {
        for q in &self.wake {
            inner.wake(q);
        }
    }
}

/// Moves `row` (of queue `row.queue`, configured `cfg`) to its dead-letter queue.
///
/// # Errors
/// `Conflict` when the queue has no dead-letter queue or it does not exist.
pub(crate) async fn dead_letter(
    c: &impl GenericClient,
    row: &mut Row,
    cfg: &QueueConfig,
    reason: DeadLetterReason,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let name = row.queue.clone();
    let dlq = cfg.dead_letter_queue.as_ref().ok_or_else(|| {
        StoreError::Conflict(format!(
            "queue \"{name}\" has no dead_letter_queue; set one (PUT /v1/queues/{name}) or nack instead"
        ))
    })?;
    let exists = c
        .query_opt("SELECT 1 FROM queues WHERE name = $1", &[&dlq.as_str()])
        .await
        .map_err(|e| db(&e))?
        .is_some();
    if !exists {
        return Err(StoreError::Conflict(format!(
            "dead-letter queue \"{dlq}\" of \"{name}\" does not exist; create it or change dead_letter_queue"
        )));
    }
    row.dead_letter = Some(DeadLetter {
        reason,
        at: Timestamp(now),
    });
    row.source_queue = Some(name.clone());
    row.queue = dlq.to_string();
    row.state = WAITING;
    row.visible_at = now;
    row.entered_at = now;
    row.token = None;
    fx.counts.add(&name, Counter::DeadLettered, 1);
    let mut e = AuditEvent::by_broker(Timestamp(now), "message.dead_lettered");
    e.queue = Some(name);
    e.message_id = Some(MessageId(row.id as u64).to_string());
    e.details.insert("reason".into(), reason.as_str().into());
    e.details
        .insert("dead_letter_queue".into(), dlq.to_string());
    if let Some(err) = &row.last_error {
        e.details
            .insert("last_error".into(), err.chars().take(500).collect());
    }
    fx.audit.push(e);
    fx.wake.insert(dlq.to_string());
    Ok(())
}

/// Ends a cancelled task whatever its handler reported: a completed record marked cancelled
/// (sticky), kept for the queue's `result_ttl`.
pub(crate) async fn end_cancelled(
    c: &impl GenericClient,
    id: i64,
    cfg: &QueueConfig,
    now: i64,
) -> Result<(), StoreError> {
    if cfg.result_ttl.is_zero() {
        c.execute("DELETE FROM messages WHERE id = $1", &[&id])
            .await
            .map_err(|e| db(&e))?;
        return Ok(());
    }
    let keep = Timestamp(now).plus(cfg.result_ttl).as_millis();
    c.execute(
        "UPDATE messages SET state = 2, visible_at = $2, keep_until = $3, cancel_requested = true,
             token = NULL, body = NULL, attrs = NULL, attempts = NULL, progress = NULL,
             result = NULL, last_error = NULL, source_queue = NULL, dl_reason = NULL,
             dl_at = NULL, dedup_id = NULL
         WHERE id = $1",
        &[&id, &now, &keep],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}

/// Messages of a queue that entered it before this moment (ms) are past its retention.
pub(crate) fn retention_cutoff(cfg: &QueueConfig, now: i64) -> i64 {
    now.saturating_sub(i64::try_from(cfg.retention.as_millis()).unwrap_or(i64::MAX))
}

/// Settles `queue`: ends its leases that ran out (retry or dead letter) and expires its
/// messages past retention (dead letter, or drop with an audit entry when it has no DLQ).
pub(crate) async fn settle(
    c: &impl GenericClient,
    queue: &str,
    cfg: &QueueConfig,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let cutoff = retention_cutoff(cfg, now);
    crate::pack::unpack_due(c, queue, cfg, now, cutoff).await?;
    let rows = c
        .query(
            &format!(
                "SELECT {ROW_COLS} FROM messages
                 WHERE queue = $1 AND ((state = 1 AND visible_at <= $2)
                                       OR (state = 0 AND entered_at <= $3))
                 ORDER BY id LIMIT {SETTLE_BATCH} FOR UPDATE SKIP LOCKED"
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
    for r in &rows {
        let mut row = Row::from_pg(r)?;
        if row.state == LEASED {
            if row.cancel_requested {
                end_cancelled(c, row.id, cfg, now).await?;
                continue;
            }
            lifecycle::record_attempt(
                &mut row.attempts,
                Attempt {
                    at: Timestamp(row.visible_at),
                    outcome: AttemptOutcome::LeaseExpired,
                    error: None,
                    consumer: None,
                },
            );
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
            dropped.push(row.id);
        }
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

/// Settles `queue` and every queue that dead-letters into it, so a DLQ shows messages whose
/// last lease ran out even when nobody touched their source queue since.
pub(crate) async fn settle_with_sources(
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
        settle(c, &name, &scfg.0, now, fx).await?;
    }
    settle(c, queue, cfg, now, fx).await
}
