//! One queue's part of the index: its messages ordered by time in each slot, the lines of its
//! FIFO groups, its dedup ids, rate window, stats history and the notifier of its
//! long-polling receivers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sluice_core::adaptive::{self, FlowConfig, FlowState};
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
    /// Due messages of FIFO groups that wait for their group (see [`Slot::Parked`]), by the
    /// time they became due.
    pub parked: BTreeSet<(i64, u64)>,
    /// Each FIFO group's line in this queue: `(order, id)` of its members in every slot, in
    /// the order they entered the queue. Only the first `max_in_flight_per_group` may be in
    /// `ready` or `leased`. A group leaves the map with its last member.
    pub groups: HashMap<Arc<str>, BTreeSet<(u64, u64)>>,
    /// The delivery order by priority and key, once the queue holds messages with either
    /// (see `lanes`); `None` while `ready` is the order.
    pub lanes: Option<super::lanes::Lanes>,
    /// Live messages of the queue with a key or priority, in any slot.
    pub tagged: u64,
    /// Deliveries in flight per key (`None`: the implicit key), kept while the queue has
    /// `key_limits`; a key leaves the map with its last delivery.
    pub key_flight: HashMap<Option<Arc<str>>, u32>,
    /// The rate windows of its keys, while `key_limits` has rates (see `key_rates`).
    pub key_rates: super::key_rates::KeyRates,
    /// Each key's own adaptive rate and breaker, while the queue governs keys (see
    /// `key_flows`).
    pub key_flows: super::key_flows::KeyFlows,
    /// Messages and deliveries per named key (see `key_counts`).
    pub key_counts: super::key_counts::KeyCounts,
    /// When the last retention sweep of the whole queue started.
    pub retention_scan: i64,
    /// The retention sweep under way: the index it is in and the last entry it looked at.
    pub sweep: Option<(Slot, Option<(i64, u64)>)>,
    /// Messages the sweep found past retention, for the next expiry to take.
    pub overdue: Vec<u64>,
    pub dedup: HashMap<String, DedupEntry>,
    pub dedup_order: VecDeque<(i64, String)>,
    pub window: SlidingWindow,
    /// The adaptive rate and breaker of a governed queue, made when first needed
    /// ([`QueueState::govern`]).
    pub flow: Option<FlowState>,
    /// Recent deliveries at the governed pace (its own window: a window prunes by the period
    /// of the limit it is asked about, and the pace has another period than `rate_limit`).
    pub flow_pace: SlidingWindow,
    /// `flow` changed in a way worth keeping (a transition, a forced state, an audited rate
    /// step) since it was last written to the catalog.
    pub flow_dirty: bool,
    /// Stats history points, oldest first (24 h).
    pub history: VecDeque<sluice_core::stats::StatsSample>,
    /// Wakes long-polling receivers when messages may have become visible.
    pub notify: Arc<Notify>,
}

impl QueueState {
    pub(super) fn new(q: &CatalogQueue) -> Self {
        let mut key_flows = super::key_flows::KeyFlows::default();
        if adaptive::governs_keys(&q.config) {
            key_flows.restore(&q.key_flows);
        }
        QueueState {
            name: q.name.clone(),
            config: q.config.clone(),
            created_at: q.created_at,
            totals: Totals::default(),
            completed: 0,
            delayed: BTreeSet::new(),
            ready: BTreeSet::new(),
            leased: BTreeSet::new(),
            parked: BTreeSet::new(),
            groups: HashMap::new(),
            lanes: None,
            tagged: 0,
            key_flight: HashMap::new(),
            key_counts: Default::default(),
            key_rates: Default::default(),
            key_flows,
            retention_scan: i64::MIN,
            sweep: None,
            overdue: Vec::new(),
            dedup: HashMap::new(),
            dedup_order: VecDeque::new(),
            window: SlidingWindow::default(),
            flow: q
                .flow
                .clone()
                .filter(|_| flow_config(&q.config).is_governed()),
            flow_pace: SlidingWindow::default(),
            flow_dirty: false,
            history: VecDeque::new(),
            notify: Arc::new(Notify::new()),
        }
    }

    /// The queue's flow state and what governs it, made at `now` when the configuration
    /// governs the queue and it has none yet; `None` (and the state dropped) when it governs
    /// nothing.
    pub fn govern(&mut self, now: Timestamp) -> Option<(&mut FlowState, FlowConfig<'_>)> {
        let cfg = flow_config(&self.config);
        if !cfg.is_governed() {
            self.flow = None;
            return None;
        }
        let flow = match &mut self.flow {
            Some(f) => f,
            none => none.insert(FlowState::new(cfg, now)?),
        };
        Some((flow, cfg))
    }

    pub(super) fn index(&mut self, slot: Slot) -> &mut BTreeSet<(i64, u64)> {
        match slot {
            Slot::Delayed => &mut self.delayed,
            Slot::Ready => &mut self.ready,
            Slot::Leased => &mut self.leased,
            Slot::Parked => &mut self.parked,
        }
    }

    /// Every message id of the queue: in flight, then visible (deliverable, then waiting for
    /// their group), then delayed.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.leased
            .iter()
            .chain(&self.ready)
            .chain(&self.parked)
            .chain(&self.delayed)
            .map(|(_, id)| *id)
    }

    /// Messages counted against `max_depth`.
    pub fn depth(&self) -> u64 {
        (self.delayed.len() + self.ready.len() + self.parked.len() + self.leased.len()) as u64
    }

    /// Visible messages: deliverable now, or due but waiting for their FIFO group.
    pub fn visible(&self) -> u64 {
        (self.ready.len() + self.parked.len()) as u64
    }

    /// When the longest-visible message became visible.
    pub fn oldest_visible(&self) -> Option<i64> {
        [self.ready.first(), self.parked.first()]
            .into_iter()
            .flatten()
            .map(|(at, _)| *at)
            .min()
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

/// What governs a queue with configuration `c` as a whole (its parts of `scope: queue`).
pub(crate) fn flow_config(c: &QueueConfig) -> FlowConfig<'_> {
    FlowConfig::of_queue(c)
}
