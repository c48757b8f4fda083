//! Redrive jobs: `POST /v1/redrives`, `GET /v1/redrives`, `GET /v1/redrives/{id}`,
//! `POST /v1/redrives/{id}/cancel | /pause | /resume`. Operator role required; the job runs in
//! the broker (`crate::jobs::redrive`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use sluice_core::{RedriveControl, RedriveId, RedriveJob};
use sluice_wire::{ErrorEnvelope, RedriveList, RedriveRequest, RedriveView};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;

/// A job as the API shows it, with how many it will move in all while it is active.
async fn view(st: &AppState, job: &RedriveJob) -> Result<RedriveView, ApiError> {
    let mut view = RedriveView::from(job);
    if job.state.is_active() && !job.spec.dry_run {
        view.to_move =
            Some(job.moved + sluice_core::reading::still_to_move(st.store.as_ref(), job).await?);
    }
    Ok(view)
}

fn job_id(s: &str) -> Result<RedriveId, ApiError> {
    Ok(s.parse::<RedriveId>()?)
}

/// Starts a redrive job: moves dead letters from `source` back to their source queue (or to
/// `destination`) at `rate` (or `rate_per_second`), up to `limit`, those matching `filter`,
/// pausing itself when `pause_if_failing` trips.
#[utoipa::path(
    post, path = "/v1/redrives", tag = "redrives",
    request_body(content = RedriveRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "Started", body = RedriveView),
        (status = 400, description = "invalid_argument", body = ErrorEnvelope),
        (status = 403, description = "permission_denied (operator role required)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
        (status = 409, description = "conflict: a job of this source is running, or the destination is the source", body = ErrorEnvelope),
    )
)]
pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<RedriveRequest>,
) -> Result<(StatusCode, Json<RedriveView>), ApiError> {
    let spec = req.to_core()?;
    caller.allow_also(&spec.source)?;
    match (&spec.destination, &spec.filter.source_queue) {
        (Some(d), _) => caller.allow_also(d)?,
        // Each message goes back to its own source queue: only to the one the filter names.
        (None, Some(s)) => caller.allow_also(s)?,
        (None, None) if !caller.covers_all() => {
            return Err(ApiError::forbidden(
                "a redrive without destination moves each message back to its own source \
                 queue, and this key does not cover every queue; give a destination, or a \
                 filter.source_queue the key covers",
            ));
        }
        (None, None) => {}
    }
    let job = st.store.create_redrive(spec).await?;
    let details = [
        ("job", job.id.to_string()),
        (
            "limit",
            job.spec.limit.map_or("none".into(), |l| l.to_string()),
        ),
        (
            "rate",
            crate::jobs::redrive::rate_text(job.spec.rate.as_ref()),
        ),
        (
            "pause_if_failing",
            job.spec.guard.as_ref().map_or("none".into(), |g| {
                format!(
                    "more than {}% of {} outcomes{}",
                    g.percent,
                    g.window,
                    g.error_contains
                        .as_deref()
                        .map_or(String::new(), |e| format!(
                            " with errors containing \"{e}\""
                        ))
                )
            }),
        ),
        (
            "filter",
            serde_json::to_string(&sluice_wire::RedriveFilterView::from(&job.spec.filter))
                .unwrap_or_default(),
        ),
        ("dry_run", job.spec.dry_run.to_string()),
    ];
    st.audit(
        &caller,
        "redrive.create",
        Some(&job.spec.source),
        None,
        &details,
    )
    .await;
    Ok((StatusCode::ACCEPTED, Json(view(&st, &job).await?)))
}

/// Lists running jobs and the most recent finished ones, newest first.
#[utoipa::path(
    get, path = "/v1/redrives", tag = "redrives",
    responses((status = 200, description = "The jobs", body = RedriveList))
)]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<RedriveList>, ApiError> {
    let jobs = st.store.list_redrives().await?;
    let mut redrives = Vec::new();
    for job in jobs
        .iter()
        .filter(|j| j.spec.queues().all(|q| caller.sees(q.as_str())))
    {
        redrives.push(view(&st, job).await?);
    }
    Ok(Json(RedriveList { redrives }))
}

/// One job and its progress.
#[utoipa::path(
    get, path = "/v1/redrives/{id}", tag = "redrives",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job", body = RedriveView),
        (status = 404, description = "message_not_found (no such job)", body = ErrorEnvelope),
    )
)]
pub async fn get(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RedriveView>, ApiError> {
    let job = st.store.get_redrive(job_id(&id)?).await?;
    allow_job(&caller, &job)?;
    Ok(Json(view(&st, &job).await?))
}

/// A key reaches a job when it covers every queue the job names
/// ([`sluice_core::RedriveSpec::queues`]); a job naming another is
/// answered as one that does not exist, so that it reveals no queue outside the key's
/// patterns.
fn allow_job(caller: &Caller, job: &RedriveJob) -> Result<(), ApiError> {
    for q in job.spec.queues() {
        caller.allow_found(q, || {
            sluice_core::StoreError::RedriveNotFound(job.id.to_string()).into()
        })?;
    }
    Ok(())
}

/// Cancels a running or paused job; moves already made stay. A finished job is returned as
/// it is.
#[utoipa::path(
    post, path = "/v1/redrives/{id}/cancel", tag = "redrives",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job after the cancel", body = RedriveView),
        (status = 400, description = "invalid_argument (not a job id)", body = ErrorEnvelope),
        (status = 404, description = "message_not_found (no such job)", body = ErrorEnvelope),
    )
)]
pub async fn cancel(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RedriveView>, ApiError> {
    control(&st, &caller, &id, RedriveControl::Cancel).await
}

/// Pauses a running job until it is resumed; it keeps its source meanwhile. Pausing a paused
/// job changes nothing.
#[utoipa::path(
    post, path = "/v1/redrives/{id}/pause", tag = "redrives",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job after the pause", body = RedriveView),
        (status = 400, description = "invalid_argument (not a job id)", body = ErrorEnvelope),
        (status = 404, description = "message_not_found (no such job)", body = ErrorEnvelope),
        (status = 409, description = "conflict: the job has finished", body = ErrorEnvelope),
    )
)]
pub async fn pause(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RedriveView>, ApiError> {
    let reason = format!("paused by {}", caller.name().unwrap_or("anonymous"));
    control(&st, &caller, &id, RedriveControl::Pause { reason }).await
}

/// Resumes a paused job (one its guard paused, or an operator). Resuming a running job changes
/// nothing.
#[utoipa::path(
    post, path = "/v1/redrives/{id}/resume", tag = "redrives",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job after the resume", body = RedriveView),
        (status = 400, description = "invalid_argument (not a job id)", body = ErrorEnvelope),
        (status = 404, description = "message_not_found (no such job)", body = ErrorEnvelope),
        (status = 409, description = "conflict: the job has finished", body = ErrorEnvelope),
    )
)]
pub async fn resume(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RedriveView>, ApiError> {
    control(&st, &caller, &id, RedriveControl::Resume).await
}

async fn control(
    st: &AppState,
    caller: &Caller,
    id: &str,
    control: RedriveControl,
) -> Result<Json<RedriveView>, ApiError> {
    let id = job_id(id)?;
    let before = st.store.get_redrive(id).await?;
    allow_job(caller, &before)?;
    let job = st.store.control_redrive(id, control.clone()).await?;
    if job != before {
        let mut details = vec![
            ("job", job.id.to_string()),
            ("moved", job.moved.to_string()),
        ];
        if let RedriveControl::Pause { reason } = &control {
            details.push(("reason", reason.clone()));
        }
        st.audit(
            caller,
            &format!("redrive.{}", control.as_str()),
            Some(&job.spec.source),
            None,
            &details,
        )
        .await;
    }
    Ok(Json(view(st, &job).await?))
}
