//! The rate governor: additive increase, multiplicative decrease, with slow start.
//!
//! Rates are held in thousandths of a delivery per minute so that a slow queue still moves
//! by exact steps. Every time span is a fraction of the configured quota window and every
//! hold comes from a Retry-After, so the governor behaves the same on a clock running a
//! hundred times faster with rates a hundred times higher.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::config::AdaptiveRate;
use super::outcome::Tally;
use super::{FlowConfig, RateReason};
use crate::config::RateLimit;
use crate::time::Timestamp;

/// Rounds per quota window: the rate may grow once per round.
pub const ROUNDS_PER_WINDOW: i64 = 12;
/// Outcomes the decrease filter remembers.
pub const RECENT_OUTCOMES: u32 = 32;
/// Congestion signals among the last [`RECENT_OUTCOMES`] needed for a decrease; fewer only
/// hold deliveries for their Retry-After.
pub const DECREASE_SIGNALS: u32 = 4;
/// A round binds (the rate limited deliveries) when it leased at least this share (in
/// permille) of what the rate allotted it, holds excluded.
const BINDING_PERMILLE: u64 = 667;
/// Below the rate of the last decrease, each growing round closes at least this fraction
/// (1/n) of the gap.
const GAP_FRACTION: u64 = 4;
/// At or above it, the step is this much (permille) of that rate per quota window, doubling
/// every half window...
const PROBE_PERMILLE: u64 = 100;
/// ... up to this fraction (1/n) of the rate per round (half the rate a window): the rate
/// runs ahead of what the dependency counted over its window by at most that much when its
/// first refusals come.
const PROBE_STEP_FRACTION: u64 = 24;
/// A rate unused for a round comes down towards this multiple of what the dependency
/// accepted over its last quota window...
const USED_MULTIPLE: u64 = 2;
/// ... by this fraction (1/n) of itself a round.
const DECAY_FRACTION: u64 = 8;
/// Smallest burst of the pace window.
const PACE_BURST: u64 = 4;

/// Thousandths per whole.
const MILLI: u64 = 1000;
/// ms per minute.
const MINUTE_MS: u64 = 60_000;

/// Successes in one round-long slice of the quota window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Bucket {
    /// `at / round_ms`.
    index: i64,
    ok: u32,
}

/// The governor's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Governor {
    /// The current rate, in thousandths of a delivery per minute.
    pub(super) rate_mpm: u64,
    /// Doubling each growing round until the first decrease.
    slow_start: bool,
    /// The rate the last decrease was cut from (0: none yet).
    last_congestion_mpm: u64,
    /// Since when the rate has grown beyond `last_congestion_mpm` (its step doubles every
    /// half quota window from then).
    probe_from: Option<Timestamp>,
    /// No deliveries before this: the longest Retry-After told.
    pub(super) hold_until: Option<Timestamp>,
    /// The last [`RECENT_OUTCOMES`] outcomes, newest in bit 0: 1 for congestion.
    recent: u32,
    /// The round length the state was counted with (a twelfth of the quota window).
    round_ms: i64,
    /// When the governor started counting successes.
    started: Timestamp,
    /// Successes over the last quota window.
    accepted: VecDeque<Bucket>,
    /// When the current round started (its holds excluded).
    round_start: Option<Timestamp>,
    /// Deliveries in the current round.
    round_leased: u32,
    /// Congestion signals in the current round.
    round_congestion: u32,
    /// Successes in the current round.
    #[serde(default)]
    round_ok: u32,
    /// Transient failures in the current round.
    #[serde(default)]
    round_failures: u32,
    /// Whether the last round that ended was held back by the rate: only then is what the
    /// dependency accepted a measure of what it takes, rather than of the work there was.
    #[serde(default)]
    bound: bool,
    /// No decrease before this: a quota window after the last one, so that a decrease is
    /// judged on calls made after it.
    calm_until: Option<Timestamp>,
    /// Congestion signals ever observed.
    pub(super) congestion_total: u64,
    /// Decreases ever made.
    pub(super) decreases_total: u64,
    /// The rate last reported in a [`super::FlowEvent::RateAdapted`].
    audited_mpm: u64,
}

/// The rate's bounds, in thousandths per minute.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    lower: u64,
    upper: u64,
}

impl Bounds {
    fn of(a: &AdaptiveRate, ceiling_per_min: Option<u32>) -> Self {
        let max = ceiling_per_min.map_or(a.max_per_min, |c| c.min(a.max_per_min));
        let upper = u64::from(max.max(1)) * MILLI;
        let lower = (u64::from(a.min_per_min) * MILLI).min(upper);
        Bounds { lower, upper }
    }

    fn clamp(self, mpm: u64) -> u64 {
        mpm.clamp(self.lower, self.upper)
    }
}

/// A rate change to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) from_mpm: u64,
    pub(super) to_mpm: u64,
    pub(super) reason: RateReason,
}

fn window_ms(a: &AdaptiveRate) -> i64 {
    i64::try_from(a.window().as_millis())
        .unwrap_or(i64::MAX)
        .max(ROUNDS_PER_WINDOW)
}

fn round_ms(a: &AdaptiveRate) -> i64 {
    window_ms(a) / ROUNDS_PER_WINDOW
}

impl Governor {
    pub(super) fn new(a: &AdaptiveRate, ceiling_per_min: Option<u32>, now: Timestamp) -> Self {
        let rate = Bounds::of(a, ceiling_per_min).lower;
        Governor {
            rate_mpm: rate,
            slow_start: true,
            last_congestion_mpm: 0,
            probe_from: None,
            hold_until: None,
            recent: 0,
            round_ms: round_ms(a),
            started: now,
            accepted: VecDeque::new(),
            round_start: None,
            round_leased: 0,
            round_congestion: 0,
            round_ok: 0,
            round_failures: 0,
            bound: false,
            calm_until: None,
            congestion_total: 0,
            decreases_total: 0,
            audited_mpm: rate,
        }
    }

    /// The rate as deliveries per minute, rounded.
    pub(super) fn per_min(&self) -> u32 {
        per_min(self.rate_mpm)
    }

    /// Whether deliveries are held at `now`.
    pub(super) fn held(&self, now: Timestamp) -> Option<Timestamp> {
        self.hold_until.filter(|h| *h > now)
    }

    /// The pace of deliveries at the current rate.
    pub(super) fn pace(&self) -> RateLimit {
        pace_of(self.rate_mpm, self.round_ms)
    }

    /// A new quota window restarts the count of successes and the round.
    fn follow_window(&mut self, a: &AdaptiveRate, now: Timestamp) {
        if self.round_ms != round_ms(a) {
            self.round_ms = round_ms(a);
            self.accepted.clear();
            self.started = now;
            self.round_start = None;
            self.round_leased = 0;
        }
    }

    /// New bounds: the rate moves into them.
    pub(super) fn reconfigure(&mut self, cfg: FlowConfig<'_>, now: Timestamp) -> Option<Step> {
        let a = cfg.adaptive?;
        self.follow_window(a, now);
        let b = Bounds::of(a, cfg.ceiling_per_min);
        let from = self.rate_mpm;
        self.rate_mpm = b.clamp(self.rate_mpm);
        self.report(from, b, RateReason::Config)
    }

    /// `n` deliveries leased at `now`: a round may end, and the rate grow.
    pub(super) fn leased(&mut self, cfg: FlowConfig<'_>, n: u32, now: Timestamp) -> Option<Step> {
        let a = cfg.adaptive?;
        self.follow_window(a, now);
        let start = *self.round_start.get_or_insert(now);
        let took_ms = now.as_millis().saturating_sub(start.as_millis());
        if took_ms < self.round_ms {
            self.round_leased = self.round_leased.saturating_add(n);
            return None;
        }
        // The round is over. It grows the rate if the rate was what held deliveries back
        // (it leased at least two thirds of what the rate allotted it), at most one
        // congestion signal came (an isolated 429 only holds), and no Retry-After holds
        // deliveries.
        let took_ms = u64::try_from(took_ms).unwrap_or(0);
        let allotted = self.rate_mpm.saturating_mul(took_ms) / MINUTE_MS;
        let binding = u64::from(self.round_leased) * MILLI * MILLI >= allotted * BINDING_PERMILLE;
        // A round in which more than a fifth of the answered calls failed does not grow the
        // rate either: a dependency that is failing is not asking for more.
        let failing = u64::from(self.round_failures) * 5
            > u64::from(self.round_ok) + u64::from(self.round_failures);
        let quiet = self.round_congestion == 0 && self.held(now).is_none();
        let grow = binding && !failing && self.round_congestion < 2 && self.held(now).is_none();
        self.bound = binding;
        self.round_start = Some(now);
        self.round_leased = n;
        self.round_congestion = 0;
        self.round_ok = 0;
        self.round_failures = 0;
        let b = Bounds::of(a, cfg.ceiling_per_min);
        if !grow {
            return if quiet { self.decay(a, b, now) } else { None };
        }
        let from = self.rate_mpm;
        let last = self.last_congestion_mpm;
        // The additive step: as configured, or a tenth of the last congested rate per window.
        let inc = a.increase_per_min.map_or(
            last * PROBE_PERMILLE / MILLI / ROUNDS_PER_WINDOW as u64,
            |i| u64::from(i) * MILLI,
        );
        let step = if self.slow_start {
            self.rate_mpm
        } else if self.rate_mpm < last {
            // Back towards the rate that last congested, fast at first.
            inc.max((last - self.rate_mpm) / GAP_FRACTION)
        } else {
            // Beyond it: probe, the step doubling every half window, in case the dependency
            // now takes more.
            let since = *self.probe_from.get_or_insert(now);
            let windows = 2 * now.since(since).as_millis() / a.window().as_millis().max(1);
            let doubled = inc.saturating_mul(1 << windows.min(20));
            doubled.min(self.rate_mpm / PROBE_STEP_FRACTION).max(inc)
        };
        self.rate_mpm = b.clamp(self.rate_mpm.saturating_add(step.max(1)));
        self.report(from, b, RateReason::Growth)
    }

    /// A quiet round that did not bind: the queue had less work than its rate. A rate far
    /// above what the dependency accepted over its last quota window (a burst of work grew
    /// it, then the work ran out) comes down by an eighth a round towards twice that, so
    /// that the next burst cannot flood the dependency before a 429 could cut it.
    fn decay(&mut self, a: &AdaptiveRate, b: Bounds, now: Timestamp) -> Option<Step> {
        let since = now.as_millis().saturating_sub(self.started.as_millis());
        if since < window_ms(a) {
            // Less than a window of successes says little yet.
            return None;
        }
        let used = self.accepted_mpm(now).saturating_mul(USED_MULTIPLE);
        if self.rate_mpm <= used {
            return None;
        }
        let from = self.rate_mpm;
        let decayed = from - from / DECAY_FRACTION;
        self.rate_mpm = b.clamp(decayed.max(used));
        self.report(from, b, RateReason::Unused)
    }

    /// The breaker opened: the dependency is down. Slow start ends, so that when it comes
    /// back the rate returns fast to where it was, a quarter of the gap a round, instead of
    /// doubling into the backlog the outage built up.
    pub(super) fn outage(&mut self, a: &AdaptiveRate) {
        if self.slow_start {
            self.slow_start = false;
            let lower = u64::from(a.min_per_min) * MILLI;
            self.last_congestion_mpm = self.rate_mpm.max(lower);
            self.probe_from = None;
        }
    }

    /// Outcomes observed at `now`: holds, the decrease filter, the accepted rate.
    pub(super) fn observe(
        &mut self,
        cfg: FlowConfig<'_>,
        t: &Tally,
        now: Timestamp,
    ) -> Option<Step> {
        let a = cfg.adaptive?;
        self.follow_window(a, now);
        if t.ok > 0 {
            self.count_accepted(t.ok, now);
        }
        self.round_ok = self.round_ok.saturating_add(t.ok);
        self.round_failures = self.round_failures.saturating_add(t.failures);
        let answered = t.ok.saturating_add(t.failures).saturating_add(t.other);
        // Order within a tally is unknown: the congestion is taken as the most recent.
        self.recent = shift_in(self.recent, answered, false);
        self.recent = shift_in(self.recent, t.congestion, true);
        if t.congestion == 0 {
            return None;
        }
        self.congestion_total += u64::from(t.congestion);
        self.round_congestion = self.round_congestion.saturating_add(t.congestion);
        if let Some(ra) = t.longest_retry_after {
            let until = now.plus(ra);
            if self.hold_until.is_none_or(|h| until > h) {
                // Holds do not count against the round's pace.
                let from = self.hold_until.map_or(now, |h| h.max(now));
                if let Some(s) = self.round_start.as_mut() {
                    *s = s.plus(until.since(from));
                }
                self.hold_until = Some(until);
            }
        }
        // Within a window of the last decrease, calls made before it still count at the
        // dependency: only a rate grown beyond what it accepted then is cut again.
        let calm =
            self.calm_until.is_some_and(|c| now < c) && self.rate_mpm <= self.last_congestion_mpm;
        if calm || self.recent.count_ones() < DECREASE_SIGNALS {
            return None;
        }
        // The first cut ends slow start, whose last doublings the dependency only felt as its
        // window filled: it is cut from what the dependency accepted over its window, when
        // that is less than the rate and the rate was what held deliveries back (otherwise
        // what was accepted is only the work there was, and says nothing of the dependency).
        let b = Bounds::of(a, cfg.ceiling_per_min);
        let from = self.rate_mpm;
        let base = if self.slow_start && self.bound {
            from.min(self.accepted_mpm(now))
        } else {
            from
        };
        // The rate to return to fast is what the dependency took over its window: Retry-After
        // holds may have kept a rate above it from being used.
        // (Only when the rate bound: a queue with less work than its rate returns to its rate,
        // or random refusals would ratchet it down under its own traffic, cut after cut.)
        self.last_congestion_mpm = if self.bound {
            base.min(self.accepted_mpm(now))
        } else {
            base
        }
        .max(b.lower);
        self.rate_mpm = b.clamp(base * u64::from(a.decrease()) / MILLI);
        self.slow_start = false;
        self.probe_from = None;
        self.calm_until = Some(now.plus(a.window()));
        self.decreases_total += 1;
        self.round_start = Some(now);
        self.round_leased = 0;
        self.report(from, b, RateReason::Congestion)
    }

    fn count_accepted(&mut self, ok: u32, now: Timestamp) {
        let index = now.as_millis().div_euclid(self.round_ms);
        while self
            .accepted
            .front()
            .is_some_and(|b| b.index <= index - ROUNDS_PER_WINDOW)
        {
            self.accepted.pop_front();
        }
        match self.accepted.back_mut() {
            Some(b) if b.index == index => b.ok = b.ok.saturating_add(ok),
            _ => self.accepted.push_back(Bucket { index, ok }),
        }
    }

    /// Successes over the last quota window (or since the start, if shorter), per minute.
    fn accepted_mpm(&self, now: Timestamp) -> u64 {
        let index = now.as_millis().div_euclid(self.round_ms);
        let ok: u64 = self
            .accepted
            .iter()
            .filter(|b| b.index > index - ROUNDS_PER_WINDOW)
            .map(|b| u64::from(b.ok))
            .sum();
        let since = now.as_millis().saturating_sub(self.started.as_millis());
        let span = since.clamp(self.round_ms, self.round_ms * ROUNDS_PER_WINDOW);
        ok * MINUTE_MS * MILLI / u64::try_from(span).unwrap_or(1).max(1)
    }

    /// A step worth reporting: a quarter of the last reported rate or more, or onto a bound.
    fn report(&mut self, from: u64, b: Bounds, reason: RateReason) -> Option<Step> {
        let to = self.rate_mpm;
        let last = self.audited_mpm;
        let large = to.abs_diff(last) * 4 >= last;
        let bound = to != last && (to == b.lower || to == b.upper);
        if to == from || !(large || bound) {
            return None;
        }
        self.audited_mpm = to;
        Some(Step {
            from_mpm: last,
            to_mpm: to,
            reason,
        })
    }
}

/// `n` bits of `bit` shifted into the recent-outcome register.
fn shift_in(reg: u32, n: u32, bit: bool) -> u32 {
    let n = n.min(RECENT_OUTCOMES);
    if n == 0 {
        return reg;
    }
    let shifted = if n >= 32 { 0 } else { reg << n };
    if bit {
        let ones = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        shifted | ones
    } else {
        shifted
    }
}

/// Thousandths per minute as whole deliveries per minute, rounded.
pub(super) fn per_min(mpm: u64) -> u32 {
    u32::try_from(mpm.saturating_add(MILLI / 2) / MILLI).unwrap_or(u32::MAX)
}

/// The sliding-window limit that paces deliveries at `mpm` thousandths per minute (its burst
/// is its whole limit, so the window alone spaces them): an even spacing, in small bursts of a 32nd of what the rate delivers in a quota window (1 to
/// [`PACE_BURST`]), or of what it delivers in 10 ms when that is more (so that a very high
/// rate does not wake the engine for each delivery). Counts keep the pace the same on a clock
/// run faster.
pub(super) fn pace_of(mpm: u64, round_ms: i64) -> RateLimit {
    let mpm = mpm.max(1);
    let window_ms = u64::try_from(round_ms * ROUNDS_PER_WINDOW).unwrap_or(MINUTE_MS);
    let per_window = mpm * window_ms / MINUTE_MS / MILLI;
    let burst = (per_window / 32)
        .clamp(1, PACE_BURST)
        .max(mpm.div_ceil(6_000_000));
    let period_ms = (burst * MINUTE_MS * MILLI / mpm).max(1);
    let limit = u32::try_from(burst).unwrap_or(u32::MAX);
    RateLimit {
        limit,
        period: std::time::Duration::from_millis(period_ms),
        // Already a small window: its whole limit may go at once, as before the pace existed.
        burst: Some(limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_register_keeps_the_newest_outcomes() {
        let r = shift_in(0, 2, true);
        assert_eq!(r.count_ones(), 2);
        let r = shift_in(r, 30, false);
        assert_eq!(r.count_ones(), 2);
        let r = shift_in(r, 1, false);
        assert_eq!(r.count_ones(), 1);
        assert_eq!(shift_in(r, 40, true), u32::MAX);
        assert_eq!(shift_in(u32::MAX, 32, false), 0);
    }

    #[test]
    fn the_pace_spreads_a_small_burst_over_its_period() {
        // A quota window of a minute: rounds of 5 s.
        let p = pace_of(100_000, 5_000);
        assert_eq!((p.limit, p.period.as_millis()), (3, 1_800));
        let p = pace_of(1_000, 5_000);
        assert_eq!((p.limit, p.period.as_millis()), (1, 60_000));
        let p = pace_of(6_000_000, 5_000);
        assert_eq!((p.limit, p.period.as_millis()), (4, 40));
        // The same on a clock run a hundred times faster.
        let p = pace_of(10_000_000, 50);
        assert_eq!((p.limit, p.period.as_millis()), (3, 18));
        // 600,000 a minute is 100 per 10 ms.
        let p = pace_of(600_000_000, 5_000);
        assert_eq!((p.limit, p.period.as_millis()), (100, 10));
    }
}
