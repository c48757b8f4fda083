//! What a dashboard needs in one call: every queue's stats, and what the caller may do.

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use futures::StreamExt as _;
use serde::Serialize;
use sluice_core::trend::{LOOKBACK, Trend};
use sluice_core::{Clock, QueueInfo, SystemClock, Timestamp};
use sluice_wire::{ErrorEnvelope, StatsView};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::{Action, Caller};
use crate::error::ApiError;

/// Queues whose stats are read at once: enough to hide a database's round trips, few enough
/// that a dashboard never crowds out the work.
const CONCURRENT_READS: usize = 8;

/// One queue in the overview.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OverviewRow {
    /// The queue's stats, as `GET /v1/queues/{q}/stats` answers them.
    #[serde(flatten)]
    pub stats: StatsView,
    /// Where its dead letters go, if anywhere.
    pub dead_letter_queue: Option<String>,
    /// Whether deliveries are paused.
    pub paused: bool,
    /// Whether it is some queue's dead-letter queue.
    pub is_dead_letter_queue: bool,
}

/// `GET /v1/stats`: every queue the caller may see, by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Overview {
    /// The queues.
    pub queues: Vec<OverviewRow>,
}

/// Every queue's stats with its rates and trends, for a dashboard: one call instead of one
/// per queue. A queue deleted while the answer is put together is left out.
#[utoipa::path(
    get, path = "/v1/stats", tag = "inspect",
    responses(
        (status = 200, description = "Every queue the caller may see, by name", body = Overview),
        (status = 403, description = "permission_denied", body = ErrorEnvelope),
    )
)]
pub async fn overview(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<Overview>, ApiError> {
    caller.allow_role(Action::Stats)?;
    let mut queues = st.store.list_queues().await?;
    queues.retain(|q| caller.sees(q.name.as_str()));
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let dlqs: HashSet<String> = queues
        .iter()
        .filter_map(|q| q.config.dead_letter_queue.as_ref().map(ToString::to_string))
        .collect();
    let now = SystemClock.now();
    let since = Timestamp(now.as_millis() - LOOKBACK.as_millis() as i64);
    let rows: Vec<Option<OverviewRow>> = futures::stream::iter(queues)
        .map(|info| {
            let st = &st;
            let dlqs = &dlqs;
            async move { row(st, info, dlqs, now, since).await }
        })
        .buffered(CONCURRENT_READS)
        .collect()
        .await;
    Ok(Json(Overview {
        queues: rows.into_iter().flatten().collect(),
    }))
}

async fn row(
    st: &AppState,
    info: QueueInfo,
    dlqs: &HashSet<String>,
    now: Timestamp,
    since: Timestamp,
) -> Option<OverviewRow> {
    let q = &info.name;
    let stats = st.store.stats(q).await.ok()?;
    let history = st.store.stats_history(q, since).await.ok()?;
    let trend = Trend::compute(&stats, info.created_at, now, &history);
    Some(OverviewRow {
        stats: StatsView::with_trend(q, &stats, &trend),
        dead_letter_queue: info
            .config
            .dead_letter_queue
            .as_ref()
            .map(ToString::to_string),
        paused: info.config.paused,
        is_dead_letter_queue: dlqs.contains(q.as_str()),
    })
}

/// `GET /v1/whoami`: the caller's key and what it may do.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WhoAmI {
    /// Whether the broker checks API keys at all.
    pub auth: bool,
    /// The key's name (`null` without authentication).
    pub name: Option<String>,
    /// The key's role; `admin` without authentication.
    pub role: String,
    /// The queue patterns the key covers (`["*"]` without authentication).
    pub queues: Vec<String>,
    /// What the role allows: any of `manage_queues`, `read_queues`, `send`, `consume`,
    /// `inspect`, `stats`, `read_tasks`, `cancel_tasks`, `redrive`.
    pub may: Vec<String>,
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
