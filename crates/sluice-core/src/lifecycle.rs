//! The lifecycle rules as pure functions, so every engine decides the same way.

use std::time::Duration;

use crate::backoff;
use crate::config::{QueueConfig, limits};
use crate::message::{Attempt, AttemptOutcome, DeadLetterReason, Holder};
use crate::time::Timestamp;

/// True when a message that has been delivered `receive_count` times may not be tried again.
pub fn is_exhausted(max_receive_count: u32, receive_count: u32) -> bool {
    max_receive_count != 0 && receive_count >= max_receive_count
}

/// What happens to a message after a failed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// It becomes visible again after this delay (zero: at once).
    Retry(Duration),
    /// It goes to the queue's DLQ for this reason.
    DeadLetter(DeadLetterReason),
}

/// Rule 2: a nack retries after the explicit delay or the queue's backoff, unless the
/// attempts are used up.
pub fn after_nack(cfg: &QueueConfig, receive_count: u32, delay: Option<Duration>) -> AfterFailure {
    if is_exhausted(cfg.max_receive_count, receive_count) {
        return AfterFailure::DeadLetter(DeadLetterReason::Exhausted);
    }
    AfterFailure::Retry(
        delay.unwrap_or_else(|| {
            backoff::retry_delay(cfg.backoff_base, cfg.backoff_max, receive_count)
        }),
    )
}

/// Rule 2 when the attempt may not count: a nack while the queue's circuit breaker is open
/// or half-open (the dependency is down, not the message) leaves the message's budget as it
/// was before this delivery, as a release does. With `counted` true this is [`after_nack`].
///
/// A counted failure without an explicit delay on a queue with a breaker waits out the
/// breaker's window before its backoff: the next attempt comes only once the breaker has
/// judged the window the failure fell in. Without it, the backoff's full jitter can draw
/// near-zero delays and let a message spend every attempt in the seconds an outage takes to
/// open the breaker.
///
/// Returns what happens to the message and the receive count to store with it:
/// `receive_count`, or `receive_count - 1` when the attempt is not counted (exhaustion and the
/// backoff are judged on that count too).
pub fn after_nack_counted(
    cfg: &QueueConfig,
    receive_count: u32,
    delay: Option<Duration>,
    counted: bool,
) -> (AfterFailure, u32) {
    let stored = if counted {
        receive_count
    } else {
        receive_count.saturating_sub(1)
    };
    let delay = match (&cfg.breaker, delay) {
        (Some(b), None) if counted => Some(b.window().saturating_add(backoff::retry_delay(
            cfg.backoff_base,
            cfg.backoff_max,
            stored,
        ))),
        _ => delay,
    };
    (after_nack(cfg, stored, delay), stored)
}

/// Rule 3: an expired lease makes the message visible at once, unless the attempts are used up.
pub fn after_lease_expiry(cfg: &QueueConfig, receive_count: u32) -> AfterFailure {
    if is_exhausted(cfg.max_receive_count, receive_count) {
        AfterFailure::DeadLetter(DeadLetterReason::LeaseExpired)
    } else {
        AfterFailure::Retry(Duration::ZERO)
    }
}

/// Appends `attempt` to a history, keeping only the newest [`limits::MAX_ATTEMPTS_KEPT`].
pub fn record_attempt(history: &mut Vec<Attempt>, attempt: Attempt) {
    history.push(attempt);
    if history.len() > limits::MAX_ATTEMPTS_KEPT {
        let extra = history.len() - limits::MAX_ATTEMPTS_KEPT;
        history.drain(..extra);
    }
}

/// The warning a queue put answers when `max_receive_count` is 0 (set now, or a new queue):
/// nothing dead-letters its failing messages by count.
pub fn unlimited_attempts_warning(queue: &str) -> String {
    format!(
        "max_receive_count is 0: messages of \"{queue}\" are retried without limit and never \
         dead-lettered by count"
    )
}

/// The attempt a delivery held under `holder` adds when it ends at `at` with `outcome`.
/// The consumer is the name given when settling (`consumer`), else the one given when
/// receiving: a lease that ran out was settled by nobody, and still names who let it.
pub fn ended_attempt(
    at: Timestamp,
    outcome: AttemptOutcome,
    error: Option<String>,
    consumer: Option<String>,
    holder: Option<&Holder>,
) -> Attempt {
    Attempt {
        at,
        outcome,
        error,
        consumer: consumer.or_else(|| holder.and_then(|h| h.consumer.clone())),
        started_at: holder.and_then(|h| h.started_at),
    }
}

/// Adds a failed delivery to a history; its error, if any, becomes `last_error`.
pub fn record_failure(
    history: &mut Vec<Attempt>,
    last_error: &mut Option<String>,
    attempt: Attempt,
) {
    if attempt.error.is_some() {
        last_error.clone_from(&attempt.error);
    }
    record_attempt(history, attempt);
}

/// The history a completed message shows: the attempts kept with its record, then the
/// delivery that completed it (acknowledged at `completed_at`, held under `holder`), the
/// newest [`limits::MAX_ATTEMPTS_KEPT`] in all. A cancelled task's last delivery is already
/// among the kept ones (its handler's nack or reject), or it never ran, so it gains none.
///
/// Engines keep the acknowledged attempt implicitly: it follows from the completed record's
/// own time and the lease it ended, so an ack writes no attempt history.
pub fn completed_history(
    mut kept: Vec<Attempt>,
    completed_at: Timestamp,
    cancelled: bool,
    holder: Option<&Holder>,
) -> Vec<Attempt> {
    if !cancelled {
        record_attempt(
            &mut kept,
            ended_attempt(completed_at, AttemptOutcome::Acked, None, None, holder),
        );
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::AttemptOutcome;
    use crate::name::QueueName;
    use crate::time::Timestamp;

    fn cfg(max: u32) -> QueueConfig {
        QueueConfig {
            max_receive_count: max,
            ..QueueConfig::defaults_for(&QueueName::new("q").unwrap())
        }
    }

    #[test]
    fn nack_on_last_attempt_dead_letters() {
        assert_eq!(
            after_nack(&cfg(3), 3, None),
            AfterFailure::DeadLetter(DeadLetterReason::Exhausted)
        );
        assert_eq!(
            after_nack(&cfg(3), 2, Some(Duration::from_secs(7))),
            AfterFailure::Retry(Duration::from_secs(7))
        );
    }

    #[test]
    fn an_uncounted_nack_keeps_the_attempt() {
        // The last attempt of three: counted, it dead-letters; not counted, the message
        // retries with the count it had before this delivery.
        assert_eq!(
            after_nack_counted(&cfg(3), 3, None, true),
            (AfterFailure::DeadLetter(DeadLetterReason::Exhausted), 3)
        );
        let d = Some(Duration::from_secs(2));
        assert_eq!(
            after_nack_counted(&cfg(3), 3, d, false),
            (AfterFailure::Retry(Duration::from_secs(2)), 2)
        );
        assert_eq!(
            after_nack_counted(&cfg(1), 1, d, false),
            (AfterFailure::Retry(Duration::from_secs(2)), 0)
        );
        assert_eq!(after_nack_counted(&cfg(3), 2, d, true).1, 2);
    }

    #[test]
    fn a_counted_failure_under_a_breaker_waits_out_its_window() {
        let s = Duration::from_secs;
        let mut c = cfg(3);
        c.backoff_base = s(10);
        c.breaker = Some(crate::adaptive::BreakerConfig {
            window_ms: 15_000,
            ..Default::default()
        });
        for _ in 0..200 {
            let (after, _) = after_nack_counted(&c, 1, None, true);
            let AfterFailure::Retry(d) = after else {
                panic!("retried: {after:?}")
            };
            assert!(d >= s(15) && d <= s(25), "window then backoff: {d:?}");
        }
        // An explicit delay is the worker's word; an uncounted nack spends nothing to guard.
        let d = Some(s(1));
        assert_eq!(
            after_nack_counted(&c, 1, d, true).0,
            AfterFailure::Retry(s(1))
        );
        let (AfterFailure::Retry(d), _) = after_nack_counted(&c, 1, None, false) else {
            panic!("retried")
        };
        assert!(d < s(15), "no window for an uncounted nack: {d:?}");
    }

    #[test]
    fn unlimited_attempts_never_dead_letter() {
        assert!(matches!(
            after_nack(&cfg(0), 10_000, None),
            AfterFailure::Retry(_)
        ));
        assert_eq!(
            after_lease_expiry(&cfg(0), 10_000),
            AfterFailure::Retry(Duration::ZERO)
        );
    }

    #[test]
    fn history_keeps_the_newest_twenty() {
        let mut h = Vec::new();
        for i in 0..25 {
            record_attempt(
                &mut h,
                Attempt {
                    at: Timestamp(i),
                    outcome: AttemptOutcome::Nacked,
                    error: None,
                    consumer: None,
                    started_at: None,
                },
            );
        }
        assert_eq!(h.len(), 20);
        assert_eq!(h[0].at, Timestamp(5));
        assert_eq!(h[19].at, Timestamp(24));
    }

    #[test]
    fn an_ended_delivery_names_who_settled_it_else_who_received_it() {
        let holder = Holder {
            started_at: Some(Timestamp(10)),
            consumer: Some("w1".into()),
        };
        let end = |consumer: Option<&str>, holder| {
            ended_attempt(
                Timestamp(20),
                AttemptOutcome::Nacked,
                None,
                consumer.map(str::to_owned),
                holder,
            )
        };
        let a = end(Some("w2"), Some(&holder));
        assert_eq!(
            (a.consumer.as_deref(), a.started_at),
            (Some("w2"), Some(Timestamp(10)))
        );
        let a = end(None, Some(&holder));
        assert_eq!(a.consumer.as_deref(), Some("w1"));
        let a = end(None, None);
        assert_eq!((a.consumer, a.started_at), (None, None));
        let done = completed_history(Vec::new(), Timestamp(30), false, Some(&holder));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].outcome, AttemptOutcome::Acked);
        assert_eq!(done[0].started_at, Some(Timestamp(10)));
        assert!(completed_history(Vec::new(), Timestamp(30), true, Some(&holder)).is_empty());
    }
}
