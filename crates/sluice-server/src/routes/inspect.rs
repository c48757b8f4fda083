//! Looking without leasing: browse, get and delete one message, stats.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_core::wire::{BrowseQuery, BrowseResponse, ErrorEnvelope, MessageView, StatsView};

use crate::AppState;
use crate::auth::{Action, Caller};
use crate::error::ApiError;
use crate::extract::{ApiQuery, MessagePath, QueuePath};

/// Lists a queue's messages (any queue, DLQs included) by state, a page at a time.
#[utoipa::path(
    get, path = "/v1/queues/{q}/messages", tag = "inspect",
    params(("q" = String, Path, description = "Queue name"), BrowseQuery),
    responses(
        (status = 200, description = "One page", body = BrowseResponse),
        (status = 400, description = "invalid_argument (state, limit or cursor)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn browse(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(query): ApiQuery<BrowseQuery>,
) -> Result<Json<BrowseResponse>, ApiError> {
    caller.allow(Action::Inspect, &q)?;
    let page = st.store.browse(&q, query.to_core()?).await?;
    Ok(Json(BrowseResponse::from(&page)))
}

async fn find(
    st: &AppState,
    caller: &Caller,
    id: sluice_core::MessageId,
) -> Result<sluice_core::Message, ApiError> {
    caller.allow_role(Action::Inspect)?;
    let m = st.store.get_message(id).await?;
    caller.allow(Action::Inspect, &m.queue)?;
    Ok(m)
}

/// One message wherever it is, including completed records still kept (with their result).
#[utoipa::path(
    get, path = "/v1/messages/{id}", tag = "inspect",
    params(("id" = String, Path, description = "Message id (16 hex digits)")),
    responses(
        (status = 200, description = "The message", body = MessageView),
        (status = 404, description = "message_not_found", body = ErrorEnvelope),
    )
)]
pub async fn get_message(
    State(st): State<AppState>,
    caller: Caller,
    MessagePath(id): MessagePath,
) -> Result<Json<MessageView>, ApiError> {
    let m = find(&st, &caller, id).await?;
    Ok(Json(MessageView::from(&m)))
}

/// Removes one message (or completed record), whatever its state.
#[utoipa::path(
    delete, path = "/v1/messages/{id}", tag = "inspect",
    params(("id" = String, Path, description = "Message id (16 hex digits)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "message_not_found", body = ErrorEnvelope),
    )
)]
pub async fn delete_message(
    State(st): State<AppState>,
    caller: Caller,
    MessagePath(id): MessagePath,
) -> Result<StatusCode, ApiError> {
    find(&st, &caller, id).await?;
    st.store.delete_message(id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Gauges and totals of one queue.
#[utoipa::path(
    get, path = "/v1/queues/{q}/stats", tag = "inspect",
    params(("q" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The stats", body = StatsView),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn stats(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<StatsView>, ApiError> {
    caller.allow(Action::Stats, &q)?;
    let s = st.store.stats(&q).await?;
    Ok(Json(StatsView::new(&q, &s)))
}
