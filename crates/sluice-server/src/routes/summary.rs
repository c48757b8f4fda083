//! `GET /v1/queues/{q}/summary`: every message of a queue (typically a DLQ) counted by its
//! last error, dead-letter reason, source queue or one attribute, largest groups first.

use axum::Json;
use axum::extract::{RawQuery, State};
use sluice_wire::{ErrorEnvelope, SummaryQuery, SummaryView};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::QueuePath;

/// Counts every message of a queue by one key. Unlike a browse, which pages, this counts the
/// whole queue however large, and answers at most `limit` groups (the largest).
#[utoipa::path(
    get, path = "/v1/queues/{q}/summary", tag = "inspect",
    params(("q" = String, Path, description = "Queue name"), SummaryQuery),
    responses(
        (status = 200, description = "The groups", body = SummaryView),
        (status = 400, description = "invalid_argument (group_by, limit, attribute or time)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn summary(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    RawQuery(query): RawQuery,
) -> Result<Json<SummaryView>, ApiError> {
    // Read as pairs, empty values included: the query decides which of its values may be
    // empty (a text filter) and which may not (`limit`).
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let req = SummaryQuery::from_pairs(&pairs)?.to_core()?;
    let group_by = req.group_by.clone();
    let s = st.store.summarize(&q, req).await?;
    Ok(Json(SummaryView::new(&q, &group_by, &s)))
}
