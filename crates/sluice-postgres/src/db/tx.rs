//! Transactions on pooled connections.

use deadpool_postgres::Object;
use sluice_core::StoreError;

use crate::error::db;

/// Opens a transaction on a pooled connection.
pub(crate) async fn begin(
    conn: &mut Object,
) -> Result<tokio_postgres::Transaction<'_>, tokio_postgres::Error> {
    let client: &mut tokio_postgres::Client = conn;
    client.transaction().await
}

/// Runs `body` in a transaction on `conn`: commits when it succeeds, and otherwise rolls back
/// before the connection goes back to the pool, so row locks taken by a failed call never
/// outlive it (a dropped transaction would roll back only later, in the background, while
/// another connection could already be skipping the rows it still holds).
pub(crate) async fn transaction<T>(
    conn: &mut Object,
    body: impl AsyncFnOnce(&tokio_postgres::Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let tx = begin(conn).await.map_err(|e| db(&e))?;
    match body(&tx).await {
        Ok(v) => {
            tx.commit().await.map_err(|e| db(&e))?;
            Ok(v)
        }
        Err(e) => {
            if let Err(re) = tx.rollback().await {
                tracing::debug!(error = %re, "rollback after a failed call");
            }
            Err(e)
        }
    }
}
