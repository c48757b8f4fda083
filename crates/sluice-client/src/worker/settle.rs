//! Settling deliveries with the broker through its outages.
//!
//! # Why settlements retry without a limit
//! A settlement records work that is already done. Giving up on an ack after a few tries
//! would turn a success into a redelivery (and a handler run twice) only because the broker
//! was restarting; giving up on a nack would leave the task leased until its lease expires.
//! So settlements retry transient failures (no connection, 503, 429, timeouts) with capped
//! exponential backoff until the broker answers. Each is safe to repeat: a receipt names one
//! delivery, so a repeat whose first answer was lost answers `receipt_stale` instead of acting
//! twice. Acks are batched (`{"acks": [...]}`, or one frame): whatever finished while the previous batch was
//! on the wire goes in the next one, which is how a worker reaches thousands of tasks per
//! second without waiting on one round trip per task.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use serde_json::value::RawValue;
use sluice_wire::{AckBatchResponse, AckRequestWire};
use tokio::sync::{mpsc, oneshot};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::worker::lane::Lane;
use crate::worker::metrics::WorkerMetrics;

/// Most acks in one request.
const MAX_ACK_BATCH: usize = 1000;
/// Most result bytes in one request (the broker reads up to 24 MiB).
const MAX_ACK_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// A jittered wait before try `failures + 1`: 50 ms doubling up to `max`.
pub(crate) fn backoff(failures: u32, max: Duration) -> Duration {
    let cap = Duration::from_millis(50)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(max);
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    // Half fixed, half jitter: waits keep growing while clients still spread out.
    Duration::from_nanos(nanos / 2 + rand::thread_rng().gen_range(0..=nanos / 2))
}

/// Runs `f` until it succeeds or fails with a non-transient error; returns the outcome and
/// whether any try failed (then a `receipt_stale` may mean an earlier try went through).
pub(crate) async fn retry<T, F, Fut>(
    what: &str,
    metrics: &WorkerMetrics,
    max_backoff: Duration,
    mut f: F,
) -> (Result<T>, bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut failures = 0u32;
    loop {
        match f().await {
            Ok(v) => {
                if failures > 0 {
                    tracing::info!(tries = failures + 1, "{what} went through");
                }
                return (Ok(v), failures > 0);
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                metrics.broker_error();
                if failures == 1 {
                    tracing::warn!(error = %e, "{what} failed; retrying until the broker answers");
                } else {
                    tracing::debug!(error = %e, failures, "{what} failed again");
                }
                tokio::time::sleep(backoff(failures, max_backoff)).await;
            }
            Err(e) => return (Err(e), failures > 0),
        }
    }
}

/// One ack waiting for its batch.
pub(crate) struct AckJob {
    pub receipt: String,
    pub result: Option<Box<RawValue>>,
    /// The item's outcome, and whether its batch needed retries.
    pub reply: oneshot::Sender<(Result<()>, bool)>,
}

/// Sends the acks arriving on `rx` in batches until every sender is gone.
pub(crate) async fn ack_batcher(
    lane: Lane,
    queue: String,
    metrics: WorkerMetrics,
    max_backoff: Duration,
    mut rx: mpsc::Receiver<AckJob>,
) {
    while let Some(first) = rx.recv().await {
        let mut bytes = first.result.as_ref().map_or(0, |r| r.get().len());
        let mut jobs = vec![first];
        while jobs.len() < MAX_ACK_BATCH && bytes < MAX_ACK_BATCH_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += j.result.as_ref().map_or(0, |r| r.get().len());
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        let (out, retried) = retry(
            "acknowledging finished tasks",
            &metrics,
            max_backoff,
            || lane.ack(&queue, &jobs),
        )
        .await;
        match out {
            Ok(results) => {
                for (job, r) in jobs.into_iter().zip(results) {
                    let _ = job.reply.send((r, retried));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, count = jobs.len(), "acknowledging a batch failed");
                for job in jobs {
                    let _ = job.reply.send((Err(copy_error(&e)), retried));
                }
            }
        }
    }
}

/// An equivalent error for each item of a failed batch (the error type is not `Clone`).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Api {
            status,
            code,
            message,
            retry_after,
        } => Error::Api {
            status: *status,
            code: *code,
            message: message.clone(),
            retry_after: *retry_after,
        },
        other => Error::Decode(other.to_string()),
    }
}

impl Client {
    /// Acknowledges 1 – 1000 deliveries, each with an optional result, in one request; each
    /// item has its own outcome, in request order.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty list; transport failures.
    pub async fn ack_items(
        &self,
        queue_name: &str,
        req: &AckRequestWire,
    ) -> Result<AckBatchResponse> {
        if req.acks.as_ref().is_none_or(Vec::is_empty) {
            return Err(Error::InvalidInput(
                "ack_items needs at least one ack".to_owned(),
            ));
        }
        self.settle_public(queue_name, "ack", req).await
    }
}
