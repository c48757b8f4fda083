//! Gauges and event counters of a queue, and the history points sampled from them.
//!
//! Rates and trends read from these live in [`crate::trend`].

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// How often the broker samples every queue's stats for its history.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
/// How long samples are kept.
pub const HISTORY_KEPT: Duration = Duration::from_secs(24 * 3600);

/// One point of a queue's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSample {
    /// When it was taken: a multiple of [`SAMPLE_INTERVAL`], so several broker nodes sampling
    /// the same queue agree on the point and it is stored once.
    pub at: crate::time::Timestamp,
    /// Visible messages.
    pub visible: u64,
    /// Delayed messages.
    pub delayed: u64,
    /// Leased messages.
    pub in_flight: u64,
    /// Messages in its DLQ.
    pub dead_letter_depth: u64,
    /// Age of the longest-waiting visible message, in ms.
    pub oldest_visible_age_ms: u64,
    /// Event totals at that time.
    pub totals: Totals,
}

impl StatsSample {
    /// The sample of `stats` at `at`.
    pub fn of(stats: &QueueStats, at: crate::time::Timestamp) -> Self {
        StatsSample {
            at,
            visible: stats.visible,
            delayed: stats.delayed,
            in_flight: stats.in_flight,
            dead_letter_depth: stats.dead_letter_depth,
            oldest_visible_age_ms: u64::try_from(stats.oldest_visible_age.as_millis())
                .unwrap_or(u64::MAX),
            totals: stats.totals,
        }
    }

    /// The sampling point for `now`: `now` rounded down to a multiple of [`SAMPLE_INTERVAL`].
    pub fn slot(now: crate::time::Timestamp) -> crate::time::Timestamp {
        let step = SAMPLE_INTERVAL.as_millis() as i64;
        crate::time::Timestamp(now.as_millis().div_euclid(step) * step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    #[test]
    fn samples_sit_on_multiples_of_the_interval() {
        assert_eq!(StatsSample::slot(Timestamp(12_345)), Timestamp(10_000));
    }
}
