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
    /// The adaptive rate and the breaker of a governed queue; `None` for others.
    pub flow: Option<crate::adaptive::FlowStats>,
    /// Named keys with messages waiting or in flight (the implicit key not counted).
    pub active_keys: u64,
    /// The keys' own states, on a queue that governs keys one by one; `None` for others.
    pub key_flows: Option<crate::adaptive::KeyFlowSummary>,
}

/// How often the broker samples every queue's stats for its history.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
/// How long samples are kept.
pub const HISTORY_KEPT: Duration = Duration::from_secs(24 * 3600);
/// A point that repeats a queue's latest stored point (the same numbers) is not stored unless
/// that one is at least this old: an idle queue costs a point an hour, not one every 10 s,
/// and its history still holds a recent point after a day's points are forgotten.
pub const HISTORY_HEARTBEAT: Duration = Duration::from_secs(3600);

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

    /// Whether a store keeps this point after `last`, the queue's latest stored one: when it is
    /// newer and its numbers changed, or `last` is [`HISTORY_HEARTBEAT`] old.
    pub fn worth_storing_after(&self, last: &StatsSample) -> bool {
        let heartbeat = HISTORY_HEARTBEAT.as_millis() as i64;
        self.at > last.at
            && (StatsSample {
                at: last.at,
                ..*self
            } != *last
                || self.at.as_millis() - last.at.as_millis() >= heartbeat)
    }

    /// A queue's history as the sampler saw it, from the points a store kept (oldest first,
    /// which may begin with the latest point before `since`): a point at every slot from
    /// `since` (or the first point, if later) to `until`, each the latest kept point at or
    /// before it. Stores leave out points that repeat the one before, so a queue's numbers at
    /// a slot are those of the latest point kept.
    pub fn fill(
        kept: &[StatsSample],
        since: crate::time::Timestamp,
        until: crate::time::Timestamp,
    ) -> Vec<StatsSample> {
        let step = SAMPLE_INTERVAL.as_millis() as i64;
        let Some(first) = kept.first() else {
            return Vec::new();
        };
        let start = since.as_millis().max(first.at.as_millis());
        let end = until
            .as_millis()
            .max(kept.last().map_or(start, |l| l.at.as_millis()));
        // Every slot in range, and every kept point's own time (points off the slots too).
        let first_slot = start.div_euclid(step) * step + if start % step == 0 { 0 } else { step };
        let mut times: Vec<i64> = (0..)
            .map(|k| first_slot + k * step)
            .take_while(|t| *t <= end)
            .chain(
                kept.iter()
                    .map(|k| k.at.as_millis())
                    .filter(|t| *t >= start),
            )
            .collect();
        times.sort_unstable();
        times.dedup();
        let mut out = Vec::with_capacity(times.len());
        let mut i = 0;
        for t in times {
            while i + 1 < kept.len() && kept[i + 1].at.as_millis() <= t {
                i += 1;
            }
            if kept[i].at.as_millis() <= t {
                out.push(StatsSample {
                    at: crate::time::Timestamp(t),
                    ..kept[i]
                });
            }
        }
        out
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

    fn point(at: i64, visible: u64) -> StatsSample {
        StatsSample {
            at: Timestamp(at),
            visible,
            delayed: 0,
            in_flight: 0,
            dead_letter_depth: 0,
            oldest_visible_age_ms: 0,
            totals: Totals::default(),
        }
    }

    #[test]
    fn a_point_is_stored_when_it_changed_or_the_last_is_an_hour_old() {
        let last = point(10_000, 3);
        assert!(!point(20_000, 3).worth_storing_after(&last), "a repeat");
        assert!(point(20_000, 4).worth_storing_after(&last), "a change");
        assert!(!point(10_000, 4).worth_storing_after(&last), "not newer");
        let hour = HISTORY_HEARTBEAT.as_millis() as i64;
        assert!(
            point(10_000 + hour, 3).worth_storing_after(&last),
            "a heartbeat"
        );
    }

    #[test]
    fn filling_puts_the_latest_kept_point_at_every_slot() {
        // Kept: a point before the range, a change, then nothing until `until`.
        let kept = [point(0, 1), point(40_000, 2)];
        let filled = StatsSample::fill(&kept, Timestamp(15_000), Timestamp(60_000));
        let got: Vec<(i64, u64)> = filled
            .iter()
            .map(|p| (p.at.as_millis(), p.visible))
            .collect();
        assert_eq!(
            got,
            [
                (20_000, 1),
                (30_000, 1),
                (40_000, 2),
                (50_000, 2),
                (60_000, 2)
            ]
        );
        // A history that starts inside the range starts at its first point.
        let filled = StatsSample::fill(&kept[1..], Timestamp(0), Timestamp(50_000));
        assert_eq!(filled.len(), 2);
        assert!(StatsSample::fill(&[], Timestamp(0), Timestamp(50_000)).is_empty());
        // A point off the slots keeps its time.
        let filled = StatsSample::fill(&[point(5_000, 7)], Timestamp(0), Timestamp(20_000));
        let got: Vec<i64> = filled.iter().map(|p| p.at.as_millis()).collect();
        assert_eq!(got, [5_000, 10_000, 20_000]);
    }
}
