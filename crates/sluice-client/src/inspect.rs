//! Looking without leasing: browse, one message, stats, task status, health.

use std::time::Duration;

use reqwest::Method;
use sluice_wire::{
    BrowseQuery, BrowseResponse, BrowseStateWire, HealthResponse, KeyOrderView, KeysQuery,
    KeysResponse, MessageView, ScalingView, StatsView, TaskView,
};

use crate::client::{Call, Client, message_id, queue};
use crate::error::Result;
use crate::retry::Safety;

impl Client {
    /// One page of a queue's messages (any queue, DLQs included), without leasing them.
    /// Pass the answer's `next_cursor` as `query.cursor` for the next page.
    ///
    /// # Errors
    /// `queue_not_found`; `invalid_argument` for a bad limit or cursor.
    pub async fn browse(&self, name: &str, query: &BrowseQuery) -> Result<BrowseResponse> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::GET,
            format!("/v1/queues/{q}/messages"),
            Safety::Idempotent,
        );
        if let Some(s) = query.state {
            let s = match s {
                BrowseStateWire::Visible => "visible",
                BrowseStateWire::Delayed => "delayed",
                BrowseStateWire::InFlight => "in_flight",
                BrowseStateWire::All => "all",
            };
            call.query.push(("state", s.to_owned()));
        }
        if let Some(l) = query.limit {
            call.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &query.cursor {
            call.query.push(("cursor", c.clone()));
        }
        self.call_json(call).await
    }

    /// One page of a queue's keys with messages waiting or in flight: what each holds, its
    /// deliveries in the last minute, weight and limit, in `query.order` (most waiting first
    /// by default). Pass the answer's `next_cursor` as `query.cursor` for the next page.
    ///
    /// # Errors
    /// `queue_not_found`; `invalid_argument` for a bad limit or cursor.
    pub async fn keys(&self, name: &str, query: &KeysQuery) -> Result<KeysResponse> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::GET,
            format!("/v1/queues/{q}/keys"),
            Safety::Idempotent,
        );
        if let Some(o) = query.order {
            let o = match o {
                KeyOrderView::Backlog => "backlog",
                KeyOrderView::InFlight => "in_flight",
                KeyOrderView::Oldest => "oldest",
                KeyOrderView::Breaker => "breaker",
            };
            call.query.push(("order", o.to_owned()));
        }
        if let Some(l) = query.limit {
            call.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &query.cursor {
            call.query.push(("cursor", c.clone()));
        }
        self.call_json(call).await
    }

    /// One message wherever it is (a DLQ included), or its completed record with its result.
    ///
    /// # Errors
    /// `message_not_found`; [`crate::Error::InvalidInput`] for an id that is not 16 hex digits.
    pub async fn get_message(&self, id: &str) -> Result<MessageView> {
        let id = message_id(id)?;
        self.call_json(Call::new(
            Method::GET,
            format!("/v1/messages/{id}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Removes one message (or completed record), whatever its state. A retry that finds it
    /// gone after an unanswered first attempt succeeds.
    ///
    /// # Errors
    /// `message_not_found`, and as [`Client::get_message`].
    pub async fn delete_message(&self, id: &str) -> Result<()> {
        let id = message_id(id)?;
        let mut call = Call::new(
            Method::DELETE,
            format!("/v1/messages/{id}"),
            Safety::Idempotent,
        );
        call.gone_is_success = true;
        self.execute(&call).await.map(drop)
    }

    /// Gauges and totals of one queue.
    ///
    /// # Errors
    /// `queue_not_found`, and transport or decode failures.
    pub async fn stats(&self, name: &str) -> Result<StatsView> {
        let q = queue(name)?;
        self.call_json(Call::new(
            Method::GET,
            format!("/v1/queues/{q}/stats"),
            Safety::Idempotent,
        ))
        .await
    }

    /// The status of a task. With `wait`, the broker holds the answer until the task
    /// is final or `wait` (at most 30 s) passes; the client's timeout is extended by `wait`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for an id that is not 16 hex digits; transport or decode
    /// failures. An unknown id is not an error: its status is `UNKNOWN`.
    pub async fn task_status(&self, id: &str, wait: Option<Duration>) -> Result<TaskView> {
        let id = message_id(id)?;
        let mut call = Call::new(Method::GET, format!("/v1/tasks/{id}"), Safety::Idempotent);
        if let Some(w) = wait {
            call.query.push(("wait_ms", w.as_millis().to_string()));
            call.extra_timeout = w;
        }
        self.call_json(call).await
    }

    /// How many workers the queue wants when each carries `per_worker` waiting or running
    /// messages (for KEDA-style autoscalers).
    ///
    /// # Errors
    /// `queue_not_found`; `invalid_argument` for `per_worker` out of range.
    pub async fn scaling(&self, name: &str, per_worker: u64) -> Result<ScalingView> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::GET,
            format!("/v1/queues/{q}/scaling"),
            Safety::Idempotent,
        );
        call.query.push(("per_worker", per_worker.to_string()));
        self.call_json(call).await
    }

    /// Liveness: `{"status": "ok"}` when the broker process answers.
    ///
    /// # Errors
    /// Transport failures.
    pub async fn healthz(&self) -> Result<HealthResponse> {
        self.call_json(Call::new(
            Method::GET,
            "/healthz".into(),
            Safety::Idempotent,
        ))
        .await
    }

    /// Readiness: `{"status": "ready"}` when the broker's store answers.
    ///
    /// # Errors
    /// `unavailable` (503) while the store does not answer; transport failures.
    pub async fn readyz(&self) -> Result<HealthResponse> {
        self.call_json(Call::new(Method::GET, "/readyz".into(), Safety::Idempotent))
            .await
    }
}
