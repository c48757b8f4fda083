//! The engine-agnostic conformance suite of `sluice-core`, run against the PostgreSQL engine
//! on a real server, each test in a schema of its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sluice_conformance::Harness;
use sluice_core::{ManualClock, Store};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_testkit::postgres;

/// Each `open` gets a fresh schema; `reopen` opens the newest one again, as the same node.
struct Postgres {
    schemas: Mutex<Vec<String>>,
    /// Sends of at least this many messages become packs.
    pack_min: usize,
}

fn options(clock: ManualClock, schema: &str, pack_min: usize) -> PostgresOptions {
    PostgresOptions {
        pack_min,
        clock: Arc::new(clock),
        schema: schema.to_string(),
        pool_size: 4,
        // Tests drive time themselves; background maintenance would only add noise.
        maintenance_interval: Duration::from_secs(3600),
        node_id: Some("conformance".to_string()),
        ..PostgresOptions::default()
    }
}

#[async_trait]
impl Harness for Postgres {
    async fn open(&self, clock: ManualClock) -> Arc<dyn Store> {
        let schema = postgres::unique_schema("conf");
        self.schemas
            .lock()
            .expect("harness lock")
            .push(schema.clone());
        let store = PostgresStore::open(&postgres::url(), options(clock, &schema, self.pack_min))
            .await
            .expect("open postgres store");
        Arc::new(store)
    }

    async fn reopen(&self, clock: ManualClock) -> Arc<dyn Store> {
        let schema = self
            .schemas
            .lock()
            .expect("harness lock")
            .last()
            .cloned()
            .expect("opened before");
        let store = PostgresStore::open(&postgres::url(), options(clock, &schema, self.pack_min))
            .await
            .expect("reopen postgres store");
        Arc::new(store)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap_or_else(|p| p.into_inner()));
        postgres::drop_schemas(schemas);
    }
}

/// The engine as configured by default.
mod default_packing {
    use super::*;

    async fn harness() -> Postgres {
        Postgres {
            schemas: Mutex::new(Vec::new()),
            pack_min: PostgresOptions::default().pack_min,
        }
    }

    sluice_conformance::conformance_suite!(harness, if = postgres::available);
}

/// Every plain send kept as a pack, even of one message, so that every rule is checked
/// against members of packs as well as rows: nacks, extensions, expiries, retention, lookups,
/// browse and the rest unpack them first.
mod every_send_packed {
    use super::*;

    async fn harness() -> Postgres {
        Postgres {
            schemas: Mutex::new(Vec::new()),
            pack_min: 1,
        }
    }

    sluice_conformance::conformance_suite!(harness, if = postgres::available);
}
