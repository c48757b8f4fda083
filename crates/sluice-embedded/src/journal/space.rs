//! Free space on the log's file system, watched so the broker refuses new messages before the
//! disk is full instead of failing every write once it is.
//!
//! Below the limit ([`crate::EmbeddedOptions::min_free_disk`]) sends are refused with
//! `unavailable` while everything that settles work already stored (receives, acks, nacks,
//! deletes) goes on in the room the limit keeps, so consumers can drain the backlog that
//! compaction then frees. Free space is read with `statvfs` every few MiB of log or every
//! second, and on every refused send while low, so the broker accepts messages again by
//! itself within a second of space being freed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sluice_core::StoreError;

/// Log bytes after which free space is read again.
const RECHECK_BYTES: u64 = 4 << 20;
/// Time after which free space is read again.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// The free space of one directory's file system, as last read.
pub(crate) struct Space {
    dir: PathBuf,
    /// Sends are refused below this many free bytes; 0 refuses them only once a write found
    /// the disk full (free space is still read, for segment preparation).
    limit: u64,
    free: u64,
    checked_at: Instant,
    checked_written: u64,
    low: bool,
}

impl Space {
    /// Watches the file system of `dir`, keeping `limit` bytes free.
    pub(crate) fn new(dir: PathBuf, limit: u64) -> Space {
        let mut s = Space {
            dir,
            limit,
            free: u64::MAX,
            checked_at: Instant::now(),
            checked_written: 0,
            low: false,
        };
        s.refresh(0);
        s
    }

    /// Reads the free space now.
    pub(crate) fn refresh(&mut self, written: u64) {
        match rustix::fs::statvfs(&self.dir) {
            Ok(st) => self.free = st.f_bavail.saturating_mul(st.f_frsize),
            // Unknown free space refuses nothing: the write itself will say.
            Err(e) => {
                tracing::debug!(error = %e, "cannot read free disk space");
                self.free = u64::MAX;
            }
        }
        self.checked_at = Instant::now();
        self.checked_written = written;
        let low = self.free < self.limit;
        if low != self.low {
            if low {
                tracing::warn!(
                    free_bytes = self.free,
                    min_free_disk = self.limit,
                    "disk almost full: refusing new messages until space is freed"
                );
            } else {
                tracing::info!(
                    free_bytes = self.free,
                    "disk space freed: accepting new messages again"
                );
            }
        }
        self.low = low;
    }

    /// Reads the free space again when it is due: after [`RECHECK_BYTES`] of log, after
    /// [`RECHECK_AFTER`], or at every call while low.
    fn observe(&mut self, written: u64) {
        if self.low
            || written.saturating_sub(self.checked_written) >= RECHECK_BYTES
            || self.checked_at.elapsed() >= RECHECK_AFTER
        {
            self.refresh(written);
        }
    }

    /// `Ok` when new messages may be written; `unavailable` saying why while the disk is
    /// almost full.
    pub(crate) fn admit(&mut self, written: u64) -> Result<(), StoreError> {
        self.observe(written);
        self.refusal()
    }

    /// As [`Space::admit`], on free space read now.
    pub(crate) fn admit_now(&mut self, written: u64) -> Result<(), StoreError> {
        self.refresh(written);
        self.refusal()
    }

    fn refusal(&self) -> Result<(), StoreError> {
        if !self.low {
            return Ok(());
        }
        Err(StoreError::unavailable(if self.limit == 0 {
            "the data directory's disk is full; new messages are refused until space is \
             freed"
                .to_owned()
        } else {
            format!(
                "the data directory's disk is almost full ({} free; the broker keeps {} free, \
                 min_free_disk); new messages are refused until space is freed, while \
                 receives, acks and nacks go on",
                mib(self.free),
                mib(self.limit)
            )
        }))
    }

    /// A write found the disk full: refuse new messages until a reading says otherwise.
    pub(crate) fn exhausted(&mut self) {
        if !self.low {
            tracing::warn!("disk full: refusing new messages until space is freed");
        }
        self.free = 0;
        self.low = true;
    }

    /// True when `bytes` more can be written and the limit still kept (read when due).
    pub(crate) fn room_for(&mut self, bytes: u64, written: u64) -> bool {
        self.observe(written);
        self.free >= bytes.saturating_add(self.limit)
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
