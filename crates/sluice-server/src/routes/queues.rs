//! Queue configuration and administration: `PUT/GET/DELETE /v1/queues/{q}`, `GET /v1/queues`,
//! `POST /v1/queues/{q}/pause|resume|purge`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_core::QueueConfigPatch;
use sluice_wire::{
    BreakerRequest, ErrorEnvelope, FlowView, PurgeResponse, QueueConfigRequest, QueueList,
    QueueListQuery, QueueView,
};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, CreateOnly, JsonBody, OptionalJsonBody, QueuePath};

/// Creates or updates a queue (idempotent). Unset fields keep their value (or the default).
/// With `If-None-Match: *` it only creates: an existing queue is answered 409 `conflict` and
/// left unchanged, decided atomically in the store.
#[utoipa::path(
    put, path = "/v1/queues/{q}", tag = "queues",
    params(
        ("q" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_.-], in dot-separated parts for a new queue (no leading, trailing or double dots)"),
        ("If-None-Match" = Option<String>, Header,
            description = "`*`: create only; 409 `conflict` when the queue exists"),
    ),
    request_body(content = QueueConfigRequest, content_type = "application/json",
        description = "Fields to set; an empty body creates the queue with the defaults"),
    responses(
        (status = 201, description = "Created", body = QueueView),
        (status = 200, description = "Updated", body = QueueView),
        (status = 400, description = "A field is out of range", body = ErrorEnvelope),
        (status = 401, description = "No or unknown key", body = ErrorEnvelope),
        (status = 403, description = "The key may not manage this queue", body = ErrorEnvelope),
        (status = 409, description = "conflict: If-None-Match: * and the queue exists, the queue as its own DLQ, or no DLQ while the queue's max_receive_count is not 0", body = ErrorEnvelope),
    )
)]
pub async fn put_queue(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
    CreateOnly(create_only): CreateOnly,
    OptionalJsonBody(req): OptionalJsonBody<QueueConfigRequest>,
) -> Result<(StatusCode, Json<QueueView>), ApiError> {
    let patch = req.to_patch()?;
    if let Some(Some(dlq)) = &patch.dead_letter_queue {
        caller.allow_also(dlq)?;
    }
    // A new queue's default dead-letter queue (`<name>.dlq`) is created with it: a key whose
    // patterns do not cover it must name one they do (or none, with max_receive_count 0).
    if patch.dead_letter_queue.is_none() && !caller.covers_all() {
        let new = match st.store.get_queue(&q).await {
            Ok(_) => false,
            Err(sluice_core::StoreError::QueueNotFound(_)) => true,
            Err(e) => return Err(e.into()),
        };
        let implicit = sluice_core::QueueConfig::defaults_for(&q)
            .apply(&q, &patch)?
            .dead_letter_queue;
        if let Some(dlq) = implicit.filter(|_| new) {
            caller.allow_also(&dlq)?;
        }
    }
    // The target's other fields are checked by the store once a URL written back as views
    // show it (query values redacted) is resolved to the real one.
    if let Some(Some(push)) = &patch.push {
        st.push.check_target(&push.target).await?;
    }
    let out = if create_only {
        st.store.create_queue(&q, &patch).await?
    } else {
        st.store.put_queue(&q, &patch).await?
    };
    let action = if out.created {
        "queue.create"
    } else {
        "queue.update"
    };
    // The change as the caller wrote it: the fields of the request, as JSON, without the
    // push target's secret, header values and URL query.
    let mut shown = req.clone();
    if let Some(Some(p)) = &mut shown.push {
        let redacted = sluice_core::push::REDACTED;
        if let Some(Some(secret)) = &mut p.secret {
            *secret = redacted.to_owned();
        }
        for v in p.headers.iter_mut().flat_map(|h| h.values_mut()) {
            *v = redacted.to_owned();
        }
        p.url = sluice_core::PushTarget::new(p.url.clone()).shown_url();
    }
    let change = serde_json::to_string(&shown).unwrap_or_default();
    st.audit(&caller, action, Some(&q), None, &[("change", change)])
        .await;
    let mut view = QueueView::from(&out.queue);
    view.warnings = out.warnings;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// One queue's configuration.
#[utoipa::path(
    get, path = "/v1/queues/{q}", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The queue", body = QueueView),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn get_queue(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<QueueView>, ApiError> {
    let info = st.store.get_queue(&q).await?;
    Ok(Json(QueueView::from(&info)))
}

/// Queues a listing examines at most for one answer when the caller's key covers only some
/// of them: a page stays cheap however few of the queues the key sees.
const LIST_SCAN_LIMIT: usize = 10_000;

/// One page of the queues the caller's key covers, by name.
///
/// Queues in bytewise name order: only names starting with `prefix`, at most `limit`
/// (1 – 1000, default 1000), after `cursor`. `next_cursor` is set while more queues remain:
/// pass it as `cursor` for the next page until it is `null`; it is opaque. Paging is by
/// name, so a queue that exists for the whole walk appears exactly once, and one created or
/// deleted meanwhile at most once. A key that covers only some queues may get fewer than
/// `limit` (even none) with a `next_cursor`: keep following it.
#[utoipa::path(
    get, path = "/v1/queues", tag = "queues",
    params(QueueListQuery),
    responses(
        (status = 200, description = "One page of queues", body = QueueList),
        (status = 400, description = "invalid_argument (prefix, limit or cursor)", body = ErrorEnvelope),
        (status = 401, description = "No or unknown key", body = ErrorEnvelope),
    )
)]
pub async fn list_queues(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<QueueListQuery>,
) -> Result<Json<QueueList>, ApiError> {
    let (queues, next_cursor) = covered_page(&st, &caller, query.to_core()?).await?;
    Ok(Json(QueueList {
        queues: queues.iter().map(QueueView::from).collect(),
        next_cursor,
    }))
}

/// One page of the queues the caller's key covers, and the cursor after it: a key covering
/// only some queues reads on until the page is full, the listing ends or a bounded number of
/// queues was examined. Each store page asks only for as many as are still wanted, so every
/// queue examined is answered or not covered, and the cursor of the last store page
/// continues exactly after it.
pub(crate) async fn covered_page(
    st: &AppState,
    caller: &Caller,
    req: sluice_core::QueuePageRequest,
) -> Result<(Vec<sluice_core::QueueInfo>, Option<String>), ApiError> {
    let want = req.limit as usize;
    let mut found = Vec::new();
    let mut cursor = req.cursor.clone();
    let mut examined = 0usize;
    loop {
        let page = st
            .store
            .list_queues_page(sluice_core::QueuePageRequest {
                limit: u32::try_from(want - found.len()).unwrap_or(1).max(1),
                cursor: cursor.clone(),
                ..req.clone()
            })
            .await?;
        examined += page.queues.len();
        found.extend(
            page.queues
                .into_iter()
                .filter(|q| caller.sees(q.name.as_str())),
        );
        cursor = page.next_cursor;
        if found.len() >= want || cursor.is_none() || examined >= LIST_SCAN_LIMIT {
            break;
        }
    }
    Ok((found, cursor))
}

/// Deletes a queue and every message in it.
#[utoipa::path(
    delete, path = "/v1/queues/{q}", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
        (status = 409, description = "It is another queue's dead-letter queue", body = ErrorEnvelope),
    )
)]
pub async fn delete_queue(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<StatusCode, ApiError> {
    let dropped = st.store.delete_queue(&q).await?;
    st.audit(
        &caller,
        "queue.delete",
        Some(&q),
        None,
        &[("dropped", dropped.to_string())],
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    st: &AppState,
    q: &sluice_core::QueueName,
    paused: bool,
) -> Result<Json<QueueView>, ApiError> {
    // `put_queue` creates missing queues; pausing one that does not exist is a 404.
    st.store.get_queue(q).await?;
    let patch = QueueConfigPatch {
        paused: Some(paused),
        ..Default::default()
    };
    let out = st.store.put_queue(q, &patch).await?;
    Ok(Json(QueueView::from(&out.queue)))
}

/// Pauses deliveries (sends are still accepted).
#[utoipa::path(
    post, path = "/v1/queues/{q}/pause", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "Paused", body = QueueView),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn pause_queue(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<QueueView>, ApiError> {
    let out = set_paused(&st, &q, true).await?;
    st.audit(&caller, "queue.pause", Some(&q), None, &[]).await;
    Ok(out)
}

/// Forces a queue's circuit breaker open (deliveries stop until forced closed) or closed
/// (deliveries resume; the breaker judges again from an empty window). Answers the queue's
/// adaptive rate and breaker, as `flow` in its stats.
#[utoipa::path(
    post, path = "/v1/queues/{q}/breaker", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = BreakerRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The queue's adaptive rate and breaker afterwards", body = FlowView),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
        (status = 409, description = "conflict: the queue has no breaker", body = ErrorEnvelope),
    )
)]
pub async fn force_breaker(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<BreakerRequest>,
) -> Result<Json<FlowView>, ApiError> {
    let out = st.store.force_breaker(&q, req.state).await?;
    let to = match req.state {
        sluice_core::adaptive::BreakerForce::Open => "open",
        sluice_core::adaptive::BreakerForce::Closed => "closed",
    };
    st.audit(
        &caller,
        "queue.breaker.force",
        Some(&q),
        None,
        &[("state", to.to_owned())],
    )
    .await;
    Ok(Json(FlowView::from(&out)))
}

/// Resumes deliveries.
#[utoipa::path(
    post, path = "/v1/queues/{q}/resume", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "Resumed", body = QueueView),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn resume_queue(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<QueueView>, ApiError> {
    let out = set_paused(&st, &q, false).await?;
    st.audit(&caller, "queue.resume", Some(&q), None, &[]).await;
    Ok(out)
}

/// Removes every message of the queue (not its completed records).
#[utoipa::path(
    post, path = "/v1/queues/{q}/purge", tag = "queues",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "Purged", body = PurgeResponse),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn purge_queue(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<PurgeResponse>, ApiError> {
    let purged = st.store.purge(&q).await?;
    st.audit(
        &caller,
        "queue.purge",
        Some(&q),
        None,
        &[("purged", purged.to_string())],
    )
    .await;
    Ok(Json(PurgeResponse { purged }))
}
