//! What the examples share: the broker URL, logging, fresh queues with fast retry settings,
//! running a worker in the background, and waiting for tasks. The integration tests include
//! the examples and call their `run` functions against a broker they start in-process.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;
use sluice_client::wire::{QueueConfigRequest, TaskView};
use sluice_client::{Client, RetryPolicy, TaskStatus, Worker, WorkerMetrics};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `SLUICE_URL`, or the default address of `sluice serve`.
pub fn broker_url() -> String {
    std::env::var("SLUICE_URL").unwrap_or_else(|_| "http://127.0.0.1:7878".to_owned())
}

/// Logs to stderr at `info` (override with `RUST_LOG`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A client with quick retries (the examples wait out short outages themselves).
pub fn client(url: &str) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .retry(RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
            max_retry_after: Duration::from_secs(2),
        })
        .build()?)
}

/// A fresh queue named `<base>-<random>` (so runs against one broker never mix), with quick
/// retries: backoff 50 – 200 ms, the given attempt limit and visibility.
pub async fn fresh_queue(
    client: &Client,
    base: &str,
    max_receive_count: u32,
    visibility: Duration,
) -> anyhow::Result<String> {
    fresh_queue_with(
        client,
        base,
        QueueConfigRequest {
            max_receive_count: Some(max_receive_count),
            visibility_timeout_ms: Some(i64::try_from(visibility.as_millis())?),
            ..QueueConfigRequest::default()
        },
    )
    .await
}

/// A fresh queue with `config`, backoff defaulting to 50 – 200 ms.
pub async fn fresh_queue_with(
    client: &Client,
    base: &str,
    mut config: QueueConfigRequest,
) -> anyhow::Result<String> {
    let name = format!(
        "{base}-{:06x}",
        rand::thread_rng().gen_range(0..0x100_0000u32)
    );
    config.backoff_base_ms.get_or_insert(50);
    config.backoff_max_ms.get_or_insert(200);
    client.put_queue(&name, &config).await?;
    Ok(name)
}

/// A worker running in the background until [`Running::stop`].
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<(), sluice_client::Error>>,
    pub metrics: WorkerMetrics,
}

/// Starts `worker` in the background.
pub fn spawn(worker: Worker) -> Running {
    let metrics = worker.metrics();
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run_until(async {
        let _ = rx.await;
    }));
    Running {
        stop: Some(tx),
        handle,
        metrics,
    }
}

impl Running {
    /// Shuts the worker down gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.handle).await??;
        Ok(())
    }
}

/// Waits until every task is final, or fails after `timeout`.
pub async fn wait_all(
    client: &Client,
    ids: &[String],
    timeout: Duration,
) -> anyhow::Result<Vec<TaskView>> {
    let mut out = Vec::with_capacity(ids.len());
    let deadline = Instant::now() + timeout;
    for id in ids {
        let left = deadline.saturating_duration_since(Instant::now());
        out.push(client.wait_for(id, left).await?);
    }
    Ok(out)
}

/// Polls `check` every 20 ms until it returns true, or fails after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits until the task has status `status`.
pub async fn wait_status(
    client: &Client,
    id: &str,
    status: TaskStatus,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_until(&format!("task {id} to be {status:?}"), timeout, || async {
        client
            .task_status(id, None)
            .await
            .is_ok_and(|v| v.status == status)
    })
    .await
}
