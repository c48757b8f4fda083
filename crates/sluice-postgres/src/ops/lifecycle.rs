//! Ends that several verbs and expiry share: dead-lettering a message, ending a cancelled task.

use sluice_core::{
    AuditEvent, DeadLetter, DeadLetterReason, MessageId, QueueConfig, StoreError, Timestamp,
};
use tokio_postgres::GenericClient;

use crate::db::counters::Counter;
use crate::db::effects::Effects;
use crate::db::row::{Row, WAITING};
use crate::error::db;

/// Moves `row` (of queue `row.queue`, configured `cfg`) to its dead-letter queue.
///
/// # Errors
/// `Conflict` when the queue has no dead-letter queue or it does not exist.
// Near-copy of the embedded engine's `dead_letter`: same checks and error texts, its own storage.
pub(crate) async fn dead_letter(
    c: &impl GenericClient,
    row: &mut Row,
    cfg: &QueueConfig,
    reason: DeadLetterReason,
    now: i64,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let name = row.queue.clone();
    let dlq = cfg
        .dead_letter_queue
        .as_ref()
        .ok_or_else(|| StoreError::no_dead_letter_queue(&name))?;
    let exists = c
        .query_opt("SELECT 1 FROM queues WHERE name = $1", &[&dlq.as_str()])
        .await
        .map_err(|e| db(&e))?
        .is_some();
    if !exists {
        return Err(StoreError::dead_letter_queue_missing(dlq.as_str(), &name));
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
    if row.grp.is_some() {
        // It left its group's line: the next member may go.
        fx.wake.insert(name.clone());
    }
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
             token = NULL, body = NULL, attrs = NULL, progress = NULL, result = NULL,
             source_queue = NULL, dl_reason = NULL, dl_at = NULL, dedup_id = NULL
         WHERE id = $1",
        &[&id, &now, &keep],
    )
    .await
    .map_err(|e| db(&e))?;
    Ok(())
}
