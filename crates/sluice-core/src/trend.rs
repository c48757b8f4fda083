//! Rates and trends of a queue: what an operator reads to decide whether to act.
//!
//! Both come from the event counters (`Totals`) and gauges that the broker samples every
//! [`SAMPLE_INTERVAL`](crate::stats::SAMPLE_INTERVAL), plus the queue's state right now, and
//! one virtual point: a queue starts at zero when it is created. That point is why a new
//! queue's first seconds count: its first sample may come after a burst, but its creation
//! does not.
//!
//! - **Rate over a window `w`** (1, 5 and 15 minutes): `(counter now − counter at B) / (now −
//!   B)`, where `B` is the latest point at or before `now − w`. A queue younger than `w` has
//!   its zero point placed at `now − w`, so the rate is the events of the last `w` divided by
//!   `w`: 50 sends into a new queue read 0.83/s over the last minute at once.
//! - **Backlog** is every message the queue still has to get done: visible + delayed + in
//!   flight. Its **slope** over `w` is its net flow, in − out, per second: `(backlog now −
//!   backlog at B) / (now − B)`.
//! - **Direction**: flat when nothing moved since the latest sample (no counter and no gauge
//!   changed), so a queue reads flat at most one sample interval after its last change.
//!   Otherwise the sign of the recent net flow, since the latest point at least one sample
//!   interval (10 s) old, so a turn shows within 10 to 20 s; flat when that net flow is at
//!   most one message or at most 5 % of the events in the same span.
//! - **Drain ETA**, only while messages are being consumed (something left the queue since
//!   the latest sample, or between the two latest when the latest is recent): the backlog
//!   divided by its net outflow over the current run of consumption, at most the last minute.
//!   The run's oldest interval is left out when the run has more than one, since consumption
//!   may have started part-way through it.
//! - **Dead letters** follow the same rules on the queue's DLQ depth; their ETA is the time
//!   to empty the DLQ while something (a redrive) takes messages out of it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stats::{QueueStats, SAMPLE_INTERVAL, StatsSample, Totals};
use crate::time::Timestamp;

/// The windows rates are given over.
pub const RATE_WINDOWS: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(900),
];

/// How much history the trend reads: the longest rate window plus two samples of slack.
pub const LOOKBACK: Duration = Duration::from_secs(900 + 20);

/// Events per second over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Sends.
    pub sent: f64,
    /// Deliveries.
    pub received: f64,
    /// Acknowledgements.
    pub acked: f64,
    /// Nacks.
    pub nacked: f64,
    /// Messages this queue sent to its DLQ.
    pub dead_lettered: f64,
    /// Messages redriven into this queue.
    pub redriven: f64,
    /// Messages that outlived retention here.
    pub expired: f64,
}

/// Which way a depth is going.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// More goes in than out.
    Rising,
    /// More goes out than in.
    Falling,
    /// Nothing moved, or in and out balance.
    #[default]
    Flat,
}

impl Direction {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Rising => "rising",
            Direction::Falling => "falling",
            Direction::Flat => "flat",
        }
    }
}

/// Where one depth (the backlog, or the DLQ) is heading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DepthTrend {
    /// Rising, falling or flat (see the module docs).
    pub direction: Direction,
    /// Net flow over the last 10 to 20 s (since the latest sample at least 10 s old),
    /// messages per second (positive: growing). The direction is read from it.
    pub slope: f64,
    /// Net flow over the last minute.
    pub slope_1m: f64,
    /// Net flow over the last five minutes.
    pub slope_5m: f64,
    /// While messages are being taken out: when the depth reaches zero at the current pace.
    pub eta: Option<Duration>,
}

/// Rates and trends of a queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// Rates over the last 1, 5 and 15 minutes.
    pub rates: [Rates; 3],
    /// The backlog: visible + delayed + in flight.
    pub backlog: DepthTrend,
    /// The queue's DLQ depth.
    pub dead_letters: DepthTrend,
}

/// One point of a depth's series.
#[derive(Debug, Clone, Copy)]
struct Point {
    at: i64,
    depth: u64,
    /// A counter of what left (for the DLQ: nothing is counted, a fall of depth tells).
    out: u64,
    /// Grows with every event that concerns this depth.
    activity: u64,
}

/// The longest gap between two points that still counts as one interval of consumption: a
/// longer one means the broker was not sampling (stopped, or restarting).
const INTERVAL_SLACK_MS: i64 = SAMPLE_INTERVAL.as_millis() as i64 * 3 / 2;

impl Trend {
    /// The trend of a queue created at `created_at`, whose state at `now` is `current`, given
    /// its history as a store keeps it (oldest first; points that repeat the one before left
    /// out, and the latest point before the lookback first).
    pub fn compute(
        current: &QueueStats,
        created_at: Timestamp,
        now: Timestamp,
        history: &[StatsSample],
    ) -> Trend {
        let now_ms = now.as_millis();
        // Stores keep a point only when the numbers changed: put back the ones left out.
        let history = StatsSample::fill(
            history,
            Timestamp(now_ms - LOOKBACK.as_millis() as i64),
            StatsSample::slot(Timestamp(now_ms - SAMPLE_INTERVAL.as_millis() as i64)),
        );
        // A sample is stamped with its slot, which may start before the queue was created:
        // such a sample was taken after creation, so it counts as taken then.
        let samples: Vec<StatsSample> = history
            .iter()
            .filter(|s| s.at.as_millis() < now_ms)
            .map(|s| StatsSample {
                at: s.at.max(created_at),
                ..*s
            })
            .collect();
        let rates = RATE_WINDOWS.map(|w| {
            let from = now_ms - w.as_millis() as i64;
            // A queue younger than the window counts from zero at the window's start.
            let (at, old) = match samples.iter().rposition(|s| s.at.as_millis() <= from) {
                Some(i) => (samples[i].at.as_millis(), samples[i].totals),
                None => (created_at.as_millis().min(from), Totals::default()),
            };
            rates_between(&old, &current.totals, (now_ms - at) as f64 / 1000.0)
        });

        let backlog_point = |at: i64, depth: u64, t: &Totals| Point {
            at,
            depth,
            out: t.acked + t.dead_lettered + t.expired,
            activity: t.sent
                + t.received
                + t.acked
                + t.nacked
                + t.dead_lettered
                + t.redriven
                + t.expired,
        };
        let dlq_point = |at: i64, depth: u64, t: &Totals| Point {
            at,
            depth,
            out: 0,
            activity: t.dead_lettered + t.redriven,
        };
        let series = |make: &dyn Fn(i64, u64, &Totals) -> Point,
                      depth: &dyn Fn(&StatsSample) -> u64,
                      current_depth: u64| {
            let mut points = vec![make(created_at.as_millis(), 0, &Totals::default())];
            points.extend(
                samples
                    .iter()
                    .map(|s| make(s.at.as_millis(), depth(s), &s.totals)),
            );
            points.push(make(now_ms, current_depth, &current.totals));
            points
        };
        let backlog = depth_trend(&series(
            &backlog_point,
            &|s| s.visible + s.delayed + s.in_flight,
            current.visible + current.delayed + current.in_flight,
        ));
        let dead_letters = depth_trend(&series(
            &dlq_point,
            &|s| s.dead_letter_depth,
            current.dead_letter_depth,
        ));
        Trend {
            rates,
            backlog,
            dead_letters,
        }
    }
}

fn rates_between(old: &Totals, new: &Totals, secs: f64) -> Rates {
    if secs <= 0.0 {
        return Rates::default();
    }
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
    Rates {
        sent: per(new.sent, old.sent),
        received: per(new.received, old.received),
        acked: per(new.acked, old.acked),
        nacked: per(new.nacked, old.nacked),
        dead_lettered: per(new.dead_lettered, old.dead_lettered),
        redriven: per(new.redriven, old.redriven),
        expired: per(new.expired, old.expired),
    }
}

/// The trend of one series: the creation point first, the current point last.
fn depth_trend(points: &[Point]) -> DepthTrend {
    let n = points.len() - 1;
    let cur = points[n];
    let slope_over = |w_ms: i64| {
        // The creation point stands at `now − w` for a queue younger than the window.
        let from = cur.at - w_ms;
        let base = points[..n].iter().rposition(|p| p.at <= from).map_or(
            Point {
                at: from,
                ..points[0]
            },
            |i| points[i],
        );
        let dt = (cur.at - base.at) as f64 / 1000.0;
        let slope = if dt > 0.0 {
            (cur.depth as f64 - base.depth as f64) / dt
        } else {
            0.0
        };
        (slope, base)
    };
    let (slope_1m, _) = slope_over(60_000);
    let (slope_5m, _) = slope_over(300_000);

    // The direction reads the recent net flow: since the latest point at least one sample
    // interval old, so that a change shows within 10 to 20 s rather than a minute.
    let (slope, base) = slope_over(SAMPLE_INTERVAL.as_millis() as i64);
    let latest = points[n - 1];
    let moved = cur.activity != latest.activity || cur.depth != latest.depth;
    let net = cur.depth as f64 - base.depth as f64;
    let through = cur.activity.saturating_sub(base.activity) as f64;
    let direction = if !moved || net.abs() <= 1.0 || net.abs() <= 0.05 * through {
        Direction::Flat
    } else if net > 0.0 {
        Direction::Rising
    } else {
        Direction::Falling
    };
    DepthTrend {
        direction,
        slope,
        slope_1m,
        slope_5m,
        eta: drain_eta(points),
    }
}

/// Whether something left between `a` and `b`, in an interval short enough to be one of the
/// sampler's.
fn consumed(a: &Point, b: &Point) -> bool {
    b.at - a.at <= INTERVAL_SLACK_MS && (b.out > a.out || b.depth < a.depth)
}

fn drain_eta(points: &[Point]) -> Option<Duration> {
    let n = points.len() - 1;
    let cur = points[n];
    if cur.depth == 0 || n < 1 {
        return None;
    }
    // The run of consumption ends now, or at the latest sample when nothing left since
    // (the current interval may just be too short to show it).
    let end = if consumed(&points[n - 1], &cur) {
        n
    } else if n >= 2
        && cur.at - points[n - 1].at <= INTERVAL_SLACK_MS
        && consumed(&points[n - 2], &points[n - 1])
    {
        n - 1
    } else {
        return None;
    };
    let mut start = end - 1;
    while start >= 1 && consumed(&points[start - 1], &points[start]) {
        start -= 1;
    }
    // Leave out the run's oldest interval when there are others; stay within the last minute.
    if end - start >= 2 {
        start += 1;
    }
    while cur.at - points[start].at > 60_000 && start + 1 < end {
        start += 1;
    }
    let from = points[start];
    let secs = (cur.at - from.at) as f64 / 1000.0;
    let fell = from.depth as f64 - cur.depth as f64;
    if secs <= 0.0 || fell <= 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(cur.depth as f64 / (fell / secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_000_000_000;

    fn stats(backlog: u64, dlq: u64, sent: u64, acked: u64) -> QueueStats {
        QueueStats {
            visible: backlog,
            delayed: 0,
            in_flight: 0,
            dead_letter_depth: dlq,
            oldest_visible_age: Duration::ZERO,
            completed: 0,
            totals: Totals {
                sent,
                acked,
                ..Totals::default()
            },
            flow: None,
        }
    }

    fn sample(at_s: i64, s: &QueueStats) -> StatsSample {
        StatsSample::of(s, Timestamp(T0 + at_s * 1000))
    }

    #[test]
    fn a_new_queues_first_sends_count_at_once() {
        let t = Trend::compute(
            &stats(50, 0, 50, 0),
            Timestamp(T0),
            Timestamp(T0 + 2_000),
            &[],
        );
        assert!((t.rates[0].sent - 50.0 / 60.0).abs() < 1e-9, "{t:?}");
        assert!((t.rates[2].sent - 50.0 / 900.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.backlog.direction, Direction::Rising);
        assert_eq!(t.backlog.eta, None, "nothing is consumed");
    }

    #[test]
    fn a_queue_still_since_its_latest_sample_is_flat_with_no_eta() {
        // A burst of 50 at creation, sampled at 10 s, nothing since.
        let after = stats(50, 0, 50, 0);
        let history = [sample(10, &after), sample(20, &after)];
        let t = Trend::compute(&after, Timestamp(T0), Timestamp(T0 + 25_000), &history);
        assert_eq!(t.backlog.direction, Direction::Flat, "{t:?}");
        assert!(
            t.backlog.slope_1m > 0.0,
            "the last minute still saw the burst"
        );
        assert_eq!(t.backlog.eta, None);
        // Only one sample after the burst: flat as soon as it is taken.
        let t = Trend::compute(&after, Timestamp(T0), Timestamp(T0 + 11_000), &history[..1]);
        assert_eq!(t.backlog.direction, Direction::Flat, "{t:?}");
    }

    #[test]
    fn a_steady_drain_reads_its_eta() {
        // 2,000 messages sent at creation; consumers take 20/s from t = 5 s.
        let at = |t: i64| {
            let acked = (20 * (t - 5)).max(0) as u64;
            stats(2000 - acked, 0, 2000, acked)
        };
        let history: Vec<_> = (1..=4).map(|k| sample(10 * k, &at(10 * k))).collect();
        let now = 43;
        let t = Trend::compute(
            &at(now),
            Timestamp(T0),
            Timestamp(T0 + now * 1000),
            &history,
        );
        let left = (2000 - 20 * (now - 5)) as f64 / 20.0;
        let eta = t.backlog.eta.expect("draining").as_secs_f64();
        assert!((eta - left).abs() < left * 0.05, "eta {eta} vs {left}");
        assert_eq!(t.backlog.direction, Direction::Falling);
    }

    #[test]
    fn consumers_that_stopped_leave_no_eta_and_a_resumed_drain_counts_from_its_restart() {
        // Stores leave out points that repeat the one before: after 20 s nothing changed.
        let history = [
            sample(10, &stats(100, 0, 200, 100)),
            sample(20, &stats(80, 0, 200, 120)),
        ];
        // 40 s later, nothing moved since: no ETA and flat.
        let cur = stats(80, 0, 200, 120);
        let t = Trend::compute(&cur, Timestamp(T0), Timestamp(T0 + 60_000), &history);
        assert_eq!(t.backlog.eta, None, "{t:?}");
        assert_eq!(t.backlog.direction, Direction::Flat);
        // Consumption resumed within the last interval, after 30 s of standing still: the
        // ETA reads that interval alone (10 in 10 s), not the drain before the pause.
        let cur = stats(70, 0, 200, 130);
        let t = Trend::compute(&cur, Timestamp(T0), Timestamp(T0 + 60_000), &history);
        let eta = t.backlog.eta.expect("draining again").as_secs_f64();
        assert!((eta - 70.0).abs() < 3.5, "{t:?}");
    }

    #[test]
    fn a_dlq_drained_by_a_redrive_has_a_time_to_empty() {
        // The main queue's DLQ falls by 1 a second from 100 at t = 0.
        let dlq = |t: i64| stats(0, (100 - t) as u64, 0, 0);
        let history: Vec<_> = (1..=3).map(|k| sample(10 * k, &dlq(10 * k))).collect();
        let t = Trend::compute(
            &dlq(35),
            Timestamp(T0 - 3_600_000),
            Timestamp(T0 + 35_000),
            &history,
        );
        let eta = t.dead_letters.eta.expect("being emptied").as_secs_f64();
        assert!((eta - 65.0).abs() < 3.0, "{eta}");
        assert_eq!(t.dead_letters.direction, Direction::Falling);
        assert_eq!(t.backlog.eta, None);
    }

    #[test]
    fn balanced_flow_is_flat_and_old_windows_use_the_sample_before() {
        // 10/s in and out for ten minutes, the backlog wobbling around 50.
        let at = |t: i64| stats(50 + (t % 20 == 0) as u64, 0, 10 * t as u64, 10 * t as u64);
        let history: Vec<_> = (1..=60).map(|k| sample(10 * k, &at(10 * k))).collect();
        let now = 605;
        let t = Trend::compute(
            &at(now),
            Timestamp(T0 - 1000),
            Timestamp(T0 + now * 1000),
            &history,
        );
        assert_eq!(t.backlog.direction, Direction::Flat, "{t:?}");
        assert!((t.rates[0].sent - 10.0).abs() < 0.5, "{t:?}");
        assert!((t.rates[1].sent - 10.0).abs() < 0.5, "{t:?}");
        // Ten minutes old: the 15-minute rate counts its events over 15 minutes.
        assert!((t.rates[2].sent - 6050.0 / 900.0).abs() < 0.01, "{t:?}");
        assert_eq!(t.backlog.eta, None, "nothing drains");
    }
}
