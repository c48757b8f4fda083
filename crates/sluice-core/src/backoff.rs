//! Retry backoff: `min(backoff_max, backoff_base * 2^(receive_count-1))` with full jitter.
//!
//! Why exponential: a dependency that is failing needs room to recover, and each failed
//! attempt is evidence that it has not yet. Why full jitter (a uniform draw between zero and
//! the ceiling) rather than a fixed delay: when an outage fails thousands of messages at
//! once, fixed delays bring them all back at once and knock the dependency over again;
//! spreading them uniformly turns the retry wave into a steady trickle.

use std::time::Duration;

/// The ceiling of the retry delay after the `receive_count`-th delivery failed.
pub fn ceiling(base: Duration, max: Duration, receive_count: u32) -> Duration {
    let exp = receive_count.saturating_sub(1).min(40);
    let factor = 1u64 << exp;
    let base_ms = u64::try_from(base.as_millis()).unwrap_or(u64::MAX);
    let ms = base_ms.saturating_mul(factor);
    Duration::from_millis(ms).min(max)
}

/// The delay drawn with full jitter: `unit` (uniform in `[0, 1)`) times the ceiling.
pub fn full_jitter(ceiling: Duration, unit: f64) -> Duration {
    let unit = unit.clamp(0.0, 1.0);
    Duration::from_millis((ceiling.as_millis() as f64 * unit) as u64)
}

/// The retry delay for a nack without an explicit delay, drawing jitter from `rand`.
pub fn retry_delay(base: Duration, max: Duration, receive_count: u32) -> Duration {
    full_jitter(ceiling(base, max, receive_count), rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ceiling_doubles_per_attempt_up_to_the_cap() {
        let max = Duration::from_secs(900);
        assert_eq!(ceiling(S, max, 1), S);
        assert_eq!(ceiling(S, max, 2), 2 * S);
        assert_eq!(ceiling(S, max, 5), 16 * S);
        assert_eq!(ceiling(S, max, 11), max);
        assert_eq!(ceiling(S, max, u32::MAX), max);
        assert_eq!(ceiling(Duration::ZERO, max, 7), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_the_ceiling() {
        let c = Duration::from_secs(8);
        assert_eq!(full_jitter(c, 0.0), Duration::ZERO);
        assert!(full_jitter(c, 0.999_999) <= c);
        for _ in 0..1000 {
            assert!(retry_delay(S, Duration::from_secs(900), 4) <= 8 * S);
        }
    }
}
