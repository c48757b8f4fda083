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

/// Events per second over the last minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Sends per second.
    pub sent: f64,
    /// Deliveries per second.
    pub received: f64,
    /// Acknowledgements per second.
    pub acked: f64,
    /// Nacks per second.
    pub nacked: f64,
    /// Dead-letterings per second.
    pub dead_lettered: f64,
}

/// Where the backlog is heading (SPEC §5): not one magic number but rates and a trend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// Rates over the last minute (zero until a minute of history exists).
    pub rates: Rates,
    /// Backlog (visible) change per second over the last five minutes, by least squares:
    /// positive means consumers are falling behind.
    pub backlog_slope_per_sec: f64,
    /// At the current slope, when the backlog reaches zero; `None` when it is not shrinking.
    pub drain_eta: Option<Duration>,
}

impl Trend {
    /// The trend of a queue whose current stats are `now_stats` at `now`, given its history
    /// (oldest first).
    pub fn compute(
        now_stats: &QueueStats,
        now: crate::time::Timestamp,
        history: &[StatsSample],
    ) -> Trend {
        let current = StatsSample::of(now_stats, now);
        let minute_ago = now.as_millis() - 60_000;
        let rates = history
            .iter()
            .rev()
            .find(|s| s.at.as_millis() <= minute_ago)
            .or_else(|| history.first())
            .filter(|s| s.at < now)
            .map(|old| {
                let dt = (now.as_millis() - old.at.as_millis()) as f64 / 1000.0;
                let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
                Rates {
                    sent: per(current.totals.sent, old.totals.sent),
                    received: per(current.totals.received, old.totals.received),
                    acked: per(current.totals.acked, old.totals.acked),
                    nacked: per(current.totals.nacked, old.totals.nacked),
                    dead_lettered: per(current.totals.dead_lettered, old.totals.dead_lettered),
                }
            })
            .unwrap_or_default();
        let five_ago = now.as_millis() - 300_000;
        let points: Vec<(f64, f64)> = history
            .iter()
            .filter(|s| s.at.as_millis() >= five_ago && s.at < now)
            .chain(std::iter::once(&current))
            .map(|s| {
                (
                    (s.at.as_millis() - five_ago) as f64 / 1000.0,
                    s.visible as f64,
                )
            })
            .collect();
        let slope = least_squares_slope(&points);
        let drain_eta = (slope < 0.0 && current.visible > 0)
            .then(|| Duration::from_secs_f64(current.visible as f64 / -slope));
        Trend {
            rates,
            backlog_slope_per_sec: slope,
            drain_eta,
        }
    }
}

fn least_squares_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return 0.0;
    }
    points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn stats(visible: u64, sent: u64, acked: u64) -> QueueStats {
        QueueStats {
            visible,
            delayed: 0,
            in_flight: 0,
            dead_letter_depth: 0,
            oldest_visible_age: Duration::ZERO,
            completed: 0,
            totals: Totals {
                sent,
                acked,
                ..Totals::default()
            },
        }
    }

    #[test]
    fn a_draining_backlog_has_a_negative_slope_and_an_eta() {
        // 10 samples over 100 s: backlog falls 10 per second, 5 sends and 15 acks per second.
        let t0 = 1_000_000_000i64;
        let history: Vec<StatsSample> = (0..10)
            .map(|i| {
                StatsSample::of(
                    &stats(2000 - 100 * i as u64, 5 * 10 * i as u64, 15 * 10 * i as u64),
                    Timestamp(t0 + i * 10_000),
                )
            })
            .collect();
        let now = Timestamp(t0 + 100_000);
        let t = Trend::compute(&stats(1000, 500, 1500), now, &history);
        assert!((t.backlog_slope_per_sec + 10.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.drain_eta, Some(Duration::from_secs(100)));
        assert!(
            (t.rates.sent - 5.0).abs() < 1e-9 && (t.rates.acked - 15.0).abs() < 1e-9,
            "{t:?}"
        );
    }

    #[test]
    fn a_growing_backlog_has_no_eta_and_no_history_means_zeros() {
        let t0 = 1_000_000_000i64;
        let history: Vec<StatsSample> = (0..5)
            .map(|i| StatsSample::of(&stats(10 * i as u64, 0, 0), Timestamp(t0 + i * 10_000)))
            .collect();
        let t = Trend::compute(&stats(50, 0, 0), Timestamp(t0 + 50_000), &history);
        assert!(t.backlog_slope_per_sec > 0.0);
        assert_eq!(t.drain_eta, None);
        assert_eq!(
            Trend::compute(&stats(5, 0, 0), Timestamp(t0), &[]),
            Trend::default()
        );
        assert_eq!(StatsSample::slot(Timestamp(12_345)), Timestamp(10_000));
    }
}
