//! `GET /healthz` (the process answers), `GET /readyz` (the store answers) and
//! `GET /openapi.json` (none needs a key), and `GET /metrics` (a key with the stats role when
//! keys are configured).

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use sluice_core::StoreError;
use sluice_wire::{ErrorEnvelope, HealthResponse};

use crate::AppState;
use crate::http::error::ApiError;

/// Liveness: the process is up.
#[utoipa::path(
    get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "Alive", body = HealthResponse))
)]
pub async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".to_owned(),
    })
}

/// Readiness: the store answers a read and takes writes (a store that refuses new messages,
/// e.g. on an almost full disk, is not ready: a load balancer sends producers elsewhere).
#[utoipa::path(
    get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Ready", body = HealthResponse),
        (status = 503, description = "unavailable (with Retry-After): the message says why", body = ErrorEnvelope),
    )
)]
pub async fn readyz(State(st): State<AppState>) -> Result<Json<HealthResponse>, ApiError> {
    let probe = async {
        // One queue's worth of a read: a probe must cost the same with 100,000 queues as
        // with one.
        st.store
            .list_queues_page(sluice_core::store::QueuePageRequest {
                limit: 1,
                ..Default::default()
            })
            .await?;
        st.store.writable().await
    };
    match tokio::time::timeout(READY_WITHIN, probe).await {
        Ok(Ok(())) => Ok(Json(HealthResponse {
            status: "ready".to_owned(),
        })),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(StoreError::unavailable(format!(
            "the store did not answer a read and a commit within {}: it is unreachable or \
             cannot commit",
            sluice_core::human::fmt_duration(READY_WITHIN)
        ))
        .into()),
    }
}

/// How long readiness waits for the store: shorter than the usual probe timeouts of load
/// balancers and orchestrators, so that a store that hangs reads as "not ready" with a reason
/// rather than as a probe that timed out.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn openapi_json(State(st): State<AppState>) -> Json<&'static serde_json::Value> {
    Json(crate::openapi::openapi_for(st.keys.enabled()))
}

/// Every queue's gauges and event counters, and this node's queue-wait and processing-time
/// histograms, in the Prometheus text format.
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition (OpenMetrics 1.0)", content_type = "application/openmetrics-text"))
)]
pub async fn metrics(
    State(st): State<AppState>,
    caller: crate::auth::Caller,
) -> Result<axum::response::Response, crate::http::error::ApiError> {
    let text = st.metrics.render_for(st.store.as_ref(), &caller).await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
