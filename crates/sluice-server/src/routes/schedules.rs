//! Schedules: `PUT / GET / DELETE /v1/schedules/{name}`, `GET /v1/schedules`,
//! `POST /v1/schedules/{name}/pause | /resume | /trigger`. A schedule is a standing send:
//! changing or triggering one needs a key that may both manage and send to its queue (the
//! `admin` role); reading one shows its body, so it needs the role that may browse messages
//! (`operator`, `admin`) and a key that covers its queue. The scheduler that fires them runs
//! in the broker (`crate::jobs::scheduler`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_core::schedule::Schedule;
use sluice_core::{Clock, SystemClock};
use sluice_wire::{ErrorEnvelope, ScheduleList, ScheduleRequest, ScheduleView, TriggerAnswer};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, SchedulePath};

/// Firings listed in a schedule's view.
const SHOWN_FIRINGS: usize = 5;

fn view(s: &Schedule) -> ScheduleView {
    ScheduleView::new(
        s,
        &crate::jobs::scheduler::upcoming(s, SystemClock.now(), SHOWN_FIRINGS),
    )
}

/// A schedule the caller may see, or a 404 as if it did not exist.
async fn visible(st: &AppState, caller: &Caller, p: &SchedulePath) -> Result<Schedule, ApiError> {
    let s = st.store.get_schedule(&p.0).await?;
    if !caller.sees(s.spec.queue.as_str()) {
        return Err(sluice_core::StoreError::ScheduleNotFound(p.0.to_string()).into());
    }
    Ok(s)
}

/// Creates the schedule or replaces it. A new trigger starts counting now; the same trigger
/// keeps its progress.
#[utoipa::path(
    put, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    request_body(content = ScheduleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced", body = ScheduleView),
        (status = 201, description = "Created", body = ScheduleView),
        (status = 400, description = "invalid_argument (cron, timezone, every_ms, body, attributes)", body = ErrorEnvelope),
        (status = 403, description = "permission_denied", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn put(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
    JsonBody(req): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let spec = req.into_spec()?;
    allow_change(&caller, &spec.queue)?;
    match st.store.get_schedule(&name.0).await {
        // Replacing a schedule of a queue the key does not cover is refused as if it were
        // not there to see.
        Ok(old) if !caller.sees(old.spec.queue.as_str()) => {
            return Err(sluice_core::StoreError::ScheduleNotFound(name.0.to_string()).into());
        }
        Ok(old) => allow_change(&caller, &old.spec.queue)?,
        Err(sluice_core::StoreError::ScheduleNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let (s, created) = st.store.put_schedule(&name.0, spec).await?;
    let details = [
        ("schedule", s.name.to_string()),
        ("trigger", trigger_text(&s)),
        ("catch_up", s.spec.catch_up.as_str().to_owned()),
        ("paused", s.spec.paused.to_string()),
    ];
    st.audit(&caller, "schedule.put", Some(&s.spec.queue), None, &details)
        .await;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((code, Json(view(&s))))
}

/// A schedule is a standing send: changing one, or triggering it, needs a key that may both
/// manage its queue and send to it (the permission table's actions for these operations;
/// the role was checked before the handler ran).
fn allow_change(caller: &Caller, queue: &sluice_core::QueueName) -> Result<(), ApiError> {
    caller.allow_also(queue)
}

fn trigger_text(s: &Schedule) -> String {
    match &s.spec.trigger {
        sluice_core::schedule::TriggerSpec::Cron { expr, timezone } => {
            format!("cron {expr} ({timezone})")
        }
        sluice_core::schedule::TriggerSpec::Every { every_ms } => format!("every {every_ms} ms"),
    }
}

/// Every schedule whose queue the key sees, by name.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "schedules",
    responses((status = 200, description = "The schedules", body = ScheduleList))
)]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<ScheduleList>, ApiError> {
    let all = st.store.list_schedules().await?;
    Ok(Json(ScheduleList {
        schedules: all
            .iter()
            .filter(|s| caller.sees(s.spec.queue.as_str()))
            .map(view)
            .collect(),
    }))
}

/// One schedule with its progress and next five firings.
#[utoipa::path(
    get, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 400, description = "invalid_argument (the name)", body = ErrorEnvelope),
        (status = 404, description = "not_found", body = ErrorEnvelope),
    )
)]
pub async fn get(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(view(&visible(&st, &caller, &name).await?)))
}

/// Deletes a schedule; the messages it enqueued stay.
#[utoipa::path(
    delete, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "permission_denied", body = ErrorEnvelope),
        (status = 404, description = "not_found", body = ErrorEnvelope),
    )
)]
pub async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
) -> Result<StatusCode, ApiError> {
    let s = visible(&st, &caller, &name).await?;
    allow_change(&caller, &s.spec.queue)?;
    st.store.delete_schedule(&name.0).await?;
    st.audit(
        &caller,
        "schedule.delete",
        Some(&s.spec.queue),
        None,
        &[("schedule", s.name.to_string())],
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    st: &AppState,
    caller: &Caller,
    name: &SchedulePath,
    paused: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    let mut s = visible(st, caller, name).await?;
    allow_change(caller, &s.spec.queue)?;
    s.spec.paused = paused;
    let (s, _) = st.store.put_schedule(&name.0, s.spec).await?;
    let action = if paused {
        "schedule.pause"
    } else {
        "schedule.resume"
    };
    st.audit(
        caller,
        action,
        Some(&s.spec.queue),
        None,
        &[("schedule", s.name.to_string())],
    )
    .await;
    Ok(Json(view(&s)))
}

/// Pauses a schedule: it fires nothing until resumed.
#[utoipa::path(
    post, path = "/v1/schedules/{name}/pause", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Paused", body = ScheduleView),
        (status = 404, description = "not_found", body = ErrorEnvelope),
    )
)]
pub async fn pause(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&st, &caller, &name, true).await
}

/// Resumes a schedule; what it missed while paused is handled by its `catch_up`.
#[utoipa::path(
    post, path = "/v1/schedules/{name}/resume", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Resumed", body = ScheduleView),
        (status = 404, description = "not_found", body = ErrorEnvelope),
    )
)]
pub async fn resume(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&st, &caller, &name, false).await
}

/// Sends the schedule's message now, once, besides its firings (they are not moved).
#[utoipa::path(
    post, path = "/v1/schedules/{name}/trigger", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Sent", body = TriggerAnswer),
        (status = 404, description = "not_found or queue_not_found", body = ErrorEnvelope),
        (status = 429, description = "queue_full", body = ErrorEnvelope),
    )
)]
pub async fn trigger(
    State(st): State<AppState>,
    caller: Caller,
    name: SchedulePath,
) -> Result<Json<TriggerAnswer>, ApiError> {
    let s = visible(&st, &caller, &name).await?;
    allow_change(&caller, &s.spec.queue)?;
    let now = SystemClock.now();
    let sent = st
        .store
        .send(&s.spec.queue, vec![s.message(now, true)])
        .await?;
    let id = sent
        .first()
        .map(|o| o.id.to_string())
        .ok_or_else(|| ApiError::from(sluice_core::StoreError::unavailable("nothing was sent")))?;
    st.audit(
        &caller,
        "schedule.trigger",
        Some(&s.spec.queue),
        Some(id.clone()),
        &[("schedule", s.name.to_string())],
    )
    .await;
    Ok(Json(TriggerAnswer {
        id,
        scheduled_for: sluice_core::time::rfc3339(now),
    }))
}
