//! The engine-agnostic conformance suite of `sluice-core`, run against the embedded engine,
//! once as it runs by default and once with relaxed durability (answers before syncs), which
//! must keep every rule but the wait for the disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sluice_conformance::Harness;
use sluice_core::{ManualClock, Store};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore, OpenError};

/// Each `open` gets a fresh data directory under one temporary root; `reopen` opens the
/// newest one again.
struct Embedded {
    root: tempfile::TempDir,
    opened: Mutex<Vec<PathBuf>>,
    sync_interval: Option<Duration>,
}

impl Embedded {
    fn options(&self, clock: ManualClock) -> EmbeddedOptions {
        EmbeddedOptions {
            clock: Arc::new(clock),
            // Tests drive time themselves; background maintenance would only add noise.
            maintenance_interval: Duration::from_secs(3600),
            sync_interval: self.sync_interval,
            ..EmbeddedOptions::default()
        }
    }

    fn new(sync_interval: Option<Duration>) -> Embedded {
        Embedded {
            root: tempfile::tempdir().expect("temp dir"),
            opened: Mutex::new(Vec::new()),
            sync_interval,
        }
    }
}

#[async_trait]
impl Harness for Embedded {
    async fn open(&self, clock: ManualClock) -> Arc<dyn Store> {
        let dir = {
            let mut opened = self.opened.lock().expect("harness lock");
            let dir = self.root.path().join(format!("store-{}", opened.len()));
            opened.push(dir.clone());
            dir
        };
        let (store, _) =
            EmbeddedStore::open(&dir, self.options(clock)).expect("open embedded store");
        Arc::new(store)
    }

    async fn reopen(&self, clock: ManualClock) -> Arc<dyn Store> {
        let dir = self
            .opened
            .lock()
            .expect("harness lock")
            .last()
            .cloned()
            .expect("opened before");
        // The previous store's background task may hold the directory for a moment longer.
        for _ in 0..100 {
            match EmbeddedStore::open(&dir, self.options(clock.clone())) {
                Ok((store, _)) => return Arc::new(store),
                Err(OpenError::Locked(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("reopen failed: {e}"),
            }
        }
        panic!("data directory still locked after 2 s");
    }
}

mod every_answer_synced {
    async fn harness() -> super::Embedded {
        super::Embedded::new(None)
    }

    sluice_conformance::conformance_suite!(harness);
}

mod relaxed_durability {
    async fn harness() -> super::Embedded {
        super::Embedded::new(Some(std::time::Duration::from_millis(100)))
    }

    sluice_conformance::conformance_suite!(harness);
}
