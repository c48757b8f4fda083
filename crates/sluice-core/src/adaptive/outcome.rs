//! How a delivery ended, as the governor and the breaker see it, and a mergeable count of
//! such endings.

use std::time::Duration;

use super::config::{AdaptiveRate, CongestionSignal};

/// How one delivery ended, for the governor and the breaker.
///
/// The engines map settlements to it: an ack is `Success` (a cancelled ack `Neutral`); a nack
/// goes through [`classify_nack`]; a lease expiry is `Failure`; a reject is `Other` (the
/// dependency answered, the message was wrong); a release or a move is `Neutral`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The call worked.
    Success,
    /// The dependency asked us to slow down (a 429, a Retry-After). It is alive, so this is
    /// not a failure for the breaker.
    Congestion {
        /// How long it asked us to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// The call failed transiently (5xx, timeout, lease expiry).
    Failure,
    /// The call ended without a transient failure but without success (a reject).
    Other,
    /// The lease ended without a call being judged (release, move, cancellation).
    Neutral,
}

/// Outcomes counted together, so that a node can count them in memory and hand them to the
/// shared state in one go ([`Tally::merge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// `Success` outcomes.
    pub ok: u32,
    /// `Congestion` outcomes.
    pub congestion: u32,
    /// `Failure` outcomes.
    pub failures: u32,
    /// `Other` outcomes.
    pub other: u32,
    /// `Neutral` outcomes.
    pub neutral: u32,
    /// The longest Retry-After among the congestion outcomes.
    pub longest_retry_after: Option<Duration>,
}

impl Tally {
    /// A tally of `n` times `outcome`.
    pub fn of(outcome: Outcome, n: u32) -> Self {
        let mut t = Tally::default();
        t.add(outcome, n);
        t
    }

    /// Counts `n` more `outcome`s.
    pub fn add(&mut self, outcome: Outcome, n: u32) {
        match outcome {
            Outcome::Success => self.ok = self.ok.saturating_add(n),
            Outcome::Congestion { retry_after } => {
                self.congestion = self.congestion.saturating_add(n);
                if n > 0 {
                    self.longest_retry_after = self.longest_retry_after.max(retry_after);
                }
            }
            Outcome::Failure => self.failures = self.failures.saturating_add(n),
            Outcome::Other => self.other = self.other.saturating_add(n),
            Outcome::Neutral => self.neutral = self.neutral.saturating_add(n),
        }
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Tally) {
        self.ok = self.ok.saturating_add(other.ok);
        self.congestion = self.congestion.saturating_add(other.congestion);
        self.failures = self.failures.saturating_add(other.failures);
        self.other = self.other.saturating_add(other.other);
        self.neutral = self.neutral.saturating_add(other.neutral);
        self.longest_retry_after = self.longest_retry_after.max(other.longest_retry_after);
    }

    /// Every outcome counted, neutral ones included: the leases that ended.
    pub fn total(&self) -> u64 {
        u64::from(self.ok)
            + u64::from(self.congestion)
            + u64::from(self.failures)
            + u64::from(self.other)
            + u64::from(self.neutral)
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

/// What a nack means. On an adaptive queue (`adaptive` given), a nack marked as carrying the
/// dependency's Retry-After (`retry_after_marker`, with the wait as `delay`) is congestion,
/// and so is one whose error contains a pattern of an `errors` signal (case-insensitive;
/// without the marker its delay is the consumer's own and is not honoured as a Retry-After).
/// Any other nack, and every nack of a queue that is not adaptive, is a transient failure.
pub fn classify_nack(
    adaptive: Option<&AdaptiveRate>,
    delay: Option<Duration>,
    retry_after_marker: bool,
    error: Option<&str>,
) -> Outcome {
    let Some(a) = adaptive else {
        return Outcome::Failure;
    };
    if retry_after_marker {
        return Outcome::Congestion { retry_after: delay };
    }
    if let (CongestionSignal::Errors(patterns), Some(error)) = (&a.signal, error) {
        let error = error.to_lowercase();
        if patterns.iter().any(|p| error.contains(&p.to_lowercase())) {
            return Outcome::Congestion { retry_after: None };
        }
    }
    Outcome::Failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_merge_and_keep_the_longest_retry_after() {
        let s = Duration::from_secs;
        let mut a = Tally::of(Outcome::Success, 3);
        a.add(
            Outcome::Congestion {
                retry_after: Some(s(5)),
            },
            1,
        );
        let mut b = Tally::of(
            Outcome::Congestion {
                retry_after: Some(s(9)),
            },
            2,
        );
        b.add(Outcome::Failure, 1);
        b.add(Outcome::Neutral, 1);
        b.add(Outcome::Congestion { retry_after: None }, 0);
        a.merge(&b);
        assert_eq!(
            a,
            Tally {
                ok: 3,
                congestion: 3,
                failures: 1,
                other: 0,
                neutral: 1,
                longest_retry_after: Some(s(9)),
            }
        );
        assert_eq!(a.total(), 8);
        assert!(Tally::default().is_empty());
    }

    #[test]
    fn nacks_are_congestion_only_on_adaptive_queues_and_by_the_signal() {
        let d = Some(Duration::from_secs(3));
        let plain = AdaptiveRate::new(1, 100);
        let mut errors = AdaptiveRate::new(1, 100);
        errors.signal = CongestionSignal::Errors(vec!["429".into(), "Too Many".into()]);
        let err = Some("push to URL answered 429 TOO MANY REQUESTS");
        assert_eq!(classify_nack(None, d, true, err), Outcome::Failure);
        assert_eq!(
            classify_nack(Some(&plain), d, true, None),
            Outcome::Congestion { retry_after: d }
        );
        assert_eq!(classify_nack(Some(&plain), d, false, err), Outcome::Failure);
        assert_eq!(
            classify_nack(Some(&errors), d, false, Some("upstream: too many requests")),
            Outcome::Congestion { retry_after: None }
        );
        assert_eq!(
            classify_nack(Some(&errors), d, true, Some("anything")),
            Outcome::Congestion { retry_after: d }
        );
        assert_eq!(
            classify_nack(Some(&errors), d, false, Some("503 unavailable")),
            Outcome::Failure
        );
        assert_eq!(
            classify_nack(Some(&errors), d, false, None),
            Outcome::Failure
        );
    }
}
