//! The PostgreSQL server tests run against: where it is, whether it answers, and a schema of
//! its own for each test.
//!
//! Tests find the server at `SLUICE_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it does not answer, a test on a developer's
//! machine is skipped with a loud message; under `CI=true` it fails, so CI never passes by
//! skipping.

use std::sync::atomic::{AtomicU32, Ordering};

/// Where the default test server is.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The connection string of the test server.
pub fn url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// True when the test server answers. Otherwise prints why and returns false, or panics
/// when `CI=true`.
pub async fn available() -> bool {
    let url = url();
    let result = match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
        Ok((client, conn)) => {
            let driver = tokio::spawn(conn);
            let r = client.simple_query("SELECT 1").await.map(|_| ());
            driver.abort();
            r
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            let msg = format!(
                "PostgreSQL at {url} is not reachable ({e}); start it or set SLUICE_TEST_POSTGRES"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg} (CI=true: the PostgreSQL tests must run)");
            }
            eprintln!("\n!!!! SKIPPED: {msg} !!!!\n");
            false
        }
    }
}

/// A schema name no other test uses.
pub fn unique_schema(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}_{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    )
}

/// Drops `schemas` (with everything in them), from any context: it runs on a thread of its
/// own, so it can be called from `Drop` inside a runtime. Sessions that still hold locks on
/// a schema's tables are cut first, so a transaction left open by the finished test cannot
/// make it wait forever.
pub fn drop_schemas(schemas: Vec<String>) {
    if schemas.is_empty() {
        return;
    }
    let url = url();
    let done = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
            else {
                return;
            };
            let driver = tokio::spawn(conn);
            // A test's stores may still hold a transaction open on the schema (a maintenance
            // pass, say) that can never finish: the runtime that drives it may be the very
            // thread waiting here. The test is over, so its sessions are cut first.
            let _ = client.batch_execute("SET lock_timeout = '2s'").await;
            for s in schemas {
                for _ in 0..10 {
                    let _ = client
                        .execute(
                            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l
                             JOIN pg_class c ON c.oid = l.relation
                             JOIN pg_namespace n ON n.oid = c.relnamespace
                             WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()",
                            &[&s],
                        )
                        .await;
                    let dropped = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{s}\" CASCADE"))
                        .await;
                    if dropped.is_ok() {
                        break;
                    }
                }
            }
            driver.abort();
        });
    });
    let _ = done.join();
}

/// A test's schema, dropped (see [`drop_schemas`]) when this goes out of scope, also when
/// the test fails.
pub struct SchemaGuard(String);

impl SchemaGuard {
    /// Guards `schema`.
    pub fn new(schema: impl Into<String>) -> Self {
        SchemaGuard(schema.into())
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        drop_schemas(vec![std::mem::take(&mut self.0)]);
    }
}

/// Cuts every connection of the test server named `channel` (a PostgreSQL store names its
/// listening connection after its channel), as a network fault or a server restart would,
/// and returns how many it cut.
///
/// # Panics
/// If the server does not answer; call [`available`] first.
pub async fn cut_listeners(channel: &str) -> u64 {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    let driver = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE pid <> pg_backend_pid() AND application_name = left($1, 63)",
            &[&channel],
        )
        .await
        .expect("terminate the listening connections");
    driver.abort();
    u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)
}
