//! One queue's part of the index: its messages ordered by time in each slot, its dedup ids,
//! rate window, stats history and the notifier of its long-polling receivers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sluice_core::rate::SlidingWindow;
use sluice_core::stats::Totals;
use sluice_core::{QueueConfig, QueueName, Timestamp};
use tokio::sync::Notify;

use super::Slot;
use crate::catalog::CatalogQueue;

/// A remembered dedup id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DedupEntry {
    pub id: u64,
    pub until: i64,
    /// Segment of the record that registered it, for compaction.
    pub seg: u32,
}

/// One queue's index.
pub(crate) struct QueueState {
    pub name: QueueName,
    pub config: QueueConfig,
    pub created_at: Timestamp,
    pub totals: Totals,
    /// Completed records of this queue kept in `State::done`.
    pub completed: u64,
    pub delayed: BTreeSet<(i64, u64)>,
    pub ready: BTreeSet<(i64, u64)>,
    pub leased: BTreeSet<(i64, u64)>,
    /// When the last retention sweep of the whole queue started.
    pub retention_scan: i64,
    /// The retention sweep under way: the index it is in and the last entry it looked at.
    pub sweep: Option<(Slot, Option<(i64, u64)>)>,
    /// Messages the sweep found past retention, for the next expiry to take.
    pub overdue: Vec<u64>,
    pub dedup: HashMap<String, DedupEntry>,
    pub dedup_order: VecDeque<(i64, String)>,
    pub window: SlidingWindow,
    /// Stats history points, oldest first (24 h).
    pub history: VecDeque<sluice_core::stats::StatsSample>,
    /// Wakes long-polling receivers when messages may have become visible.
    pub notify: Arc<Notify>,
}

impl QueueState {
    pub(super) fn new(q: &CatalogQueue) -> Self {
        QueueState {
            name: q.name.clone(),
            config: q.config.clone(),
            created_at: q.created_at,
            totals: Totals::default(),
            completed: 0,
            delayed: BTreeSet::new(),
            ready: BTreeSet::new(),
            leased: BTreeSet::new(),
            retention_scan: i64::MIN,
            sweep: None,
            overdue: Vec::new(),
            dedup: HashMap::new(),
            dedup_order: VecDeque::new(),
            window: SlidingWindow::default(),
            history: VecDeque::new(),
            notify: Arc::new(Notify::new()),
        }
    }

    pub(super) fn index(&mut self, slot: Slot) -> &mut BTreeSet<(i64, u64)> {
        match slot {
            Slot::Delayed => &mut self.delayed,
            Slot::Ready => &mut self.ready,
            Slot::Leased => &mut self.leased,
        }
    }

    /// Every message id of the queue: in flight, then visible, then delayed.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.leased
            .iter()
            .chain(&self.ready)
            .chain(&self.delayed)
            .map(|(_, id)| *id)
    }

    /// Messages counted against `max_depth`.
    pub fn depth(&self) -> u64 {
        (self.delayed.len() + self.ready.len() + self.leased.len()) as u64
    }

    /// Looks a dedup id up, forgetting it when its window is over.
    pub fn dedup_hit(&self, key: &str, now: i64) -> Option<u64> {
        self.dedup.get(key).filter(|e| e.until > now).map(|e| e.id)
    }

    pub(super) fn register_dedup(&mut self, key: String, entry: DedupEntry) {
        self.dedup_order.push_back((entry.until, key.clone()));
        self.dedup.insert(key, entry);
    }

    /// Forgets dedup ids whose window is over.
    pub fn prune_dedup(&mut self, now: i64) {
        while let Some((until, _)) = self.dedup_order.front() {
            if *until > now {
                break;
            }
            if let Some((until, key)) = self.dedup_order.pop_front()
                && self.dedup.get(&key).is_some_and(|e| e.until == until)
            {
                self.dedup.remove(&key);
            }
        }
    }
}
