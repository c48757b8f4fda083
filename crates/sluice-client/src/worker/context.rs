//! What a running handler knows and can do: its task's identity and attempt, progress
//! reports, cooperative cancellation and stable idempotency keys for its side effects.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::client::Client;
use crate::error::Result;
use crate::worker::lane::Lane;

/// The context of one task run, handed to its handler. Cheap to clone.
///
/// ```no_run
/// use sluice_client::{TaskContext, TaskError};
///
/// async fn export(ctx: TaskContext, rows: u32) -> Result<u32, TaskError> {
///     for i in 0..rows {
///         if ctx.is_cancelled() {
///             return Err(TaskError::cancelled());
///         }
///         // ... export row i, with a key the downstream deduplicates by ...
///         let _key = ctx.idempotency_key(&format!("row-{i}"));
///         ctx.progress(f64::from(i + 1) * 100.0 / f64::from(rows), Some("exporting")).await?;
///     }
///     Ok(rows)
/// }
/// ```
#[derive(Clone)]
pub struct TaskContext {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    lane: Lane,
    queue: String,
    id: String,
    task: String,
    receipt: String,
    receive_count: u32,
    max_receive_count: u32,
    attributes: BTreeMap<String, String>,
    key: Option<String>,
    priority: u8,
    trace: Option<sluice_wire::TraceView>,
    cancel: watch::Sender<bool>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("queue", &self.inner.queue)
            .field("id", &self.inner.id)
            .field("task", &self.inner.task)
            .field("receive_count", &self.inner.receive_count)
            .finish()
    }
}

pub(crate) struct ContextParts {
    pub client: Client,
    pub lane: Lane,
    pub queue: String,
    pub id: String,
    pub task: String,
    pub receipt: String,
    pub receive_count: u32,
    pub max_receive_count: u32,
    pub attributes: BTreeMap<String, String>,
    pub key: Option<String>,
    pub priority: u8,
    pub trace: Option<sluice_wire::TraceView>,
}

impl TaskContext {
    pub(crate) fn new(p: ContextParts) -> Self {
        let (cancel, _) = watch::channel(false);
        TaskContext {
            inner: Arc::new(Inner {
                client: p.client,
                lane: p.lane,
                queue: p.queue,
                id: p.id,
                task: p.task,
                receipt: p.receipt,
                receive_count: p.receive_count,
                max_receive_count: p.max_receive_count,
                attributes: p.attributes,
                key: p.key,
                priority: p.priority,
                trace: p.trace,
                cancel,
            }),
        }
    }

    /// The task id (its message id).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The task's name.
    pub fn task(&self) -> &str {
        &self.inner.task
    }

    /// The queue it came from.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.receive_count
    }

    /// The key the task was sent with (its tenant, customer or account), if any.
    pub fn key(&self) -> Option<&str> {
        self.inner.key.as_deref()
    }

    /// The W3C trace context the task was sent with, if any: the parent of the span that
    /// runs it, so that the worker's span joins the producer's trace.
    pub fn trace(&self) -> Option<&sluice_wire::TraceView> {
        self.inner.trace.as_ref()
    }

    /// The priority it was delivered at (0 – 9, 9 most urgent).
    pub fn priority(&self) -> u8 {
        self.inner.priority
    }

    /// The queue's attempt limit (0 = unlimited).
    pub fn max_attempts(&self) -> u32 {
        self.inner.max_receive_count
    }

    /// True when a failure now dead-letters the task.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.max_receive_count > 0 && self.inner.receive_count >= self.inner.max_receive_count
    }

    /// The message's attributes.
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.inner.attributes
    }

    /// The worker's client, e.g. to enqueue follow-up tasks.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// A stable key for side effect `label` of this task: the same on every attempt, so a
    /// downstream that deduplicates by it acts once. See [`crate::idempotency_key`].
    pub fn idempotency_key(&self, label: &str) -> String {
        crate::idempotency::idempotency_key(&self.inner.id, label)
    }

    /// Reports progress (`pct` 0 – 100, an optional short detail); it shows in the task's
    /// status and event stream. The answer also delivers a pending cancel, so
    /// [`TaskContext::is_cancelled`] is current right after.
    ///
    /// # Errors
    /// `invalid_argument` for `pct` outside 0 – 100; `receipt_stale` when this worker lost
    /// the lease; transport failures. Progress is informative: a handler may ignore errors.
    pub async fn progress(&self, pct: f64, detail: Option<&str>) -> Result<()> {
        let cancel_requested = self
            .inner
            .lane
            .progress(&self.inner.queue, &self.inner.receipt, pct, detail)
            .await?;
        if cancel_requested {
            self.mark_cancelled();
        }
        Ok(())
    }

    /// True once the task was cancelled (heard at a lease extension or progress report).
    /// The handler should stop soon; what it returns then does not change the task's
    /// `CANCELLED` status.
    pub fn is_cancelled(&self) -> bool {
        *self.inner.cancel.borrow()
    }

    /// Resolves when the task is cancelled; pair it with the work in `tokio::select!`.
    ///
    /// # Cancel safety
    /// Safe.
    pub async fn cancelled(&self) {
        let mut rx = self.inner.cancel.subscribe();
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    pub(crate) fn mark_cancelled(&self) {
        self.inner.cancel.send_replace(true);
    }

    pub(crate) fn receipt(&self) -> &str {
        &self.inner.receipt
    }
}
