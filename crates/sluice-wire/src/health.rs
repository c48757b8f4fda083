//! Liveness and readiness.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// `ok` (alive) or `ready` (the store answers).
    pub status: String,
}
