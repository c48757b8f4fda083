//! A downstream rate limiter that the handlers of a worker (or of several workers in one
//! process) share, so together they stay under an upstream's quota.
//!
//! # Why smooth, and why a hold-off
//! A quota such as "10 requests per second" is usually enforced over sliding windows. A
//! limiter that lets a full burst through at once and then refills can pass nearly twice the
//! quota across a window boundary, so the default here spaces calls evenly (a burst of 1;
//! [`RateLimiter::with_burst`] relaxes it). And when the upstream answers 429 with
//! `Retry-After` anyway (its quota is shared with others we cannot see), every handler should
//! back off, not only the one that was told: [`RateLimiter::hold_off`] pauses all of them.
//! The limiter is GCRA from the `governor` crate: no background task, one atomic per call.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota};

use crate::error::{Error, Result};

/// A shared limiter: clones share one budget.
///
/// ```no_run
/// # async fn f() -> Result<(), sluice_client::Error> {
/// use std::time::Duration;
/// let limiter = sluice_client::RateLimiter::new(10, Duration::from_secs(1))?; // 10/s
/// for _ in 0..3 {
///     limiter.acquire().await; // waits for its turn
///     // ... call the upstream ...
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    limiter: DefaultDirectRateLimiter,
    /// Nanoseconds since `epoch` before which nobody may go (a hold-off).
    hold_until: AtomicU64,
    epoch: Instant,
    limit: u32,
    period: Duration,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("limit", &self.inner.limit)
            .field("period", &self.inner.period)
            .finish()
    }
}

impl RateLimiter {
    /// At most `limit` calls per `period`, evenly spaced.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a zero limit or period.
    pub fn new(limit: u32, period: Duration) -> Result<Self> {
        Self::build(limit, period, 1)
    }

    /// At most `limit` calls per `period`, letting up to `burst` through back to back after a
    /// quiet spell (`burst` is capped at `limit`).
    ///
    /// # Errors
    /// As [`RateLimiter::new`].
    pub fn with_burst(limit: u32, period: Duration, burst: u32) -> Result<Self> {
        Self::build(limit, period, burst)
    }

    fn build(limit: u32, period: Duration, burst: u32) -> Result<Self> {
        let bad = || {
            Error::InvalidInput(format!(
                "a rate limit needs a positive limit and period, got {limit} per {}",
                sluice_core::human::fmt_duration(period)
            ))
        };
        let n = NonZeroU32::new(limit).ok_or_else(bad)?;
        let interval = period
            .checked_div(n.get())
            .filter(|d| !d.is_zero())
            .ok_or_else(bad)?;
        let burst = NonZeroU32::new(burst.clamp(1, limit)).ok_or_else(bad)?;
        let quota = Quota::with_period(interval)
            .ok_or_else(bad)?
            .allow_burst(burst);
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                limiter: DefaultDirectRateLimiter::direct(quota),
                hold_until: AtomicU64::new(0),
                epoch: Instant::now(),
                limit,
                period,
            }),
        })
    }

    /// Waits until a call may go.
    ///
    /// # Cancel safety
    /// Safe: a dropped wait takes nothing from the budget.
    pub async fn acquire(&self) {
        loop {
            let hold = self.hold_remaining();
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
                continue;
            }
            self.inner.limiter.until_ready().await;
            // A hold-off set while we waited applies to us too.
            if self.hold_remaining().is_zero() {
                return;
            }
        }
    }

    /// Takes a turn if one is free now.
    pub fn try_acquire(&self) -> bool {
        self.hold_remaining().is_zero() && self.inner.limiter.check().is_ok()
    }

    /// Pauses every holder of this limiter for `wait` (e.g. an upstream's `Retry-After`); a
    /// shorter hold-off than one already in force changes nothing.
    pub fn hold_off(&self, wait: Duration) {
        let until = self.now_nanos().saturating_add(nanos(wait));
        self.inner.hold_until.fetch_max(until, Ordering::AcqRel);
    }

    fn hold_remaining(&self) -> Duration {
        let until = self.inner.hold_until.load(Ordering::Acquire);
        Duration::from_nanos(until.saturating_sub(self.now_nanos()))
    }

    fn now_nanos(&self) -> u64 {
        nanos(self.inner.epoch.elapsed())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spaces_calls_and_holds_off() {
        let l = RateLimiter::new(20, Duration::from_secs(1)).unwrap();
        let start = Instant::now();
        for _ in 0..6 {
            l.acquire().await;
        }
        // 6 calls at 50 ms spacing: the first is free, then 5 waits.
        assert!(
            start.elapsed() >= Duration::from_millis(240),
            "{:?}",
            start.elapsed()
        );
        l.hold_off(Duration::from_millis(150));
        assert!(!l.try_acquire());
        let t = Instant::now();
        l.acquire().await;
        assert!(t.elapsed() >= Duration::from_millis(140));
        assert!(RateLimiter::new(0, Duration::from_secs(1)).is_err());
    }
}
