//! Tasks from the caller's side: enqueue a task envelope, cancel, report progress,
//! watch a task's events, and request/reply with [`Client::call`].
//!
//! # Why `call` long-polls
//! Waiting for a result by asking "done yet?" in a loop either answers late (long sleeps) or
//! hammers the broker (short ones). `GET /v1/tasks/{id}?wait_ms=` holds the answer on the broker
//! until the task is final, so [`Client::wait_for`] asks at most once per 30 s while the task
//! runs and hears about the end within the broker's own poll interval.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_core::TaskStatus;
use sluice_core::config::limits::MAX_WAIT;
use sluice_wire::{ExtendResponse, ProgressRequest, SendResponse, TaskView};

use crate::body::ResultExt;
use crate::client::{Call, Client, message_id, queue};
use crate::envelope::TaskEnvelope;
use crate::error::{Error, Result};
use crate::retry::Safety;
use crate::sse::SseParser;

/// The task events of [`Client::task_events`]: each item is the task's status after a change
/// of status or progress; the stream ends after the final status.
pub type TaskEvents = Pin<Box<dyn Stream<Item = Result<TaskView>> + Send>>;

impl Client {
    /// Enqueues task `task` with `args` (any `Serialize` value, mapped to the envelope's
    /// `args`/`kwargs` as [`crate::envelope`] explains) and returns the task id.
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// let id = client.enqueue("images", "resize", &("s3://a.png", 64)).await?;
    /// println!("task {id} queued");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInput`], before anything is sent, when `args` cannot be JSON (a NaN or
    /// infinite float, a map with non-string keys): the message names the value and how to
    /// fix it. Otherwise as [`Client::send`].
    pub async fn enqueue<A: Serialize + ?Sized>(
        &self,
        queue_name: &str,
        task: &str,
        args: &A,
    ) -> Result<String> {
        let env = TaskEnvelope::new(task, args)?;
        Ok(self.enqueue_envelope(queue_name, &env).await?.id)
    }

    /// Enqueues a prepared envelope. For a delay, dedup id, key or priority, use
    /// [`TaskEnvelope::to_message`] and [`Client::send`]:
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// use sluice_client::TaskEnvelope;
    /// let env = TaskEnvelope::new("charge", &("order-7",))?;
    /// client.send("billing", env.to_message()?.key("acme").priority(9)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Client::enqueue`].
    pub async fn enqueue_envelope(
        &self,
        queue_name: &str,
        envelope: &TaskEnvelope,
    ) -> Result<SendResponse> {
        self.send(queue_name, envelope.to_message()?).await
    }

    /// Cancels a task: a waiting one is removed at once and ends `CANCELLED`; a running one
    /// is flagged, and its worker's handler hears of it at its next lease extension or
    /// progress report and stops cooperatively. `CANCELLED` is sticky: a late success does not
    /// undo it. A finished task is left as it is. Answers the status after the cancel.
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client, id: &str) -> Result<(), sluice_client::Error> {
    /// let view = client.cancel(id).await?;
    /// println!("{id} is {:?}", view.status);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `message_not_found` for an id the broker does not know; transport failures.
    pub async fn cancel(&self, id: &str) -> Result<TaskView> {
        let id = message_id(id)?;
        self.call_json(Call::new(
            Method::POST,
            format!("/v1/tasks/{id}/cancel"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Reports the progress of a running task (`pct` 0 – 100) from the worker holding
    /// `receipt`; the answer's `cancel_requested` says whether the task was cancelled. A
    /// worker's handler calls [`crate::TaskContext::progress`] instead.
    ///
    /// # Errors
    /// `receipt_stale`; `invalid_argument` for `pct` outside 0 – 100 or a long detail.
    pub async fn progress(
        &self,
        queue_name: &str,
        receipt: &str,
        pct: f64,
        detail: Option<&str>,
    ) -> Result<ExtendResponse> {
        let q = queue(queue_name)?;
        let req = ProgressRequest {
            receipt: receipt.to_owned(),
            pct,
            detail: detail.map(str::to_owned),
        };
        let call = Call::new(
            Method::POST,
            format!("/v1/queues/{q}/progress"),
            Safety::Idempotent,
        )
        .json(&req)?;
        self.call_json(call).await
    }

    /// Streams the task's status as server-sent events: one item now, then one after each
    /// change of status or progress, ending after the final status.
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client, id: &str) -> Result<(), sluice_client::Error> {
    /// use futures::StreamExt;
    /// let mut events = client.task_events(id).await?;
    /// while let Some(view) = events.next().await {
    ///     let view = view?;
    ///     println!("{:?} {:?}", view.status, view.progress.map(|p| p.pct));
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Opening fails as [`Client::task_status`]; an item is an error when the stream breaks
    /// off or the broker reports one (then the stream ends).
    pub async fn task_events(&self, id: &str) -> Result<TaskEvents> {
        let id = message_id(id)?;
        let resp = self.open_stream(&format!("/v1/tasks/{id}/events")).await?;
        struct St {
            bytes: Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
            parser: SseParser,
            pending: std::collections::VecDeque<Result<TaskView>>,
            done: bool,
        }
        let st = St {
            bytes: Box::pin(resp.bytes_stream()),
            parser: SseParser::default(),
            pending: Default::default(),
            done: false,
        };
        let stream = futures::stream::unfold(st, |mut st| async move {
            loop {
                if let Some(item) = st.pending.pop_front() {
                    return Some((item, st));
                }
                if st.done {
                    return None;
                }
                match st.bytes.next().await {
                    None => return None,
                    Some(Err(e)) => {
                        st.done = true;
                        st.pending.push_back(Err(Error::Transport(e)));
                    }
                    Some(Ok(chunk)) => {
                        for ev in st.parser.push(&chunk) {
                            match ev.event.as_str() {
                                "status" | "message" => st.pending.push_back(
                                    serde_json::from_str::<TaskView>(&ev.data)
                                        .map_err(|e| Error::decode("task event", e)),
                                ),
                                "error" => {
                                    st.done = true;
                                    st.pending.push_back(Err(Error::Api {
                                        status: 503,
                                        code: sluice_core::ErrorCode::Unavailable,
                                        message: ev.data,
                                        retry_after: None,
                                    }));
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
        });
        Ok(Box::pin(stream))
    }

    /// Waits until the task is final (`SUCCESS`, `FAILURE`, `CANCELLED`, or `UNKNOWN` when
    /// nothing is known of it) and returns its status, long-polling the broker in rounds of at
    /// most 30 s (no busy loop).
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client, id: &str) -> Result<(), sluice_client::Error> {
    /// let view = client.wait_for(id, std::time::Duration::from_secs(60)).await?;
    /// # let _ = view; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::TaskTimeout`] when the task is not final after `timeout`; as
    /// [`Client::task_status`] otherwise.
    ///
    /// # Cancel safety
    /// Safe: it only reads.
    pub async fn wait_for(&self, id: &str, timeout: Duration) -> Result<TaskView> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let round = left.min(MAX_WAIT);
            let view = self.task_status(id, Some(round)).await?;
            if view.status.is_final() || view.status == TaskStatus::Unknown {
                return Ok(view);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::TaskTimeout {
                    id: id.to_owned(),
                    timeout,
                    status: view.status,
                });
            }
            if round.is_zero() {
                // Only when the timeout is already used up; kept as a guard against a loop.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Request/reply on top of the queue: enqueues `task` with `args`, waits up to `timeout`
    /// for it to finish, and returns its result read as `O`.
    ///
    /// ```no_run
    /// # async fn f(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// use std::time::Duration;
    /// let sum: i64 = client.call("math", "add", &(2, 3), Duration::from_secs(5)).await?;
    /// assert_eq!(sum, 5);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Client::enqueue`]; [`Error::TaskTimeout`] when the task is not final in time (it
    /// is not cancelled: do that with [`Client::cancel`] if the reply no longer matters);
    /// [`Error::TaskFailed`] when it ended `FAILURE`, `CANCELLED` or `UNKNOWN`;
    /// [`Error::Decode`] when the result does not fit `O` (or none was kept: the queue's
    /// `result_ttl` is 0, or the result was over the size cap).
    pub async fn call<A: Serialize + ?Sized, O: DeserializeOwned>(
        &self,
        queue_name: &str,
        task: &str,
        args: &A,
        timeout: Duration,
    ) -> Result<O> {
        let id = self.enqueue(queue_name, task, args).await?;
        let view = self.wait_for(&id, timeout).await?;
        if view.status != TaskStatus::Success {
            return Err(Error::TaskFailed {
                id,
                status: view.status,
                error: view.error,
            });
        }
        match view.decoded_result()? {
            Some(body) => body.json(),
            None => serde_json::from_str("null").map_err(|_| {
                Error::Decode(format!(
                    "task {id} succeeded but no result was kept (the queue's result_ttl is 0, \
                     or the result was over the size cap)"
                ))
            }),
        }
    }
}
