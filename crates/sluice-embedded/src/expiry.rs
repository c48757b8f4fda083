//! Expiry: the transitions time alone makes. A lease whose deadline passed ends (the message
//! is visible again, or dead-lettered after its last attempt), a message past its queue's
//! retention is dead-lettered or dropped, a delayed message whose time came becomes visible,
//! and dedup ids, completed records and idempotency responses past their time are forgotten.
//!
//! Nothing runs on a timer per message: every call brings the queue it touches up to now
//! first ([`Core::expire`]), and the maintenance task does the same for every queue.

use sluice_core::adaptive::Outcome;
use sluice_core::lifecycle::{self, AfterFailure};
use sluice_core::{AttemptOutcome, DeadLetterReason, StoreError, Timestamp};

use crate::core::Core;
use crate::journal::record::{Qid, Record, RemoveReason, UpdateEvent, UpdateRecord};
use crate::state::{LeaseHolder, Slot, State};

/// Most messages expired for retention per call, to bound the time the lock is held.
const RETENTION_BATCH: usize = 10_000;
/// How often retention sweeps a whole queue (in ms), at most.
const RETENTION_SCAN_EVERY: i64 = 60_000;
/// Messages the retention sweep looks at per background pass (every 500 ms): a few
/// milliseconds under the lock; a queue of 10 million is swept in about a minute.
const RETENTION_SWEEP_STEP: usize = 100_000;

impl Core {
    /// Expires in every queue, the background round: also sweeps each queue for messages
    /// past retention that the per-call check misses.
    pub(crate) fn expire_all(&mut self, now: i64) -> Result<(), StoreError> {
        let qids: Vec<Qid> = self.state.queues.keys().copied().collect();
        for qid in qids {
            sweep_retention(
                &mut self.state,
                qid,
                now,
                RETENTION_SCAN_EVERY,
                RETENTION_SWEEP_STEP,
            );
            self.expire(qid, now)?;
        }
        Ok(())
    }

    /// Brings a queue up to `now`: forgets expired dedup ids and completed records, ends
    /// expired leases, expires messages past retention, makes due messages visible.
    /// Returns the log position of any records written.
    ///
    /// Long because all that time alone changes in a queue (leases run out, messages past retention
    /// dead-lettered or dropped) goes into one list of records and one commit, then the queue and
    /// its DLQ are promoted.
    pub(crate) fn expire(&mut self, qid: Qid, now: i64) -> Result<Option<u64>, StoreError> {
        self.state.prune_done(now);
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return Ok(None);
        };
        q.prune_dedup(now);
        q.key_counts.forget_idle(now);
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
        // Parked messages (waiting for their FIFO group) are visible too, by the same time.
        let mut too_old: Vec<u64> = q
            .ready
            .iter()
            .take_while(|(at, _)| *at <= cutoff)
            .chain(q.parked.iter().take_while(|(at, _)| *at <= cutoff))
            .take(RETENTION_BATCH)
            .map(|(_, id)| *id)
            .collect();
        // Found by the background sweep (`sweep_retention`); still to be checked,
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
        let mut failures = crate::flow::Outcomes::of(q);
        // Whether anything went to the dead-letter queue, which is then brought up to now.
        let mut dead_lettered = false;
        for id in expired_leases {
            let m = self.state.msgs[&id];
            if m.cancel_requested() {
                ended.push(self.end_cancelled(qid, id, &m, now)?);
                continue;
            }
            failures.add(|| self.key_arc(&m, id), Outcome::Failure);
            let (_, mut rich) = self.load(id, &m)?;
            let holder = self.state.holders.get(&id).map(LeaseHolder::holder);
            lifecycle::record_attempt(
                &mut rich.attempts,
                lifecycle::ended_attempt(
                    Timestamp(m.at),
                    AttemptOutcome::LeaseExpired,
                    None,
                    None,
                    holder.as_ref(),
                ),
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
                    AfterFailure::DeadLetter(reason) => {
                        dead_lettered = true;
                        self.dead_letter(
                            &cfg,
                            &name,
                            id,
                            &m,
                            rich,
                            reason,
                            UpdateEvent::LeaseExhausted { from: qid },
                            now,
                        )?
                    }
                },
            );
        }
        let mut records: Vec<Record> = records.into_iter().map(|u| self.update(u, now)).collect();
        records.extend(ended);
        let mut dropped = Vec::new();
        for id in too_old {
            let m = self.state.msgs[&id];
            if cfg.dead_letter_queue.is_some() {
                let (_, rich) = self.load(id, &m)?;
                dead_lettered = true;
                let u = self.dead_letter(
                    &cfg,
                    &name,
                    id,
                    &m,
                    rich,
                    DeadLetterReason::Expired,
                    UpdateEvent::Expired { from: qid },
                    now,
                )?;
                let r = self.update(u, now);
                records.push(r);
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
        self.flow_settle(qid, failures, now);
        // The dead-letter queue too: what was dead-lettered just now is visible there now,
        // whoever looks next (a lookup of the message reads it where it went).
        let dlq = cfg
            .dead_letter_queue
            .as_ref()
            .filter(|_| dead_lettered)
            .and_then(|n| self.state.names.get(n).copied());
        for q in std::iter::once(qid).chain(dlq) {
            if self.state.promote(q, now) > 0 {
                self.state.queues[&q].notify.notify_waiters();
            }
        }
        Ok(pos)
    }

    /// Expires in `qid` and every queue that dead-letters into it, so a DLQ shows messages whose
    /// last lease ran out even when nobody touched their source queue since.
    pub(crate) fn expire_with_sources(&mut self, qid: Qid, now: i64) -> Result<(), StoreError> {
        let name = self.state.queues.get(&qid).map(|q| q.name.clone());
        let sources: Vec<Qid> = self
            .state
            .queues
            .iter()
            .filter(|(_, q)| name.is_some() && q.config.dead_letter_queue == name)
            .map(|(s, _)| *s)
            .collect();
        for s in sources {
            self.expire(s, now)?;
        }
        self.expire(qid, now)?;
        Ok(())
    }
}

/// Looks at up to `step` more messages of queue `qid` for ones past retention that the
/// cheap check misses: messages whose visible-at is recent (they waited out a retry) but
/// which entered the queue before the cutoff. A sweep of the whole queue starts every
/// `every` ms and goes on from where it stopped, `step` messages per call, so the lock
/// is never held for a scan of a deep queue (10 million messages took about a second).
/// What it finds goes to `QueueState::overdue`.
fn sweep_retention(state: &mut State, qid: Qid, now: i64, every: i64, step: usize) {
    let Some(q) = state.queues.get_mut(&qid) else {
        return;
    };
    let retention = q.config.retention.as_millis() as i64;
    let cutoff = now - retention;
    let (mut slot, mut after) = match q.sweep {
        Some(at) => at,
        None if now.saturating_sub(q.retention_scan) >= every.min(retention / 4) => {
            q.retention_scan = now;
            (Slot::Ready, None)
        }
        None => return,
    };
    let mut left = step;
    loop {
        let index = match slot {
            Slot::Ready => &q.ready,
            Slot::Parked => &q.parked,
            _ => &q.delayed,
        };
        let range = match after {
            Some(k) => index.range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
            None => index.range(..),
        };
        let mut seen = 0;
        for &(at, id) in range.take(left) {
            seen += 1;
            after = Some((at, id));
            if at > cutoff && state.msgs.get(&id).is_some_and(|m| m.entered_at <= cutoff) {
                q.overdue.push(id);
            }
        }
        left -= seen;
        if left > 0 {
            // This index is done: on to the next, or the sweep is over.
            if slot != Slot::Delayed {
                slot = if slot == Slot::Ready {
                    Slot::Parked
                } else {
                    Slot::Delayed
                };
                after = None;
                continue;
            }
            q.sweep = None;
            return;
        }
        q.sweep = Some((slot, after));
        return;
    }
}
