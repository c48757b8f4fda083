//! The append-only log: numbered segment files, appends in memory order, and group commit.
//!
//! Appends go straight to the active segment with `write` (so the bytes are readable at
//! once through the page cache); a sync makes them durable. A caller that must wait for its
//! records leads the group commit itself ([`wait_durable`]): if no sync is running it calls
//! `fdatasync` for everything written so far, on its own thread, and publishes the new
//! durable position; if one is running it waits for it and tries again. Every caller that
//! arrived during one sync shares the next, so the disk does one sync for many requests, and
//! the leader's answer goes out without a hand-off to another thread and back (a hand-off
//! costs two context switches per sync; measured: broker CPU per message at B = 1 from
//! 108 – 122 µs to 90 µs). The cost is that a slow disk holds the leader's worker thread for
//! the length of one `fdatasync`, so a sync of more than [`LEAD_AT_MOST`] bytes (large
//! batches) goes to the sync thread at once instead. The sync thread also covers bytes
//! nobody waits for (lease records) a few milliseconds later, and shutdown.
//!
//! A failed sync poisons the log: the page cache may have dropped the dirty pages, so a retry
//! could report success for data that is gone. Every later write fails with `unavailable`
//! until the process restarts and recovers from what the disk really holds.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use sluice_core::StoreError;
use tokio::sync::watch;

use crate::error::OpenError;
use crate::journal::record::{self, FrameError, Record};
use crate::journal::space::Space;

/// A segment is closed and a new one started past this size.
pub(crate) const SEGMENT_TARGET: u64 = 64 * 1024 * 1024;

/// Bytes appended to the (growing) segment started at open before the log prepares a
/// zero-filled one to move to: enough that a store opened for a few writes does not write
/// a whole segment of zeros.
const LEAVE_UNPREPARED_AFTER: u64 = 1 << 20;

/// Where a record lives: segment number and byte offset of its frame. Eight bytes, because
/// every live message keeps two of these in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Loc {
    pub seg: u32,
    pub off: u32,
}

/// The file name of segment `n`.
pub(crate) fn segment_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:010}.log"))
}

/// Lists the segment numbers in `dir`, oldest first.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u32>, OpenError> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| OpenError::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| OpenError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".log")
            && let Ok(n) = stem.parse::<u32>()
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Makes a directory entry change (create, unlink) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Durable {
    /// Every byte of the log before this position is on stable storage.
    pub synced: u64,
    /// A sync failed; nothing more will become durable.
    pub failed: bool,
}

struct SyncState {
    written: u64,
    file: Arc<File>,
    synced: u64,
    failure: Option<String>,
    stop: bool,
    /// The sync thread is asleep on the condvar: only then is a wake-up (a syscall) needed.
    idle: bool,
    /// A caller waits for bytes it leaves to the sync thread: sync them without delay.
    urgent: bool,
}

pub(crate) struct SyncShared {
    state: Mutex<SyncState>,
    /// How long the sync thread leaves unsynced bytes before it syncs them itself.
    delay: Duration,
    wake: Condvar,
    durable: watch::Sender<Durable>,
    /// Someone (a waiting caller or the sync thread) is running a sync.
    leader: AtomicBool,
}

/// The writing end of the log. Owned by the store's state lock, so append order is apply order.
pub(crate) struct Log {
    dir: PathBuf,
    segments: BTreeMap<u32, Arc<File>>,
    active: u32,
    active_len: u64,
    /// Total bytes appended since open: the log position waiters compare against.
    written: u64,
    /// The log position at which the active segment starts.
    active_base: u64,
    scratch: Vec<u8>,
    sync: Arc<SyncShared>,
    syncer: Option<thread::JoinHandle<()>>,
    /// The next segment, being zero-filled in the background (see [`prepare_segment`]).
    prepared: Option<(u32, thread::JoinHandle<std::io::Result<File>>)>,
    /// Whether the active segment was zero-filled ahead (every segment but the one started
    /// at open, which the log leaves as soon as the next one is ready).
    active_prepared: bool,
    /// Free space on the log's file system.
    space: Space,
}

impl Log {
    /// Opens the log for appending: `existing` are the recovered segments; a fresh segment is
    /// started after them so that a recovered (possibly truncated) tail is never appended to.
    /// The sync thread syncs bytes nobody waits for after `sync_delay` (see
    /// [`SYNC_THREAD_DELAY`]; longer under relaxed durability). New messages are refused
    /// while less than `min_free` bytes are free on the log's file system.
    pub(crate) fn open(
        dir: &Path,
        existing: Vec<u32>,
        sync_delay: Duration,
        min_free: u64,
    ) -> Result<Log, OpenError> {
        remove_unused_preparations(dir).map_err(|e| OpenError::io(dir, e))?;
        let mut segments = BTreeMap::new();
        for n in &existing {
            let p = segment_path(dir, *n);
            let f = File::open(&p).map_err(|e| OpenError::io(&p, e))?;
            segments.insert(*n, Arc::new(f));
        }
        let active = existing.last().map_or(1, |n| n + 1);
        let path = segment_path(dir, active);
        let file = create_segment(&path).map_err(|e| OpenError::io(&path, e))?;
        sync_dir(dir).map_err(|e| OpenError::io(dir, e))?;
        let file = Arc::new(file);
        segments.insert(active, file.clone());
        let (durable, _) = watch::channel(Durable {
            synced: 0,
            failed: false,
        });
        let sync = Arc::new(SyncShared {
            state: Mutex::new(SyncState {
                written: 0,
                file,
                synced: 0,
                failure: None,
                stop: false,
                idle: false,
                urgent: false,
            }),
            wake: Condvar::new(),
            delay: sync_delay,
            durable,
            leader: AtomicBool::new(false),
        });
        let worker = sync.clone();
        let syncer = thread::Builder::new()
            .name("sluice-sync".into())
            .spawn(move || sync_loop(&worker))
            .map_err(|e| OpenError::io(dir, e))?;
        Ok(Log {
            dir: dir.to_path_buf(),
            segments,
            active,
            active_len: 0,
            written: 0,
            active_base: 0,
            scratch: Vec::with_capacity(1 << 16),
            sync,
            syncer: Some(syncer),
            prepared: None,
            active_prepared: false,
            space: Space::new(dir.to_path_buf(), min_free),
        })
    }

    /// `Ok` when new messages may be written: `unavailable` while the disk is almost full
    /// (sends are refused before the disk fills, so that settling what is stored goes on).
    pub(crate) fn admit_growth(&mut self) -> Result<(), StoreError> {
        self.space.admit(self.written)
    }

    /// `Ok` when the log takes writes of every kind now: not poisoned, and room for new
    /// messages (free space read afresh).
    pub(crate) fn writable(&mut self) -> Result<(), StoreError> {
        self.check_poisoned()?;
        self.space.admit_now(self.written)
    }

    /// Appends records in one write. Returns each record's location and the log position
    /// after them (wait for [`Log::durable`] to pass it before acknowledging the change).
    ///
    /// # Errors
    /// `Unavailable` when the disk refuses the write (full, I/O error) or the log is poisoned;
    /// nothing is applied then.
    pub(crate) fn append(
        &mut self,
        records: &[Record],
    ) -> Result<(Vec<(Loc, u32)>, u64), StoreError> {
        self.check_poisoned()?;
        self.scratch.clear();
        let mut lens = Vec::with_capacity(records.len());
        for r in records {
            lens.push(record::encode_into(r, &mut self.scratch));
        }
        let total = self.scratch.len() as u64;
        let full = self.active_len + total > SEGMENT_TARGET;
        let leave_unprepared =
            !self.active_prepared && self.prepared.as_ref().is_some_and(|(_, h)| h.is_finished());
        if self.active_len > 0 && (full || leave_unprepared) {
            self.rotate()?;
        }
        let file = self.segments[&self.active].clone();
        if let Err(e) = file.write_all_at(&self.scratch, self.active_len) {
            let full = e.kind() == std::io::ErrorKind::StorageFull;
            if full {
                self.space.exhausted();
            }
            // Cut any partial write so the next append does not follow garbage.
            if file.set_len(self.active_len).is_err() {
                self.poison(format!("write failed and could not be undone: {e}"));
            }
            return Err(StoreError::unavailable(if full {
                format!(
                    "the data directory's disk is full ({e}); writes resume once space is freed"
                )
            } else {
                format!("log write failed: {e}")
            }));
        }
        let mut off = self.active_len;
        let mut locs = Vec::with_capacity(records.len());
        for len in lens {
            locs.push((
                Loc {
                    seg: self.active,
                    off: u32::try_from(off).unwrap_or(u32::MAX),
                },
                len as u32,
            ));
            off += len as u64;
        }
        self.active_len += total;
        self.written += total;
        let mut st = lock(&self.sync.state);
        st.written = self.written;
        let idle = st.idle;
        drop(st);
        // A busy sync thread looks for more work before it sleeps.
        if idle {
            self.sync.wake.notify_one();
        }
        // The segment started at open grows with every append, which costs each sync an inode
        // write (measured: 125 µs per 1 KiB write + fdatasync instead of 92 µs). Once it sees
        // real traffic, appends move to a zero-filled one as soon as that is ready.
        if self.active_len > SEGMENT_TARGET / 2
            || (!self.active_prepared && self.active_len > LEAVE_UNPREPARED_AFTER)
        {
            self.prepare_next();
        }
        Ok((locs, self.written))
    }

    /// Starts zero-filling the segment after the active one, unless that is under way or
    /// the disk has no room for a whole segment beyond what must stay free (the log then
    /// grows its segments as it writes).
    fn prepare_next(&mut self) {
        if self.prepared.is_some() || !self.space.room_for(SEGMENT_TARGET, self.written) {
            return;
        }
        let (dir, n) = (self.dir.clone(), self.active + 1);
        if let Ok(h) = thread::Builder::new()
            .name("sluice-prealloc".into())
            .spawn(move || prepare_segment(&dir, n))
        {
            self.prepared = Some((n, h));
        }
    }

    /// Closes the active segment (durably) and starts the next one.
    fn rotate(&mut self) -> Result<(), StoreError> {
        let old = self.segments[&self.active].clone();
        // A closed segment is cut to what it holds, so only the newest segment can ever end
        // in preallocated zeros (recovery relies on that).
        if let Err(e) = old.set_len(self.active_len).and_then(|()| old.sync_data()) {
            self.poison(format!("closing a full segment failed: {e}"));
            return Err(StoreError::unavailable(format!("fsync failed: {e}")));
        }
        let next = self.active + 1;
        let path = segment_path(&self.dir, next);
        let prepared = match self.prepared.take() {
            Some((n, h)) if n == next => h.join().ok().and_then(Result::ok),
            _ => None,
        };
        self.active_prepared = prepared.is_some();
        let file = match prepared {
            Some(f) => std::fs::rename(prepared_path(&self.dir, next), &path).map(|()| f),
            None => create_segment(&path),
        }
        .and_then(|f| sync_dir(&self.dir).map(|_| f))
        .map_err(|e| StoreError::unavailable(format!("cannot start log segment: {e}")))?;
        let file = Arc::new(file);
        self.segments.insert(next, file.clone());
        self.active = next;
        self.active_len = 0;
        self.active_base = self.written;
        lock(&self.sync.state).file = file;
        Ok(())
    }

    /// Reads one record back: the frame header first (for its length), then the frame.
    pub(crate) fn read(&self, loc: Loc) -> Result<Record, StoreError> {
        self.read_sized(loc, None)
    }

    /// Reads one record whose frame length is known (as the index knows it for bodies): one
    /// `pread` instead of two.
    pub(crate) fn read_sized(&self, loc: Loc, len: Option<u32>) -> Result<Record, StoreError> {
        let file = self.segments.get(&loc.seg).ok_or_else(|| {
            StoreError::unavailable(format!("log segment {} is missing", loc.seg))
        })?;
        let io = |e: std::io::Error| StoreError::unavailable(format!("log read failed: {e}"));
        let frame = match len {
            Some(n) if n as usize >= record::HEADER => n as usize,
            _ => {
                let mut head = [0u8; record::HEADER];
                file.read_exact_at(&mut head, u64::from(loc.off))
                    .map_err(io)?;
                let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
                record::HEADER + len.min(record::MAX_PAYLOAD)
            }
        };
        let mut buf = vec![0u8; frame];
        file.read_exact_at(&mut buf, u64::from(loc.off))
            .map_err(io)?;
        record::decode_frame(&buf)
            .map(|(r, _)| r)
            .map_err(|e: FrameError| {
                StoreError::unavailable(format!(
                    "log segment {} is damaged at byte {}: {e}",
                    loc.seg, loc.off
                ))
            })
    }

    /// The log position to wait for before telling anyone about the record at `loc`: just
    /// past its first byte, which covers the whole record because the durable position only
    /// ever moves to the end of an append. 0 for records in closed segments, which were
    /// synced in full when they were closed (or before this process opened the log).
    pub(crate) fn position_of(&self, loc: Loc) -> u64 {
        if loc.seg == self.active {
            self.active_base + u64::from(loc.off) + 1
        } else {
            0
        }
    }

    /// The shared sync state, for callers that lead the group commit ([`wait_durable`]).
    pub(crate) fn sync_handle(&self) -> Arc<SyncShared> {
        self.sync.clone()
    }

    /// A receiver of the durable position.
    pub(crate) fn durable(&self) -> watch::Receiver<Durable> {
        self.sync.durable.subscribe()
    }

    /// Segment numbers and sizes, oldest first (the active one last).
    pub(crate) fn segment_sizes(&self) -> Vec<(u32, u64)> {
        self.segments
            .iter()
            .map(|(n, f)| (*n, f.metadata().map(|m| m.len()).unwrap_or(0)))
            .collect()
    }

    /// The segment being appended to.
    pub(crate) fn active(&self) -> u32 {
        self.active
    }

    /// Forgets and deletes a segment whose live records were all copied forward and made
    /// durable. Only ever the oldest segment: replay relies on every record that could touch
    /// a live message being at or after that message's base record.
    pub(crate) fn remove_segment(&mut self, n: u32) -> std::io::Result<()> {
        debug_assert_eq!(self.segments.keys().next(), Some(&n));
        self.segments.remove(&n);
        std::fs::remove_file(segment_path(&self.dir, n))?;
        sync_dir(&self.dir)
    }

    fn check_poisoned(&self) -> Result<(), StoreError> {
        match &lock(&self.sync.state).failure {
            Some(f) => Err(StoreError::unavailable(format!(
                "{f}; writes are refused until the broker restarts and recovers from disk"
            ))),
            None => Ok(()),
        }
    }

    fn poison(&self, why: String) {
        tracing::error!(reason = %why, "log poisoned: refusing writes until restart");
        let mut st = lock(&self.sync.state);
        st.failure.get_or_insert(why);
        drop(st);
        self.sync.durable.send_modify(|d| d.failed = true);
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Some((_, h)) = self.prepared.take() {
            let _ = h.join();
        }
        lock(&self.sync.state).stop = true;
        self.sync.wake.notify_one();
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
    }
}

fn create_segment(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

fn prepared_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:010}.prealloc"))
}

/// Zero-fills the next segment ahead of time, under a name replay ignores.
///
/// Why: appending to a file that grows makes every write allocate blocks and every
/// `fdatasync` journal the new size, and on ext4 an append then waits behind the running sync
/// for the inode. Writing into blocks that already exist changes no metadata, so the sync
/// flushes data only and appends do not queue behind it. The cost is one sequential write of
/// the segment's size, done off the request path.
/// Bytes per write when zero-filling a segment. The page cache keeps what a write brings in
/// as folios of about the write's size, and every later small append into a folio walks all
/// of its blocks (`ext4_block_write_begin`): after 1 MiB writes, a 1 KiB append cost 2.8 –
/// 3.0 µs of CPU against 1.0 µs after 64 KiB or 4 KiB writes (measured with a script on
/// Linux 6.18, ext4), and log `pwrite`s were the largest single cost of a broker with
/// relaxed durability.
const ZERO_FILL_CHUNK: usize = 64 * 1024;

fn prepare_segment(dir: &Path, n: u32) -> std::io::Result<File> {
    let path = prepared_path(dir, n);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let zeros = vec![0u8; ZERO_FILL_CHUNK];
    let mut left = SEGMENT_TARGET;
    let filled = (|| {
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    })();
    if let Err(e) = filled {
        // A half-filled preparation (a disk that filled meanwhile) gives its space back.
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(f)
}

/// Deletes zero-filled segments prepared before a restart; they hold nothing.
fn remove_unused_preparations(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "prealloc") {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock leaves plain numbers behind; they stay consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long the sync thread leaves unsynced bytes to a waiting caller before it syncs them
/// itself: bytes nobody waits for (lease records) and shutdown.
pub(crate) const SYNC_THREAD_DELAY: Duration = Duration::from_millis(2);

fn sync_loop(shared: &SyncShared) {
    loop {
        {
            let mut st = lock(&shared.state);
            while st.written <= st.synced && !st.stop && st.failure.is_none() {
                st.idle = true;
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                st.idle = false;
            }
            if st.failure.is_some() || (st.stop && st.written <= st.synced) {
                return;
            }
            let until = std::time::Instant::now() + shared.delay;
            while !st.stop && !st.urgent && st.written > st.synced {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                st = shared
                    .wake
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            st.urgent = false;
            if st.written <= st.synced {
                continue;
            }
        }
        if sync_now(shared).is_some_and(|r| r.is_err()) {
            return;
        }
    }
}

/// Unsynced bytes past which a waiting caller hands the sync to the sync thread instead of
/// leading it on its own (worker) thread: a large sync holds a thread long enough that
/// serving other requests meanwhile is worth the hand-off (measured: batches of 100 1 KiB
/// messages, 2 producers + 6 consumers, 55,800 msg/s with every sync led by a caller).
pub(crate) const LEAD_AT_MOST: u64 = 32 * 1024;

/// Syncs everything written so far on the calling thread, unless a sync is already running
/// (`None`: wait for that one's result). Callers that wait for durability lead the group
/// commit themselves: the sync runs without handing off to another thread and back.
fn sync_now(shared: &SyncShared) -> Option<Result<(), StoreError>> {
    if shared
        .leader
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return None;
    }
    let (target, file, synced, failed) = {
        let st = lock(&shared.state);
        (st.written, st.file.clone(), st.synced, st.failure.is_some())
    };
    let out = if failed {
        Err("an earlier fsync failed".to_owned())
    } else if target <= synced {
        Ok(())
    } else {
        match file.sync_data() {
            Ok(()) => {
                let mut st = lock(&shared.state);
                st.synced = st.synced.max(target);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "fsync failed: refusing writes until restart");
                lock(&shared.state).failure = Some(format!("fsync failed: {e}"));
                Err(format!("fsync failed: {e}"))
            }
        }
    };
    // The lead is given up before the news goes out, so a woken waiter whose records this
    // sync did not cover can lead the next one at once. Waiters are woken even when there
    // was nothing to sync: one may have found the lead taken and be waiting for this.
    shared.leader.store(false, Ordering::Release);
    match out {
        Ok(()) => {
            shared
                .durable
                .send_modify(|d| d.synced = d.synced.max(target));
            Some(Ok(()))
        }
        Err(why) => {
            shared.durable.send_modify(|d| d.failed = true);
            Some(Err(StoreError::unavailable(format!(
                "{why}; writes are refused until the broker restarts and recovers from disk"
            ))))
        }
    }
}

/// The answer to every write once a sync has failed (the log is poisoned).
pub(crate) fn sync_failed() -> StoreError {
    StoreError::unavailable(
        "fsync failed; writes are refused until the broker restarts and recovers from disk",
    )
}

/// Waits until the log is durable up to `pos`, leading the group commit when no sync is
/// running and the unsynced tail is small ([`LEAD_AT_MOST`]); a larger one goes to the sync
/// thread at once.
///
/// # Errors
/// `Unavailable` if a sync failed before reaching it, or the log was closed.
pub(crate) async fn wait_durable(
    shared: &SyncShared,
    mut rx: watch::Receiver<Durable>,
    pos: u64,
) -> Result<(), StoreError> {
    loop {
        let d = *rx.borrow_and_update();
        if d.synced >= pos {
            return Ok(());
        }
        if d.failed {
            return Err(sync_failed());
        }
        let small = {
            let st = lock(&shared.state);
            st.written.saturating_sub(st.synced) <= LEAD_AT_MOST
        };
        let led = if small {
            sync_now(shared)
        } else {
            lock(&shared.state).urgent = true;
            shared.wake.notify_one();
            None
        };
        match led {
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => {}
            None => rx
                .changed()
                .await
                .map_err(|_| StoreError::unavailable("the store is shutting down"))?,
        }
    }
}
