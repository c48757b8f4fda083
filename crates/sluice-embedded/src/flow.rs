//! Adaptive rate and circuit breaker of governed queues (`sluice_core::adaptive`): outcomes
//! handed to a queue's [`FlowState`], its events written to the audit log, and its state kept
//! in the catalog when it changed in a way worth keeping.
//!
//! Everything runs under the store's lock, in memory: an outcome is a few additions, and the
//! catalog is written only from the maintenance round, for queues whose state changed (a
//! breaker transition, a forced state, an audited rate step), a few lines a minute at most.
//! What changed in between (the counts of a round, the breaker's window) restarts empty after
//! a restart.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::adaptive::{BreakerForce, FlowEvent, FlowStats, KeyFlowStats, Outcome, Tally};
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

/// Writes `events` of queue `q`'s keys at `now` to the audit log, within the queue's allowance
/// of key entries, and wakes its waiting receivers.
pub(crate) fn audit_keys(
    audit: &mut AuditLog,
    q: &mut QueueState,
    events: Vec<(Key, FlowEvent)>,
    now: i64,
) {
    let name = q.name.clone();
    let lines = q.key_flows.audit.entries(
        name.as_str(),
        Timestamp(now),
        events.iter().map(|(k, e)| (k.as_deref(), *e)),
    );
    if !lines.is_empty()
        && let Err(e) = audit.append(&lines, false)
    {
        tracing::warn!(error = %e, queue = %name, "could not write key breaker events to the audit log");
    }
    if !events.is_empty() {
        q.notify.notify_waiters();
    }
}

/// A key as the index names it: `None` is the implicit key.
pub(crate) type Key = Option<Arc<str>>;

/// Outcomes of one queue's deliveries: for the queue, and per key when it governs keys.
pub(crate) struct Outcomes {
    all: Tally,
    keys: Option<HashMap<Key, Tally>>,
}

impl Outcomes {
    /// Nothing counted yet, for queue `q`.
    pub(crate) fn of(q: &QueueState) -> Self {
        Outcomes {
            all: Tally::default(),
            keys: q.governs_keys().then(HashMap::new),
        }
    }

    /// Counts `outcome` of a delivery of the key `key` names (asked only when the queue
    /// governs keys).
    pub(crate) fn add(&mut self, key: impl FnOnce() -> Key, outcome: Outcome) {
        self.all.add(outcome, 1);
        if let Some(keys) = &mut self.keys {
            keys.entry(key()).or_default().add(outcome, 1);
        }
    }
}

impl Core {
    /// The key of live message `m` (id `id`), as the index names it.
    pub(crate) fn key_arc(&self, m: &crate::state::Msg, id: u64) -> Key {
        self.state.tag_of(m, id).and_then(|t| t.key.clone())
    }

    /// Hands `outcomes` of queue `qid`'s deliveries that ended at `now` to its flow state and
    /// its keys' states.
    pub(crate) fn flow_settle(&mut self, qid: Qid, outcomes: Outcomes, now: i64) {
        self.flow_observe(qid, &outcomes.all, now);
        let Some(keys) = outcomes.keys else { return };
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return;
        };
        let mut events = Vec::new();
        for (key, t) in keys {
            for e in q.key_flow_observe(&key, &t, now) {
                events.push((key.clone(), e));
            }
        }
        audit_keys(&mut self.audit, q, events, now);
    }

    /// One outcome of a delivery of message `id` (`m`) of queue `qid` at `now`.
    pub(crate) fn flow_outcome(
        &mut self,
        qid: Qid,
        m: &crate::state::Msg,
        id: u64,
        outcome: Outcome,
        now: i64,
    ) {
        let Some(q) = self.state.queues.get(&qid) else {
            return;
        };
        let mut o = Outcomes::of(q);
        o.add(|| self.key_arc(m, id), outcome);
        self.flow_settle(qid, o, now);
    }

    /// An operator's order to the breaker of `key` of queue `qid`, kept in the catalog before
    /// it answers; the key's state afterwards.
    pub(crate) fn force_key_breaker(
        &mut self,
        qid: Qid,
        key: Key,
        force: BreakerForce,
        now: i64,
    ) -> Result<KeyFlowStats, StoreError> {
        let next_qid = self.state.next_qid;
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return Err(StoreError::QueueNotFound(format!("{qid}")));
        };
        let Some((stats, events)) = q.force_key_breaker(&key, force, now) else {
            return Err(StoreError::NoKeyBreaker(q.name.to_string()));
        };
        self.catalog.append(&Change::Put {
            queues: vec![crate::core::catalog_entry(qid, q)],
            next_qid,
        })?;
        q.key_flows.dirty = false;
        let events = events.into_iter().map(|e| (key.clone(), e)).collect();
        audit_keys(&mut self.audit, q, events, now);
        Ok(stats)
    }

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
        let governed = if crate::state::flow_config(&q.config).breaker.is_some() {
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

    /// Whether a failed delivery of message `id` (`m`) of queue `qid` ending in `outcome`
    /// spends the message's attempt: not while the queue's breaker or the key's is open or
    /// half-open, nor for congestion.
    pub(crate) fn flow_counts_attempt(
        &mut self,
        qid: Qid,
        m: &crate::state::Msg,
        id: u64,
        outcome: Outcome,
        now: i64,
    ) -> bool {
        let key = self.key_arc(m, id);
        let Some(q) = self.state.queues.get_mut(&qid) else {
            return true;
        };
        let by_key = !q.governs_keys() || q.key_counts_attempt(&key, outcome, now);
        by_key
            && q.govern(Timestamp(now))
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
            if q.governs_keys() || q.key_flows.len() > 0 {
                q.forget_idle_key_flows(now);
                // Says how many key entries the last minute left out, once it is over.
                audit_keys(&mut self.audit, q, Vec::new(), now);
            }
        }
        let dirty: Vec<CatalogQueue> = self
            .state
            .queues
            .iter()
            .filter(|(_, q)| q.flow_dirty || q.key_flows.dirty)
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
            q.key_flows.dirty = false;
        }
        crate::ops::queues::snapshot_if_due(self);
        Ok(())
    }
}
