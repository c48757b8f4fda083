//! What a handler's failure means for its task: retry it (transient), retry it after a known
//! wait, or give up on it now (permanent).

use std::fmt;
use std::time::Duration;

/// How a failed task is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskErrorKind {
    /// Try again later: nack, the queue's backoff applies (or the error's `retry_after`).
    Transient,
    /// Trying again cannot help: reject, the task goes to the DLQ now.
    Permanent,
    /// The handler stopped because the task was cancelled; the broker ends it `CANCELLED`.
    Cancelled,
}

/// A handler's error.
///
/// Any `std::error::Error` converts into a transient one, so `?` retries by default; say
/// [`TaskError::permanent`] when retrying cannot help (bad input, a refused payment) and
/// [`TaskError::retry_after`] when the upstream said when to come back.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::{TaskError, TaskErrorKind};
///
/// fn classify(status: u16, retry_after: Option<u64>) -> TaskError {
///     match (status, retry_after) {
///         (429 | 503, Some(s)) => TaskError::retry_after("upstream busy", Duration::from_secs(s)),
///         (500..=599, _) => TaskError::transient(format!("upstream answered {status}")),
///         _ => TaskError::permanent(format!("upstream refused the request ({status})")),
///     }
/// }
/// assert_eq!(classify(400, None).kind(), TaskErrorKind::Permanent);
/// ```
pub struct TaskError {
    kind: TaskErrorKind,
    message: String,
    retry_after: Option<Duration>,
    /// The wait is the dependency's own Retry-After (congestion), not one the handler chose.
    congestion: bool,
}

impl TaskError {
    /// A transient error: the task is retried after the queue's backoff.
    pub fn transient(message: impl fmt::Display) -> Self {
        TaskError {
            kind: TaskErrorKind::Transient,
            message: message.to_string(),
            retry_after: None,
            congestion: false,
        }
    }

    /// A transient error because the dependency is congested and said how long to wait (its
    /// `Retry-After` on a 429 or 503): the task is retried after `wait` instead of the
    /// queue's backoff, and a queue with an adaptive rate slows down for it.
    pub fn retry_after(message: impl fmt::Display, wait: Duration) -> Self {
        TaskError {
            kind: TaskErrorKind::Transient,
            message: message.to_string(),
            retry_after: Some(wait),
            congestion: true,
        }
    }

    /// A transient error with a wait the handler chose (not the dependency's Retry-After):
    /// the task is retried after `wait` instead of the queue's backoff, and the queue's
    /// adaptive rate, if any, does not count it as congestion.
    pub fn retry_in(message: impl fmt::Display, wait: Duration) -> Self {
        TaskError {
            kind: TaskErrorKind::Transient,
            message: message.to_string(),
            retry_after: Some(wait),
            congestion: false,
        }
    }

    /// A permanent error: the task is dead-lettered now, without further attempts.
    pub fn permanent(message: impl fmt::Display) -> Self {
        TaskError {
            kind: TaskErrorKind::Permanent,
            message: message.to_string(),
            retry_after: None,
            congestion: false,
        }
    }

    /// The handler stopped because [`crate::TaskContext::is_cancelled`] said so.
    pub fn cancelled() -> Self {
        TaskError {
            kind: TaskErrorKind::Cancelled,
            message: "cancelled".to_owned(),
            retry_after: None,
            congestion: false,
        }
    }

    /// How the task is treated.
    pub fn kind(&self) -> TaskErrorKind {
        self.kind
    }

    /// The message, stored as the task's `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The wait of [`TaskError::retry_after`] or [`TaskError::retry_in`].
    pub fn wait(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether the wait is the dependency's Retry-After ([`TaskError::retry_after`]).
    pub fn is_congestion(&self) -> bool {
        self.congestion
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("retry_after", &self.retry_after)
            .field("congestion", &self.congestion)
            .finish()
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(e: E) -> Self {
        let mut message = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        TaskError::transient(message)
    }
}
