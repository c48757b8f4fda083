//! What each key of a queue holds: the keys listing.

use axum::Json;
use axum::extract::State;
use sluice_core::{Clock, SystemClock};
use sluice_wire::{ErrorEnvelope, KeysQuery, KeysResponse};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, QueuePath};

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
