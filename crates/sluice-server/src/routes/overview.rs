//! What a dashboard needs in one call: a page of queues with their stats, and what the caller
//! may do.

use axum::Json;
use axum::extract::State;
use sluice_core::{Clock, SystemClock};
use sluice_wire::{ErrorEnvelope, Overview, OverviewRow, QueueListQuery, StatsView, WhoAmI};

use crate::AppState;
use crate::auth::{Action, Caller};
use crate::http::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::routes::queues::covered_page;

/// Queues' stats with their rates and trends, for a dashboard: one call per page instead of
/// one per queue. Paged like `GET /v1/queues` (`prefix`, `limit` 1 – 1000 default 1000,
/// `cursor`); a queue deleted while the answer is put together is left out.
#[utoipa::path(
    get, path = "/v1/stats", tag = "inspect",
    params(QueueListQuery),
    responses(
        (status = 200, description = "One page of the queues the caller may see, by name", body = Overview),
        (status = 400, description = "invalid_argument (prefix, limit or cursor)", body = ErrorEnvelope),
        (status = 403, description = "permission_denied", body = ErrorEnvelope),
    )
)]
pub async fn overview(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<QueueListQuery>,
) -> Result<Json<Overview>, ApiError> {
    let (queues, next_cursor) = covered_page(&st, &caller, query.to_core()?).await?;
    let readings =
        sluice_core::reading::read_many(st.store.as_ref(), queues, SystemClock.now()).await?;
    let rows = readings
        .into_iter()
        .flatten()
        .map(|r| OverviewRow {
            stats: StatsView::with_trend(&r.info.name, &r.stats, &r.trend),
            dead_letter_queue: r
                .info
                .config
                .dead_letter_queue
                .as_ref()
                .map(ToString::to_string),
            paused: r.info.config.paused,
            is_dead_letter_queue: r.is_dead_letter_queue,
        })
        .collect();
    Ok(Json(Overview {
        queues: rows,
        next_cursor,
    }))
}

/// Who the caller is, so a client can offer only what the key may do (the broker checks
/// every call anyway).
#[utoipa::path(
    get, path = "/v1/whoami", tag = "health",
    responses(
        (status = 200, description = "The caller's key and role", body = WhoAmI),
        (status = 401, description = "unauthenticated", body = ErrorEnvelope),
    )
)]
pub async fn whoami(State(st): State<AppState>, caller: Caller) -> Json<WhoAmI> {
    let actions = [
        (Action::ManageQueue, "manage_queues"),
        (Action::ReadQueue, "read_queues"),
        (Action::Send, "send"),
        (Action::Consume, "consume"),
        (Action::Inspect, "inspect"),
        (Action::Stats, "stats"),
        (Action::ReadTask, "read_tasks"),
        (Action::CancelTask, "cancel_tasks"),
        (Action::Redrive, "redrive"),
    ];
    Json(WhoAmI {
        auth: st.keys.enabled(),
        name: caller.name().map(str::to_owned),
        role: caller.role().map_or("admin", |r| r.as_str()).to_owned(),
        queues: caller.patterns(),
        may: actions
            .iter()
            .filter(|(a, _)| caller.allow_role(*a).is_ok())
            .map(|(_, n)| (*n).to_owned())
            .collect(),
    })
}
