//! The worker: runs registered task handlers on the tasks of one queue and turns each
//! handler's outcome into the task lifecycle.
//!
//! | handler outcome | the worker | the task |
//! |---|---|---|
//! | `Ok(output)` | ack with the output as result (dropped with a warning above the size cap) | `SUCCESS` |
//! | [`TaskError::transient`] (or any `?`-converted error), or a panic | nack: the queue's backoff applies | `RETRY`, or `FAILURE` after the last attempt |
//! | [`TaskError::retry_after`] | nack with that delay | `RETRY` |
//! | [`TaskError::permanent`] | reject: DLQ now | `FAILURE` |
//! | a body that is not an envelope, an unknown task, arguments that do not fit | move to `<queue>.unprocessable` with the decode error, byte-exact | (moved) |
//! | anything, after [`crate::Client::cancel`] | settle; the broker keeps it cancelled | `CANCELLED` |
//!
//! When a task is dead-lettered by this worker (permanent error, or a failed last attempt) the
//! [`WorkerBuilder::on_dead_letter`] hook runs once; its failure or panic is logged and
//! changes nothing.
//!
//! # Delivery, leases and shutdown
//! The worker leases up to `batch` tasks at a time, never more than `concurrency` running,
//! and extends each lease while its handler runs (every third of the visibility timeout), so
//! a long task is not handed to a second worker; the extension's answer also carries a
//! cancel. When the broker cannot be reached the worker logs, backs off and resumes by itself;
//! finished tasks keep trying to settle meanwhile, so no result is lost. On shutdown it stops
//! leasing, lets running tasks finish within the grace period and releases the rest at once for
//! redelivery.

mod context;
mod error;
mod handler;
mod lane;
mod metrics;
mod run;
mod settle;
mod task;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::error::{Error, Result};

pub use context::TaskContext;
pub use error::{TaskError, TaskErrorKind};
pub use handler::HookError;
pub use metrics::{HANDLER_TIME_BUCKETS, MetricsSnapshot, Outcome, WorkerMetrics};

use handler::{ErasedHandler, ErasedHook};

/// A worker of one queue, built with [`Worker::builder`] and started with [`Worker::run`] or
/// [`Worker::run_until`].
///
/// ```no_run
/// use std::time::Duration;
/// use sluice_client::{Client, TaskContext, TaskError, Worker};
///
/// #[derive(serde::Deserialize)]
/// struct Resize { url: String, width: u32 }
///
/// # async fn f() -> Result<(), sluice_client::Error> {
/// let client = Client::new("http://127.0.0.1:7878")?;
/// let worker = Worker::builder(client, "images")
///     .concurrency(8)
///     .handler("resize", |_ctx: TaskContext, job: Resize| async move {
///         if job.width == 0 {
///             return Err(TaskError::permanent("width must be positive"));
///         }
///         Ok(format!("{} at {}px", job.url, job.width))
///     })
///     .on_dead_letter(|task_id, error| async move {
///         eprintln!("ALERT: task {task_id} failed for good: {error}");
///         Ok(())
///     })
///     .build()?;
/// worker.run().await // until Ctrl-C, then a graceful shutdown
/// # }
/// ```
pub struct Worker {
    cfg: WorkerBuilder,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.cfg.queue)
            .field("tasks", &self.cfg.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Settings and handlers of a [`Worker`].
pub struct WorkerBuilder {
    pub(crate) client: Client,
    pub(crate) frames: Option<std::sync::Arc<crate::frames::FramePool>>,
    pub(crate) queue: String,
    pub(crate) handlers: HashMap<String, ErasedHandler>,
    pub(crate) hook: Option<ErasedHook>,
    pub(crate) concurrency: usize,
    pub(crate) batch: Option<u32>,
    pub(crate) poll_wait: Duration,
    pub(crate) visibility: Option<Duration>,
    pub(crate) extend_every: Option<Duration>,
    pub(crate) unprocessable: Option<String>,
    pub(crate) shutdown_grace: Duration,
    pub(crate) max_result_bytes: Option<usize>,
    pub(crate) max_backoff: Duration,
    pub(crate) consumer: Option<String>,
    pub(crate) metrics: WorkerMetrics,
}

impl Worker {
    /// A builder for a worker of `queue` using `client`. The queue must exist when the worker
    /// starts.
    pub fn builder(client: Client, queue: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            client,
            frames: None,
            queue: queue.into(),
            handlers: HashMap::new(),
            hook: None,
            concurrency: 16,
            batch: None,
            poll_wait: Duration::from_secs(1),
            visibility: None,
            extend_every: None,
            unprocessable: None,
            shutdown_grace: Duration::from_secs(30),
            max_result_bytes: None,
            max_backoff: Duration::from_secs(5),
            consumer: None,
            metrics: WorkerMetrics::new(),
        }
    }

    /// The worker's live metrics (clones share them; take them before `run`).
    pub fn metrics(&self) -> WorkerMetrics {
        self.cfg.metrics.clone()
    }

    /// The queue it works on.
    pub fn queue(&self) -> &str {
        &self.cfg.queue
    }

    /// Runs until Ctrl-C, then shuts down gracefully (see [`Worker::run_until`]).
    ///
    /// # Errors
    /// As [`Worker::run_until`].
    pub async fn run(self) -> Result<()> {
        self.run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
    }

    /// Runs until `shutdown` resolves, then stops leasing, waits up to the grace period for
    /// running tasks and nacks the rest for redelivery. Broker outages are waited out, at
    /// start too.
    ///
    /// ```no_run
    /// # async fn f(worker: sluice_client::Worker) -> Result<(), sluice_client::Error> {
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let running = tokio::spawn(worker.run_until(async { let _ = stopped.await; }));
    /// // ... later:
    /// let _ = stop.send(());
    /// running.await.expect("worker task")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Only at start: `queue_not_found` for the worker's queue, `unauthenticated` /
    /// `permission_denied`, or an unprocessable queue that cannot be created.
    ///
    /// # Cancel safety
    /// Dropping the future stops leasing and abandons running tasks where they are: their
    /// leases expire and they are delivered again (nothing is lost, but prefer `shutdown`).
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        run::run(self.cfg, shutdown).await
    }
}

impl WorkerBuilder {
    /// Registers the handler of task `name`. Its input is read from the envelope's
    /// `args`/`kwargs` (see [`crate::envelope`]); its output is stored as the task's result.
    ///
    /// ```no_run
    /// # fn f(b: sluice_client::WorkerBuilder) -> sluice_client::WorkerBuilder {
    /// b.handler("add", |_ctx, (a, b): (i64, i64)| async move { Ok(a + b) })
    /// # }
    /// ```
    pub fn handler<I, O, F, Fut>(mut self, name: impl Into<String>, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(TaskContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, TaskError>> + Send + 'static,
    {
        self.handlers.insert(name.into(), handler::erase(f));
        self
    }

    /// The hook run once for each task this worker dead-letters (permanent error, or a failed
    /// last attempt), with the task id and its error. A hook that fails or panics is logged.
    ///
    /// ```no_run
    /// # fn f(b: sluice_client::WorkerBuilder) -> sluice_client::WorkerBuilder {
    /// b.on_dead_letter(|task_id, error| async move {
    ///     eprintln!("task {task_id} is in the DLQ: {error}");
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn on_dead_letter<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(String, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HookError>> + Send + 'static,
    {
        self.hook = Some(handler::erase_hook(hook));
        self
    }

    /// Leases and settles over the frame protocol (`sluice serve --frames-listen`) through
    /// `pool` instead of HTTP: the same operations and rules at a lower cost per task for the
    /// broker and the worker. The worker's [`Client`] still reads the queue's settings and
    /// creates the unprocessable queue, and is what [`TaskContext::client`] returns.
    ///
    /// ```no_run
    /// # use sluice_client::{Client, Worker, frames::FramePool};
    /// # fn f(client: Client) {
    /// let worker = Worker::builder(client, "jobs")
    ///     .frames(FramePool::new("127.0.0.1:7879", None));
    /// # }
    /// ```
    pub fn frames(mut self, pool: crate::frames::FramePool) -> Self {
        self.frames = Some(std::sync::Arc::new(pool));
        self
    }

    /// Most tasks running at once. Default 16.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Most tasks leased per receive, 1 – 1000. Default: the concurrency (capped at 1000).
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = Some(n);
        self
    }

    /// Long-poll wait of each receive (0 – 30 s); also the longest a shutdown waits for a
    /// receive in progress. Default 1 s.
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait;
        self
    }

    /// Lease length of this worker's deliveries; the queue's `visibility_timeout` otherwise.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = Some(visibility);
        self
    }

    /// How often a running task's lease is extended (and a cancel is looked for). Default a
    /// third of the lease length.
    pub fn extend_every(mut self, every: Duration) -> Self {
        self.extend_every = Some(every);
        self
    }

    /// Where undecodable bodies and unknown tasks go. Default `<queue>.unprocessable`,
    /// created at start when missing (no attempt limit, no DLQ, 30-day retention).
    pub fn unprocessable_queue(mut self, name: impl Into<String>) -> Self {
        self.unprocessable = Some(name.into());
        self
    }

    /// How long a shutdown lets running tasks finish before it nacks them. Default 30 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Largest result kept (JSON bytes); larger ones are dropped with a warning and the task
    /// still succeeds. Default the queue's `max_message_bytes`, the broker's own cap.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// Longest wait between tries while the broker is unreachable. Default 5 s.
    pub fn max_backoff(mut self, wait: Duration) -> Self {
        self.max_backoff = wait;
        self
    }

    /// The consumer name recorded in each attempt. Default `rust-worker-<pid>`.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// Builds the worker.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when no handler is registered, the concurrency is 0, the batch
    /// is outside 1 – 1000, or a queue name is invalid.
    pub fn build(self) -> Result<Worker> {
        crate::client::queue(&self.queue)?;
        if let Some(u) = &self.unprocessable {
            crate::client::queue(u)?;
        }
        if self.handlers.is_empty() {
            return Err(Error::InvalidInput(
                "a worker needs at least one handler: register one with .handler(name, f)"
                    .to_owned(),
            ));
        }
        if self.concurrency == 0 {
            return Err(Error::InvalidInput(
                "concurrency must be at least 1".to_owned(),
            ));
        }
        if let Some(b) = self.batch
            && !(1..=1000).contains(&b)
        {
            return Err(Error::InvalidInput(format!(
                "batch must be 1 to 1000, got {b}"
            )));
        }
        Ok(Worker { cfg: self })
    }
}
