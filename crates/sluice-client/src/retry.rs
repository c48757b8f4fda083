//! When a failed call is tried again, and how long the client waits first.
//!
//! # Why these rules
//! A retry is only harmless when repeating the request cannot do its effect twice. So each
//! call is classified once, by what it does, not by its HTTP method:
//!
//! | call | retried on | why it is safe |
//! |---|---|---|
//! | every `GET` (queues, browse, message, stats, health) | transport errors, 503, 429 | reads have no effect |
//! | `PUT /v1/queues/{q}`, pause, resume | transport errors, 503, 429 | they set a state; setting it twice is setting it once |
//! | `DELETE` queue or message | transport errors, 503, 429 | a retry that finds it gone (404) after an unanswered first attempt counts as success |
//! | extend | transport errors, 503, 429 | it sets the lease end to "now + visibility" |
//! | ack, nack, reject, move | transport errors, 503, 429 | a receipt names one delivery, so a repeat cannot settle a later delivery; a repeat of a call whose answer was lost answers `receipt_stale` |
//! | receive | transport errors, 503, 429 | a lease whose answer was lost only delays that message by its visibility timeout; nothing is lost (at-least-once) |
//! | send with an `Idempotency-Key` (given, or generated when safe retries are on) or with a `dedup_id` on every message | transport errors, 503, 429 | the broker replays the first answer (or returns the first id) instead of storing again |
//! | send without either, purge | only "could not connect" | the broker never saw the request; any later failure may have stored (or purged) already, and a repeat would do it twice |
//!
//! A failure that says the broker never saw the request (connection refused, DNS) is retried
//! for every call. Other 4xx answers are never retried: the same request gets the same answer.
//!
//! Waits grow exponentially (`initial_backoff * 2^n`, capped at `max_backoff`) with full
//! jitter (a uniform draw between zero and that cap), so clients that failed together do not
//! come back together and hammer a broker that is recovering. A `Retry-After` from the broker
//! (sent with 503 and 429) is a floor on the wait; one longer than `max_retry_after` ends the
//! retries at once, returning the error, rather than blocking the caller for minutes.

use std::time::Duration;

use rand::Rng;

use crate::error::Error;

/// How calls are retried. The default makes up to 4 attempts, waiting about 100 ms, 200 ms,
/// 400 ms (jittered) between them, and follows `Retry-After` up to 10 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    /// The cap of the first wait.
    pub initial_backoff: Duration,
    /// The cap of any wait.
    pub max_backoff: Duration,
    /// The longest `Retry-After` the client will wait for; a longer one returns the error.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// No retries: every call is attempted once.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The jittered wait before attempt `attempt + 1` (with `attempt` attempts made so far,
    /// at least 1), not counting `Retry-After`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let cap = self
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        if cap.is_zero() {
            return cap;
        }
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
    }

    /// How long to wait before trying again after `err`, the `attempt`-th failure (1-based),
    /// or `None` to give up now.
    pub(crate) fn next_wait(&self, attempt: u32, safety: Safety, err: &Error) -> Option<Duration> {
        if attempt >= self.max_attempts || !retryable(safety, err) {
            return None;
        }
        let wait = self.backoff(attempt);
        match err.retry_after() {
            Some(ra) if ra > self.max_retry_after => None,
            Some(ra) => Some(wait.max(ra)),
            None => Some(wait),
        }
    }
}

/// Whether a call may be repeated after an ambiguous failure (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Safety {
    /// Repeating has no further effect.
    Idempotent,
    /// Repeating may act twice: retried only when the broker was never reached.
    Unsafe,
}

fn retryable(safety: Safety, err: &Error) -> bool {
    if err.is_connect() {
        return true;
    }
    safety == Safety::Idempotent && err.is_transient()
}

/// Parses a `Retry-After` header: delta-seconds (an HTTP date is not used by the broker and is
/// ignored).
pub(crate) fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::ErrorCode;

    fn api(status: u16, retry_after: Option<Duration>) -> Error {
        Error::Api {
            status,
            code: crate::error::code_for_status(status),
            message: "x".into(),
            retry_after,
        }
    }

    #[test]
    fn backoff_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(800),
            max_retry_after: Duration::from_secs(1),
        };
        for attempt in 1..12 {
            let cap = Duration::from_millis(100 * (1 << (attempt - 1).min(3)));
            for _ in 0..50 {
                assert!(p.backoff(attempt) <= cap);
            }
        }
        let distinct: std::collections::HashSet<_> = (0..20).map(|_| p.backoff(4)).collect();
        assert!(distinct.len() > 1, "waits are jittered");
    }

    #[test]
    fn what_is_retried() {
        let p = RetryPolicy::default();
        assert!(
            p.next_wait(1, Safety::Idempotent, &api(503, None))
                .is_some()
        );
        assert!(
            p.next_wait(1, Safety::Idempotent, &api(429, None))
                .is_some()
        );
        assert!(
            p.next_wait(1, Safety::Idempotent, &api(409, None))
                .is_none()
        );
        assert!(p.next_wait(1, Safety::Unsafe, &api(503, None)).is_none());
        assert!(
            p.next_wait(4, Safety::Idempotent, &api(503, None))
                .is_none()
        );
        let floor = p
            .next_wait(
                1,
                Safety::Idempotent,
                &api(503, Some(Duration::from_secs(2))),
            )
            .unwrap();
        assert!(floor >= Duration::from_secs(2));
        assert!(
            p.next_wait(
                1,
                Safety::Idempotent,
                &api(503, Some(Duration::from_secs(60)))
            )
            .is_none(),
            "a Retry-After beyond max_retry_after gives up"
        );
        assert_eq!(
            Error::InvalidInput("x".into()).code(),
            Some(ErrorCode::InvalidArgument)
        );
    }

    #[test]
    fn retry_after_parses_seconds() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
