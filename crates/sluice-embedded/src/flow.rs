//! Adaptive rate and circuit breaker of governed queues (`sluice_core::adaptive`): outcomes
//! handed to a queue's [`FlowState`], its events written to the audit log, and its state kept
//! in the catalog when it changed in a way worth keeping.
//!
//! Everything runs under the store's lock, in memory: an outcome is a few additions, and the
//! catalog is written only from the maintenance round, for queues whose state changed (a
//! breaker transition, a forced state, an audited rate step), a few lines a minute at most.
//! What changed in between (the counts of a round, the breaker's window) restarts empty after
//! a restart.

use sluice_core::adaptive::{BreakerForce, FlowEvent, FlowStats, Outcome, Tally};
use sluice_core::{StoreError, Timestamp};

use crate::audit::AuditLog;
use crate::catalog::{CatalogQueue, Change};
use crate::core::Core;
use crate::journal::record::Qid;
use crate::state::QueueState;

/// Writes `events` of queue `q` to the audit log, marks its state to be kept, and wakes its
/// waiting receivers (a breaker that closed or turned half-open lets deliveries through).
pub(crate) fn audit(audit: &mut AuditLog, q: &mut QueueState, events: &[FlowEvent]) {
    if events.is_empty() {
        return;
    }
    q.flow_dirty = true;
    let lines: Vec<_> = events.iter().map(|e| e.audit(q.name.as_str())).collect();
    if let Err(e) = audit.append(&lines, false) {
        tracing::warn!(error = %e, queue = %q.name, "could not write adaptive rate or breaker events to the audit log");
    }
    q.notify.notify_waiters();
}

impl Core {
    /// Hands the outcomes of deliveries of queue `qid` that ended at `now` to its flow state,
    /// if it is governed.
    pub(crate) fn flow_observe(&mut self, qid: Qid, tally: &Tally, now: i64) {
        if tally.is_empty() {
            return;
        }
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return;
        };
        let Some((flow, cfg)) = q.govern(Timestamp(now)) else {
            return;
        };
        let events = flow.observe(cfg, tally, Timestamp(now));
        audit(&mut self.audit, q, &events);
    }

    /// An operator's order to queue `qid`'s breaker, kept in the catalog before it answers
    /// (a forced-open breaker stays open across a restart); the state afterwards.
    pub(crate) fn flow_force(
        &mut self,
        qid: Qid,
        force: BreakerForce,
        now: i64,
    ) -> Result<FlowStats, StoreError> {
        let next_qid = self.state.next_qid;
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return Err(StoreError::QueueNotFound(format!("{qid}")));
        };
        let name = q.name.clone();
        let governed = if q.config.breaker.is_some() {
            q.govern(Timestamp(now))
        } else {
            None
        };
        let Some((flow, cfg)) = governed else {
            return Err(StoreError::NoBreaker(name.to_string()));
        };
        let events = flow.force(force, Timestamp(now));
        let stats = flow.stats(cfg, Timestamp(now));
        self.catalog.append(&Change::Put {
            queues: vec![crate::core::catalog_entry(qid, q)],
            next_qid,
        })?;
        audit(&mut self.audit, q, &events);
        Ok(stats)
    }

    /// One outcome of queue `qid` at `now`.
    pub(crate) fn flow_outcome(&mut self, qid: Qid, outcome: Outcome, now: i64) {
        self.flow_observe(qid, &Tally::of(outcome, 1), now);
    }

    /// Whether a failed delivery of queue `qid` ending in `outcome` spends the message's
    /// attempt: not while its breaker is open or half-open, nor for congestion.
    pub(crate) fn flow_counts_attempt(&mut self, qid: Qid, outcome: Outcome, now: i64) -> bool {
        self.state
            .queues
            .get_mut(&qid)
            .and_then(|q| q.govern(Timestamp(now)))
            .is_none_or(|(flow, _)| flow.counts_attempt(outcome))
    }

    /// The maintenance round's part: time-driven transitions of every governed queue (an
    /// open breaker turns half-open while nobody receives), then the states worth keeping
    /// written to the catalog as one change.
    pub(crate) fn flow_round(&mut self, now: i64) -> Result<(), StoreError> {
        for q in self.state.queues.values_mut() {
            if let Some((flow, cfg)) = q.govern(Timestamp(now)) {
                let events = flow.tick(cfg, Timestamp(now));
                audit(&mut self.audit, q, &events);
            }
        }
        let dirty: Vec<CatalogQueue> = self
            .state
            .queues
            .iter()
            .filter(|(_, q)| q.flow_dirty)
            .map(|(qid, q)| crate::core::catalog_entry(*qid, q))
            .collect();
        if dirty.is_empty() {
            return Ok(());
        }
        self.catalog.append(&Change::Put {
            queues: dirty,
            next_qid: self.state.next_qid,
        })?;
        for q in self.state.queues.values_mut() {
            q.flow_dirty = false;
        }
        crate::ops::queues::snapshot_if_due(self);
        Ok(())
    }
}
