//! `EmbeddedStore`: the `Store` contract on the local log.
//!
//! Over 1,000 lines: `Core` and the whole `Store` impl still live here; splitting them by
//! concern (queues, consume, redrive, inspect) mirrors the PostgreSQL engine and is planned
//! as one restructuring, so the two engines change alike.
//!
//! Every call takes the state lock, decides with the lifecycle rules of `sluice-core`, appends
//! the resulting records to the log, applies them in memory, releases the lock and only then
//! waits for the group commit to make its records durable. The lock is never held across a
//! sync, so concurrent callers pile up behind one fsync instead of one each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::message::clip_error;
use sluice_core::store::{
    BrowseCursor, IDEMPOTENCY_TTL, IdempotentResponse, LeaseState, long_poll_nap,
    validate_ack_batch, validate_bodies_fit, validate_idempotent, validate_limit,
    validate_nack_delay, validate_receive, validate_send_batch, validate_visibility,
};
use sluice_core::{
    AckRequest, Attempt, AttemptOutcome, BrowsePage, BrowseRequest, BrowseState, Clock, DeadLetter,
    DeadLetterReason, Delivery, Failure, Message, MessageId, MessageState, NackOutcome, NewMessage,
    Progress, PutQueueOutcome, QueueConfig, QueueConfigPatch, QueueInfo, QueueName, QueueStats,
    Receipt, ReceiveRequest, RedriveId, RedriveJob, RedriveSpec, RedriveStep, SendOutcome, Store,
    StoreError, SystemClock, Timestamp,
};
use tokio::sync::{Notify, watch};

use crate::catalog::{self, Catalog, CatalogQueue};
use crate::error::OpenError;
use crate::journal::log::{self, Durable, Log};
use crate::journal::record::{
    Acked, Lease, MessageRecord, Origin, Qid, Record, RemoveReason, Rich, UpdateEvent, UpdateRecord,
};
use crate::journal::recovery::{self, ReplayStats};
use crate::state::{Msg, Slot, State};

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
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            clock: Arc::new(SystemClock),
            maintenance_interval: Duration::from_millis(500),
            sync_interval: None,
        }
    }
}

/// The default storage engine: a data directory on local disk.
///
/// Cloning is cheap and shares the store. The background maintenance task stops when the
/// last clone is dropped, and the data directory is released then.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) core: Mutex<Core>,
    pub(crate) durable: watch::Receiver<Durable>,
    /// The log's sync state, for callers that lead the group commit.
    sync: Arc<log::SyncShared>,
    /// Answers do not wait for syncs ([`EmbeddedOptions::sync_interval`]).
    relaxed: bool,
    /// Held while a compaction runs: one at a time.
    pub(crate) compacting: tokio::sync::Mutex<()>,
    /// Held open to keep the directory lock.
    _lock: std::fs::File,
}

pub(crate) struct Core {
    pub(crate) state: State,
    pub(crate) log: Log,
    pub(crate) audit: crate::audit::AuditLog,
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
    /// Opens (creating if needed) the store in `dir`, recovering its state from disk.
    ///
    /// Must be called inside a Tokio runtime: it starts the background maintenance task.
    ///
    /// # Errors
    /// [`OpenError`] when the directory cannot be used, is locked by another process, or
    /// holds damaged records (the error names the file and offset).
    pub fn open(
        dir: impl AsRef<Path>,
        options: EmbeddedOptions,
    ) -> Result<(Self, RecoveryReport), OpenError> {
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
        let cat = catalog::load(&dir)?;
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
        let log = Log::open(&log_dir, segments, sync_delay)?;
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
            core: Mutex::new(Core { state, log, audit }),
            durable,
            sync,
            relaxed: options.sync_interval.is_some(),
            compacting: tokio::sync::Mutex::new(()),
            _lock: lock,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(maintenance_loop(
                Arc::downgrade(&inner),
                options.maintenance_interval,
            ));
        }
        Ok((EmbeddedStore { inner }, report))
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Runs one round of background maintenance now (lease expiry, retention, compaction),
    /// after any compaction already running.
    ///
    /// # Errors
    /// `Unavailable` when the log cannot be written.
    pub async fn maintain(&self) -> Result<(), StoreError> {
        maintain_all(&self.inner, true).await
    }

    /// Live messages in the index (all queues), for capacity planning: each costs about
    /// 160 bytes of RAM besides its body (see `docs/architecture.md`).
    pub fn index_len(&self) -> usize {
        self.inner.lock().state.msgs.len()
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic under the lock would be a bug; the state it leaves is still the last
        // consistent one because records are applied only after they are written.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Waits until the log is durable up to `pos`.
    pub(crate) async fn durable(&self, pos: u64) -> Result<(), StoreError> {
        log::wait_durable(&self.sync, self.durable.clone(), pos).await
    }

    /// Waits until a change written up to `pos` may be answered: once it is durable, or at
    /// once under relaxed durability ([`EmbeddedOptions::sync_interval`]) while no sync has
    /// failed. The store's own housekeeping (compaction) always waits for [`Inner::durable`].
    pub(crate) async fn answerable(&self, pos: u64) -> Result<(), StoreError> {
        if !self.relaxed {
            return self.durable(pos).await;
        }
        if self.durable.borrow().failed {
            return Err(log::sync_failed());
        }
        Ok(())
    }
}

impl Core {
    pub(crate) fn qid(&self, name: &QueueName) -> Result<Qid, StoreError> {
        self.state
            .names
            .get(name)
            .copied()
            .ok_or_else(|| StoreError::QueueNotFound(name.to_string()))
    }

    /// Appends records and applies them. Returns the log position to wait for.
    pub(crate) fn commit(&mut self, records: Vec<Record>) -> Result<u64, StoreError> {
        let (locs, pos) = self.log.append(&records)?;
        let events = self.audit_events_of(&records);
        let mark = self.state.summary.fresh_mark();
        for (r, l) in records.iter().zip(locs) {
            self.state.apply(r, l.0, l.1);
        }
        // Messages this commit put in the summary index (first failures, dead letters) take
        // their attributes from their records, which the page cache still holds.
        if self.state.summary.fresh_mark() > mark {
            crate::ops::summary::learn_since(self, Some(mark), usize::MAX);
        }
        if !events.is_empty()
            && let Err(e) = self.audit.append(&events, false)
        {
            tracing::warn!(error = %e, "could not write dead-letter events to the audit log");
        }
        Ok(pos)
    }

    /// The audit entries of the broker's own decisions in `records`: dead letters and expiry.
    fn audit_events_of(&self, records: &[Record]) -> Vec<sluice_core::AuditEvent> {
        let name = |qid: Qid| self.state.queues.get(&qid).map(|q| q.name.to_string());
        let mut out = Vec::new();
        for r in records {
            match r {
                Record::Update(u) => {
                    let from = match u.event {
                        UpdateEvent::NackExhausted { from }
                        | UpdateEvent::LeaseExhausted { from }
                        | UpdateEvent::Rejected { from }
                        | UpdateEvent::Expired { from } => from,
                        _ => continue,
                    };
                    let at = u
                        .rich
                        .dead_letter
                        .as_ref()
                        .map_or(Timestamp(u.visible_at), |d| d.at);
                    let mut e = sluice_core::AuditEvent::by_broker(at, "message.dead_lettered");
                    e.queue = name(from);
                    e.message_id = Some(MessageId(u.id).to_string());
                    if let Some(d) = &u.rich.dead_letter {
                        e.details.insert("reason".into(), d.reason.as_str().into());
                    }
                    if let Some(dlq) = name(u.qid) {
                        e.details.insert("dead_letter_queue".into(), dlq);
                    }
                    if let Some(err) = &u.rich.last_error {
                        e.details
                            .insert("last_error".into(), err.chars().take(500).collect());
                    }
                    out.push(e);
                }
                Record::Remove {
                    ids,
                    reason: RemoveReason::Expired,
                    at,
                } => {
                    for id in ids {
                        let mut e =
                            sluice_core::AuditEvent::by_broker(Timestamp(*at), "message.expired");
                        e.queue = self.state.msgs.get(id).and_then(|m| name(m.qid));
                        e.message_id = Some(MessageId(*id).to_string());
                        e.details.insert(
                            "outcome".into(),
                            "dropped: the queue has no dead-letter queue".into(),
                        );
                        out.push(e);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Reads the body record and the rich fields of a live message.
    pub(crate) fn load(&self, id: u64, m: &Msg) -> Result<(MessageRecord, Rich), StoreError> {
        let Record::Message(rec) = self.log.read_sized(m.body, Some(m.body_len))? else {
            return Err(StoreError::unavailable(
                "log record is not a message (index out of step)",
            ));
        };
        let rich = if m.aux == m.body {
            rec.rich.clone()
        } else {
            match self.log.read(m.aux)? {
                Record::Update(u) => u.rich,
                Record::Message(r) => r.rich,
                Record::Redrive { moves, .. } | Record::RedriveV1 { moves, .. } => {
                    match moves.into_iter().find(|u| u.id == id) {
                        Some(u) => u.rich,
                        None => {
                            return Err(StoreError::unavailable(
                                "redrive record does not hold the message (index out of step)",
                            ));
                        }
                    }
                }
                _ => {
                    return Err(StoreError::unavailable(
                        "log record is not an update (index out of step)",
                    ));
                }
            }
        };
        Ok((rec, rich))
    }

    /// Brings a queue up to `now`: forgets expired dedup ids and completed records, ends
    /// expired leases, expires messages past retention, makes due messages visible.
    /// Returns the log position of any records written.
    pub(crate) fn maintain(&mut self, qid: Qid, now: i64) -> Result<Option<u64>, StoreError> {
        self.state.prune_done(now);
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return Ok(None);
        };
        q.prune_dedup(now);
        let expired_leases: Vec<u64> = q
            .leased
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect();
        // Retention. A visible message's visible_at is never before it entered the queue, so
        // the front of the ready index finds the usual expired messages at once; messages
        // that waited out retries are found by a full scan, at most once a minute.
        let retention = q.config.retention.as_millis() as i64;
        let cutoff = now - retention;
        let mut too_old: Vec<u64> = q
            .ready
            .iter()
            .take_while(|(at, _)| *at <= cutoff)
            .take(RETENTION_BATCH)
            .map(|(_, id)| *id)
            .collect();
        // Found by the background sweep (`State::retention_sweep`); still to be checked,
        // since a message may have moved on since.
        if !q.overdue.is_empty() {
            let msgs = &self.state.msgs;
            let take = q.overdue.len().min(RETENTION_BATCH);
            too_old.extend(q.overdue.drain(..take).filter(|id| {
                msgs.get(id).is_some_and(|m| {
                    m.qid == qid
                        && m.slot() != Slot::Leased
                        && m.at > cutoff
                        && m.entered_at <= cutoff
                })
            }));
        }
        let cfg = q.config.clone();
        let name = q.name.clone();
        let mut records = Vec::new();
        let mut ended = Vec::new();
        for id in expired_leases {
            let m = self.state.msgs[&id];
            if m.cancel_requested() {
                ended.push(self.end_cancelled(qid, id, &m, now));
                continue;
            }
            let (_, mut rich) = self.load(id, &m)?;
            lifecycle::record_attempt(
                &mut rich.attempts,
                Attempt {
                    at: Timestamp(m.at),
                    outcome: AttemptOutcome::LeaseExpired,
                    error: None,
                    consumer: None,
                },
            );
            records.push(
                match lifecycle::after_lease_expiry(&cfg, m.receive_count()) {
                    AfterFailure::Retry(_) => UpdateRecord {
                        event: UpdateEvent::LeaseExpired,
                        id,
                        qid,
                        visible_at: now,
                        entered_at: m.entered_at,
                        receive_count: m.receive_count(),
                        rich,
                    },
                    AfterFailure::DeadLetter(reason) => self.dead_letter(
                        &cfg,
                        &name,
                        id,
                        &m,
                        rich,
                        reason,
                        UpdateEvent::LeaseExhausted { from: qid },
                        now,
                    )?,
                },
            );
        }
        let mut records: Vec<Record> = records.into_iter().map(Record::Update).collect();
        records.extend(ended);
        let mut dropped = Vec::new();
        for id in too_old {
            let m = self.state.msgs[&id];
            if cfg.dead_letter_queue.is_some() {
                let (_, rich) = self.load(id, &m)?;
                records.push(Record::Update(self.dead_letter(
                    &cfg,
                    &name,
                    id,
                    &m,
                    rich,
                    DeadLetterReason::Expired,
                    UpdateEvent::Expired { from: qid },
                    now,
                )?));
            } else {
                dropped.push(id);
            }
        }
        if !dropped.is_empty() {
            tracing::info!(queue = %name, count = dropped.len(), "dropping messages past retention (queue has no dead-letter queue)");
            records.push(Record::Remove {
                ids: dropped,
                reason: RemoveReason::Expired,
                at: now,
            });
        }
        let pos = if records.is_empty() {
            None
        } else {
            Some(self.commit(records)?)
        };
        if self.state.promote(qid, now) > 0 {
            self.state.queues[&qid].notify.notify_waiters();
        }
        Ok(pos)
    }

    /// Maintains `qid` and every queue that dead-letters into it, so a DLQ shows messages whose
    /// last lease ran out even when nobody touched their source queue since.
    pub(crate) fn maintain_with_sources(&mut self, qid: Qid, now: i64) -> Result<(), StoreError> {
        let name = self.state.queues.get(&qid).map(|q| q.name.clone());
        let sources: Vec<Qid> = self
            .state
            .queues
            .iter()
            .filter(|(_, q)| name.is_some() && q.config.dead_letter_queue == name)
            .map(|(s, _)| *s)
            .collect();
        for s in sources {
            self.maintain(s, now)?;
        }
        self.maintain(qid, now)?;
        Ok(())
    }

    /// The update that moves message `id` of queue `name` to its dead-letter queue.
    #[allow(clippy::too_many_arguments)]
    fn dead_letter(
        &mut self,
        cfg: &QueueConfig,
        name: &QueueName,
        id: u64,
        m: &Msg,
        mut rich: Rich,
        reason: DeadLetterReason,
        event: UpdateEvent,
        now: i64,
    ) -> Result<UpdateRecord, StoreError> {
        let dlq_name = cfg.dead_letter_queue.as_ref().ok_or_else(|| {
            StoreError::Conflict(format!(
                "queue \"{name}\" has no dead_letter_queue; set one (PUT /v1/queues/{name}) or nack instead"
            ))
        })?;
        let dlq = self.qid(dlq_name).map_err(|_| {
            StoreError::Conflict(format!(
                "dead-letter queue \"{dlq_name}\" of \"{name}\" does not exist; create it or change dead_letter_queue"
            ))
        })?;
        rich.dead_letter = Some(DeadLetter {
            reason,
            at: Timestamp(now),
        });
        rich.source_queue = Some(name.to_string());
        if let Some(q) = self.state.queues.get(&dlq) {
            q.notify.notify_waiters();
        }
        Ok(UpdateRecord {
            event,
            id,
            qid: dlq,
            visible_at: now,
            entered_at: now,
            receive_count: m.receive_count(),
            rich,
        })
    }

    /// The record that ends a cancelled task whatever its handler reported: a completed
    /// record marked cancelled (sticky), kept for the queue's `result_ttl`.
    pub(crate) fn end_cancelled(&self, qid: Qid, id: u64, m: &Msg, now: i64) -> Record {
        let ttl = self
            .state
            .queues
            .get(&qid)
            .map_or(0, |q| q.config.result_ttl.as_millis() as i64);
        Record::Ack(vec![Acked {
            id,
            qid,
            receive_count: m.receive_count(),
            at: now,
            keep_until: now + ttl,
            cancelled: true,
        }])
    }

    /// Finds the live lease named by `receipt` in queue `qid`.
    fn leased(&self, qid: Qid, receipt: &Receipt) -> Result<Msg, StoreError> {
        match self.state.msgs.get(&receipt.id.0) {
            Some(m) if m.qid == qid && m.holds(receipt.token) => Ok(*m),
            _ => Err(StoreError::ReceiptStale),
        }
    }

    /// The response kept under an idempotency key, read back from the log.
    fn remembered(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        let Some(r) = self.state.idem.get(key) else {
            return Ok(None);
        };
        match self.log.read(r.loc)? {
            Record::Idempotent { response, .. } => Ok(Some(response)),
            _ => Err(StoreError::unavailable(
                "log record is not an idempotency response (index out of step)",
            )),
        }
    }

    pub(crate) fn info(&self, qid: Qid) -> QueueInfo {
        let q = &self.state.queues[&qid];
        QueueInfo {
            name: q.name.clone(),
            config: q.config.clone(),
            created_at: q.created_at,
        }
    }

    pub(crate) fn catalog(&self) -> Catalog {
        let mut queues: Vec<CatalogQueue> = self
            .state
            .queues
            .iter()
            .map(|(qid, q)| CatalogQueue {
                qid: *qid,
                name: q.name.clone(),
                config: q.config.clone(),
                created_at: q.created_at,
            })
            .collect();
        queues.sort_by_key(|q| q.qid);
        Catalog {
            next_qid: self.state.next_qid,
            queues,
        }
    }

    pub(crate) fn message_view(&self, id: u64, m: &Msg) -> Result<Message, StoreError> {
        let (rec, rich) = self.load(id, m)?;
        let q = &self.state.queues[&m.qid];
        Ok(Message {
            id: MessageId(id),
            queue: q.name.clone(),
            state: match m.slot() {
                Slot::Delayed => MessageState::Delayed,
                Slot::Ready => MessageState::Visible,
                Slot::Leased => MessageState::InFlight,
            },
            body: Some(rec.body),
            attributes: rec.attributes,
            enqueued_at: Timestamp(rec.enqueued_at),
            entered_at: Timestamp(m.entered_at),
            visible_at: Some(Timestamp(m.at)),
            receive_count: m.receive_count(),
            last_error: rich.last_error,
            attempts: rich.attempts,
            dedup_id: rec.dedup.map(|(k, _)| k),
            source_queue: rich.source_queue.and_then(|s| QueueName::new(s).ok()),
            dead_letter: rich.dead_letter,
            result: None,
            completed_at: None,
            cancelled: m.cancel_requested(),
            progress: self.state.progress.get(&id).cloned(),
        })
    }
}

/// Most messages expired per maintenance pass, to bound the time the lock is held.
const RETENTION_BATCH: usize = 10_000;
/// How often retention sweeps a whole queue (in ms), at most.
const RETENTION_SCAN_EVERY: i64 = 60_000;
/// Messages the retention sweep looks at per background pass (every 500 ms): a few
/// milliseconds under the lock; a queue of 10 million is swept in about a minute.
const RETENTION_SWEEP_STEP: usize = 100_000;

enum Attempted {
    /// Deliveries, and the log position to wait for before handing them out, if any; `true`
    /// when that position holds a token reservation, which is waited for even under relaxed
    /// durability (receipts must stay unambiguous after any crash).
    Got(Vec<Delivery>, Option<(u64, bool)>),
    Empty {
        next_wake: Option<i64>,
    },
}

impl EmbeddedStore {
    fn try_receive(
        &self,
        queue: &QueueName,
        req: &ReceiveRequest,
    ) -> Result<Attempted, StoreError> {
        let inner = &self.inner;
        let mut core = inner.lock();
        let now = inner.now();
        let qid = core.qid(queue)?;
        core.maintain(qid, now)?;
        let core = &mut *core;
        let q = core.state.queues.get_mut(&qid).expect("queue exists");
        let next_wake = [
            q.delayed.first().map(|e| e.0),
            q.leased.first().map(|e| e.0),
        ]
        .into_iter()
        .flatten()
        .min();
        if q.config.paused {
            return Ok(Attempted::Empty { next_wake: None });
        }
        let mut n = req.max as usize;
        if let Some(mif) = q.config.max_in_flight {
            n = n.min((mif as usize).saturating_sub(q.leased.len()));
        }
        if let Some(rl) = q.config.rate_limit {
            let avail = q.window.available(&rl, Timestamp(now)) as usize;
            if avail == 0 {
                let free = q
                    .window
                    .next_free(&rl, Timestamp(now))
                    .map(|t| t.as_millis());
                return Ok(Attempted::Empty {
                    next_wake: [next_wake, free].into_iter().flatten().min(),
                });
            }
            n = n.min(avail);
        }
        let ids: Vec<u64> = q.ready.iter().take(n).map(|(_, id)| *id).collect();
        if ids.is_empty() {
            return Ok(Attempted::Empty { next_wake });
        }
        let vis = req.visibility.unwrap_or(q.config.visibility_timeout);
        let max_receive_count = q.config.max_receive_count;
        if let Some(_rl) = q.config.rate_limit {
            q.window.record(Timestamp(now), ids.len());
        }
        let deadline = Timestamp(now).plus(vis).as_millis();
        // Tokens must never be handed out twice, crash or not: their reservation is the one
        // part of a receive that is waited for (once per `TOKEN_BLOCK` leases).
        let reservation = core.state.reserve_tokens(ids.len() as u64);
        let mut leases = Vec::with_capacity(ids.len());
        let mut out = Vec::with_capacity(ids.len());
        // The newest records the deliveries depend on (their send, the nack or move that made
        // them visible here): nobody is shown a change that a crash could still take back.
        let mut depends = 0;
        for id in ids {
            let m = core.state.msgs[&id];
            depends = depends
                .max(core.log.position_of(m.body))
                .max(core.log.position_of(m.aux));
            let token = core.state.draw_token();
            let (rec, rich) = core.load(id, &m)?;
            let receive_count = m.receive_count() + 1;
            leases.push(Lease {
                id,
                receive_count,
                token,
                deadline,
            });
            out.push(Delivery {
                id: MessageId(id),
                receipt: Receipt {
                    id: MessageId(id),
                    token,
                },
                body: rec.body,
                attributes: rec.attributes,
                receive_count,
                max_receive_count,
                enqueued_at: Timestamp(rec.enqueued_at),
                last_error: rich.last_error,
                lease_deadline: Timestamp(deadline),
            });
        }
        let reserved = reservation.is_some();
        let mut records: Vec<Record> = reservation.into_iter().collect();
        records.push(Record::Lease(leases));
        let pos = core.commit(records)?;
        // The lease itself is not waited for: it becomes durable with the next group commit
        // (at the latest with this consumer's ack, which comes after it in the log), and a
        // lease lost in a crash only makes the message visible again early. See "Which
        // writes wait" in docs/architecture.md.
        let wait = if reserved { pos } else { depends };
        Ok(Attempted::Got(out, (wait > 0).then_some((wait, reserved))))
    }

    fn notifier(&self, queue: &QueueName) -> Result<Arc<Notify>, StoreError> {
        let core = self.inner.lock();
        let qid = core.qid(queue)?;
        Ok(core.state.queues[&qid].notify.clone())
    }

    /// Runs a receipt-checked change: maintain the queue, check the lease, build records.
    async fn with_lease<T>(
        &self,
        queue: &QueueName,
        receipt: &Receipt,
        f: impl FnOnce(&mut Core, Qid, Msg, i64) -> Result<(Vec<Record>, T), StoreError>,
    ) -> Result<T, StoreError> {
        let pos = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            let qid = core.qid(queue)?;
            core.maintain(qid, now)?;
            let m = core.leased(qid, receipt)?;
            let (records, out) = f(&mut core, qid, m, now)?;
            let pos = core.commit(records)?;
            (pos, out)
        };
        self.inner.answerable(pos.0).await?;
        Ok(pos.1)
    }
}

fn failure_attempt(now: i64, outcome: AttemptOutcome, failure: &Failure) -> Attempt {
    Attempt {
        at: Timestamp(now),
        outcome,
        error: failure.error.clone().map(clip_error),
        consumer: failure.consumer.clone(),
    }
}

fn apply_failure(rich: &mut Rich, now: i64, outcome: AttemptOutcome, failure: &Failure) {
    let attempt = failure_attempt(now, outcome, failure);
    if attempt.error.is_some() {
        rich.last_error.clone_from(&attempt.error);
    }
    lifecycle::record_attempt(&mut rich.attempts, attempt);
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn put_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::queues::put(&self.inner, name, patch, false)
    }

    async fn create_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::queues::put(&self.inner, name, patch, true)
    }

    async fn get_queue(&self, name: &QueueName) -> Result<QueueInfo, StoreError> {
        let core = self.inner.lock();
        Ok(core.info(core.qid(name)?))
    }

    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        let core = self.inner.lock();
        Ok(core
            .state
            .names
            .values()
            .map(|qid| core.info(*qid))
            .collect())
    }

    async fn delete_queue(&self, name: &QueueName) -> Result<(), StoreError> {
        let mut core = self.inner.lock();
        let qid = core.qid(name)?;
        if let Some(user) = core
            .state
            .queues
            .values()
            .find(|q| q.name != *name && q.config.dead_letter_queue.as_ref() == Some(name))
        {
            return Err(StoreError::Conflict(format!(
                "queue \"{name}\" is the dead-letter queue of \"{}\"; change that queue's dead_letter_queue first",
                user.name.as_str()
            )));
        }
        let mut cat = core.catalog();
        cat.queues.retain(|q| q.qid != qid);
        catalog::store(&self.inner.dir, &cat)?;
        let notify = core.state.queues[&qid].notify.clone();
        core.state.drop_queue(qid);
        notify.notify_waiters();
        Ok(())
    }

    async fn send(
        &self,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        validate_send_batch(&messages)?;
        let (out, pos, notify) = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            let qid = core.qid(queue)?;
            core.maintain(qid, now)?;
            let cfg = core.state.queues[&qid].config.clone();
            validate_bodies_fit(&cfg, queue, &messages)?;
            let mut out = Vec::with_capacity(messages.len());
            let mut records = Vec::with_capacity(messages.len());
            // Dedup ids seen earlier in this batch count as already sent.
            let mut batch_dedup: std::collections::HashMap<&str, u64> = Default::default();
            let dedup_on = !cfg.dedup_window.is_zero();
            let dedup_until = now + cfg.dedup_window.as_millis() as i64;
            for m in &messages {
                let key = m.dedup_id.as_deref().filter(|_| dedup_on);
                if let Some(key) = key {
                    let hit = core.state.queues[&qid]
                        .dedup_hit(key, now)
                        .or_else(|| batch_dedup.get(key).copied());
                    if let Some(id) = hit {
                        out.push(SendOutcome {
                            id: MessageId(id),
                            duplicate: true,
                        });
                        continue;
                    }
                }
                let id = core.state.draw_id(Timestamp(now));
                if let Some(key) = key {
                    batch_dedup.insert(key, id);
                }
                out.push(SendOutcome {
                    id: MessageId(id),
                    duplicate: false,
                });
                let visible_at = Timestamp(now)
                    .plus(m.delay.unwrap_or(cfg.delay))
                    .as_millis();
                records.push(Record::Message(MessageRecord {
                    origin: Origin::Send,
                    id,
                    qid,
                    body: m.body.clone(),
                    attributes: m.attributes.clone(),
                    enqueued_at: now,
                    entered_at: now,
                    visible_at,
                    receive_count: 0,
                    lease: None,
                    rich: Rich::default(),
                    dedup: key.map(|k| (k.to_string(), dedup_until)),
                }));
            }
            if let Some(max) = cfg.max_depth
                && core.state.queues[&qid].depth() + records.len() as u64 > max
            {
                return Err(StoreError::QueueFull {
                    queue: queue.to_string(),
                    max_depth: max,
                    retry_after: Duration::from_secs(1),
                });
            }
            let pos = if records.is_empty() {
                None
            } else {
                Some(core.commit(records)?)
            };
            core.state.promote(qid, now);
            (out, pos, core.state.queues[&qid].notify.clone())
        };
        notify.notify_waiters();
        if let Some(pos) = pos {
            self.inner.answerable(pos).await?;
        }
        Ok(out)
    }

    async fn receive(
        &self,
        queue: &QueueName,
        req: ReceiveRequest,
    ) -> Result<Vec<Delivery>, StoreError> {
        validate_receive(&req)?;
        let until = tokio::time::Instant::now() + req.wait;
        let notify = self.notifier(queue)?;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_receive(queue, &req)? {
                Attempted::Got(out, wait) => {
                    match wait {
                        Some((pos, true)) => self.inner.durable(pos).await?,
                        Some((pos, false)) => self.inner.answerable(pos).await?,
                        None => {}
                    }
                    return Ok(out);
                }
                Attempted::Empty { next_wake } => {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Ok(Vec::new());
                    }
                    // Re-check at the next due time (delay over, lease end, rate window),
                    // and at least every second so a moved clock is noticed.
                    let nap =
                        long_poll_nap(left, Duration::from_secs(1), self.inner.now(), next_wake);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(nap) => {}
                    }
                }
            }
        }
    }

    async fn ack(
        &self,
        queue: &QueueName,
        acks: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        validate_ack_batch(acks.len())?;
        let (out, pos) = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            let qid = core.qid(queue)?;
            core.maintain(qid, now)?;
            let cfg = core.state.queues[&qid].config.clone();
            let keep_until = now + cfg.result_ttl.as_millis() as i64;
            let mut seen = std::collections::HashSet::new();
            let mut plain = Vec::new();
            let mut records = Vec::new();
            let mut out = Vec::with_capacity(acks.len());
            for a in acks {
                let m = match core.leased(qid, &a.receipt) {
                    Ok(m) if seen.insert(a.receipt.id) => m,
                    Ok(_) | Err(_) => {
                        out.push(Err(StoreError::ReceiptStale));
                        continue;
                    }
                };
                let acked = Acked {
                    id: a.receipt.id.0,
                    qid,
                    receive_count: m.receive_count(),
                    at: now,
                    keep_until,
                    cancelled: m.cancel_requested(),
                };
                match a.result {
                    Some(result) if result.len() > cfg.max_message_bytes as usize => {
                        seen.remove(&a.receipt.id);
                        out.push(Err(StoreError::PayloadTooLarge(format!(
                            "result is {} bytes; queue \"{queue}\" keeps results of at most {} bytes (max_message_bytes)",
                            result.len(),
                            cfg.max_message_bytes
                        ))));
                        continue;
                    }
                    Some(result) if keep_until > now && !acked.cancelled => {
                        records.push(Record::Complete { acked, result })
                    }
                    _ => plain.push(acked),
                }
                out.push(Ok(()));
            }
            if !plain.is_empty() {
                records.push(Record::Ack(plain));
            }
            let pos = if records.is_empty() {
                None
            } else {
                Some(core.commit(records)?)
            };
            (out, pos)
        };
        if let Some(pos) = pos {
            self.inner.answerable(pos).await?;
        }
        Ok(out)
    }

    async fn lease_may_overlap_ack(&self, _queue: &QueueName) -> bool {
        // `ack` decides and appends under the state lock before its one await (durability).
        true
    }

    async fn nack(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        failure: Failure,
    ) -> Result<NackOutcome, StoreError> {
        validate_nack_delay(delay)?;
        let (outcome, notify) = self
            .with_lease(queue, &receipt, |core, qid, m, now| {
                if m.cancel_requested() {
                    let notify = core.state.queues[&qid].notify.clone();
                    let outcome = NackOutcome {
                        state: Some(MessageState::Completed),
                        queue: queue.clone(),
                    };
                    return Ok((
                        vec![core.end_cancelled(qid, receipt.id.0, &m, now)],
                        (outcome, notify),
                    ));
                }
                let cfg = core.state.queues[&qid].config.clone();
                let (_, mut rich) = core.load(receipt.id.0, &m)?;
                apply_failure(&mut rich, now, AttemptOutcome::Nacked, &failure);
                let id = receipt.id.0;
                let (update, state) = match lifecycle::after_nack(&cfg, m.receive_count(), delay) {
                    AfterFailure::Retry(d) => (
                        UpdateRecord {
                            event: UpdateEvent::Nack,
                            id,
                            qid,
                            visible_at: Timestamp(now).plus(d).as_millis(),
                            entered_at: m.entered_at,
                            receive_count: m.receive_count(),
                            rich,
                        },
                        Some(if d.is_zero() {
                            MessageState::Visible
                        } else {
                            MessageState::Delayed
                        }),
                    ),
                    AfterFailure::DeadLetter(reason) => {
                        let name = queue.clone();
                        (
                            core.dead_letter(
                                &cfg,
                                &name,
                                id,
                                &m,
                                rich,
                                reason,
                                UpdateEvent::NackExhausted { from: qid },
                                now,
                            )?,
                            None,
                        )
                    }
                };
                let to = update.qid;
                let notify = core.state.queues[&to].notify.clone();
                let q = core.state.queues[&to].name.clone();
                Ok((
                    vec![Record::Update(update)],
                    (NackOutcome { state, queue: q }, notify),
                ))
            })
            .await?;
        // A waiting consumer wakes and its receive makes the message visible (every call
        // brings its queue up to now first).
        notify.notify_waiters();
        Ok(outcome)
    }

    async fn reject(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        failure: Failure,
    ) -> Result<QueueName, StoreError> {
        self.with_lease(queue, &receipt, |core, qid, m, now| {
            if m.cancel_requested() {
                return Ok((
                    vec![core.end_cancelled(qid, receipt.id.0, &m, now)],
                    queue.clone(),
                ));
            }
            let cfg = core.state.queues[&qid].config.clone();
            let (_, mut rich) = core.load(receipt.id.0, &m)?;
            apply_failure(&mut rich, now, AttemptOutcome::Rejected, &failure);
            let u = core.dead_letter(
                &cfg,
                queue,
                receipt.id.0,
                &m,
                rich,
                DeadLetterReason::Rejected,
                UpdateEvent::Rejected { from: qid },
                now,
            )?;
            let dlq = core.state.queues[&u.qid].name.clone();
            Ok((vec![Record::Update(u)], dlq))
        })
        .await
    }

    async fn move_message(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        to: &QueueName,
        failure: Failure,
    ) -> Result<(), StoreError> {
        sluice_core::store::validate_move(queue, to)?;
        let notify = self
            .with_lease(queue, &receipt, |core, qid, m, now| {
                let to_qid = core.qid(to)?;
                if m.cancel_requested() {
                    let notify = core.state.queues[&qid].notify.clone();
                    return Ok((vec![core.end_cancelled(qid, receipt.id.0, &m, now)], notify));
                }
                let (_, mut rich) = core.load(receipt.id.0, &m)?;
                apply_failure(&mut rich, now, AttemptOutcome::Moved, &failure);
                rich.source_queue = Some(queue.to_string());
                rich.dead_letter = None;
                let u = UpdateRecord {
                    event: UpdateEvent::Moved { from: qid },
                    id: receipt.id.0,
                    qid: to_qid,
                    visible_at: now,
                    entered_at: now,
                    receive_count: 0,
                    rich,
                };
                Ok((
                    vec![Record::Update(u)],
                    core.state.queues[&to_qid].notify.clone(),
                ))
            })
            .await?;
        notify.notify_waiters();
        Ok(())
    }

    async fn extend(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Result<LeaseState, StoreError> {
        validate_visibility(visibility)?;
        self.with_lease(queue, &receipt, |_, _, m, now| {
            let deadline = Timestamp(now).plus(visibility);
            Ok((
                vec![Record::Extend {
                    id: receipt.id.0,
                    token: receipt.token,
                    deadline: deadline.as_millis(),
                }],
                LeaseState {
                    deadline,
                    cancel_requested: m.cancel_requested(),
                },
            ))
        })
        .await
    }

    async fn release(&self, queue: &QueueName, receipt: Receipt) -> Result<(), StoreError> {
        let notify = self
            .with_lease(queue, &receipt, |core, qid, m, now| {
                let notify = core.state.queues[&qid].notify.clone();
                if m.cancel_requested() {
                    return Ok((vec![core.end_cancelled(qid, receipt.id.0, &m, now)], notify));
                }
                let (_, rich) = core.load(receipt.id.0, &m)?;
                let u = UpdateRecord {
                    event: UpdateEvent::Released,
                    id: receipt.id.0,
                    qid,
                    visible_at: now,
                    entered_at: m.entered_at,
                    receive_count: m.receive_count().saturating_sub(1),
                    rich,
                };
                Ok((vec![Record::Update(u)], notify))
            })
            .await?;
        notify.notify_waiters();
        Ok(())
    }

    async fn progress(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        mut progress: Progress,
    ) -> Result<LeaseState, StoreError> {
        progress.validate()?;
        let mut core = self.inner.lock();
        let now = self.inner.now();
        let qid = core.qid(queue)?;
        core.maintain(qid, now)?;
        let m = core.leased(qid, &receipt)?;
        progress.at = Timestamp(now);
        core.state.progress.insert(receipt.id.0, progress);
        Ok(LeaseState {
            deadline: Timestamp(m.at),
            cancel_requested: m.cancel_requested(),
        })
    }

    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError> {
        let pos = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            if let Some(m) = core.state.msgs.get(&id.0).copied() {
                core.maintain(m.qid, now)?;
            }
            match core.state.msgs.get(&id.0).copied() {
                // A dead letter is a finished (failed) task: left as it is.
                Some(m) if core.load(id.0, &m)?.1.dead_letter.is_some() => None,
                Some(m) if m.slot() == Slot::Leased && m.cancel_requested() => None,
                Some(m) if m.slot() == Slot::Leased => {
                    Some(core.commit(vec![Record::Cancel { id: id.0 }])?)
                }
                Some(m) => {
                    let rec = core.end_cancelled(m.qid, id.0, &m, now);
                    Some(core.commit(vec![rec])?)
                }
                None => None,
            }
        };
        if let Some(pos) = pos {
            self.inner.answerable(pos).await?;
        }
        self.get_message(id).await
    }

    async fn browse(
        &self,
        queue: &QueueName,
        req: BrowseRequest,
    ) -> Result<BrowsePage, StoreError> {
        validate_limit(req.limit)?;
        let after = match &req.cursor {
            None => None,
            Some(c) => {
                let c: BrowseCursor = c.parse()?;
                Some((c.part, c.at, c.id))
            }
        };
        let mut core = self.inner.lock();
        let now = self.inner.now();
        let qid = core.qid(queue)?;
        core.maintain_with_sources(qid, now)?;
        let q = &core.state.queues[&qid];
        // Keys are (index, time, id): "all" walks in-flight, then visible, then delayed.
        let parts: Vec<(u8, &std::collections::BTreeSet<(i64, u64)>)> = match req.state {
            BrowseState::Visible => vec![(1, &q.ready)],
            BrowseState::Delayed => vec![(2, &q.delayed)],
            BrowseState::InFlight => vec![(0, &q.leased)],
            BrowseState::All => vec![(0, &q.leased), (1, &q.ready), (2, &q.delayed)],
        };
        let mut keys: Vec<(u8, i64, u64)> = Vec::new();
        for (tag, index) in parts {
            let range = match after {
                Some((t, at, id)) if t == tag => index.range((
                    std::ops::Bound::Excluded((at, id)),
                    std::ops::Bound::Unbounded,
                )),
                Some((t, _, _)) if t > tag => continue,
                _ => index.range(..),
            };
            keys.extend(
                range
                    .take(req.limit as usize + 1 - keys.len())
                    .map(|(at, id)| (tag, *at, *id)),
            );
            if keys.len() > req.limit as usize {
                break;
            }
        }
        let more = keys.len() > req.limit as usize;
        let mut messages = Vec::with_capacity(keys.len());
        for (_, _, id) in keys.iter().take(req.limit as usize) {
            let m = core.state.msgs[id];
            messages.push(core.message_view(*id, &m)?);
        }
        let next_cursor = if more {
            keys.get(req.limit as usize - 1).map(|(part, at, id)| {
                BrowseCursor {
                    part: *part,
                    at: *at,
                    id: *id,
                }
                .to_string()
            })
        } else {
            None
        };
        Ok(BrowsePage {
            messages,
            next_cursor,
        })
    }

    async fn get_message(&self, id: MessageId) -> Result<Message, StoreError> {
        let mut core = self.inner.lock();
        let now = self.inner.now();
        if let Some(m) = core.state.msgs.get(&id.0).copied() {
            core.maintain(m.qid, now)?;
            if let Some(m) = core.state.msgs.get(&id.0).copied() {
                return core.message_view(id.0, &m);
            }
        }
        core.state.prune_done(now);
        let Some(d) = core.state.done.get(&id.0).copied() else {
            return Err(StoreError::MessageNotFound(id));
        };
        let result = if d.has_result {
            stored_result(core.log.read(d.loc)?, id.0)
        } else {
            None
        };
        Ok(Message {
            id,
            queue: core.state.queues[&d.qid].name.clone(),
            state: MessageState::Completed,
            body: None,
            attributes: Default::default(),
            enqueued_at: Timestamp(d.at),
            entered_at: Timestamp(d.at),
            visible_at: None,
            receive_count: d.receive_count,
            last_error: None,
            attempts: Vec::new(),
            dedup_id: None,
            source_queue: None,
            dead_letter: None,
            result,
            completed_at: Some(Timestamp(d.at)),
            cancelled: d.cancelled,
            progress: None,
        })
    }

    async fn delete_message(&self, id: MessageId) -> Result<(), StoreError> {
        let pos = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            if !core.state.msgs.contains_key(&id.0) && !core.state.done.contains_key(&id.0) {
                return Err(StoreError::MessageNotFound(id));
            }
            core.commit(vec![Record::Remove {
                ids: vec![id.0],
                reason: RemoveReason::Deleted,
                at: now,
            }])?
        };
        self.inner.answerable(pos).await
    }

    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError> {
        let (n, pos) = {
            let mut core = self.inner.lock();
            let qid = core.qid(queue)?;
            let n = core.state.queues[&qid].depth();
            (n, core.commit(vec![Record::Purge { qid }])?)
        };
        self.inner.answerable(pos).await?;
        Ok(n)
    }

    async fn summarize(
        &self,
        queue: &QueueName,
        req: sluice_core::summary::SummaryRequest,
    ) -> Result<sluice_core::summary::Summary, StoreError> {
        req.validate()?;
        crate::ops::summary::answer(&self.inner, queue, &req).await
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        let mut core = self.inner.lock();
        let now = self.inner.now();
        let qid = core.qid(queue)?;
        core.maintain(qid, now)?;
        let dlq = core.state.queues[&qid]
            .config
            .dead_letter_queue
            .as_ref()
            .and_then(|d| core.state.names.get(d).copied());
        let dead_letter_depth = match dlq {
            Some(d) => {
                core.maintain_with_sources(d, now)?;
                core.state.queues[&d].depth()
            }
            None => 0,
        };
        let q = &core.state.queues[&qid];
        Ok(QueueStats {
            visible: q.ready.len() as u64,
            delayed: q.delayed.len() as u64,
            in_flight: q.leased.len() as u64,
            dead_letter_depth,
            oldest_visible_age: q.ready.first().map_or(Duration::ZERO, |(at, _)| {
                Timestamp(now).since(Timestamp(*at))
            }),
            completed: q.completed,
            totals: q.totals,
        })
    }

    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
        let (job, pos) = {
            let mut core = self.inner.lock();
            let (job, rec) = crate::redrive::create(&mut core, spec, self.inner.now())?;
            (job, core.commit(vec![rec])?)
        };
        self.inner.answerable(pos).await?;
        Ok(job)
    }

    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError> {
        crate::redrive::get(&self.inner.lock(), id)
    }

    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError> {
        Ok(self
            .inner
            .lock()
            .state
            .jobs
            .values()
            .rev()
            .cloned()
            .collect())
    }

    async fn control_redrive(
        &self,
        id: RedriveId,
        control: sluice_core::RedriveControl,
    ) -> Result<RedriveJob, StoreError> {
        let (job, pos) = {
            let mut core = self.inner.lock();
            let (job, rec) = crate::redrive::control(&core, id, &control, self.inner.now())?;
            let pos = match rec {
                Some(rec) => Some(core.commit(vec![rec])?),
                None => None,
            };
            (job, pos)
        };
        if let Some(pos) = pos {
            self.inner.answerable(pos).await?;
        }
        Ok(job)
    }

    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError> {
        let now = self.inner.now();
        let (job, moved_ids, wake, pos) = {
            let mut core = self.inner.lock();
            let out = crate::redrive::step(&mut core, id, max, now)?;
            let pos = core.commit(vec![out.record])?;
            (out.job, out.moved_ids, out.wake, pos)
        };
        for n in wake {
            n.notify_waiters();
        }
        self.inner.answerable(pos).await?;
        Ok(RedriveStep {
            job,
            moved_now: moved_ids.len() as u64,
            at: Timestamp(now),
            moved_ids,
        })
    }

    async fn record_stats(
        &self,
        samples: Vec<(QueueName, sluice_core::stats::StatsSample)>,
    ) -> Result<(), StoreError> {
        let pos = {
            let mut core = self.inner.lock();
            let mut by_time: BTreeMap<i64, Vec<(Qid, sluice_core::stats::StatsSample)>> =
                BTreeMap::new();
            for (name, sample) in samples {
                let Some(qid) = core.state.names.get(&name).copied() else {
                    continue;
                };
                let q = &core.state.queues[&qid];
                if q.history.back().is_some_and(|last| last.at >= sample.at) {
                    continue;
                }
                by_time
                    .entry(sample.at.as_millis())
                    .or_default()
                    .push((qid, sample));
            }
            let records: Vec<Record> = by_time
                .into_iter()
                .map(|(at, entries)| Record::Samples { at, entries })
                .collect();
            if records.is_empty() {
                return Ok(());
            }
            core.commit(records)?
        };
        self.inner.answerable(pos).await
    }

    async fn audit_append(&self, events: Vec<sluice_core::AuditEvent>) -> Result<(), StoreError> {
        self.inner.lock().audit.append(&events, true)
    }

    async fn audit_query(
        &self,
        query: sluice_core::AuditQuery,
    ) -> Result<Vec<sluice_core::AuditEvent>, StoreError> {
        // Unsynced broker events are in the file already; reading sees them.
        self.inner.lock().audit.query(&query)
    }

    async fn stats_history(
        &self,
        queue: &QueueName,
        since: Timestamp,
    ) -> Result<Vec<sluice_core::stats::StatsSample>, StoreError> {
        let core = self.inner.lock();
        let qid = core.qid(queue)?;
        Ok(core.state.queues[&qid]
            .history
            .iter()
            .filter(|s| s.at >= since)
            .copied()
            .collect())
    }

    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        let mut core = self.inner.lock();
        core.state.prune_idempotent(self.inner.now());
        core.remembered(key)
    }

    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        validate_idempotent(key, &response)?;
        let pos = {
            let mut core = self.inner.lock();
            let now = self.inner.now();
            core.state.prune_idempotent(now);
            if let Some(kept) = core.remembered(key)? {
                return Ok(Some(kept));
            }
            let until = Timestamp(now).plus(IDEMPOTENCY_TTL).as_millis();
            core.commit(vec![Record::Idempotent {
                key: key.to_string(),
                until,
                response,
            }])?
        };
        self.inner.answerable(pos).await?;
        Ok(None)
    }
}

/// The result held by a completion record (an ack with result, or its compaction copy).
pub(crate) fn stored_result(rec: Record, id: u64) -> Option<sluice_core::Body> {
    match rec {
        Record::Complete { result, .. } => Some(result),
        Record::Kept { acked, results } => acked
            .iter()
            .zip(results)
            .find(|(a, _)| a.id == id)
            .and_then(|(_, r)| r),
        _ => None,
    }
}

async fn maintain_all(inner: &Inner, wait: bool) -> Result<(), StoreError> {
    {
        let mut core = inner.lock();
        let now = inner.now();
        let qids: Vec<Qid> = core.state.queues.keys().copied().collect();
        for qid in qids {
            core.state
                .retention_sweep(qid, now, RETENTION_SCAN_EVERY, RETENTION_SWEEP_STEP);
            core.maintain(qid, now)?;
        }
        core.audit.append(&[], true)?;
    }
    // After a restart, the dead letters replayed from update records learn their attributes
    // a chunk per hold of the lock.
    loop {
        {
            let mut core = inner.lock();
            if core.state.summary.fresh_mark() == 0 {
                break;
            }
            crate::ops::summary::learn_since(&mut core, None, crate::ops::summary::ATTRIBUTE_CHUNK);
        }
        tokio::task::yield_now().await;
    }
    crate::journal::compaction::compact(inner, wait).await
}

async fn maintenance_loop(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = maintain_all(&inner, false).await {
            tracing::warn!(error = %e, "background maintenance failed; retrying");
        }
    }
}
