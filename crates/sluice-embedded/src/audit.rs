//! The audit log of the embedded engine: JSON lines in `<data-dir>/audit/`, one file at a
//! time, rotated by size, the oldest files dropped past a bound.
//!
//! Operator actions are synced before the API answers. The broker's own dead-letter and
//! expiry events are written as they happen and synced by the next operator action or the
//! maintenance tick (within a second): the dead-letter move itself is already durable in the
//! message log, so the audit line is a view of it, not the record of truth.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use sluice_core::{AuditEvent, AuditQuery, StoreError};

use crate::error::OpenError;

/// A file is closed and a new one started past this size.
const ROTATE_BYTES: u64 = 32 * 1024 * 1024;
/// Files kept; older ones are deleted (about 256 MiB of audit in all).
const FILES_KEPT: usize = 8;

pub(crate) struct AuditLog {
    dir: PathBuf,
    current: u32,
    file: File,
    size: u64,
    dirty: bool,
}

fn file_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("audit-{n:010}.jsonl"))
}

fn list(dir: &Path) -> std::io::Result<Vec<u32>> {
    let mut out: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_prefix("audit-")?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

impl AuditLog {
    pub(crate) fn open(data_dir: &Path) -> Result<AuditLog, OpenError> {
        let dir = data_dir.join("audit");
        std::fs::create_dir_all(&dir).map_err(|e| OpenError::io(&dir, e))?;
        let current = list(&dir)
            .map_err(|e| OpenError::io(&dir, e))?
            .last()
            .copied()
            .unwrap_or(1);
        let path = file_path(&dir, current);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| OpenError::io(&path, e))?;
        let size = file.metadata().map_err(|e| OpenError::io(&path, e))?.len();
        Ok(AuditLog {
            dir,
            current,
            file,
            size,
            dirty: false,
        })
    }

    /// Appends events; with `sync`, makes everything written so far durable.
    pub(crate) fn append(&mut self, events: &[AuditEvent], sync: bool) -> Result<(), StoreError> {
        let fail =
            |e: std::io::Error| StoreError::unavailable(format!("cannot write the audit log: {e}"));
        if !events.is_empty() {
            let mut buf = Vec::new();
            for e in events {
                serde_json::to_writer(&mut buf, e).map_err(|e| {
                    StoreError::unavailable(format!("cannot encode an audit event: {e}"))
                })?;
                buf.push(b'\n');
            }
            if self.size > 0 && self.size + buf.len() as u64 > ROTATE_BYTES {
                self.rotate().map_err(fail)?;
            }
            self.file.write_all(&buf).map_err(fail)?;
            self.size += buf.len() as u64;
            self.dirty = true;
        }
        if sync && self.dirty {
            self.file.sync_data().map_err(fail)?;
            self.dirty = false;
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.sync_data()?;
        self.current += 1;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(file_path(&self.dir, self.current))?;
        self.size = 0;
        crate::journal::log::sync_dir(&self.dir)?;
        let files = list(&self.dir)?;
        if files.len() > FILES_KEPT {
            for n in &files[..files.len() - FILES_KEPT] {
                std::fs::remove_file(file_path(&self.dir, *n))?;
            }
        }
        Ok(())
    }

    /// The newest matching events, oldest first. Lines that do not parse (a torn last line
    /// after a crash) are skipped.
    pub(crate) fn query(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        let fail =
            |e: std::io::Error| StoreError::unavailable(format!("cannot read the audit log: {e}"));
        let limit = q.limit.clamp(1, 10_000);
        let mut out: Vec<AuditEvent> = Vec::new();
        for n in list(&self.dir).map_err(fail)?.into_iter().rev() {
            let f = File::open(file_path(&self.dir, n)).map_err(fail)?;
            let mut found: Vec<AuditEvent> = BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str::<AuditEvent>(&l).ok())
                .filter(|e| q.matches(e))
                .collect();
            found.append(&mut out);
            out = found;
            if out.len() >= limit {
                break;
            }
        }
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }
}
