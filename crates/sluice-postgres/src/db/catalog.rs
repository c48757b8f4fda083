//! The queue catalog: one row per queue with its full configuration.

use sluice_core::{QueueConfig, StoreError};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::error::{corrupt, db};

/// A queue's configuration, read in the caller's transaction (`lock`: `FOR UPDATE`, which
/// serialises receives that check a global limit).
pub(crate) async fn config(
    c: &impl GenericClient,
    name: &str,
    lock: bool,
) -> Result<QueueConfig, StoreError> {
    let sql = if lock {
        "SELECT config FROM queues WHERE name = $1 FOR UPDATE"
    } else {
        "SELECT config FROM queues WHERE name = $1"
    };
    let row = c
        .query_opt(sql, &[&name])
        .await
        .map_err(|e| db(&e))?
        .ok_or_else(|| StoreError::QueueNotFound(name.to_string()))?;
    let cfg: Json<QueueConfig> = row.try_get(0).map_err(corrupt)?;
    Ok(cfg.0)
}
