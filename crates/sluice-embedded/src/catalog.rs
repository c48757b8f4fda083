//! The queue catalog: names, ids and configs of all queues, in one small JSON file replaced
//! atomically (write a temporary file, fsync, rename, fsync the directory).
//!
//! Queues change rarely and are few, so they live outside the log: a message record names its
//! queue by id, and a record whose queue id is not in the catalog belongs to a deleted queue
//! and is skipped on replay. That makes delete-queue a single atomic step.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_core::{QueueConfig, QueueName, StoreError, Timestamp};

use crate::error::OpenError;
use crate::journal::log::sync_dir;
use crate::journal::record::Qid;

/// One queue as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CatalogQueue {
    pub qid: Qid,
    pub name: QueueName,
    pub config: QueueConfig,
    pub created_at: Timestamp,
}

/// The catalog file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Catalog {
    /// Queue ids are never reused.
    pub next_qid: Qid,
    pub queues: Vec<CatalogQueue>,
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join("queues.json")
}

/// Reads the catalog; a missing file is an empty catalog (a new data directory).
pub(crate) fn load(dir: &Path) -> Result<Catalog, OpenError> {
    let p = path(dir);
    match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| OpenError::Corrupt {
            file: p.clone(),
            offset: 0,
            detail: format!("queue catalog does not parse: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Catalog {
            next_qid: 1,
            queues: vec![],
        }),
        Err(e) => Err(OpenError::io(p, e)),
    }
}

/// Replaces the catalog durably.
pub(crate) fn store(dir: &Path, catalog: &Catalog) -> Result<(), StoreError> {
    let fail =
        |e: std::io::Error| StoreError::unavailable(format!("cannot write the queue catalog: {e}"));
    let tmp = dir.join("queues.json.tmp");
    let bytes = serde_json::to_vec_pretty(catalog)
        .map_err(|e| StoreError::unavailable(format!("cannot encode the queue catalog: {e}")))?;
    let mut f = File::create(&tmp).map_err(fail)?;
    f.write_all(&bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    drop(f);
    std::fs::rename(&tmp, path(dir)).map_err(fail)?;
    sync_dir(dir).map_err(fail)
}
