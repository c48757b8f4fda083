//! A sliding-window limit: at most `limit` events in any window of length `period`.
//!
//! Queue `rate_limit`s protect a downstream that counts calls per window (an API quota of
//! 100 per minute, say). A token bucket refilled continuously lets through up to twice the
//! quota inside one window after an idle spell; keeping the times of the last `limit`
//! deliveries makes the promise exact, for a memory cost bounded by `limit`.

use std::collections::VecDeque;

use crate::config::RateLimit;
use crate::time::Timestamp;

/// Times of the recent events of one limited stream.
#[derive(Debug, Default, Clone)]
pub struct SlidingWindow {
    events: VecDeque<Timestamp>,
}

impl SlidingWindow {
    /// How many more events `limit` allows at `now`.
    pub fn available(&mut self, limit: &RateLimit, now: Timestamp) -> u32 {
        self.forget_before(limit, now);
        limit
            .limit
            .saturating_sub(u32::try_from(self.events.len()).unwrap_or(u32::MAX))
    }

    /// Records `n` events at `now`.
    pub fn record(&mut self, now: Timestamp, n: usize) {
        self.events.extend(std::iter::repeat_n(now, n));
    }

    /// When the next event will be allowed, if none is allowed at `now`.
    pub fn next_free(&mut self, limit: &RateLimit, now: Timestamp) -> Option<Timestamp> {
        if self.available(limit, now) > 0 {
            return None;
        }
        // The window frees a slot when the oldest event that still counts leaves it.
        let over = self.events.len() - limit.limit as usize;
        self.events.get(over).map(|t| t.plus(limit.period))
    }

    /// A window holding `events` (oldest first), as one kept them ([`SlidingWindow::events`]).
    pub fn restore(events: impl IntoIterator<Item = Timestamp>) -> Self {
        SlidingWindow {
            events: events.into_iter().collect(),
        }
    }

    /// The events it holds, oldest first: some may have left the window already.
    pub fn events(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.events.iter().copied()
    }

    /// Records `n` events at `now` and forgets those that left `limit`'s window by then: for
    /// a window rebuilt from a history, which no `available` call trims meanwhile.
    pub fn record_within(&mut self, limit: &RateLimit, now: Timestamp, n: usize) {
        self.record(now, n);
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

    #[test]
    fn never_more_than_limit_in_any_window() {
        let rl = RateLimit {
            limit: 3,
            period: Duration::from_secs(10),
        };
        let mut w = SlidingWindow::default();
        let t0 = Timestamp(1_000_000);
        assert_eq!(w.available(&rl, t0), 3);
        w.record(t0, 2);
        w.record(t0.plus(Duration::from_secs(5)), 1);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(9))), 0);
        assert_eq!(
            w.next_free(&rl, t0.plus(Duration::from_secs(9))),
            Some(t0.plus(Duration::from_secs(10)))
        );
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(10))), 2);
        assert_eq!(w.available(&rl, t0.plus(Duration::from_secs(15))), 3);
    }
}
