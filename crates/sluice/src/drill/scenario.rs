//! The scenario's numbers and its clock.
//!
//! Every duration and rate is given in *scenario* time (what a real enrollment system would
//! see) and compressed by `--time-scale N`: a scenario minute lasts `60 / N` real seconds and
//! a quota of `q` calls per scenario minute becomes `q * N / 60` calls per real second. All
//! verdicts are computed in scenario time, so they do not depend on N.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::DrillArgs;

/// The scenario clock: maps real instants to scenario minutes and scenario durations to real
/// ones.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// When the scenario started.
    pub start: Instant,
    /// Scenario seconds per real second.
    pub scale: f64,
}

impl Clock {
    /// A clock starting now.
    pub fn new(scale: f64) -> Self {
        Clock {
            start: Instant::now(),
            scale,
        }
    }

    /// Real time of a scenario duration.
    pub fn real(&self, scenario: Duration) -> Duration {
        Duration::from_secs_f64(scenario.as_secs_f64() / self.scale)
    }

    /// Scenario minutes elapsed at `t`.
    pub fn minutes_at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64() * self.scale / 60.0
    }

    /// Scenario minutes elapsed now.
    pub fn now_minutes(&self) -> f64 {
        self.minutes_at(Instant::now())
    }

    /// The real instant of scenario minute `m`.
    pub fn instant_of(&self, minutes: f64) -> Instant {
        self.start + Duration::from_secs_f64((minutes * 60.0 / self.scale).max(0.0))
    }
}

/// The validated scenario (scenario units).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Valid reservations.
    pub reservations: u32,
    /// Poison messages (malformed reservation ids).
    pub poison: u32,
    /// Raw bodies that are not a task envelope.
    pub undecodable: u32,
    /// How long a seat is held.
    pub hold: Duration,
    /// Reservations are made evenly over this window.
    pub arrival_window: Duration,
    /// Upstream calls allowed per scenario minute.
    pub quota_per_min: u32,
    /// Share of calls the upstream refuses at random with 429, in percent.
    pub random_429_pct: f64,
    /// The Retry-After of a random 429.
    pub random_retry_after: Duration,
    /// Share of releases whose reply is lost (applied, then 502), in percent.
    pub lost_reply_pct: f64,
    /// When the outage starts (from the scenario start).
    pub outage_at: Duration,
    /// How long the upstream is down.
    pub outage: Duration,
    /// The retry budget: the queue's max_receive_count.
    pub max_receive_count: u32,
    /// Broker backoff after a transient failure.
    pub backoff_base: Duration,
    /// Cap of that backoff.
    pub backoff_max: Duration,
    /// Lease length.
    pub visibility: Duration,
    /// Share of the quota the workers' rate limiter uses.
    pub worker_share: f64,
    /// Messages per redrive job.
    pub redrive_batch: u64,
    /// Redrive rate, messages per scenario minute.
    pub redrive_per_min: u32,
    /// The operator pauses the redrive when the 429 share of the last minute passes this.
    pub redrive_stop_429_pct: f64,
    /// The operator's wait after each redrive job.
    pub redrive_pause: Duration,
    /// Scenario seconds per real second.
    pub scale: f64,
    /// Seed of the random 429s and of the arrival jitter.
    pub seed: u64,
    /// `--adaptive`: the queue governs itself and the worker has no limiter.
    pub adaptive: bool,
    /// The adaptive rate's floor, per scenario minute.
    pub adaptive_min_per_min: u32,
    /// The adaptive rate's bound, per scenario minute.
    pub adaptive_max_per_min: u32,
    /// With `adaptive`, run the tuned scenario beside it.
    pub reference: bool,
    /// Misconfiguration: no idempotency key on releases.
    pub no_idempotency_key: bool,
    /// Misconfiguration: permanent errors (malformed ids) are retried like transient ones.
    pub retry_permanent_errors: bool,
}

impl Scenario {
    /// Validates the flags.
    pub fn from_args(a: &DrillArgs) -> anyhow::Result<Self> {
        let tenants = a.tenants.is_some();
        let time_scale = a.time_scale.unwrap_or(if tenants { 30.0 } else { 100.0 });
        let reservations = a
            .reservations
            .unwrap_or(if tenants { 9_000 } else { 10_000 });
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let hold = a.hold.unwrap_or(minutes(if tenants { 5 } else { 20 }));
        let arrival_window = a
            .arrival_window
            .unwrap_or(minutes(if tenants { 60 } else { 180 }));
        if !(time_scale.is_finite() && time_scale > 0.0 && time_scale <= 10_000.0) {
            bail!("--time-scale must be above 0 and at most 10000");
        }
        if a.quota == 0 {
            bail!("--quota must be at least 1 call per minute");
        }
        if !(0.0..=50.0).contains(&a.random_429) || !(0.0..=50.0).contains(&a.lost_replies) {
            bail!("--random-429 and --lost-replies are percentages from 0 to 50");
        }
        if !(a.worker_share > 0.0 && a.worker_share <= 2.0) {
            bail!("--worker-share must be above 0 and at most 2");
        }
        if a.max_receive_count > 1000 {
            bail!("--max-receive-count must be 0 (unlimited) to 1000");
        }
        if reservations == 0 {
            bail!("--reservations must be at least 1");
        }
        if (a.adaptive || tenants) && !(1..=a.adaptive_max).contains(&a.adaptive_min) {
            bail!("--adaptive-min must be at least 1 and at most --adaptive-max");
        }
        if (a.adaptive || tenants) && f64::from(a.adaptive_max) * time_scale > 60_000_000.0 {
            bail!("--adaptive-max times --time-scale must be at most 60,000,000 a minute");
        }
        if a.tenants.is_some_and(|n| !(4..=50).contains(&n)) {
            bail!("--tenants must be 4 to 50");
        }
        // With tenants the outage comes earlier, so that the quota raise after it has room.
        let outage_at = a
            .outage_at
            .unwrap_or(hold + arrival_window.mul_f64(if tenants { 0.3 } else { 0.5 }));
        Ok(Scenario {
            reservations,
            poison: a.poison,
            undecodable: a.undecodable,
            hold,
            arrival_window,
            quota_per_min: a.quota,
            random_429_pct: a.random_429,
            random_retry_after: a.random_retry_after,
            lost_reply_pct: a.lost_replies,
            outage_at,
            outage: a.outage,
            max_receive_count: a.max_receive_count,
            backoff_base: a.backoff_base,
            backoff_max: a.backoff_max,
            visibility: a.visibility,
            worker_share: a.worker_share,
            redrive_batch: a.redrive_batch.max(1),
            redrive_per_min: a.redrive_rate.max(1),
            redrive_stop_429_pct: a.redrive_stop_429,
            redrive_pause: a.redrive_pause,
            scale: time_scale,
            seed: a.seed,
            adaptive: a.adaptive,
            adaptive_min_per_min: a.adaptive_min,
            adaptive_max_per_min: a.adaptive_max,
            reference: !a.no_reference,
            no_idempotency_key: a.no_idempotency_key,
            retry_permanent_errors: a.retry_permanent_errors,
        })
    }

    /// Worker calls per scenario minute.
    pub fn worker_per_min(&self) -> f64 {
        f64::from(self.quota_per_min) * self.worker_share
    }

    /// Scenario minutes of the last expiry.
    pub fn last_expiry_min(&self) -> f64 {
        (self.hold + self.arrival_window).as_secs_f64() / 60.0
    }

    /// Outage start and end, scenario minutes.
    pub fn outage_min(&self) -> (f64, f64) {
        let s = self.outage_at.as_secs_f64() / 60.0;
        (s, s + self.outage.as_secs_f64() / 60.0)
    }

    /// The scenario minutes the whole drill is expected to take: every release at the
    /// workers' rate after the first expiry, plus the outage, or the last expiry if later.
    pub fn expected_minutes(&self) -> f64 {
        let work = f64::from(self.reservations) / self.worker_per_min().max(0.001);
        let first = self.hold.as_secs_f64() / 60.0;
        (first + work + self.outage.as_secs_f64() / 60.0).max(self.last_expiry_min())
    }

    /// Real calls per second the workers' limiter allows.
    pub fn worker_rate_real(&self) -> f64 {
        self.worker_per_min() * self.scale / 60.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_scales() {
        let c = Clock::new(60.0);
        assert_eq!(c.real(Duration::from_secs(60)), Duration::from_secs(1));
        let t = c.instant_of(2.0);
        assert!((c.minutes_at(t) - 2.0).abs() < 1e-6);
    }
}
