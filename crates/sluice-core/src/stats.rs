//! Gauges and event counters of a queue (SPEC §5).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Event totals since the queue was created; they survive restarts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Messages stored by send (duplicates not counted).
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Acknowledgements.
    pub acked: u64,
    /// Nacks (including those that dead-lettered).
    pub nacked: u64,
    /// Messages this queue sent to its DLQ.
    pub dead_lettered: u64,
    /// Messages redriven into this queue.
    pub redriven: u64,
    /// Messages that outlived retention here.
    pub expired: u64,
}

/// A snapshot of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready to be received now.
    pub visible: u64,
    /// Waiting for a delay or backoff.
    pub delayed: u64,
    /// Leased.
    pub in_flight: u64,
    /// Messages in this queue's DLQ (0 without one).
    pub dead_letter_depth: u64,
    /// How long the longest-waiting visible message has been ready: zero when none is.
    pub oldest_visible_age: Duration,
    /// Completed records kept for `result_ttl`.
    pub completed: u64,
    /// Event totals.
    pub totals: Totals,
}
