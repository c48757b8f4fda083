//! Errors of opening the engine, and how database failures reach callers.

use std::time::Duration;

use sluice_core::StoreError;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The connection string could not be parsed.
    #[error("invalid PostgreSQL connection string: {0}")]
    Url(String),
    /// The database refused a statement or could not be reached.
    #[error("PostgreSQL: {0}; check that the server runs and the connection string is right")]
    Database(#[from] tokio_postgres::Error),
    /// No connection could be taken from the pool.
    #[error("PostgreSQL connection pool: {0}")]
    Pool(String),
    /// The schema was migrated by a newer Sluice.
    #[error(
        "schema \"{schema}\" is at version {found}, newer than this build knows ({known}); \
         upgrade this node to the version the other nodes run"
    )]
    TooNew {
        /// The schema.
        schema: String,
        /// Its version.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
}

/// How long a caller should wait before retrying after the database was unreachable.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A database failure as the broker reports it: `unavailable` (503 with `Retry-After`), since
/// every failure that reaches here is the database's, not the caller's.
pub(crate) fn db(e: &tokio_postgres::Error) -> StoreError {
    // Text the database cannot store is the input's fault, not an outage: a retry would fail
    // the same way. The checking layer refuses the known cases (U+0000) first; this keeps any
    // other such input a 400 rather than a 503 that clients retry forever.
    if let Some(d) = e.as_db_error()
        && matches!(d.code().code(), "22P05" | "22021")
    {
        return StoreError::invalid(format!(
            "the database cannot store this text ({}); remove the character it names",
            d.message()
        ));
    }
    let reason = match e.as_db_error() {
        Some(d) => format!("database error {}: {}", d.code().code(), d.message()),
        None => format!("database unreachable: {e}"),
    };
    StoreError::Unavailable {
        reason,
        retry_after: RETRY_AFTER,
    }
}

/// A pool that could not hand out a connection (the database is down or saturated).
pub(crate) fn pool(e: &deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable {
        reason: format!("no database connection: {e}"),
        retry_after: RETRY_AFTER,
    }
}

/// True when `e` is a unique-constraint violation.
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// A value the database holds that the engine cannot read back (a bug or a foreign write).
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::unavailable(format!("unreadable row in the database: {what}"))
}
