//! One delivery from lease to settlement: decode, run the handler in its own task (so a
//! panic is contained), extend the lease while it runs, map the outcome to ack, nack, reject
//! or move, and run the dead-letter hook.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use sluice_core::ErrorCode;
use sluice_wire::{DeliveryView, FailureState};
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};
use tracing::Instrument;

use crate::body::BodyExt;
use crate::envelope::TaskEnvelope;
use crate::error::Error;
use crate::messages::NackOptions;
use crate::worker::context::{ContextParts, TaskContext};
use crate::worker::error::{TaskError, TaskErrorKind};
use crate::worker::handler::HandlerOutput;
use crate::worker::metrics::Outcome;
use crate::worker::run::{Shared, ensure_queue};
use crate::worker::settle::{AckJob, retry};

/// Counts a task in flight for as long as it lives.
struct InFlight<'a>(&'a Shared);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.metrics.ended();
    }
}

pub(crate) async fn process(shared: Arc<Shared>, d: DeliveryView, permit: OwnedSemaphorePermit) {
    let span = tracing::info_span!(
        "sluice.task",
        queue = %shared.queue,
        task_id = %d.id,
        task = tracing::field::Empty,
        attempt = d.receive_count,
    );
    async {
        shared.metrics.started();
        let _in_flight = InFlight(&shared);
        let outcome = run_delivery(&shared, &d).await;
        shared.metrics.finished(outcome);
    }
    .instrument(span)
    .await;
    drop(permit);
}

// Long because it follows one delivery from decoding to settlement: the handler runs while this
// loop keeps its lease extended and watches for the grace period's end, and how the handler ended
// picks the settlement.
async fn run_delivery(shared: &Shared, d: &DeliveryView) -> Outcome {
    let env = match d.decoded_body().and_then(|b| TaskEnvelope::from_body(&b)) {
        Ok(env) => env,
        Err(e) => return unprocessable(shared, d, &decode_reason(e)).await,
    };
    tracing::Span::current().record("task", env.task.as_str());
    let Some(handler) = shared.handlers.get(&env.task) else {
        let mut known: Vec<&str> = shared.handlers.keys().map(String::as_str).collect();
        known.sort_unstable();
        let msg = format!(
            "unknown task \"{}\": no handler is registered under that name (this worker runs {})",
            env.task,
            known.join(", ")
        );
        return unprocessable(shared, d, &msg).await;
    };
    let ctx = TaskContext::new(ContextParts {
        client: shared.client.clone(),
        lane: shared.lane.clone(),
        queue: shared.queue.clone(),
        id: d.id.clone(),
        task: env.task.clone(),
        receipt: d.receipt.clone(),
        receive_count: d.receive_count,
        max_receive_count: d.max_receive_count,
        attributes: d.attributes.clone(),
        key: d.key.clone(),
        priority: d.priority,
        trace: d.trace.clone(),
    });
    let fut = match handler(ctx.clone(), &env) {
        Ok(f) => f,
        Err(e) => return unprocessable(shared, d, &decode_reason(e)).await,
    };
    tracing::debug!("task started");
    let started = Instant::now();
    let mut join = tokio::spawn(fut.instrument(tracing::Span::current()));
    let aborted = aborted(shared.abort.clone());
    tokio::pin!(aborted);
    let mut next_extend = tokio::time::Instant::now() + shared.extend_every;
    let mut lease_lost = false;
    let res = loop {
        tokio::select! {
            r = &mut join => break Some(r),
            () = tokio::time::sleep_until(next_extend), if !lease_lost => {
                next_extend = tokio::time::Instant::now() + match extend(shared, &ctx).await {
                    Extended::Ok => shared.extend_every,
                    Extended::Retry => (shared.extend_every / 4).max(Duration::from_millis(10)),
                    Extended::Lost => {
                        lease_lost = true;
                        shared.extend_every
                    }
                };
            }
            () = &mut aborted => {
                join.abort();
                break None;
            }
        }
    };
    let Some(res) = res else {
        return release(shared, d).await;
    };
    shared.metrics.handler_time(started.elapsed());
    let out: HandlerOutput = match res {
        Ok(out) => out,
        Err(e) if e.is_panic() => {
            shared.metrics.panicked();
            let msg = panic_message(e.into_panic());
            tracing::error!(panic = %msg, "handler panicked; the task will be retried");
            Err(TaskError::transient(format!("handler panicked: {msg}")))
        }
        Err(e) => Err(TaskError::transient(format!("handler did not finish: {e}"))),
    };
    let cancelled = ctx.is_cancelled();
    let outcome = match out {
        Ok(Ok(result)) => succeed(shared, d, Some(result)).await,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the handler's output is not JSON; acking without a result");
            succeed(shared, d, None).await
        }
        Err(e) if cancelled || e.kind() == TaskErrorKind::Cancelled => {
            nack(shared, d, None, false, "cancelled".to_owned()).await;
            Outcome::Cancelled
        }
        Err(e) => match e.kind() {
            TaskErrorKind::Permanent => reject(shared, d, e.message().to_owned()).await,
            _ => {
                fail(
                    shared,
                    d,
                    e.wait(),
                    e.is_congestion(),
                    e.message().to_owned(),
                )
                .await
            }
        },
    };
    if cancelled
        && matches!(
            outcome,
            Outcome::Success | Outcome::Retry | Outcome::Failure
        )
    {
        tracing::info!("task was cancelled while it ran");
        return Outcome::Cancelled;
    }
    outcome
}

async fn aborted(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|a| *a).await.map(drop).is_err() {
        std::future::pending::<()>().await;
    }
}

enum Extended {
    Ok,
    Retry,
    Lost,
}

async fn extend(shared: &Shared, ctx: &TaskContext) -> Extended {
    match shared
        .lane
        .extend(&shared.queue, ctx.receipt(), shared.visibility)
        .await
    {
        Ok(cancel_requested) => {
            if cancel_requested && !ctx.is_cancelled() {
                tracing::info!("task cancelled; telling the handler");
                ctx.mark_cancelled();
            }
            Extended::Ok
        }
        Err(e) if e.code() == Some(ErrorCode::ReceiptStale) => {
            tracing::warn!("lease lost (it expired or the task is gone); the task may run again");
            Extended::Lost
        }
        Err(e) => {
            shared.metrics.broker_error();
            tracing::warn!(error = %e, "extending the lease failed; trying again soon");
            Extended::Retry
        }
    }
}

/// Acks with `result`, dropping a result over the cap; never turns a success into a failure.
async fn succeed(shared: &Shared, d: &DeliveryView, result: Option<Box<RawValue>>) -> Outcome {
    let result = match result {
        Some(r) if r.get().len() > shared.max_result_bytes => {
            tracing::warn!(
                bytes = r.get().len(),
                cap = shared.max_result_bytes,
                "result is over the size cap and was dropped; the task still succeeds"
            );
            shared.metrics.result_dropped();
            None
        }
        r => r,
    };
    let had_result = result.is_some();
    let (mut r, mut retried) = ack(shared, d, result).await;
    if had_result && matches!(&r, Err(e) if e.code() == Some(ErrorCode::PayloadTooLarge)) {
        tracing::warn!(
            "the broker refused the result as too large; dropped, the task still succeeds"
        );
        shared.metrics.result_dropped();
        (r, retried) = ack(shared, d, None).await;
    }
    match r {
        Ok(()) => {
            tracing::debug!("task succeeded");
            Outcome::Success
        }
        Err(e) if e.code() == Some(ErrorCode::ReceiptStale) && retried => {
            // An earlier try may have gone through before the broker stopped answering.
            match shared.client.task_status(&d.id, None).await {
                Ok(v) if v.status == sluice_core::TaskStatus::Success => Outcome::Success,
                _ => lost(&e),
            }
        }
        Err(e) => lost(&e),
    }
}

fn lost(e: &Error) -> Outcome {
    tracing::warn!(error = %e, "could not settle the task (its lease had ended); it will run again");
    Outcome::Lost
}

async fn ack(
    shared: &Shared,
    d: &DeliveryView,
    result: Option<Box<RawValue>>,
) -> (Result<(), Error>, bool) {
    let (tx, rx) = oneshot::channel();
    let job = AckJob {
        receipt: d.receipt.clone(),
        result,
        reply: tx,
    };
    if shared.acks.send(job).await.is_err() {
        return (
            Err(Error::Decode("the worker's ack sender stopped".to_owned())),
            false,
        );
    }
    rx.await.unwrap_or_else(|_| {
        (
            Err(Error::Decode("the worker's ack sender stopped".to_owned())),
            false,
        )
    })
}

/// Nacks after a transient failure; runs the hook when that was the last attempt.
async fn fail(
    shared: &Shared,
    d: &DeliveryView,
    delay: Option<Duration>,
    congestion: bool,
    error: String,
) -> Outcome {
    match nack(shared, d, delay, congestion, error.clone()).await {
        Some(FailureState::DeadLettered) => {
            tracing::error!(error = %error, "task failed on its last attempt; dead-lettered");
            dead_letter(shared, d, error).await;
            Outcome::Failure
        }
        Some(_) => {
            tracing::warn!(error = %error, retry_in = ?delay, "task failed; it will be retried");
            Outcome::Retry
        }
        None => Outcome::Lost,
    }
}

async fn nack(
    shared: &Shared,
    d: &DeliveryView,
    delay: Option<Duration>,
    congestion: bool,
    error: String,
) -> Option<FailureState> {
    let opts = NackOptions {
        delay,
        retry_after: congestion && delay.is_some(),
        error: Some(error),
        consumer: Some(shared.consumer.clone()),
    };
    let (r, _) = retry(
        "reporting a failed task",
        &shared.metrics,
        shared.max_backoff,
        || shared.lane.nack(&shared.queue, &d.receipt, &opts),
    )
    .await;
    match r {
        Ok(state) => Some(state),
        Err(e) => {
            lost(&e);
            None
        }
    }
}

async fn reject(shared: &Shared, d: &DeliveryView, error: String) -> Outcome {
    let (r, _) = retry(
        "dead-lettering a failed task",
        &shared.metrics,
        shared.max_backoff,
        || shared.lane.reject(&shared.queue, &d.receipt, &error),
    )
    .await;
    match r {
        Ok(_) => {
            tracing::error!(error = %error, "task failed permanently; dead-lettered");
            dead_letter(shared, d, error).await;
            Outcome::Failure
        }
        Err(e) if e.code() == Some(ErrorCode::Conflict) => {
            tracing::warn!(error = %e, "the queue has no DLQ; the permanent failure is nacked instead");
            fail(shared, d, None, false, error).await
        }
        Err(e) => lost(&e),
    }
}

/// Moves an undecodable delivery to the unprocessable queue, byte-exact, with the reason.
async fn unprocessable(shared: &Shared, d: &DeliveryView, reason: &str) -> Outcome {
    tracing::warn!(reason, to = %shared.unprocessable, "unprocessable message moved aside");
    for _ in 0..2 {
        let (r, _) = retry(
            "moving an unprocessable message",
            &shared.metrics,
            shared.max_backoff,
            || {
                shared
                    .lane
                    .move_message(&shared.queue, &d.receipt, &shared.unprocessable, reason)
            },
        )
        .await;
        match r {
            Ok(_) => return Outcome::Unprocessable,
            Err(e) if e.code() == Some(ErrorCode::QueueNotFound) => {
                // Deleted while we ran: create it again, once.
                if let Err(e) = ensure_queue(
                    &shared.client,
                    &shared.unprocessable,
                    &shared.unprocessable_config,
                    shared.max_backoff,
                    &shared.metrics,
                )
                .await
                {
                    return lost(&e);
                }
            }
            Err(e) => return lost(&e),
        }
    }
    Outcome::Lost
}

/// Hands an unfinished task back at shutdown, for immediate redelivery. A release does not
/// count as an attempt: the shutdown is not the task's failure, and a task on its last attempt
/// must not be dead-lettered because its worker stopped.
async fn release(shared: &Shared, d: &DeliveryView) -> Outcome {
    let (r, _) = retry(
        "handing back an unfinished task",
        &shared.metrics,
        shared.max_backoff,
        || shared.lane.release(&shared.queue, &d.receipt),
    )
    .await;
    match r {
        Ok(_) => {
            tracing::info!("unfinished task handed back for redelivery");
            Outcome::Released
        }
        Err(e) => lost(&e),
    }
}

/// Counts a dead letter and runs the hook once; its failure or panic is only logged.
async fn dead_letter(shared: &Shared, d: &DeliveryView, error: String) {
    shared.metrics.dead_lettered();
    let Some(hook) = &shared.hook else { return };
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| hook(d.id.clone(), error))) {
        Ok(f) => f,
        Err(p) => {
            tracing::error!(panic = %panic_message(p), "the on_dead_letter hook panicked");
            return;
        }
    };
    match tokio::spawn(fut).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "the on_dead_letter hook failed"),
        Err(e) if e.is_panic() => {
            tracing::error!(panic = %panic_message(e.into_panic()), "the on_dead_letter hook panicked");
        }
        Err(e) => tracing::error!(error = %e, "the on_dead_letter hook did not finish"),
    }
}

/// The reason stored with an unprocessable message: the decode error itself.
fn decode_reason(e: Error) -> String {
    match e {
        Error::Decode(m) => m,
        other => other.to_string(),
    }
}

fn panic_message(p: Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
