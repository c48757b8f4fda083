//! What a node remembers of each queue for its own hot-path choices, in one place.
//!
//! Every node-local memory of a queue (its cached configuration, its wake-ups, the calls
//! gathering for its next statements, what is read ahead or handed off, the sizes and times
//! its last leases saw) lives in the queue's [`QueueLocal`], made on first use. A call looks
//! its queue up once and hands the entry down, and deleting a queue forgets all of it in
//! [`Locals::forget`]. Each memory keeps a small lock of its own (or an atomic), so calls on
//! different queues never contend, and calls on one queue only over the memory they share.
//!
//! Not here: the hot paths' pending counts, a node-wide write buffer flushed as one, and
//! whether other nodes' wake-ups arrive, which is one LISTEN connection's state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_core::{QueueConfig, QueueName};

use crate::hot::ack_combine::AckJob;
use crate::hot::backlog::Backlog;
use crate::hot::combine::{Combiner, Lanes};
use crate::hot::handoff::Waiting;
use crate::hot::lapse_checks::LapseChecks;
use crate::hot::lease_combine::LeaseJob;
use crate::hot::pack_sizes::PackSizes;
use crate::hot::read_ahead::ReadAhead;
use crate::hot::send_combine::SendJob;
use crate::hot::wake::QueueWaker;

/// How long a node reuses a queue's configuration on the hot paths (send, ack, receive of a
/// queue without global limits) before reading it again. A change made on this node is seen
/// at once; one made on another node within this time.
pub(crate) const CONFIG_TTL: Duration = Duration::from_secs(1);

/// The node's memories of every queue it has served since start (or since the queue was
/// deleted), by name: by its text, so that names read back from rows and notifications find
/// their queue without building a `QueueName`.
#[derive(Default)]
pub(crate) struct Locals(Mutex<HashMap<String, Arc<QueueLocal>>>);

impl Locals {
    /// The memories of `queue`, made empty on first use.
    pub(crate) fn of(&self, queue: &QueueName) -> Arc<QueueLocal> {
        let mut map = self.map();
        if let Some(local) = map.get(queue.as_str()) {
            return local.clone();
        }
        let local = Arc::new(QueueLocal::new(queue.clone()));
        map.insert(queue.as_str().to_owned(), local.clone());
        local
    }

    /// The memories of `queue` if this node has any; none are made.
    pub(crate) fn get(&self, queue: &str) -> Option<Arc<QueueLocal>> {
        self.map().get(queue).cloned()
    }

    /// Every queue's memories, for the few node-wide passes (wake-ups after the LISTEN
    /// connection came back, a message deleted, the store closing).
    pub(crate) fn all(&self) -> Vec<Arc<QueueLocal>> {
        self.map().values().cloned().collect()
    }

    /// Forgets `queue` (deleted): calls still holding its memories find them emptied of what
    /// named its rows, and the next call of a queue of that name starts afresh. Returns the
    /// memories forgotten, whose waiting receives are still to be woken.
    pub(crate) fn forget(&self, queue: &str) -> Option<Arc<QueueLocal>> {
        let local = self.map().remove(queue)?;
        local.clear();
        Some(local)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<QueueLocal>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What this node remembers of one queue.
pub(crate) struct QueueLocal {
    /// The queue's name.
    pub(crate) name: QueueName,
    /// The configuration last read, and when.
    config: Mutex<Option<(QueueConfig, Instant)>>,
    /// Receives long-polling on this node, and what the last empty lease showed.
    pub(crate) waker: QueueWaker,
    /// Plain sends gathering for the queue's next write.
    pub(crate) sends: Combiner<(), SendJob>,
    /// Receives gathering for the queue's next lease, per lease length.
    pub(crate) leases: Lanes<Duration, LeaseJob>,
    /// Acks gathering for the queue's next ack statement, per `result_ttl`.
    pub(crate) acks: Combiner<Duration, AckJob>,
    /// Whether the last large receive on this node was served by packs.
    served_by_packs: AtomicBool,
    /// Whether the queue's consumers on this node are behind, and where the next lease
    /// starts (`crate::hot::backlog`).
    pub(crate) backlog: Backlog,
    /// The size of the packs the last pack lease took (`crate::hot::pack_sizes`).
    pub(crate) pack_sizes: PackSizes,
    /// When this node last looked for leases that ran out (`crate::hot::lapse_checks`).
    pub(crate) lapse_checks: LapseChecks,
    /// Receives long-polling on this node, for sends to hand messages to
    /// (`crate::hot::handoff`).
    pub(crate) handoff: Waiting,
    /// Messages leased ahead of this node's receives (`crate::hot::read_ahead`).
    pub(crate) read_ahead: ReadAhead,
    /// Whether this node has seen messages of FIFO groups in the queue: then a message
    /// leaving a line (an ack, a reject, a delete) wakes the receives waiting for the next.
    grouped: AtomicBool,
    /// Whether this node has seen messages with keys or priorities in the queue: its receives
    /// then rank and lease in a transaction (`crate::hot::ranks`).
    ordered: AtomicBool,
    /// The group this node's last lease of grouped messages reached: the next starts after
    /// it, so groups take turns.
    group_turn: Mutex<String>,
}

impl QueueLocal {
    fn new(name: QueueName) -> Self {
        QueueLocal {
            name,
            config: Mutex::new(None),
            waker: QueueWaker::default(),
            sends: Combiner::new(crate::hot::send_combine::SENDS_IN_FLIGHT),
            leases: Lanes::new(
                crate::hot::lease_combine::LEASES_IN_FLIGHT,
                crate::hot::lease_combine::LARGE_LEASES_IN_FLIGHT,
                crate::hot::lease_combine::PACKED_LEASES_IN_FLIGHT,
            ),
            acks: Combiner::new(crate::hot::ack_combine::ACKS_IN_FLIGHT),
            served_by_packs: AtomicBool::new(false),
            backlog: Backlog::default(),
            pack_sizes: PackSizes::default(),
            lapse_checks: LapseChecks::default(),
            handoff: Waiting::default(),
            read_ahead: ReadAhead::default(),
            grouped: AtomicBool::new(false),
            ordered: AtomicBool::new(false),
            group_turn: Mutex::new(String::new()),
        }
    }

    /// Whether this node has seen messages of FIFO groups in the queue.
    pub(crate) fn grouped(&self) -> bool {
        self.grouped.load(Ordering::Relaxed)
    }

    /// The group after which the next lease of grouped messages starts (empty: the first).
    pub(crate) fn group_turn(&self) -> String {
        self.group_turn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes the group the last lease of grouped messages reached.
    pub(crate) fn set_group_turn(&self, group: &str) {
        group.clone_into(&mut self.group_turn.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Notes that the queue holds messages of FIFO groups.
    pub(crate) fn mark_grouped(&self) {
        self.grouped.store(true, Ordering::Relaxed);
    }

    /// Whether this node has seen messages with keys or priorities (or ranked ones) in the
    /// queue.
    pub(crate) fn ordered(&self) -> bool {
        self.ordered.load(Ordering::Relaxed)
    }

    /// Notes whether the queue holds messages with keys or priorities, or ranked ones.
    pub(crate) fn set_ordered(&self, ordered: bool) {
        self.ordered.store(ordered, Ordering::Relaxed);
    }

    /// Notes that the queue holds messages with keys or priorities.
    pub(crate) fn mark_ordered(&self) {
        self.set_ordered(true);
    }

    /// The configuration when read less than [`CONFIG_TTL`] ago.
    pub(crate) fn cached_config(&self) -> Option<QueueConfig> {
        self.config()
            .as_ref()
            .filter(|(_, at)| at.elapsed() < CONFIG_TTL)
            .map(|(cfg, _)| cfg.clone())
    }

    /// Keeps `cfg`, read just now.
    pub(crate) fn keep_config(&self, cfg: &QueueConfig) {
        *self.config() = Some((cfg.clone(), Instant::now()));
    }

    /// Forgets the configuration (changed, or the queue is gone).
    pub(crate) fn forget_config(&self) {
        *self.config() = None;
    }

    /// Whether the last large receive on this node was served by packs.
    pub(crate) fn served_by_packs(&self) -> bool {
        self.served_by_packs.load(Ordering::Relaxed)
    }

    /// Notes whether a large receive was served by packs.
    pub(crate) fn mark_served_by_packs(&self, packs: bool) {
        self.served_by_packs.store(packs, Ordering::Relaxed);
    }

    /// Empties what named the queue's rows or configuration: the queue was deleted.
    fn clear(&self) {
        self.forget_config();
        self.read_ahead.clear();
        self.pack_sizes.clear();
        self.lapse_checks.clear();
        self.handoff.clear();
    }

    fn config(&self) -> MutexGuard<'_, Option<(QueueConfig, Instant)>> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }
}
