//! The store's shared core: the in-memory state, the log and the audit log under one mutex
//! ([`Core`]), the handle every operation works through ([`Inner`]), and the steps the
//! operations share (commit, load, dead-lettering).
//!
//! Every call takes the state lock, decides with the lifecycle rules of `sluice-core`, appends
//! the resulting records to the log, applies them in memory, releases the lock and only then
//! waits for the group commit to make its records durable. The lock is never held across a
//! sync, so concurrent callers pile up behind one fsync instead of one each.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_core::message::{Attempt, Holder};
use sluice_core::{
    Attributes, Body, Clock, DeadLetter, DeadLetterReason, Message, MessageId, MessageState,
    QueueConfig, QueueInfo, QueueName, Receipt, StoreError, Timestamp,
};
use tokio::sync::watch;

use crate::catalog::{Catalog, CatalogQueue};
use crate::journal::log::{self, Durable, Log};
use crate::journal::record::{
    Acked, Completion, MessageRecord, Qid, Record, RemoveReason, Rich, Times, UpdateEvent,
    UpdateRecord,
};
use crate::state::{Msg, Slot, State};

/// Messages whose attributes are read from the log under one hold of the lock: a read takes
/// a few microseconds, so reading many lets other calls in between chunks instead of
/// stalling the broker for their whole length.
pub(crate) const ATTRIBUTE_CHUNK: usize = 4096;

/// The state of an open store, shared by its clones and its maintenance task.
pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) core: Mutex<Core>,
    pub(crate) durable: watch::Receiver<Durable>,
    /// The log's sync state, for callers that lead the group commit.
    pub(crate) sync: Arc<log::SyncShared>,
    /// Answers do not wait for syncs ([`crate::EmbeddedOptions::sync_interval`]).
    pub(crate) relaxed: bool,
    /// Held while a compaction runs: one at a time.
    pub(crate) compacting: tokio::sync::Mutex<()>,
    /// Held open to keep the directory lock.
    pub(crate) _lock: std::fs::File,
}

/// Everything the one mutex guards: a change to the state is appended to the log (and its
/// audit lines written) under the same hold of the lock, so the two never disagree.
pub(crate) struct Core {
    pub(crate) state: State,
    pub(crate) log: Log,
    pub(crate) audit: crate::audit::AuditLog,
    /// The queue catalog's journal; changes are appended here before they are applied.
    pub(crate) catalog: crate::catalog::Journal,
    /// Pending claims on idempotency keys, in memory only: every request holding one runs
    /// in this process, so a restart ends them all (`crate::ops::records`).
    pub(crate) claims: crate::ops::records::Claims,
}

impl Inner {
    /// Takes the state lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic under the lock would be a bug; the state it leaves is still the last
        // consistent one because records are applied only after they are written.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, in ms since the epoch, from the store's clock.
    pub(crate) fn now(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Waits until the log is durable up to `pos`.
    pub(crate) async fn durable(&self, pos: u64) -> Result<(), StoreError> {
        log::wait_durable(&self.sync, self.durable.clone(), pos).await
    }

    /// Waits until a change written up to `pos` may be answered: once it is durable, or at
    /// once under relaxed durability ([`crate::EmbeddedOptions::sync_interval`]) while no sync has
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

    /// Runs a receipt-checked change: bring the queue up to now, check the lease, build records.
    pub(crate) async fn with_lease<T>(
        &self,
        queue: &QueueName,
        receipt: &Receipt,
        f: impl FnOnce(&mut Core, Qid, Msg, i64) -> Result<(Vec<Record>, T), StoreError>,
    ) -> Result<T, StoreError> {
        let pos = {
            let mut core = self.lock();
            let now = self.now();
            let qid = core.qid(queue)?;
            core.expire(qid, now)?;
            let m = core.leased(qid, receipt)?;
            let (records, out) = f(&mut core, qid, m, now)?;
            let pos = core.commit(records)?;
            (pos, out)
        };
        self.answerable(pos.0).await?;
        Ok(pos.1)
    }
}

impl Core {
    /// The id of queue `name`.
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
            self.learn_attributes(Some(mark), usize::MAX);
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
                Record::Update(u) | Record::Regrouped { update: u, .. } => {
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
        let Some(rec) = self.log.read_sized(m.body, Some(m.body_len))?.into_base() else {
            return Err(StoreError::unavailable(
                "log record is not a message (index out of step)",
            ));
        };
        let rich = if m.aux == m.body {
            rec.rich.clone()
        } else {
            self.history(id, m)?
        };
        Ok((rec, rich))
    }

    /// The record of update `u`: a plain update, or for a grouped message that it brings into
    /// another queue, one that also gives it its place at the end of its group's line there.
    pub(crate) fn update(&mut self, u: UpdateRecord, now: i64) -> Record {
        match self.state.place_for(&u, now) {
            Some(order) => Record::Regrouped { update: u, order },
            None => Record::Update(u),
        }
    }

    /// The update that moves message `id` of queue `name` to its dead-letter queue.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dead_letter(
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
        let dlq_name = cfg
            .dead_letter_queue
            .as_ref()
            .ok_or_else(|| StoreError::no_dead_letter_queue(name.as_str()))?;
        let dlq = self
            .qid(dlq_name)
            .map_err(|_| StoreError::dead_letter_queue_missing(dlq_name.as_str(), name.as_str()))?;
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
    /// record marked cancelled (sticky), kept for the queue's `result_ttl` with the attempts
    /// that failed before.
    pub(crate) fn end_cancelled(
        &self,
        qid: Qid,
        id: u64,
        m: &Msg,
        now: i64,
    ) -> Result<Record, StoreError> {
        let ttl = self
            .state
            .queues
            .get(&qid)
            .map_or(0, |q| q.config.result_ttl.as_millis() as i64);
        let acked = Acked {
            id,
            qid,
            receive_count: m.receive_count(),
            at: now,
            keep_until: now + ttl,
            cancelled: true,
        };
        let record = self
            .completion(acked, m, None)?
            .unwrap_or_else(|| Record::Ack(vec![acked]));
        let times = self.times(&acked, m)?.into_iter().collect();
        Ok(Record::timed(record, times))
    }

    /// When message `acked.id` (`m`) was sent and entered its queue, for its completed
    /// record; `None` when no completed record is kept. Only a message that entered its
    /// queue after its send (dead-lettered, moved, redriven) pays for reading its send time.
    pub(crate) fn times(&self, acked: &Acked, m: &Msg) -> Result<Option<Times>, StoreError> {
        if acked.keep_until <= acked.at {
            return Ok(None);
        }
        let enqueued_at = if m.entered_later() {
            let Some(rec) = self.log.read_sized(m.body, Some(m.body_len))?.into_base() else {
                return Err(StoreError::unavailable(
                    "log record is not a message (index out of step)",
                ));
            };
            rec.enqueued_at
        } else {
            m.entered_at
        };
        Ok(Some(Times {
            id: acked.id,
            enqueued_at,
            entered_at: m.entered_at,
        }))
    }

    /// The record of its own that completes message `id` (`m`) as `acked`, keeping `result`
    /// and, when the message has any and its completed record is kept, the attempts that
    /// failed before (only messages that failed pay for reading them). `None` for a plain
    /// ack, which shares one [`Record::Ack`] with the other plain acks of its batch.
    pub(crate) fn completion(
        &self,
        acked: Acked,
        m: &Msg,
        result: Option<Body>,
    ) -> Result<Option<Record>, StoreError> {
        let kept = acked.keep_until > acked.at;
        if kept && m.has_history() {
            let rich = self.history(acked.id, m)?;
            return Ok(Some(Record::Finished(Completion {
                acked,
                result,
                attempts: rich.attempts,
                last_error: rich.last_error,
            })));
        }
        Ok(match result {
            Some(result) if kept => Some(Record::Complete { acked, result }),
            _ => None,
        })
    }

    /// The rich fields of message `id` (`m`), read from its newest record holding them
    /// (without reading its body when an update holds them).
    pub(crate) fn history(&self, id: u64, m: &Msg) -> Result<Rich, StoreError> {
        if m.aux == m.body {
            return Ok(self.load(id, m)?.1);
        }
        self.log.read(m.aux)?.into_rich(id).ok_or_else(|| {
            StoreError::unavailable(
                "log record is not an update of the message (index out of step)",
            )
        })
    }

    /// Finds the live lease named by `receipt` in queue `qid`.
    pub(crate) fn leased(&self, qid: Qid, receipt: &Receipt) -> Result<Msg, StoreError> {
        match self.state.msgs.get(&receipt.id.0) {
            Some(m) if m.qid == qid && m.holds(receipt.token) => Ok(*m),
            _ => Err(StoreError::ReceiptStale),
        }
    }

    /// Queue `qid` as the API shows it.
    pub(crate) fn info(&self, qid: Qid) -> QueueInfo {
        let q = &self.state.queues[&qid];
        QueueInfo {
            name: q.name.clone(),
            config: q.config.clone(),
            created_at: q.created_at,
        }
    }

    /// The catalog of the current queues, for a new snapshot.
    pub(crate) fn catalog(&self) -> Catalog {
        let mut queues: Vec<CatalogQueue> = self
            .state
            .queues
            .iter()
            .map(|(qid, q)| catalog_entry(*qid, q))
            .collect();
        queues.sort_by_key(|q| q.qid);
        Catalog {
            next_qid: self.state.next_qid,
            queues,
        }
    }

    /// A live message as the API shows it, body and history read from the log.
    pub(crate) fn message_view(&self, id: u64, m: &Msg) -> Result<Message, StoreError> {
        let (rec, rich) = self.load(id, m)?;
        let q = &self.state.queues[&m.qid];
        Ok(Message {
            trace: rec.trace,
            id: MessageId(id),
            queue: q.name.clone(),
            state: match m.slot() {
                Slot::Delayed => MessageState::Delayed,
                Slot::Ready | Slot::Parked => MessageState::Visible,
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
            group: if m.grouped() {
                self.state.group_of(id)
            } else {
                None
            },
            key: self.state.key_of(m, id),
            priority: self.state.tag_of(m, id).and_then(|t| t.priority),
        })
    }

    /// The attributes of message `id` if it is still in queue `qid`, read from its record.
    pub(crate) fn read_attributes(
        &self,
        qid: Qid,
        id: u64,
    ) -> Result<Option<Attributes>, StoreError> {
        let Some(m) = self.state.msgs.get(&id).filter(|m| m.qid == qid) else {
            return Ok(None);
        };
        match self.log.read_sized(m.body, Some(m.body_len))?.into_base() {
            Some(rec) => Ok(Some(rec.attributes)),
            None => Err(StoreError::unavailable(
                "log record is not a message (index out of step)",
            )),
        }
    }

    /// Reads the attributes of the messages indexed without them since `mark` (this commit's),
    /// or of up to `limit` of the oldest still missing when `mark` is `None` (the background
    /// pass after a restart). Returns how many it read.
    pub(crate) fn learn_attributes(&mut self, mark: Option<usize>, limit: usize) -> usize {
        let batch = self.state.summary.take_fresh(mark, limit);
        let mut read = 0;
        for (qid, id) in batch {
            if !self.state.summary.missing_attributes(qid, id) {
                continue;
            }
            match self.read_attributes(qid, id) {
                Ok(Some(attrs)) => {
                    self.state.summary.learn(qid, id, &attrs);
                    read += 1;
                }
                Ok(None) => {}
                // The next summary that needs them reads them again.
                Err(e) => tracing::debug!(error = %e, "could not read a dead letter's attributes"),
            }
        }
        read
    }
}

/// What a completion record keeps of message `id`: its result, the attempts that failed
/// before, and its last error.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The lease of the delivery that completed it, when the record holds it.
    pub holder: Option<Holder>,
    pub result: Option<Body>,
    pub attempts: Vec<Attempt>,
    pub last_error: Option<String>,
}

/// What completion record `rec` (an ack, an ack with result or history, or a compaction copy
/// of one) keeps of message `id`.
pub(crate) fn stored_completion(rec: Record, id: u64) -> Kept {
    stored_completions(rec).remove(&id).unwrap_or_default()
}

/// What completion record `rec` keeps of each message it completes, in one pass: a
/// compaction copy holds thousands, and reading it once per message would be quadratic.
pub(crate) fn stored_completions(rec: Record) -> HashMap<u64, Kept> {
    let mut out = HashMap::new();
    add_completions(rec, &mut out);
    out
}

fn add_completions(rec: Record, out: &mut HashMap<u64, Kept>) {
    let mut add = |c: Completion| {
        out.insert(
            c.acked.id,
            Kept {
                holder: None,
                result: c.result,
                attempts: c.attempts,
                last_error: c.last_error,
            },
        );
    };
    match rec {
        Record::Complete { acked, result } => add(Completion {
            acked,
            result: Some(result),
            attempts: Vec::new(),
            last_error: None,
        }),
        Record::Finished(c) => add(c),
        Record::Kept { acked, results } => {
            for (a, result) in acked.into_iter().zip(results) {
                add(Completion {
                    acked: a,
                    result,
                    attempts: Vec::new(),
                    last_error: None,
                });
            }
        }
        Record::KeptFinished { finished } => finished.into_iter().for_each(add),
        Record::Timed { record, .. } => add_completions(*record, out),
        Record::Held { record, holds } => {
            add_completions(*record, out);
            for h in holds {
                if let Some(holder) = h.holder() {
                    out.entry(h.id).or_default().holder = Some(holder);
                }
            }
        }
        _ => {}
    }
}

/// Queue `qid` as the catalog keeps it.
pub(crate) fn catalog_entry(qid: Qid, q: &crate::state::QueueState) -> CatalogQueue {
    CatalogQueue {
        qid,
        name: q.name.clone(),
        config: q.config.clone(),
        created_at: q.created_at,
        flow: q.flow.clone(),
        key_flows: q.kept_key_flows(),
    }
}
