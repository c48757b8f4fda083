//! Tasks: status of a task id, with an optional long poll until it is final, and
//! the autoscaling hint of a queue.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use axum::Json;
use axum::extract::State;
use sluice_core::config::limits::MAX_WAIT;
use sluice_core::{StoreError, TaskStatus};
use sluice_wire::{ErrorEnvelope, ScalingQuery, ScalingView, TaskQuery, TaskView};

use crate::AppState;
use crate::auth::Caller;
use crate::http::deadline::Deadline;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, MessagePath, QueuePath};

/// How often a long-polled task status is looked at again.
const TASK_POLL: Duration = Duration::from_millis(50);

/// The status of a task; `?wait_ms=` waits (up to 30 s) until it is final, which gives
/// request/reply on top of the queue.
#[utoipa::path(
    get, path = "/v1/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Task id (its message id)"), TaskQuery),
    responses(
        (status = 200, description = "The task's status (UNKNOWN for an id nothing is known about)", body = TaskView),
        (status = 400, description = "invalid_argument (id or wait_ms)", body = ErrorEnvelope),
    )
)]
pub async fn get_task(
    State(st): State<AppState>,
    caller: Caller,
    MessagePath(id): MessagePath,
    deadline: Deadline,
    ApiQuery(query): ApiQuery<TaskQuery>,
) -> Result<Json<TaskView>, ApiError> {
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0));
    if wait > MAX_WAIT {
        return Err(ApiError::invalid(format!(
            "wait_ms must be at most {}, got {}",
            MAX_WAIT.as_millis(),
            wait.as_millis()
        )));
    }
    deadline.allow(wait);
    let until = tokio::time::Instant::now() + wait;
    loop {
        let view = match st.store.get_message(id).await {
            // A task in a queue outside the key's patterns reads as one that does not exist.
            Ok(m) if caller.sees(m.queue.as_str()) => TaskView::of(&m),
            Ok(_) | Err(StoreError::MessageNotFound(_)) => TaskView::unknown(id),
            Err(e) => return Err(e.into()),
        };
        let done = view.status.is_final() || view.status == TaskStatus::Unknown;
        if done || tokio::time::Instant::now() >= until {
            return Ok(Json(view));
        }
        tokio::select! {
            () = tokio::time::sleep(TASK_POLL) => {}
            () = st.shutting_down() => return Ok(Json(view)),
        }
    }
}

/// Cancels a task: a waiting one is removed at once; a running one is flagged and its handler
/// is told at its next lease extension or progress report. CANCELLED is sticky. A finished
/// task is left as it is. Answers the task's status afterwards.
#[utoipa::path(
    post, path = "/v1/tasks/{id}/cancel", tag = "tasks",
    params(("id" = String, Path, description = "Task id (its message id)")),
    responses(
        (status = 200, description = "The task's status after the cancel", body = TaskView),
        (status = 404, description = "message_not_found", body = ErrorEnvelope),
    )
)]
pub async fn cancel(
    State(st): State<AppState>,
    caller: Caller,
    MessagePath(id): MessagePath,
) -> Result<Json<TaskView>, ApiError> {
    let m = st.store.get_message(id).await?;
    caller.allow_found(&m.queue, || StoreError::MessageNotFound(id).into())?;
    let m = st.store.cancel(id).await?;
    st.audit(
        &caller,
        "task.cancel",
        Some(&m.queue),
        Some(id.to_string()),
        &[],
    )
    .await;
    Ok(Json(TaskView::of(&m)))
}

/// How often the event stream looks at a task.
const EVENT_POLL: Duration = Duration::from_millis(200);
/// Longest an event stream stays open; clients reconnect.
const EVENT_STREAM_MAX: Duration = Duration::from_secs(3600);

/// A stream of server-sent events (`event: status`, data: the task status as JSON) sent
/// whenever the task's status or progress changes; it ends after the final status.
#[utoipa::path(
    get, path = "/v1/tasks/{id}/events", tag = "tasks",
    params(("id" = String, Path, description = "Task id (its message id)")),
    responses(
        (status = 200, description = "text/event-stream of TaskView objects", content_type = "text/event-stream", body = TaskView),
    )
)]
pub async fn events(
    State(st): State<AppState>,
    caller: Caller,
    MessagePath(id): MessagePath,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let until = tokio::time::Instant::now() + EVENT_STREAM_MAX;
    struct Watch {
        st: AppState,
        last: Option<String>,
        done: bool,
    }
    let stream = futures::stream::unfold(
        Watch {
            st,
            last: None,
            done: false,
        },
        move |mut w| {
            let caller = caller.clone();
            async move {
                loop {
                    if w.done || tokio::time::Instant::now() >= until {
                        return None;
                    }
                    let view = match w.st.store.get_message(id).await {
                        // Outside the key's patterns (where it was sent, or where it went since):
                        // as if it did not exist.
                        Ok(m) if caller.sees(m.queue.as_str()) => TaskView::of(&m),
                        Ok(_) | Err(StoreError::MessageNotFound(_)) => TaskView::unknown(id),
                        Err(e) => {
                            let msg = crate::http::error::http_message(&e);
                            w.done = true;
                            return Some((Ok(Event::default().event("error").data(msg)), w));
                        }
                    };
                    let json = serde_json::to_string(&view).unwrap_or_default();
                    if w.last.as_deref() != Some(json.as_str()) {
                        w.done = view.status.is_final() || view.status == TaskStatus::Unknown;
                        w.last = Some(json.clone());
                        return Some((Ok(Event::default().event("status").data(json)), w));
                    }
                    tokio::select! {
                        () = tokio::time::sleep(EVENT_POLL) => {}
                        () = w.st.shutting_down() => return None,
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// How many workers a queue wants at `per_worker` waiting or running tasks each.
#[utoipa::path(
    get, path = "/v1/queues/{q}/scaling", tag = "tasks",
    params(("q" = String, Path, description = "Queue name"), ScalingQuery),
    responses(
        (status = 200, description = "The hint", body = ScalingView),
        (status = 400, description = "invalid_argument (per_worker)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn scaling(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(query): ApiQuery<ScalingQuery>,
) -> Result<Json<ScalingView>, ApiError> {
    if query.per_worker == 0 || query.per_worker > 1_000_000 {
        return Err(ApiError::invalid(format!(
            "per_worker must be 1 to 1000000, got {}",
            query.per_worker
        )));
    }
    let s = st.store.stats(&q).await?;
    Ok(Json(ScalingView {
        desired_workers: (s.visible + s.in_flight).div_ceil(query.per_worker),
        backlog: s.visible,
        in_flight: s.in_flight,
    }))
}
