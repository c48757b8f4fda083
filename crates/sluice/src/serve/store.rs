//! The store `--store` names: which engine, how its connection string is shown, and
//! opening it with the declared queues applied.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use sluice_core::Store;
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_postgres::{PostgresOptions, PostgresStore};

/// Which engine `--store` names.
pub(super) enum StoreChoice {
    Embedded,
    Postgres(String),
}

/// The engine `s` names (absent: embedded).
pub(super) fn parse_store(s: Option<&str>) -> anyhow::Result<StoreChoice> {
    match s {
        None | Some("embedded") => Ok(StoreChoice::Embedded),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(StoreChoice::Postgres(url.to_string()))
        }
        Some(other) => bail!(
            "--store \"{other}\" is neither `embedded` nor a postgres:// connection string \
             (e.g. postgres://sluice@127.0.0.1:5432/sluice)"
        ),
    }
}

/// The connection string without its password, for logs.
pub(super) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Opens the store `choice` names, recovering the embedded one from `data_dir`.
pub(super) async fn open_store(
    choice: StoreChoice,
    data_dir: &Path,
    sync_interval: Option<std::time::Duration>,
    min_free_disk: u64,
    node_id: Option<String>,
) -> anyhow::Result<Arc<dyn Store>> {
    let store: Arc<dyn Store> = match choice {
        StoreChoice::Embedded => {
            let options = EmbeddedOptions {
                sync_interval,
                min_free_disk,
                ..EmbeddedOptions::default()
            };
            let (store, report) = EmbeddedStore::open(data_dir, options)
                .with_context(|| format!("opening data directory {}", data_dir.display()))?;
            if let Some(d) = sync_interval {
                tracing::warn!(
                    sync_interval_ms = d.as_millis() as u64,
                    "relaxed durability: writes are answered before they are synced; a machine \
                     crash can lose up to this long of acknowledged writes"
                );
            }
            tracing::info!(
                dir = %data_dir.display(),
                records = report.records,
                messages = report.messages,
                torn_bytes = report.torn_bytes,
                elapsed_ms = report.elapsed.as_millis() as u64,
                "store recovered"
            );
            Arc::new(store)
        }
        StoreChoice::Postgres(url) => {
            let options = PostgresOptions {
                node_id,
                ..PostgresOptions::default()
            };
            let store = PostgresStore::open(&url, options)
                .await
                .with_context(|| format!("opening PostgreSQL store {}", redacted(&url)))?;
            tracing::info!(
                store = %redacted(&url),
                schema = store.engine().schema(),
                node = store.engine().node_id(),
                "PostgreSQL store ready"
            );
            Arc::new(store)
        }
    };
    Ok(store)
}

/// Creates or updates the queues of `[[queues]]`, in the order the file declares them.
pub(super) async fn declare_queues(
    store: &dyn Store,
    queues: &[(sluice_core::QueueName, sluice_core::QueueConfigPatch)],
) -> anyhow::Result<()> {
    for (name, patch) in queues {
        let out = store
            .put_queue(name, patch)
            .await
            .with_context(|| format!("applying [[queues]] {name}"))?;
        for w in out.warnings {
            tracing::warn!(queue = %name, "{w}");
        }
        tracing::info!(queue = %name, created = out.created, "queue declared");
    }
    Ok(())
}
