//! `GET /healthz` (the process answers), `GET /readyz` (the store answers) and
//! `GET /openapi.json`. None needs a key.

use axum::Json;
use axum::extract::State;
use sluice_core::wire::{ErrorEnvelope, HealthResponse};

use crate::AppState;
use crate::error::ApiError;

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

/// Readiness: the store answers a read.
#[utoipa::path(
    get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Ready", body = HealthResponse),
        (status = 503, description = "unavailable (with Retry-After)", body = ErrorEnvelope),
    )
)]
pub async fn readyz(State(st): State<AppState>) -> Result<Json<HealthResponse>, ApiError> {
    st.store.list_queues().await?;
    Ok(Json(HealthResponse {
        status: "ready".to_owned(),
    }))
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(super::openapi())
}
