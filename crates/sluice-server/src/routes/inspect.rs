//! Looking without leasing: browse, get and delete one message, stats.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_core::stats::{SAMPLE_INTERVAL, StatsSample};
use sluice_core::{Clock, SystemClock, Timestamp};
use sluice_wire::{
    BrowseQuery, BrowseResponse, ErrorEnvelope, HistoryQuery, HistoryView, MessageView, SampleView,
    StatsView,
};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, MessagePath, QueuePath};

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
    _caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(query): ApiQuery<BrowseQuery>,
) -> Result<Json<BrowseResponse>, ApiError> {
    let req = query.to_core()?;
    let Some(filter) = query.filter()? else {
        let page = st.store.browse(&q, req).await?;
        return Ok(Json(BrowseResponse::from(&page)));
    };
    // Filtered: walk pages until the page is full, the queue ends, or a bounded number of
    // messages was examined. Each store page asks only for as many as are still wanted, so
    // every message examined is either answered or does not match, and the cursor of the last
    // page continues exactly after it.
    let want = req.limit as usize;
    let mut found = Vec::new();
    let mut cursor = req.cursor.clone();
    let mut examined = 0usize;
    loop {
        let page = st
            .store
            .browse(
                &q,
                sluice_core::BrowseRequest {
                    cursor: cursor.clone(),
                    limit: u32::try_from(want - found.len()).unwrap_or(1).max(1),
                    ..req.clone()
                },
            )
            .await?;
        examined += page.messages.len();
        found.extend(page.messages.into_iter().filter(|m| filter.matches(m)));
        cursor = page.next_cursor;
        if found.len() >= want || cursor.is_none() || examined >= FILTER_SCAN_LIMIT {
            break;
        }
    }
    Ok(Json(BrowseResponse::from(&sluice_core::BrowsePage {
        messages: found,
        next_cursor: cursor,
    })))
}

async fn find(
    st: &AppState,
    caller: &Caller,
    id: sluice_core::MessageId,
) -> Result<sluice_core::Message, ApiError> {
    let m = st.store.get_message(id).await?;
    caller.allow_found(&m.queue, || {
        sluice_core::StoreError::MessageNotFound(id).into()
    })?;
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
    let m = find(&st, &caller, id).await?;
    st.store.delete_message(id).await?;
    st.audit(
        &caller,
        "message.delete",
        Some(&m.queue),
        Some(id.to_string()),
        &[],
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Gauges, totals, rates over 1, 5 and 15 minutes, and the trends of the backlog and the DLQ.
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
    _caller: Caller,
    QueuePath(q): QueuePath,
) -> Result<Json<StatsView>, ApiError> {
    let r = sluice_core::reading::read(st.store.as_ref(), &q, SystemClock.now()).await?;
    Ok(Json(StatsView::with_trend(&q, &r.stats, &r.trend)))
}

/// Most messages one filtered browse examines; the answer's cursor continues from there, so a
/// page may hold fewer matches than asked while more may follow.
const FILTER_SCAN_LIMIT: usize = 10_000;

/// A queue's history: a point every 10 s, kept for 24 h.
#[utoipa::path(
    get, path = "/v1/queues/{q}/stats/history", tag = "inspect",
    params(("q" = String, Path, description = "Queue name"), HistoryQuery),
    responses(
        (status = 200, description = "The points, oldest first", body = HistoryView),
        (status = 400, description = "invalid_argument (since)", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn history(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryView>, ApiError> {
    let since = match &query.since {
        Some(s) => sluice_core::human::parse_time("since", s, SystemClock.now())?,
        None => Timestamp(SystemClock.now().as_millis() - 3_600_000),
    };
    // The store leaves out points that repeat the one before: put one back at every slot.
    let now = SystemClock.now();
    let kept = st.store.stats_history(&q, since).await?;
    let samples = StatsSample::fill(
        &kept,
        since,
        StatsSample::slot(Timestamp(
            now.as_millis() - SAMPLE_INTERVAL.as_millis() as i64,
        )),
    );
    Ok(Json(HistoryView {
        queue: q.to_string(),
        interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
        samples: samples.iter().map(SampleView::from).collect(),
    }))
}
