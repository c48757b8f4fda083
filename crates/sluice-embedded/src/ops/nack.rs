//! Handing a lease back unfinished: `nack` (retry or dead-letter), `reject` (dead-letter
//! now), `move_message` (to another queue) and `release` (visible again, attempt not
//! counted). A task whose cancellation was requested ends cancelled instead.

use std::time::Duration;

use sluice_core::adaptive::{Outcome, classify_nack};
use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::{
    AttemptOutcome, DeadLetterReason, Failure, MessageState, NackOutcome, QueueName, Receipt,
    StoreError, Timestamp,
};

use crate::core::{Core, Inner};
use crate::journal::record::{Record, Rich, UpdateEvent, UpdateRecord};
use crate::state::LeaseHolder;

/// Hands a lease back as failed: retried after the delay, or dead-lettered after its last
/// attempt.
pub(crate) async fn nack(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    delay: Option<Duration>,
    failure: Failure,
) -> Result<NackOutcome, StoreError> {
    let (outcome, notify) = inner
        .with_lease(queue, &receipt, |core, qid, m, now| {
            if m.cancel_requested() {
                let notify = core.state.queues[&qid].notify.clone();
                let outcome = NackOutcome {
                    state: Some(MessageState::Completed),
                    queue: queue.clone(),
                };
                return Ok((
                    vec![core.end_cancelled(qid, receipt.id.0, &m, now)?],
                    (outcome, notify),
                ));
            }
            let cfg = core.state.queues[&qid].config.clone();
            let (_, mut rich) = core.load(receipt.id.0, &m)?;
            apply_failure(
                core,
                receipt.id.0,
                &mut rich,
                now,
                AttemptOutcome::Nacked,
                &failure,
            );
            let id = receipt.id.0;
            // Congestion: a nack with the dependency's Retry-After, or one whose error matches
            // an `errors` signal. It does not spend the attempt, nor does any nack while the
            // breaker is open or half-open (asked before the failure is counted).
            let outcome = classify_nack(
                cfg.adaptive.as_ref(),
                delay,
                failure.retry_after,
                failure.error.as_deref(),
            );
            let counted = core.flow_counts_attempt(qid, &m, id, outcome, now);
            let (after, receive_count) =
                lifecycle::after_nack_counted(&cfg, m.receive_count(), delay, counted);
            let (update, state) = match after {
                AfterFailure::Retry(d) => (
                    UpdateRecord {
                        event: UpdateEvent::Nack,
                        id,
                        qid,
                        visible_at: Timestamp(now).plus(d).as_millis(),
                        entered_at: m.entered_at,
                        receive_count,
                        rich,
                    },
                    Some(if d.is_zero() {
                        MessageState::Visible
                    } else {
                        MessageState::Delayed
                    }),
                ),
                AfterFailure::DeadLetter(reason) => {
                    let name = queue.clone();
                    (
                        core.dead_letter(
                            &cfg,
                            &name,
                            id,
                            &m,
                            rich,
                            reason,
                            UpdateEvent::NackExhausted { from: qid },
                            now,
                        )?,
                        None,
                    )
                }
            };
            core.flow_outcome(qid, &m, id, outcome, now);
            let to = update.qid;
            let notify = core.state.queues[&to].notify.clone();
            let q = core.state.queues[&to].name.clone();
            Ok((
                vec![core.update(update, now)],
                (NackOutcome { state, queue: q }, notify),
            ))
        })
        .await?;
    // A waiting consumer wakes and its receive makes the message visible (every call
    // brings its queue up to now first).
    notify.notify_waiters();
    Ok(outcome)
}

/// Dead-letters a leased message now.
pub(crate) async fn reject(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    failure: Failure,
) -> Result<QueueName, StoreError> {
    inner
        .with_lease(queue, &receipt, |core, qid, m, now| {
            if m.cancel_requested() {
                return Ok((
                    vec![core.end_cancelled(qid, receipt.id.0, &m, now)?],
                    queue.clone(),
                ));
            }
            let cfg = core.state.queues[&qid].config.clone();
            let (_, mut rich) = core.load(receipt.id.0, &m)?;
            apply_failure(
                core,
                receipt.id.0,
                &mut rich,
                now,
                AttemptOutcome::Rejected,
                &failure,
            );
            let u = core.dead_letter(
                &cfg,
                queue,
                receipt.id.0,
                &m,
                rich,
                DeadLetterReason::Rejected,
                UpdateEvent::Rejected { from: qid },
                now,
            )?;
            core.flow_outcome(qid, &m, receipt.id.0, Outcome::Other, now);
            let dlq = core.state.queues[&u.qid].name.clone();
            Ok((vec![core.update(u, now)], dlq))
        })
        .await
}

/// Moves a leased message to another queue, as a fresh message there.
pub(crate) async fn move_message(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
    to: &QueueName,
    failure: Failure,
) -> Result<(), StoreError> {
    let notify = inner
        .with_lease(queue, &receipt, |core, qid, m, now| {
            let to_qid = core.qid(to)?;
            if m.cancel_requested() {
                let notify = core.state.queues[&qid].notify.clone();
                return Ok((
                    vec![core.end_cancelled(qid, receipt.id.0, &m, now)?],
                    notify,
                ));
            }
            let (_, mut rich) = core.load(receipt.id.0, &m)?;
            apply_failure(
                core,
                receipt.id.0,
                &mut rich,
                now,
                AttemptOutcome::Moved,
                &failure,
            );
            rich.source_queue = Some(queue.to_string());
            rich.dead_letter = None;
            let u = UpdateRecord {
                event: UpdateEvent::Moved { from: qid },
                id: receipt.id.0,
                qid: to_qid,
                visible_at: now,
                entered_at: now,
                receive_count: 0,
                rich,
            };
            core.flow_outcome(qid, &m, receipt.id.0, Outcome::Neutral, now);
            let notify = core.state.queues[&to_qid].notify.clone();
            Ok((vec![core.update(u, now)], notify))
        })
        .await?;
    notify.notify_waiters();
    Ok(())
}

/// Hands a lease back unused: visible again, the receive not counted.
pub(crate) async fn release(
    inner: &Inner,
    queue: &QueueName,
    receipt: Receipt,
) -> Result<(), StoreError> {
    let notify = inner
        .with_lease(queue, &receipt, |core, qid, m, now| {
            let notify = core.state.queues[&qid].notify.clone();
            if m.cancel_requested() {
                return Ok((
                    vec![core.end_cancelled(qid, receipt.id.0, &m, now)?],
                    notify,
                ));
            }
            let (_, rich) = core.load(receipt.id.0, &m)?;
            let u = UpdateRecord {
                event: UpdateEvent::Released,
                id: receipt.id.0,
                qid,
                visible_at: now,
                entered_at: m.entered_at,
                receive_count: m.receive_count().saturating_sub(1),
                rich,
            };
            core.flow_outcome(qid, &m, receipt.id.0, Outcome::Neutral, now);
            Ok((vec![Record::Update(u)], notify))
        })
        .await?;
    notify.notify_waiters();
    Ok(())
}

/// Adds the failure message `id`'s consumer reported to its history (its error already cut
/// to its limit by `Checked`); the error, if any, becomes the last error.
fn apply_failure(
    core: &Core,
    id: u64,
    rich: &mut Rich,
    now: i64,
    outcome: AttemptOutcome,
    failure: &Failure,
) {
    let holder = core.state.holders.get(&id).map(LeaseHolder::holder);
    let attempt = lifecycle::ended_attempt(
        Timestamp(now),
        outcome,
        failure.error.clone(),
        failure.consumer.clone(),
        holder.as_ref(),
    );
    lifecycle::record_failure(&mut rich.attempts, &mut rich.last_error, attempt);
}
