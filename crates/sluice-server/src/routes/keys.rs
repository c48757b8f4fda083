//! What each key of a queue holds (the keys listing), and an operator's order to one key's
//! breaker.

use axum::Json;
use axum::extract::State;
use sluice_core::{Clock, SystemClock};
use sluice_wire::{BreakerRequest, ErrorEnvelope, KeyFlowView, KeysQuery, KeysResponse};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, JsonBody, QueueKeyPath, QueuePath};

/// Each key of a queue with messages waiting or in flight — backlog, in flight, oldest
/// visible age, deliveries in the last minute, weight and limit — a page at a time, most
/// waiting (or in flight, or oldest) first. Reads every message of the queue.
#[utoipa::path(
    get, path = "/v1/queues/{q}/keys", tag = "inspect",
    params(("q" = String, Path, description = "Queue name"), KeysQuery),
    responses(
        (status = 200, description = "One page", body = KeysResponse),
        (status = 400, description = "invalid_argument (order, limit or cursor)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn keys(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(query): ApiQuery<KeysQuery>,
) -> Result<Json<KeysResponse>, ApiError> {
    // A queue that does not exist is named first, whatever the query (as a browse does).
    let info = st.store.get_queue(&q).await?;
    let req = query.to_core()?;
    let page = st.store.keys(&q, req).await?;
    Ok(Json(KeysResponse::new(
        &page,
        &info.config,
        SystemClock.now(),
    )))
}

/// Forces the breaker of one key of a queue whose breaker is per key (`"scope": "key"`) open
/// (that key's deliveries stop until forced closed; other keys go on) or closed (they resume;
/// the key's breaker judges again from an empty window). Answers the key's rate and breaker.
/// Messages sent without a key share the implicit key, which cannot be named here.
#[utoipa::path(
    post, path = "/v1/queues/{q}/keys/{key}/breaker", tag = "queues",
    params(
        ("q" = String, Path, description = "Queue name"),
        ("key" = String, Path, description = "Message key"),
    ),
    request_body(content = BreakerRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The key's rate and breaker afterwards", body = KeyFlowView),
        (status = 400, description = "invalid_argument (key)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
        (status = 409, description = "conflict: the queue has no per-key breaker", body = ErrorEnvelope),
    )
)]
pub async fn force_key_breaker(
    State(st): State<AppState>,
    caller: Caller,
    QueueKeyPath(q, key): QueueKeyPath,
    JsonBody(req): JsonBody<BreakerRequest>,
) -> Result<Json<KeyFlowView>, ApiError> {
    let out = st
        .store
        .force_key_breaker(&q, Some(&key), req.state)
        .await?;
    let to = match req.state {
        sluice_core::adaptive::BreakerForce::Open => "open",
        sluice_core::adaptive::BreakerForce::Closed => "closed",
    };
    st.audit(
        &caller,
        "key.breaker.force",
        Some(&q),
        None,
        &[("state", to.to_owned()), ("key", key.to_string())],
    )
    .await;
    Ok(Json(KeyFlowView::from(&out)))
}
