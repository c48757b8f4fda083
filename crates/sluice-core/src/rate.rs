//! Rate limits: at most `limit` events in any window of length `period`, spread evenly.
//!
//! Queue `rate_limit`s protect a downstream that counts calls per window (an API quota of
//! 100 per minute, say). Two rules hold together, and an event goes only when both allow it:
//!
//! - **The window** keeps the times of the recent events: never more than `limit` in any
//!   window of `period`. A token bucket refilled continuously lets through up to twice the
//!   quota inside one window after an idle spell; the kept times make the promise exact, for
//!   a memory cost bounded by `limit`.
//! - **The pace** (the generic cell rate algorithm, GCRA) spreads them: after a quiet spell
//!   `burst` events may go at once (default a tenth of `limit`, at least 1), then one every
//!   `period / limit`. Without it, 100 a minute went as 100 in the first second and nothing
//!   for a minute, which an upstream with a per-second sub-limit answers with 429s. The pace
//!   is one number, the *theoretical arrival time* of the next event: each event moves it
//!   on by one interval from `max(it, now)`, and an event may go while it is no more than
//!   `burst - 1` intervals ahead of now. Times are in nanoseconds and the interval is
//!   `period / limit` rounded down, so every engine computes the same. A burst as large as
//!   the limit turns the pace off: the window alone decides, as before bursts existed.

use std::collections::VecDeque;

use crate::config::RateLimit;
use crate::time::Timestamp;

/// Nanoseconds in a millisecond.
const NS_PER_MS: i64 = 1_000_000;

/// The recent events of one limited stream: their times, and the pace's arrival time.
#[derive(Debug, Default, Clone)]
pub struct SlidingWindow {
    events: VecDeque<Timestamp>,
    /// The pace's theoretical arrival time of the next event, in ns (`None`: no event yet).
    tat: Option<i64>,
}

/// The pace's interval between two events of `limit`, in ns (at least 1).
fn interval(limit: &RateLimit) -> i64 {
    let period = i64::try_from(limit.period.as_nanos()).unwrap_or(i64::MAX);
    (period / i64::from(limit.limit.max(1))).max(1)
}

/// Whether `limit` spreads its events: not when its burst is its whole limit, which leaves
/// the window alone to decide (as before bursts existed).
fn spreads(limit: &RateLimit) -> bool {
    limit.burst() < limit.limit
}

fn ns(t: Timestamp) -> i64 {
    t.as_millis().saturating_mul(NS_PER_MS)
}

impl SlidingWindow {
    /// How many more events `limit` allows at `now`: what both the window and the pace allow.
    pub fn available(&mut self, limit: &RateLimit, now: Timestamp) -> u32 {
        self.forget_before(limit, now);
        let window = limit
            .limit
            .saturating_sub(u32::try_from(self.events.len()).unwrap_or(u32::MAX));
        window.min(self.paced(limit, now))
    }

    /// What [`SlidingWindow::available`] says, without forgetting the events that left the
    /// window: for a look that may not change it.
    pub fn room(&self, limit: &RateLimit, now: Timestamp) -> u32 {
        let gone = self.events.partition_point(|t| t.plus(limit.period) <= now);
        let counted = u32::try_from(self.events.len() - gone).unwrap_or(u32::MAX);
        limit
            .limit
            .saturating_sub(counted)
            .min(self.paced(limit, now))
    }

    /// From when the window is as good as new under `limit` (its events all left it and its
    /// pace is no longer ahead), so it may be forgotten; `None` when it never held an event.
    pub fn idle_from(&self, limit: &RateLimit) -> Option<Timestamp> {
        let window = self.events.back().map(|t| t.plus(limit.period));
        let pace = self
            .tat
            .map(|tat| Timestamp((tat + NS_PER_MS - 1).div_euclid(NS_PER_MS)));
        [window, pace].into_iter().flatten().max()
    }

    /// How many events the pace allows at `now`.
    fn paced(&self, limit: &RateLimit, now: Timestamp) -> u32 {
        if !spreads(limit) {
            return limit.limit;
        }
        let burst = i64::from(limit.burst());
        let Some(tat) = self.tat else {
            return u32::try_from(burst).unwrap_or(u32::MAX);
        };
        let t = interval(limit);
        let ahead = tat - ns(now);
        if ahead <= 0 {
            return u32::try_from(burst).unwrap_or(u32::MAX);
        }
        // Event k (from 0) may go while the arrival time after k more is at most
        // `burst - 1` intervals ahead: ahead + k·t <= (burst - 1)·t.
        let room = (burst - 1) * t - ahead;
        if room < 0 {
            0
        } else {
            u32::try_from((room / t + 1).min(burst)).unwrap_or(0)
        }
    }

    /// Records `n` events at `now` under `limit`.
    pub fn record(&mut self, limit: &RateLimit, now: Timestamp, n: usize) {
        self.events.extend(std::iter::repeat_n(now, n));
        if !spreads(limit) {
            return;
        }
        let t = interval(limit);
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let from = self.tat.map_or(ns(now), |tat| tat.max(ns(now)));
        self.tat = Some(from.saturating_add(t.saturating_mul(n)));
    }

    /// Records `n` events at `now` that no pace limited (they count in the window only).
    pub fn note(&mut self, now: Timestamp, n: usize) {
        self.events.extend(std::iter::repeat_n(now, n));
    }

    /// When the next event will be allowed, if none is allowed at `now`.
    pub fn next_free(&mut self, limit: &RateLimit, now: Timestamp) -> Option<Timestamp> {
        if self.available(limit, now) > 0 {
            return None;
        }
        // The window frees a slot when the oldest event that still counts leaves it.
        let window = self
            .events
            .len()
            .checked_sub(limit.limit as usize)
            .and_then(|over| self.events.get(over))
            .map(|t| t.plus(limit.period));
        // The pace allows one more once its arrival time is `burst - 1` intervals ahead.
        let paced = (self.paced(limit, now) == 0)
            .then_some(self.tat)
            .flatten()
            .map(|tat| {
                let at = tat - i64::from(limit.burst() - 1) * interval(limit);
                // Rounded up to the millisecond: never before it is allowed.
                Timestamp((at + NS_PER_MS - 1).div_euclid(NS_PER_MS))
            });
        [window, paced].into_iter().flatten().max()
    }

    /// A window holding `events` (oldest first) and the pace's arrival time `tat`, as one
    /// kept them ([`SlidingWindow::events`], [`SlidingWindow::pace`]).
    pub fn restore(events: impl IntoIterator<Item = Timestamp>, tat: Option<i64>) -> Self {
        SlidingWindow {
            events: events.into_iter().collect(),
            tat,
        }
    }

    /// The events it holds, oldest first: some may have left the window already.
    pub fn events(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.events.iter().copied()
    }

    /// The pace's arrival time of the next event, in ns, once an event was recorded.
    pub fn pace(&self) -> Option<i64> {
        self.tat
    }

    /// Records `n` events at `now` and forgets those that left `limit`'s window by then: for
    /// a window rebuilt from a history, which no `available` call trims meanwhile.
    pub fn record_within(&mut self, limit: &RateLimit, now: Timestamp, n: usize) {
        self.record(limit, now, n);
        self.forget_before(limit, now);
    }

    fn forget_before(&mut self, limit: &RateLimit, now: Timestamp) {
        while let Some(&t) = self.events.front() {
            if t.plus(limit.period) <= now {
                self.events.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limit(n: u32, period: Duration, burst: Option<u32>) -> RateLimit {
        RateLimit {
            limit: n,
            period,
            burst,
        }
    }

    #[test]
    fn never_more_than_limit_in_any_window() {
        // A burst as large as the limit: the window alone decides.
        let rl = limit(3, Duration::from_secs(10), Some(3));
        let mut w = SlidingWindow::default();
        let t0 = Timestamp(1_000_000);
        assert_eq!(w.available(&rl, t0), 3);
        w.record(&rl, t0, 2);
        w.record(&rl, t0.plus(Duration::from_secs(5)), 1);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(9))), 0);
        assert_eq!(
            w.next_free(&rl, t0.plus(Duration::from_secs(9))),
            Some(t0.plus(Duration::from_secs(10)))
        );
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(10))), 2);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(15))), 3);
    }

    #[test]
    fn a_look_without_forgetting_agrees_and_idle_windows_are_new() {
        let rl = limit(4, Duration::from_secs(10), None);
        let mut w = SlidingWindow::default();
        let t0 = Timestamp(5_000_000);
        assert_eq!(w.idle_from(&rl), None);
        for k in 0..6 {
            let t = t0.plus(Duration::from_millis(1700 * k));
            if w.room(&rl, t) > 0 {
                w.record(&rl, t, 1);
            }
        }
        for k in 0..40 {
            let t = t0.plus(Duration::from_millis(500 * k));
            let looked = w.room(&rl, t);
            assert_eq!(looked, w.clone().available(&rl, t), "at {k}");
        }
        let idle = w.idle_from(&rl).unwrap();
        assert_eq!(w.room(&rl, idle), rl.burst(), "a whole burst again");
        assert_eq!(
            w.clone().available(&rl, idle),
            SlidingWindow::default().available(&rl, idle)
        );
    }

    #[test]
    fn the_pace_spreads_what_the_burst_leaves() {
        // 100 a minute, burst 10: 10 at once, then one every 600 ms.
        let rl = limit(100, Duration::from_secs(60), None);
        assert_eq!(rl.burst(), 10);
        let mut w = SlidingWindow::default();
        let t0 = Timestamp(1_000_000);
        assert_eq!(w.available(&rl, t0), 10);
        w.record(&rl, t0, 10);
        assert_eq!(w.available(&rl, t0), 0);
        assert_eq!(
            w.next_free(&rl, t0),
            Some(t0.plus(Duration::from_millis(600)))
        );
        assert_eq!(w.available(&rl, t0.plus(Duration::from_millis(599))), 0);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_millis(600))), 1);
        // Over a minute of steady demand: 10 + 100 - 1 events at most, 100 at most in the
        // first minute, and never more than 100 in any sliding minute.
        let mut at = t0.plus(Duration::from_millis(600));
        let mut sent = vec![(t0, 10usize)];
        while at < t0.plus(Duration::from_secs(120)) {
            let n = w.available(&rl, at) as usize;
            if n > 0 {
                w.record(&rl, at, n);
                sent.push((at, n));
            }
            at = at.plus(Duration::from_millis(50));
        }
        for (start, _) in &sent {
            let end = start.plus(Duration::from_secs(60));
            let inside: usize = sent
                .iter()
                .filter(|(t, _)| t >= start && *t < end)
                .map(|(_, n)| n)
                .sum();
            assert!(inside <= 100, "{inside} in the minute from {start:?}");
        }
        let first_10s: usize = sent
            .iter()
            .filter(|(t, _)| *t < t0.plus(Duration::from_secs(10)))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(first_10s, 10 + 16, "the burst, then one per 600 ms");
    }

    #[test]
    fn a_burst_of_one_is_strict_spacing_and_an_idle_spell_restores_the_burst() {
        let rl = limit(10, Duration::from_secs(1), Some(1));
        let mut w = SlidingWindow::default();
        let t0 = Timestamp(5_000);
        assert_eq!(w.available(&rl, t0), 1);
        w.record(&rl, t0, 1);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_millis(99))), 0);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_millis(100))), 1);
        let rl3 = limit(10, Duration::from_secs(1), Some(3));
        let mut w = SlidingWindow::default();
        w.record(&rl3, t0, 3);
        assert_eq!(w.available(&rl3, t0.plus(Duration::from_millis(100))), 1);
        assert_eq!(w.available(&rl3, t0.plus(Duration::from_secs(5))), 3);
    }
}
