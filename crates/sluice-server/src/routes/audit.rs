//! `GET /v1/audit` (SPEC §7): read the audit log. Operator role.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use sluice_core::wire::{ErrorEnvelope, rfc3339};
use sluice_core::{AuditQuery, Clock, QueueName, SystemClock};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::auth::{Action, Caller};
use crate::error::ApiError;
use crate::extract::ApiQuery;

/// Query of `GET /v1/audit`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Only this queue's entries.
    pub queue: Option<String>,
    /// Only entries at or after this time: RFC 3339 (`2026-01-01T10:00:00Z`), or how long ago
    /// (`10m`, `1h`, `90s`, `2d`).
    pub since: Option<String>,
    /// At most this many, the newest (default 100, at most 10000).
    #[param(default = 100, minimum = 1, maximum = 10_000)]
    pub limit: Option<usize>,
}

/// One audit entry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryView {
    /// When (RFC 3339).
    pub at: String,
    /// Who: an API key's name, `anonymous`, or `sluice` for the broker itself.
    pub actor: String,
    /// What, e.g. `queue.purge`, `redrive.create`, `message.dead_lettered`.
    pub action: String,
    /// The queue concerned.
    pub queue: Option<String>,
    /// The message concerned.
    pub message_id: Option<String>,
    /// Further keys.
    pub details: BTreeMap<String, String>,
    /// `ok`, or what went wrong.
    pub outcome: String,
}

/// `GET /v1/audit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    /// The entries, oldest first.
    pub entries: Vec<AuditEntryView>,
}

/// The newest audit entries, optionally of one queue and since a time.
#[utoipa::path(
    get, path = "/v1/audit", tag = "redrives",
    params(AuditParams),
    responses(
        (status = 200, description = "The entries, oldest first", body = AuditList),
        (status = 400, description = "invalid_argument", body = ErrorEnvelope),
    )
)]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<AuditParams>,
) -> Result<Json<AuditList>, ApiError> {
    caller.allow_role(Action::Inspect)?;
    if let Some(q) = &p.queue {
        caller.allow(Action::Inspect, &QueueName::new(q.clone())?)?;
    }
    let query = AuditQuery {
        queue: p.queue,
        since: p
            .since
            .as_deref()
            .map(|s| sluice_core::human::parse_time("since", s, SystemClock.now()))
            .transpose()?,
        limit: p.limit.unwrap_or(100).clamp(1, 10_000),
    };
    let entries = st.store.audit_query(query).await?;
    Ok(Json(AuditList {
        entries: entries
            .into_iter()
            .filter(|e| e.queue.as_deref().is_none_or(|q| caller.sees(q)))
            .map(|e| AuditEntryView {
                at: rfc3339(e.at),
                actor: e.actor,
                action: e.action,
                queue: e.queue,
                message_id: e.message_id,
                details: e.details,
                outcome: e.outcome,
            })
            .collect(),
    }))
}
