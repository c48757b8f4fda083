//! Time as the queue sees it: milliseconds since the Unix epoch, read through an injected
//! [`Clock`] so that every lifecycle rule can be tested on virtual time, fast and exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A point in time, in whole milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This time moved forward by `d` (saturating; durations in Sluice are bounded by config
    /// limits, so saturation only guards against arithmetic on hostile values).
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

/// The source of "now" for a store. Engines never read the system time directly.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }
}

/// A clock that only moves when told to: lifecycle tests advance it by exact amounts.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start.0)),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `t` (may move backwards, to test clock skew handling).
    pub fn set(&self, t: Timestamp) {
        self.now.store(t.0, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        // 2026-01-01T00:00:00Z: a fixed, realistic epoch keeps test output readable.
        ManualClock::new(Timestamp(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }
}

/// Formats a time as RFC 3339 (UTC), the form times take in the API and the CLI.
pub fn rfc3339(t: Timestamp) -> String {
    let nanos = i128::from(t.as_millis()) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| t.as_millis().to_string())
}

/// Parses an RFC 3339 time.
///
/// # Errors
/// `InvalidArgument` naming `field` when `s` is not an RFC 3339 time.
pub fn parse_rfc3339(field: &str, s: &str) -> Result<Timestamp, crate::error::StoreError> {
    let d = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            crate::error::StoreError::invalid(format!(
                "{field} must be an RFC 3339 time like 2026-01-01T00:00:00Z, got \"{s}\": {e}"
            ))
        })?;
    let ms = d.unix_timestamp_nanos() / 1_000_000;
    i64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| crate::error::StoreError::invalid(format!("{field} is out of range: \"{s}\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(
            rfc3339(Timestamp(1_767_225_600_250)),
            "2026-01-01T00:00:00.25Z"
        );
        assert_eq!(
            parse_rfc3339("t", "2026-01-01T00:00:00.25Z").unwrap(),
            Timestamp(1_767_225_600_250)
        );
    }
}
