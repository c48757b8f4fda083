//! Rates and trends of a queue: what an operator reads to decide whether to act.
//!
//! Both come from the event counters (`Totals`) and gauges that the broker samples every
//! [`SAMPLE_INTERVAL`](crate::stats::SAMPLE_INTERVAL), plus the queue's state right now, and
//! one virtual point: a queue starts at zero when it is created. That point is why a new
//! queue's first seconds count: its first sample may come after a burst, but its creation
//! does not.
//!
//! - **Rate over a window `w`** (1, 5 and 15 minutes): `(counter now − counter at B) / (now −
//!   B)`, where `B` is the latest point at or before `now − w`. A queue younger than `w`
//!   counts from zero at its creation, over its age (at least a second): a new queue sent 5
//!   a second reads 5/s after 5 s. No event in the window reads 0.
//! - **Backlog** is every message the queue still has to get done: visible + delayed + in
//!   flight. Its **change** over the last minute is `backlog now − backlog at B` (`B` as for
//!   the one-minute rate, the creation point of a younger queue), and its **slope** that
//!   change per second; `slope_5m` is the same over five minutes.
//! - **Direction**: the sign of that change, flat when it is at most one message or at most
//!   5 % of the events through the backlog in the same minute: a jump reads rising for the
//!   minute after it, as the one-minute change and rates that stand beside it do. Unless the
//!   recent span (since the latest point at least one sample interval, 10 s, old) went the
//!   other way by the same measure: then that span decides, so a turn shows within 10 to
//!   20 s. `slope` is the change per second over the span that decided.
//! - **Drain ETA**: the backlog divided by the rate it leaves at. That rate is its net
//!   outflow over the current run of consumption (at most the last minute; the run's oldest
//!   interval is left out when it has others, since consumption may have started part-way
//!   through it). On a queue with a delivery cap (`rate_limit`, or the adaptive rate of a
//!   governed queue) that delivered within its period, the rate is at most the cap, and the
//!   cap itself when the cap's pauses break the run. No ETA while the queue is paused, or
//!   **stalled**: messages are visible and nothing left for [`STALL`] (10 s) while no cap
//!   holds them; `stalled_for` says since when (the sample at which the last one left).
//! - **Dead letters** follow the same rules on the queue's DLQ depth; their ETA is the time
//!   to empty the DLQ while something (a redrive) takes messages out of it. A DLQ is never
//!   stalled, neither as the queue's `dead_letters` nor as a queue of its own: dead letters
//!   wait for an operator.
//! - **Under a redrive** ([`Outlook`]), a DLQ's ETA (on its own row and as its source queue's
//!   dead-letter trend) is the time to move what the active jobs will still move — their
//!   matching messages within what is left of their limits — not the whole depth; there is
//!   none while every job is paused, or once they have nothing left to move.

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

/// How long messages may wait visible with nothing leaving before the backlog is stalled.
pub const STALL: Duration = Duration::from_secs(10);

/// What holds a queue's deliveries back besides its consumers, read by the drain ETA.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Holds {
    /// The queue is paused: it delivers nothing.
    pub paused: bool,
    /// The lowest delivery cap in force: `rate_limit`, or a governed queue's adaptive rate.
    pub cap: Option<crate::config::RateLimit>,
    /// The depth is of dead letters (a dead-letter queue's own, or a queue's DLQ depth):
    /// they wait for an operator, so they are never stalled and are emptied only by a redrive:
    /// an ETA only while one is active ([`Holds::redrive`]).
    pub dead_letters: bool,
    /// What the active redrive jobs out of this queue will still move, when any runs or is
    /// paused: the drain ETA is the time to move that, not the whole depth.
    pub redrive: Option<Outlook>,
    /// The same for the queue's dead-letter queue, read by its dead-letter trend.
    pub dlq_redrive: Option<Outlook>,
}

/// What the active redrive jobs out of one queue will still move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outlook {
    /// Messages they will still move: each job's matching messages still in the queue,
    /// within what is left of its limit.
    pub remaining: u64,
    /// Every one of them is paused: nothing leaves until one is resumed, so there is no ETA.
    pub paused: bool,
}

impl Holds {
    /// The holds of a queue with config `cfg` and stats `current`.
    pub fn of(cfg: &crate::config::QueueConfig, current: &QueueStats) -> Holds {
        let adaptive = current
            .flow
            .as_ref()
            .and_then(|f| f.adaptive.as_ref())
            .map(|a| crate::config::RateLimit {
                limit: a.rate_per_min.max(1),
                period: Duration::from_secs(60),
                burst: None,
            });
        let per_sec = |r: &crate::config::RateLimit| {
            f64::from(r.limit) / r.period.as_secs_f64().max(f64::MIN_POSITIVE)
        };
        let cap = match (cfg.rate_limit, adaptive) {
            (Some(a), Some(b)) => Some(if per_sec(&a) <= per_sec(&b) { a } else { b }),
            (a, b) => a.or(b),
        };
        Holds {
            paused: cfg.paused,
            cap,
            dead_letters: false,
            redrive: None,
            dlq_redrive: None,
        }
    }
}

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
    /// Rising, falling or flat: the sign of `change_1m`, or of the recent span's change when
    /// that went the other way (see the module docs).
    pub direction: Direction,
    /// The depth's change over the last minute (positive: growing).
    pub change_1m: i64,
    /// The change per second over the span the direction was read from.
    pub slope: f64,
    /// The change over the last five minutes, per second.
    pub slope_5m: f64,
    /// While messages are being taken out: when the depth reaches zero at the current pace.
    pub eta: Option<Duration>,
    /// Messages are visible and nothing has left for this long (at least [`STALL`]), with
    /// no delivery cap holding them: consumers are gone or stuck.
    pub stalled_for: Option<Duration>,
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
    /// Deliveries so far (for the DLQ: none counted).
    received: u64,
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
        holds: Holds,
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
            // A queue younger than the window counts from zero at its creation, over its age.
            let (at, old) = match samples.iter().rposition(|s| s.at.as_millis() <= from) {
                Some(i) => (samples[i].at.as_millis(), samples[i].totals),
                None => (created_at.as_millis().max(from), Totals::default()),
            };
            rates_between(
                &old,
                &current.totals,
                ((now_ms - at) as f64 / 1000.0).max(1.0),
            )
        });

        let backlog_point = |at: i64, depth: u64, t: &Totals| Point {
            at,
            depth,
            out: t.acked + t.dead_lettered + t.expired,
            received: t.received,
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
            received: 0,
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
        let backlog = depth_trend(
            &series(
                &backlog_point,
                &|s| s.visible + s.delayed + s.in_flight,
                current.visible + current.delayed + current.in_flight,
            ),
            holds,
            current.visible > 0 && !holds.dead_letters,
        );
        let dead_letters = depth_trend(
            &series(
                &dlq_point,
                &|s| s.dead_letter_depth,
                current.dead_letter_depth,
            ),
            Holds {
                redrive: holds.dlq_redrive,
                dead_letters: true,
                ..Holds::default()
            },
            false,
        );
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

/// The trend of one series: the creation point first, the current point last. `waiting`:
/// messages are visible, so a backlog nothing leaves is stalled.
fn depth_trend(points: &[Point], holds: Holds, waiting: bool) -> DepthTrend {
    let n = points.len() - 1;
    let cur = points[n];
    // Which way the depth went since `base`: flat when in and out balance.
    let heading = |base: &Point| {
        let change = cur.depth as i64 - base.depth as i64;
        let through = cur.activity.saturating_sub(base.activity) as f64;
        let net = change.unsigned_abs() as f64;
        if net <= 1.0 || net <= 0.05 * through {
            Direction::Flat
        } else if change > 0 {
            Direction::Rising
        } else {
            Direction::Falling
        }
    };
    let slope_since = |base: &Point| {
        let dt = (cur.at - base.at) as f64 / 1000.0;
        if dt > 0.0 {
            (cur.depth as f64 - base.depth as f64) / dt
        } else {
            0.0
        }
    };
    let minute = base_of(points, 60_000);
    let recent = base_of(points, SAMPLE_INTERVAL.as_millis() as i64);
    // The last minute decides, unless the recent span turned the other way.
    let (direction, span) = match (heading(&minute), heading(&recent)) {
        (m, r) if r != Direction::Flat && r != m => (r, recent),
        (m, _) => (m, minute),
    };
    let (eta, stalled_for) = drain(points, holds, waiting);
    DepthTrend {
        direction,
        change_1m: cur.depth as i64 - minute.depth as i64,
        slope: slope_since(&span),
        slope_5m: slope_since(&base_of(points, 300_000)),
        eta,
        stalled_for,
    }
}

/// The latest point at or before `w_ms` before the current (last) one; the creation point
/// for a series younger than that.
fn base_of(points: &[Point], w_ms: i64) -> Point {
    let n = points.len() - 1;
    let from = points[n].at - w_ms;
    points[..n]
        .iter()
        .rposition(|p| p.at <= from)
        .map_or(points[0], |i| points[i])
}

/// Whether something left between `a` and `b`, in an interval short enough to be one of the
/// sampler's.
fn consumed(a: &Point, b: &Point) -> bool {
    b.at - a.at <= INTERVAL_SLACK_MS && left(a, b)
}

/// Whether something left between `a` and `b`, however far apart.
fn left(a: &Point, b: &Point) -> bool {
    b.out > a.out || b.depth < a.depth
}

/// The drain ETA and how long the backlog has been stalled (see the module docs).
fn drain(points: &[Point], holds: Holds, waiting: bool) -> (Option<Duration>, Option<Duration>) {
    let n = points.len() - 1;
    let cur = points[n];
    if cur.depth == 0 || n < 1 || holds.paused || holds.redrive.is_some_and(|o| o.paused) {
        return (None, None);
    }
    // Dead letters leave only through a redrive: no job, no time to empty (a job that just
    // finished leaves the depth's recent fall behind it).
    if holds.dead_letters && holds.redrive.is_none() {
        return (None, None);
    }
    // Under a redrive, what is left is what its jobs will still move (a limit or a filter
    // leaves the rest where it is).
    let left_to_move = holds
        .redrive
        .map_or(cur.depth, |o| o.remaining.min(cur.depth));
    if left_to_move == 0 {
        return (None, None);
    }
    // A cap holds the backlog while its consumers took something within the cap's period.
    let capped = holds.cap.filter(|cap| {
        let period = i64::try_from(cap.period.as_millis())
            .unwrap_or(i64::MAX)
            .max(STALL.as_millis() as i64);
        cur.received > base_of(points, period).received
    });
    let last_left = (1..=n).rev().find(|&i| left(&points[i - 1], &points[i]));
    let since = last_left.map_or(points[0].at, |i| points[i].at);
    let idle = cur.at - since;
    if waiting && capped.is_none() && idle >= STALL.as_millis() as i64 {
        let stalled = Duration::from_millis(u64::try_from(idle).unwrap_or(0));
        return (None, Some(stalled));
    }
    let run = run_rate(points);
    let rate = match capped {
        Some(cap) => {
            let cap_rate = f64::from(cap.limit) / cap.period.as_secs_f64().max(0.001);
            Some(run.map_or(cap_rate, |r| r.min(cap_rate)))
        }
        None => run,
    };
    let eta = rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(left_to_move as f64 / r));
    (eta, None)
}

/// The net outflow, per second, over the current run of consumption: consecutive sample
/// intervals in each of which something left, ending now (or at the latest sample when the
/// current interval is too short to show it).
fn run_rate(points: &[Point]) -> Option<f64> {
    let n = points.len() - 1;
    let cur = points[n];
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
    (secs > 0.0 && fell > 0.0).then(|| fell / secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RateLimit;

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
                received: acked,
                acked,
                ..Totals::default()
            },
            flow: None,
            active_keys: 0,
            key_flows: None,
        }
    }

    fn sample(at_s: i64, s: &QueueStats) -> StatsSample {
        StatsSample::of(s, Timestamp(T0 + at_s * 1000))
    }

    /// The trend at `now_ms` of a queue created at `T0` whose state at any second is
    /// `at(t)`, sampled every 10 s as the broker does.
    fn trend_at(now_ms: i64, at: &dyn Fn(i64) -> QueueStats, holds: Holds) -> Trend {
        let history: Vec<_> = (1..)
            .map(|k| 10 * k)
            .take_while(|t| t * 1000 < now_ms)
            .map(|t| sample(t, &at(t)))
            .collect();
        let now_s = now_ms.div_euclid(1000);
        Trend::compute(
            &at(now_s),
            Timestamp(T0),
            Timestamp(T0 + now_ms),
            &history,
            holds,
        )
    }

    fn within(got: f64, want: f64, share: f64) -> bool {
        (got - want).abs() <= want * share
    }

    #[test]
    fn a_new_queue_reads_its_rate_over_its_age() {
        // 5 a second for 5 s.
        let t = trend_at(
            5_000,
            &|t| stats(5 * t as u64, 0, 5 * t as u64, 0),
            Holds::default(),
        );
        for w in 0..3 {
            assert!(within(t.rates[w].sent, 5.0, 0.2), "{:?}", t.rates[w]);
        }
        // Then nothing for longer than the window: 0.
        let t = trend_at(
            400_000,
            &|t| stats(25, 0, 5 * t.min(5) as u64, 0),
            Holds::default(),
        );
        assert_eq!(t.rates[0].sent, 0.0, "{t:?}");
        assert_eq!(t.rates[1].sent, 0.0, "{t:?}");
    }

    #[test]
    fn a_steady_drain_reads_its_eta_within_15_s_and_at_every_reading_after() {
        // 300 waiting; consumers take 3 a second from t = 60 s.
        let at = |t: i64| {
            let acked = (3 * (t - 60)).clamp(0, 300) as u64;
            stats(300 - acked, 0, 300, acked)
        };
        for now in (75_000..150_000).step_by(1000) {
            let t = trend_at(now, &at, Holds::default());
            let left = at(now / 1000).visible as f64 / 3.0;
            let eta = t.backlog.eta.map(|d| d.as_secs_f64());
            assert!(
                eta.is_some_and(|e| within(e, left, 0.2)),
                "at {now} ms: eta {eta:?} for {left} s left"
            );
            assert_eq!(t.backlog.direction, Direction::Falling, "at {now} ms");
            assert_eq!(t.backlog.stalled_for, None);
        }
    }

    #[test]
    fn a_backlog_held_by_a_rate_limit_reads_the_cap() {
        // 500 waiting under 100 a minute: each minute's 100 go in its first two seconds.
        let at = |t: i64| {
            let minutes = t / 60;
            let into = (t % 60).min(2) as u64;
            let acked = (100 * minutes as u64 + 50 * into).min(500);
            stats(500 - acked, 0, 500, acked)
        };
        let holds = Holds {
            cap: Some(RateLimit {
                limit: 100,
                period: Duration::from_secs(60),
                burst: None,
            }),
            ..Holds::default()
        };
        for now in (65_000..170_000).step_by(5000) {
            let t = trend_at(now, &at, holds);
            let left = at(now / 1000).visible as f64 / (100.0 / 60.0);
            let eta = t.backlog.eta.map(|d| d.as_secs_f64());
            assert!(
                eta.is_some_and(|e| within(e, left, 0.2)),
                "at {now} ms: eta {eta:?} for {left} s left"
            );
            assert_eq!(t.backlog.stalled_for, None, "a cap is not a stall");
        }
    }

    #[test]
    fn consumers_that_stopped_leave_a_stall_and_no_eta() {
        // Draining 2 a second until t = 40 s, then nothing.
        let at = |t: i64| {
            let acked = (2 * t.min(40)) as u64;
            stats(200 - acked, 0, 200, acked)
        };
        let t = trend_at(45_000, &at, Holds::default());
        assert!(
            t.backlog.eta.is_some(),
            "5 s after the last ack: still draining"
        );
        let t = trend_at(62_000, &at, Holds::default());
        assert_eq!(t.backlog.eta, None, "{t:?}");
        let stalled = t.backlog.stalled_for.expect("stalled").as_secs();
        assert!((10..=30).contains(&stalled), "{stalled}");
        // A paused queue is neither draining nor stalled.
        let paused = Holds {
            paused: true,
            ..Holds::default()
        };
        let t = trend_at(62_000, &at, paused);
        assert_eq!((t.backlog.eta, t.backlog.stalled_for), (None, None));
        // Nor is a dead-letter queue's own backlog: its messages wait for an operator.
        let dlq = Holds {
            dead_letters: true,
            ..Holds::default()
        };
        let t = trend_at(62_000, &at, dlq);
        assert_eq!(t.backlog.stalled_for, None);
        let t = trend_at(35_000, &at, paused);
        assert_eq!(t.backlog.eta, None, "paused: no ETA");
    }

    #[test]
    fn a_dlq_jump_reads_rising_for_the_minute_after_it() {
        // The DLQ jumps from 10 to 101 between t = 100 s and t = 110 s, then nothing.
        let at = |t: i64| {
            let d = if t < 100 {
                10
            } else if t < 110 {
                10 + 9 * (t - 100) as u64
            } else {
                101
            };
            let mut s = stats(0, d, 0, 0);
            s.totals.dead_lettered = d;
            s
        };
        for now in (112_000..165_000).step_by(3000) {
            let t = trend_at(now, &at, Holds::default());
            assert_eq!(
                t.dead_letters.direction,
                Direction::Rising,
                "at {now} ms: {t:?}"
            );
            assert_eq!(t.dead_letters.change_1m, 91, "at {now} ms");
            assert!(t.dead_letters.slope > 0.0);
        }
        let t = trend_at(200_000, &at, Holds::default());
        assert_eq!(t.dead_letters.direction, Direction::Flat, "a minute later");
        assert_eq!(
            t.dead_letters.stalled_for, None,
            "dead letters wait for an operator"
        );
    }

    #[test]
    fn a_dlq_drained_by_a_redrive_has_a_time_to_empty() {
        // The DLQ held 100 for an hour, then falls by 1 a second from t = 0.
        let dlq = |t: i64| stats(0, (100 - t.max(0)) as u64, 0, 0);
        let history: Vec<_> = (-6..=3).map(|k| sample(10 * k, &dlq(10 * k))).collect();
        let under = |outlook: Option<Outlook>| {
            Trend::compute(
                &dlq(35),
                Timestamp(T0 - 3_600_000),
                Timestamp(T0 + 35_000),
                &history,
                Holds {
                    dlq_redrive: outlook,
                    ..Holds::default()
                },
            )
        };
        let t = under(Some(Outlook {
            remaining: 65,
            paused: false,
        }));
        let eta = t.dead_letters.eta.expect("being emptied").as_secs_f64();
        assert!((eta - 65.0).abs() < 3.0, "{eta}");
        assert_eq!(t.dead_letters.direction, Direction::Falling);
        assert_eq!(t.backlog.eta, None);
        // The same fall with no job left: nothing empties the DLQ any more.
        let t = under(None);
        assert_eq!(t.dead_letters.eta, None);
        assert_eq!(t.dead_letters.direction, Direction::Falling);
    }

    #[test]
    fn under_a_redrive_the_eta_is_of_what_its_jobs_will_still_move() {
        // 82 dead letters falling by 1 a second from t = 0; the job will move 20 of them in
        // all (its limit), 10 more are excluded by its filter.
        // The same numbers serve as the DLQ's own backlog and as its source's dead letters.
        let dlq = |t: i64| {
            let d = (82 - t.clamp(0, 20)) as u64;
            stats(d, d, 0, 0)
        };
        let history: Vec<_> = (-6..=1).map(|k| sample(10 * k, &dlq(10 * k))).collect();
        let now = dlq(15);
        let at = |outlook| {
            let holds = Holds {
                dlq_redrive: Some(outlook),
                redrive: Some(outlook),
                dead_letters: true,
                ..Holds::default()
            };
            Trend::compute(
                &now,
                Timestamp(T0 - 3_600_000),
                Timestamp(T0 + 15_000),
                &history,
                holds,
            )
        };
        // 5 left to move at 1 a second: about 5 s, on the DLQ's own row and as the source
        // queue's dead-letter trend; not the 67 left in the DLQ.
        let t = at(Outlook {
            remaining: 5,
            paused: false,
        });
        for eta in [t.dead_letters.eta, t.backlog.eta] {
            let eta = eta.expect("being emptied").as_secs_f64();
            assert!((eta - 5.0).abs() < 1.0, "{eta}");
        }
        // Paused: nothing leaves until it is resumed.
        let t = at(Outlook {
            remaining: 5,
            paused: true,
        });
        assert_eq!((t.dead_letters.eta, t.backlog.eta), (None, None));
        // Nothing left to move: what stays is not being emptied.
        let t = at(Outlook {
            remaining: 0,
            paused: false,
        });
        assert_eq!((t.dead_letters.eta, t.backlog.eta), (None, None));
    }

    #[test]
    fn balanced_flow_is_flat_and_old_windows_use_the_sample_before() {
        // 10/s in and out for ten minutes, the backlog wobbling around 50.
        let at = |t: i64| stats(50 + (t % 20 == 0) as u64, 0, 10 * t as u64, 10 * t as u64);
        let t = trend_at(605_000, &at, Holds::default());
        assert_eq!(t.backlog.direction, Direction::Flat, "{t:?}");
        for w in 0..3 {
            assert!(within(t.rates[w].sent, 10.0, 0.05), "{:?}", t.rates[w]);
        }
        assert_eq!(t.backlog.eta, None, "nothing drains");
    }
}
