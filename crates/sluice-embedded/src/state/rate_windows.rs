//! The sliding windows and paces of rate-limited queues through a restart: replay counts the
//! deliveries of the lease records it reads, and compaction keeps the windows and paces in a
//! record of their own ([`Record::RatePaces`](crate::journal::record::Record::RatePaces))
//! before it drops the segment those leases were in. Replay reads every lease under the queue's configuration of
//! now, so a queue newly limited also writes its window then: replay counts no lease made
//! before. Without this a restart forgot every delivery of the current period, and a queue
//! limited to 5 a minute delivered 5 more at once.

use sluice_core::Timestamp;
use sluice_core::rate::SlidingWindow;

use super::State;
use crate::journal::record::{Lease, Qid, RatePace};

impl State {
    /// Counts the leases of a lease record made at `at` in their queues' windows, for the
    /// queues rate-limited at that point of the log.
    pub(super) fn count_in_rate_windows(&mut self, at: i64, leases: &[Lease]) {
        // A receive's leases are of one queue: most often one without a limit, passed over
        // after one lookup.
        let Some(qid) = leases
            .iter()
            .find_map(|l| self.msgs.get(&l.id).map(|m| m.qid))
        else {
            return;
        };
        self.count_in_key_windows(qid, at, leases);
        let Some(limit) = self.queues.get(&qid).and_then(|q| q.config.rate_limit) else {
            return;
        };
        let n = leases
            .iter()
            .filter(|l| self.msgs.get(&l.id).is_some_and(|m| m.qid == qid))
            .count();
        if let Some(q) = self.queues.get_mut(&qid) {
            q.window.record_within(&limit, Timestamp(at), n);
        }
    }

    /// Sets the windows of the queues named to what a compaction kept before paces were
    /// kept: their paces start afresh.
    pub(super) fn restore_rate_windows(&mut self, windows: &[(Qid, Vec<i64>)]) {
        for (qid, events) in windows {
            if let Some(q) = self.queues.get_mut(qid) {
                q.window = SlidingWindow::restore(events.iter().map(|t| Timestamp(*t)), None);
            }
        }
    }

    /// Sets the windows and paces of the queues named to what was kept.
    pub(super) fn restore_rate_paces(&mut self, paces: &[RatePace]) {
        for p in paces {
            if let Some(q) = self.queues.get_mut(&p.qid) {
                q.window = SlidingWindow::restore(p.events.iter().map(|t| Timestamp(*t)), p.tat);
            }
        }
    }

    /// Queue `qid`'s window and pace.
    pub(crate) fn rate_pace(&self, qid: Qid) -> RatePace {
        let q = self.queues.get(&qid);
        RatePace {
            qid,
            events: q
                .map(|q| q.window.events().map(|t| t.as_millis()).collect())
                .unwrap_or_default(),
            tat: q.and_then(|q| q.window.pace()),
        }
    }

    /// The windows and paces of rate-limited queues that hold deliveries, for compaction to
    /// keep.
    pub(crate) fn rate_paces(&self) -> Vec<RatePace> {
        self.queues
            .iter()
            .filter(|(_, q)| q.config.rate_limit.is_some())
            .map(|(qid, _)| self.rate_pace(*qid))
            .filter(|p| !p.events.is_empty() || p.tat.is_some())
            .collect()
    }
}
