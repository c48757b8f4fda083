//! Opening a store: options, the directory lock, recovery by replay, and the start of the
//! maintenance task.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::{Checked, Clock, SystemClock};

use crate::catalog;
use crate::core::{Core, Inner};
use crate::error::OpenError;
use crate::journal::log::{self, Log};
use crate::journal::recovery::{self, ReplayStats};
use crate::state::State;
use crate::store::EmbeddedStore;

/// Options of an embedded store.
#[derive(Clone)]
pub struct EmbeddedOptions {
    /// Where time comes from (the system clock in production, a manual clock in tests).
    pub clock: Arc<dyn Clock>,
    /// How often background maintenance runs: lease expiry, retention, compaction.
    pub maintenance_interval: Duration,
    /// Relaxed durability: answer writes as soon as they are in the log file (the kernel's
    /// page cache) and sync at most this long after. A crash of the broker process loses
    /// nothing; a crash of the machine (power loss, kernel panic) can lose up to this long
    /// of acknowledged changes. `None` (the default): every answer waits for its sync.
    pub sync_interval: Option<Duration>,
    /// Free space (bytes) kept on the data directory's file system: below it new messages
    /// are refused with `unavailable` (and the store reports itself not ready) while
    /// receives, acks and nacks go on, so a disk never fills under a backlog that consumers
    /// could drain. 0 turns the check off (writes then fail only when the disk is full).
    /// Default [`DEFAULT_MIN_FREE_DISK`].
    pub min_free_disk: u64,
}

/// The default of [`EmbeddedOptions::min_free_disk`]: 128 MiB, two log segments.
pub const DEFAULT_MIN_FREE_DISK: u64 = 128 * 1024 * 1024;

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            clock: Arc::new(SystemClock),
            maintenance_interval: Duration::from_millis(500),
            sync_interval: None,
            min_free_disk: DEFAULT_MIN_FREE_DISK,
        }
    }
}

/// What recovery found, for operators.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryReport {
    /// Records replayed.
    pub records: u64,
    /// Bytes of log replayed.
    pub bytes: u64,
    /// Bytes of torn tail cut off.
    pub torn_bytes: u64,
    /// Live messages after recovery.
    pub messages: u64,
    /// Time taken.
    pub elapsed: Duration,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`, recovering its state from disk. The
    /// store comes wrapped in the contract's checking layer, the only form in which it is a
    /// [`Store`](sluice_core::Store); its own methods (`maintain`, `dir`, …) are reached
    /// through [`Checked::engine`].
    ///
    /// Must be called inside a Tokio runtime: it starts the background maintenance task.
    ///
    /// # Errors
    /// [`OpenError`] when the directory cannot be used, is locked by another process, or
    /// holds damaged records (the error names the file and offset).
    pub fn open(
        dir: impl AsRef<Path>,
        options: EmbeddedOptions,
    ) -> Result<(Checked<Self>, RecoveryReport), OpenError> {
        let started = std::time::Instant::now();
        let dir = dir.as_ref().to_path_buf();
        let log_dir = dir.join("log");
        std::fs::create_dir_all(&log_dir).map_err(|e| OpenError::io(&log_dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| OpenError::io(&lock_path, e))?;
        if lock.try_lock().is_err() {
            return Err(OpenError::Locked(dir));
        }
        let (cat, catalog) = catalog::open(&dir)?;
        let mut state = State::new(&cat.queues, cat.next_qid);
        let segments = log::list_segments(&log_dir)?;
        let mut stats = ReplayStats::default();
        for (i, n) in segments.iter().enumerate() {
            recovery::replay_segment(
                &log_dir,
                *n,
                i + 1 == segments.len(),
                &mut state,
                &mut stats,
            )?;
        }
        state.finish_replay();
        let sync_delay = options.sync_interval.unwrap_or(log::SYNC_THREAD_DELAY);
        let log = Log::open(&log_dir, segments, sync_delay, options.min_free_disk)?;
        let audit = crate::audit::AuditLog::open(&dir)?;
        let report = RecoveryReport {
            records: stats.records,
            bytes: stats.bytes,
            torn_bytes: stats.torn_bytes,
            messages: state.msgs.len() as u64,
            elapsed: started.elapsed(),
        };
        let durable = log.durable();
        let sync = log.sync_handle();
        let inner = Arc::new(Inner {
            dir,
            clock: options.clock,
            core: Mutex::new(Core {
                state,
                log,
                audit,
                catalog,
                claims: Default::default(),
            }),
            durable,
            sync,
            relaxed: options.sync_interval.is_some(),
            compacting: tokio::sync::Mutex::new(()),
            _lock: lock,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(crate::maintenance::run(
                Arc::downgrade(&inner),
                options.maintenance_interval,
            ));
        }
        Ok((Checked::new(EmbeddedStore { inner }), report))
    }
}
