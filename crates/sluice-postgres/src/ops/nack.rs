//! Handing a leased message back: nack, reject, move, release.

use std::time::Duration;

use sluice_core::adaptive::{Outcome, classify_nack};
use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::{
    AttemptOutcome, DeadLetterReason, Delivery, Failure, MessageState, NackOutcome, QueueName,
    Receipt, StoreError, Timestamp,
};

use crate::db::counters::Counter;
use crate::db::row::{Row, WAITING};
use crate::error::corrupt;
use crate::ops::leased::{Change, change_leased};
use crate::ops::lifecycle::{dead_letter, end_cancelled};
use crate::store::Inner;

/// Records a failed attempt on `row`, ending the lease it is under, keeping its error
/// (already cut to its limit by `Checked`) as the last one.
// Near-copy of the embedded engine's `apply_failure`: the same rule on each engine's own row type.
fn apply_failure(row: &mut Row, now: i64, outcome: AttemptOutcome, failure: &Failure) {
    let attempt = lifecycle::ended_attempt(
        Timestamp(now),
        outcome,
        failure.error.clone(),
        failure.consumer.clone(),
        Some(&row.holder),
    );
    lifecycle::record_failure(&mut row.attempts, &mut row.last_error, attempt);
}

/// Returns a message for another attempt, or dead-letters it when its attempts are used up.
pub(crate) async fn nack(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    delay: Option<Duration>,
    failure: Failure,
) -> Result<NackOutcome, StoreError> {
    change_leased(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(NackOutcome {
                state: Some(MessageState::Completed),
                queue: queue.clone(),
            }));
        }
        apply_failure(row, now, AttemptOutcome::Nacked, &failure);
        fx.counts.add(queue.as_str(), Counter::Nacked, 1);
        // A governed queue: congestion is a nack with the dependency's Retry-After, or one
        // whose error matches an `errors` signal. It does not spend the attempt, nor does any
        // nack while the breaker is open or half-open (asked before the failure is counted).
        let counted = if crate::flow::governed(cfg) {
            let outcome = classify_nack(
                cfg.adaptive.as_ref(),
                delay,
                failure.retry_after,
                failure.error.as_deref(),
            );
            let key = row.fkey.as_deref();
            let counted =
                crate::flow::counts_attempt(tx, inner, queue.as_str(), cfg, key, outcome, now)
                    .await?;
            fx.outcome(queue.as_str(), outcome, 1, now);
            fx.key_outcome(cfg, queue.as_str(), key, outcome, now);
            counted
        } else {
            true
        };
        let (after, receive_count) =
            lifecycle::after_nack_counted(cfg, row.receive_count, delay, counted);
        match after {
            AfterFailure::Retry(d) => {
                row.receive_count = receive_count;
                row.state = WAITING;
                row.visible_at = Timestamp(now).plus(d).as_millis();
                row.token = None;
                if d.is_zero() {
                    fx.wake.insert(queue.to_string());
                }
                Ok(Change::Row(NackOutcome {
                    state: Some(if d.is_zero() {
                        MessageState::Visible
                    } else {
                        MessageState::Delayed
                    }),
                    queue: queue.clone(),
                }))
            }
            AfterFailure::DeadLetter(reason) => {
                dead_letter(tx, row, cfg, reason, now, fx).await?;
                Ok(Change::Row(NackOutcome {
                    state: None,
                    queue: QueueName::new(row.queue.clone()).map_err(corrupt)?,
                }))
            }
        }
    })
    .await
}

/// Dead-letters a message now.
pub(crate) async fn reject(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    failure: Failure,
) -> Result<QueueName, StoreError> {
    change_leased(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(queue.clone()));
        }
        apply_failure(row, now, AttemptOutcome::Rejected, &failure);
        dead_letter(tx, row, cfg, DeadLetterReason::Rejected, now, fx).await?;
        if crate::flow::governed(cfg) {
            // The dependency answered: the message was wrong.
            fx.outcome(queue.as_str(), Outcome::Other, 1, now);
            fx.key_outcome(
                cfg,
                queue.as_str(),
                row.fkey.as_deref(),
                Outcome::Other,
                now,
            );
        }
        Ok(Change::Row(
            QueueName::new(row.queue.clone()).map_err(corrupt)?,
        ))
    })
    .await
}

/// Moves a leased message to queue `to` as a fresh visible message there.
pub(crate) async fn move_to(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    to: &QueueName,
    failure: Failure,
) -> Result<(), StoreError> {
    change_leased(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        crate::db::catalog::config(tx, to.as_str(), false).await?;
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(()));
        }
        apply_failure(row, now, AttemptOutcome::Moved, &failure);
        if crate::flow::governed(cfg) {
            fx.outcome(queue.as_str(), Outcome::Neutral, 1, now);
            fx.key_outcome(
                cfg,
                queue.as_str(),
                row.fkey.as_deref(),
                Outcome::Neutral,
                now,
            );
        }
        row.source_queue = Some(queue.to_string());
        row.dead_letter = None;
        row.queue = to.to_string();
        row.state = WAITING;
        row.visible_at = now;
        row.entered_at = now;
        row.receive_count = 0;
        row.token = None;
        fx.wake.insert(to.to_string());
        if row.grp.is_some() {
            // It left its group's line: the next member may go.
            fx.wake.insert(queue.to_string());
        }
        Ok(Change::Row(()))
    })
    .await
}

/// Hands a delivery back without counting it as an attempt.
pub(crate) async fn release(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
) -> Result<(), StoreError> {
    change_leased(inner, queue, &receipt, async |tx, cfg, row, now, fx| {
        if row.cancel_requested {
            end_cancelled(tx, row.id, cfg, now).await?;
            return Ok(Change::Done(()));
        }
        if crate::flow::governed(cfg) {
            fx.outcome(queue.as_str(), Outcome::Neutral, 1, now);
            fx.key_outcome(
                cfg,
                queue.as_str(),
                row.fkey.as_deref(),
                Outcome::Neutral,
                now,
            );
        }
        row.state = WAITING;
        row.visible_at = now;
        row.receive_count = row.receive_count.saturating_sub(1);
        row.token = None;
        fx.wake.insert(queue.to_string());
        Ok(Change::Row(()))
    })
    .await
}

/// Releases `deliveries` of `queue` that no receive took, one by one; one that cannot be
/// released returns when its lease runs out.
pub(crate) async fn release_unused(
    inner: &Inner,
    queue: &QueueName,
    deliveries: impl IntoIterator<Item = Delivery>,
) {
    for d in deliveries {
        if let Err(e) = release(inner, queue, d.receipt).await {
            tracing::debug!(error = %e, %queue, id = %d.id, "could not release a message no receive took; it returns when its lease runs out");
        }
    }
}
