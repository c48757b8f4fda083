//! The worker's main loop: start (wait for the broker, read the queue's settings, make sure
//! the unprocessable queue exists), lease in batches under the concurrency limit, ride out
//! broker outages, and shut down without losing a task.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::ErrorCode;
use sluice_wire::{QueueConfigRequest, QueueView};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::messages::ReceiveOptions;
use crate::worker::WorkerBuilder;
use crate::worker::handler::{ErasedHandler, ErasedHook};
use crate::worker::lane::Lane;
use crate::worker::metrics::WorkerMetrics;
use crate::worker::settle::{AckJob, ack_batcher, backoff};

/// What every task of a running worker shares.
pub(crate) struct Shared {
    pub client: Client,
    /// Leases and settlements go this way (HTTP or frames).
    pub lane: Lane,
    pub queue: String,
    pub handlers: HashMap<String, ErasedHandler>,
    pub hook: Option<ErasedHook>,
    pub metrics: WorkerMetrics,
    pub unprocessable: String,
    pub unprocessable_config: QueueConfigRequest,
    pub visibility: Duration,
    pub extend_every: Duration,
    pub max_result_bytes: usize,
    pub max_backoff: Duration,
    pub consumer: String,
    pub acks: mpsc::Sender<AckJob>,
    /// Turns true when the grace period is over: running tasks are nacked.
    pub abort: watch::Receiver<bool>,
}

/// How long after the grace period the worker waits for nacks to reach the broker.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

// Long because start-up, the lease loop and shutdown share the pinned shutdown future, the
// semaphore and the abort channel; the grace period waits for the very permits the loop hands out,
// read best beside it.
pub(crate) async fn run(
    cfg: WorkerBuilder,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    tokio::pin!(shutdown);
    let unprocessable = cfg
        .unprocessable
        .clone()
        .unwrap_or_else(|| format!("{}.unprocessable", cfg.queue));
    let start = start(&cfg, &unprocessable);
    let (view, unprocessable_config) = tokio::select! {
        r = start => r?,
        () = &mut shutdown => return Ok(()),
    };
    let visibility = cfg
        .visibility
        .unwrap_or(Duration::from_millis(view.config.visibility_timeout_ms));
    let extend_every = cfg
        .extend_every
        .unwrap_or(visibility / 3)
        .max(Duration::from_millis(10));
    let max_result_bytes = cfg
        .max_result_bytes
        .unwrap_or(view.config.max_message_bytes as usize);
    let lane = match &cfg.frames {
        Some(pool) => Lane::Frames(Arc::clone(pool)),
        None => Lane::Http(Arc::new(cfg.client.clone())),
    };
    let (ack_tx, ack_rx) = mpsc::channel(4096);
    tokio::spawn(ack_batcher(
        lane.clone(),
        cfg.queue.clone(),
        cfg.metrics.clone(),
        cfg.max_backoff,
        ack_rx,
    ));
    let (abort_tx, abort_rx) = watch::channel(false);
    let consumer = cfg
        .consumer
        .clone()
        .unwrap_or_else(|| format!("rust-worker-{}", std::process::id()));
    let shared = Arc::new(Shared {
        client: cfg.client.clone(),
        lane,
        queue: cfg.queue.clone(),
        handlers: cfg.handlers,
        hook: cfg.hook,
        metrics: cfg.metrics.clone(),
        unprocessable,
        unprocessable_config,
        visibility,
        extend_every,
        max_result_bytes,
        max_backoff: cfg.max_backoff,
        consumer: consumer.clone(),
        acks: ack_tx,
        abort: abort_rx,
    });
    let concurrency = cfg.concurrency;
    let batch = cfg
        .batch
        .unwrap_or_else(|| u32::try_from(concurrency.min(1000)).unwrap_or(1000))
        as usize;
    let sem = Arc::new(Semaphore::new(concurrency));
    tracing::info!(
        queue = %shared.queue, concurrency, batch, frames = cfg.frames.is_some(), visibility_ms = visibility.as_millis() as u64,
        tasks = ?shared.handlers.keys().collect::<Vec<_>>(), "worker started"
    );

    let mut stopping = false;
    let mut failures = 0u32;
    while !stopping {
        let first = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = Arc::clone(&sem).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let mut permits = vec![first];
        while permits.len() < batch {
            match Arc::clone(&sem).try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let opts = ReceiveOptions {
            max: u32::try_from(permits.len()).unwrap_or(1000),
            wait: cfg.poll_wait,
            visibility: cfg.visibility,
            consumer: Some(consumer.clone()),
        };
        // A receive in progress is let finish (it is bounded by the poll wait): dropping it
        // could leave leased messages nobody runs until their lease ends.
        let recv = shared.lane.receive(&shared.queue, &opts);
        tokio::pin!(recv);
        let got = loop {
            tokio::select! {
                r = &mut recv => break r,
                () = &mut shutdown, if !stopping => stopping = true,
            }
        };
        match got {
            Ok(deliveries) => {
                if failures > 0 {
                    tracing::info!(failures, "broker reachable again; leasing resumed");
                    failures = 0;
                }
                for d in deliveries {
                    let Some(permit) = permits.pop() else {
                        // The broker never returns more than asked; run it anyway.
                        tracing::warn!("the broker returned more deliveries than asked for");
                        let permit = match Arc::clone(&sem).acquire_owned().await {
                            Ok(p) => p,
                            Err(_) => break,
                        };
                        tokio::spawn(crate::worker::task::process(Arc::clone(&shared), d, permit));
                        continue;
                    };
                    tokio::spawn(crate::worker::task::process(Arc::clone(&shared), d, permit));
                }
            }
            Err(e) => {
                drop(permits);
                failures += 1;
                shared.metrics.broker_error();
                let wait = backoff(failures, cfg.max_backoff);
                if failures == 1 {
                    if e.is_transient() {
                        tracing::warn!(error = %e, "cannot lease from the broker; backing off until it answers");
                    } else {
                        tracing::error!(error = %e, "leasing failed; retrying with backoff");
                    }
                } else {
                    tracing::debug!(error = %e, failures, ?wait, "leasing failed again");
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = &mut shutdown, if !stopping => stopping = true,
                }
            }
        }
    }

    let all = u32::try_from(concurrency).unwrap_or(u32::MAX);
    let running = concurrency - sem.available_permits();
    tracing::info!(running, grace = ?cfg.shutdown_grace, "worker stopping: no new leases");
    let finished = tokio::time::timeout(cfg.shutdown_grace, sem.acquire_many(all)).await;
    if finished.is_err() {
        let left = concurrency - sem.available_permits();
        tracing::warn!(
            left,
            "grace period over: handing the unfinished tasks back for redelivery"
        );
        abort_tx.send_replace(true);
        if tokio::time::timeout(RELEASE_WAIT, sem.acquire_many(all))
            .await
            .is_err()
        {
            tracing::error!(
                "some tasks could not be handed back; their leases will expire and they will \
                 be delivered again"
            );
        }
    }
    tracing::info!("worker stopped");
    Ok(())
}

/// Waits for the broker, reads the queue's settings and makes sure the unprocessable queue
/// exists.
async fn start(
    cfg: &WorkerBuilder,
    unprocessable: &str,
) -> Result<(QueueView, QueueConfigRequest)> {
    let view = wait_out("reading the queue's settings", cfg, || {
        cfg.client.get_queue(&cfg.queue)
    })
    .await?;
    let unp = QueueConfigRequest {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        retention_ms: Some(30 * 86_400_000),
        max_message_bytes: Some(view.config.max_message_bytes),
        ..QueueConfigRequest::default()
    };
    ensure_queue(
        &cfg.client,
        unprocessable,
        &unp,
        cfg.max_backoff,
        &cfg.metrics,
    )
    .await?;
    Ok((view, unp))
}

/// Creates queue `name` with `config` unless it exists (an existing queue is left as it is).
pub(crate) async fn ensure_queue(
    client: &Client,
    name: &str,
    config: &QueueConfigRequest,
    max_backoff: Duration,
    metrics: &WorkerMetrics,
) -> Result<()> {
    let (r, _) = crate::worker::settle::retry(
        "looking up the unprocessable queue",
        metrics,
        max_backoff,
        || client.get_queue(name),
    )
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(ErrorCode::QueueNotFound) => {
            let (r, _) = crate::worker::settle::retry(
                "creating the unprocessable queue",
                metrics,
                max_backoff,
                || client.put_queue(name, config),
            )
            .await;
            r.map(|_| tracing::info!(queue = name, "created the unprocessable queue"))
        }
        Err(e) => Err(e),
    }
}

async fn wait_out<T, F, Fut>(what: &str, cfg: &WorkerBuilder, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let (r, _) = crate::worker::settle::retry(what, &cfg.metrics, cfg.max_backoff, f).await;
    r.map_err(|e| match e {
        Error::Api {
            code: ErrorCode::QueueNotFound,
            status,
            retry_after,
            ..
        } => Error::Api {
            status,
            code: ErrorCode::QueueNotFound,
            message: format!(
                "the worker's queue \"{}\" does not exist; create it first (PUT /v1/queues/{} or \
                 `sluice queue create {}`)",
                cfg.queue, cfg.queue, cfg.queue
            ),
            retry_after,
        },
        other => other,
    })
}
