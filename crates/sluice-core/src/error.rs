//! The one catalogue of error codes and the typed error every `Store` returns.
//!
//! The codes are data: the server maps each to an HTTP status, the CLI to an exit code and
//! both SDKs back to a typed error, so `receipt_stale` means one thing everywhere.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::MessageId;

/// A stable, documented error code, shared by server, CLI and SDKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed or a value is out of range.
    InvalidArgument,
    /// No or unknown credentials.
    Unauthenticated,
    /// The credentials do not allow this action on this queue.
    PermissionDenied,
    /// The named queue does not exist.
    QueueNotFound,
    /// No message with that id exists (any more).
    MessageNotFound,
    /// The receipt does not name the current delivery of its message.
    ReceiptStale,
    /// The request conflicts with the current state.
    Conflict,
    /// A body or batch is over its size limit.
    PayloadTooLarge,
    /// An idempotency key was reused with a different request.
    IdempotencyMismatch,
    /// Too many requests; retry after the advertised delay.
    RateLimited,
    /// The queue is at `max_depth`; retry after the advertised delay.
    QueueFull,
    /// Storage is unavailable (disk full, database lost); retry later.
    Unavailable,
    /// No such route: the path names nothing the API serves.
    NotFound,
    /// The route exists but does not accept the request's method (see the `Allow` header).
    MethodNotAllowed,
}

impl ErrorCode {
    /// Every code, in catalogue order.
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::InvalidArgument,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::QueueNotFound,
        ErrorCode::MessageNotFound,
        ErrorCode::ReceiptStale,
        ErrorCode::Conflict,
        ErrorCode::PayloadTooLarge,
        ErrorCode::IdempotencyMismatch,
        ErrorCode::RateLimited,
        ErrorCode::QueueFull,
        ErrorCode::Unavailable,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
    ];

    /// The wire form, e.g. `receipt_stale`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::QueueNotFound => "queue_not_found",
            ErrorCode::MessageNotFound => "message_not_found",
            ErrorCode::ReceiptStale => "receipt_stale",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::IdempotencyMismatch => "idempotency_mismatch",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
        }
    }

    /// The HTTP status the API answers with for this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::QueueNotFound | ErrorCode::MessageNotFound | ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::ReceiptStale | ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::IdempotencyMismatch => 422,
            ErrorCode::RateLimited | ErrorCode::QueueFull => 429,
            ErrorCode::Unavailable => 503,
        }
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a `Store` call can fail with. Every variant maps to one [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Bad input; the message says which value and what is allowed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The queue does not exist.
    #[error("queue \"{0}\" does not exist; create it first")]
    QueueNotFound(String),
    /// No message with this id.
    #[error("message {0} does not exist (it was acknowledged, deleted, expired or never sent)")]
    MessageNotFound(MessageId),
    /// No redrive job with this id. It shares the 404 code `message_not_found`: the catalogue
    /// has no separate code for jobs.
    #[error("no redrive job with id {0}; list the redrive jobs to find the one you mean")]
    RedriveNotFound(String),
    /// No schedule with this name (code `not_found`).
    #[error("schedule \"{0}\" does not exist; list the schedules to find the one you mean")]
    ScheduleNotFound(String),
    /// The receipt names a delivery that is over.
    #[error(
        "receipt is stale: its lease expired and the message was delivered again, or the message is gone; \
         receive the message again to get a current receipt"
    )]
    ReceiptStale,
    /// The request conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// A create-only put of a queue that exists; the queue was left unchanged. Its code is
    /// `conflict`; a variant of its own lets a front end add how to update the queue there.
    #[error(
        "queue \"{0}\" already exists and was left unchanged; to change its settings, update it \
         instead of creating it"
    )]
    QueueExists(String),
    /// A second redrive job on a source whose job still runs. Its code is `conflict`; a variant
    /// of its own lets a front end add how to cancel the running job there.
    #[error("redrive job {running} of \"{queue}\" is still running; wait for it or cancel it")]
    RedriveRunning {
        /// The running job's id (or a description of it).
        running: String,
        /// The source queue.
        queue: String,
    },
    /// A breaker command for a queue without a breaker. Its code is `conflict`; a variant of
    /// its own lets a front end add how to give the queue one there.
    #[error("queue \"{0}\" has no breaker; give it one first in its configuration (breaker)")]
    NoBreaker(String),
    /// A key breaker command for a queue whose breaker is not per key. Its code is
    /// `conflict`.
    #[error(
        "queue \"{0}\" has no per-key breaker; give it one first in its configuration \
         (breaker with \"scope\": \"key\"), or force the queue's own breaker"
    )]
    NoKeyBreaker(String),
    /// A body or batch is too large.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The queue is at `max_depth`.
    #[error(
        "queue \"{queue}\" is full (max_depth {max_depth}); retry after {} or raise max_depth",
        crate::human::fmt_duration(*.retry_after)
    )]
    QueueFull {
        /// The queue.
        queue: String,
        /// Its configured limit.
        max_depth: u64,
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// Storage cannot take writes now; the broker recovers by itself when the cause goes away.
    #[error(
        "storage unavailable: {reason}; retry after {}",
        crate::human::fmt_duration(*.retry_after)
    )]
    Unavailable {
        /// What failed (e.g. "fsync failed: No space left on device").
        reason: String,
        /// When a retry may succeed.
        retry_after: Duration,
    },
}

impl StoreError {
    /// Shorthand for [`StoreError::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        StoreError::InvalidArgument(msg.into())
    }

    /// A page cursor that no page handed out (`InvalidArgument`), for every paged listing:
    /// `also` says what else the caller may do, if anything.
    pub fn bad_cursor(also: &str) -> Self {
        StoreError::invalid(format!(
            "cursor is malformed; pass next_cursor exactly as the previous page returned it{also}"
        ))
    }

    /// A dead-lettering (reject, or a move to the DLQ) of a message of `queue`, which has no
    /// dead-letter queue (code `conflict`).
    pub fn no_dead_letter_queue(queue: &str) -> Self {
        StoreError::Conflict(format!(
            "queue \"{queue}\" has no dead_letter_queue; give it one in its configuration \
             (dead_letter_queue) or nack instead"
        ))
    }

    /// A dead-lettering of a message of `queue` whose dead-letter queue `dlq` does not exist
    /// (code `conflict`).
    pub fn dead_letter_queue_missing(dlq: &str, queue: &str) -> Self {
        StoreError::Conflict(format!(
            "dead-letter queue \"{dlq}\" of \"{queue}\" does not exist; create it or change \
             dead_letter_queue"
        ))
    }

    /// A delete of `queue` while it is the dead-letter queue of `user` (code `conflict`).
    pub fn dead_letter_queue_in_use(queue: &str, user: &str) -> Self {
        StoreError::Conflict(format!(
            "queue \"{queue}\" is the dead-letter queue of \"{user}\"; change that queue's \
             dead_letter_queue first"
        ))
    }

    /// An acknowledgement whose result of `len` bytes is over `queue`'s `max` (code
    /// `payload_too_large`).
    pub fn result_too_large(len: usize, queue: &str, max: u32) -> Self {
        StoreError::PayloadTooLarge(format!(
            "result is {len} bytes; queue \"{queue}\" keeps results of at most {max} bytes \
             (max_message_bytes)"
        ))
    }

    /// The error of a create-only put of a queue that exists (code `conflict`).
    pub fn queue_exists(name: &str) -> Self {
        StoreError::QueueExists(name.to_owned())
    }

    /// Shorthand for [`StoreError::Unavailable`] with a one-second retry hint.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        StoreError::Unavailable {
            reason: reason.into(),
            retry_after: Duration::from_secs(1),
        }
    }

    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            StoreError::QueueNotFound(_) => ErrorCode::QueueNotFound,
            StoreError::MessageNotFound(_) | StoreError::RedriveNotFound(_) => {
                ErrorCode::MessageNotFound
            }
            StoreError::ScheduleNotFound(_) => ErrorCode::NotFound,
            StoreError::ReceiptStale => ErrorCode::ReceiptStale,
            StoreError::Conflict(_)
            | StoreError::QueueExists(_)
            | StoreError::RedriveRunning { .. }
            | StoreError::NoBreaker(_)
            | StoreError::NoKeyBreaker(_) => ErrorCode::Conflict,
            StoreError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            StoreError::QueueFull { .. } => ErrorCode::QueueFull,
            StoreError::Unavailable { .. } => ErrorCode::Unavailable,
        }
    }

    /// For errors a client should retry later, the delay to advertise in `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreError::QueueFull { retry_after, .. }
            | StoreError::Unavailable { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()));
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            let json = serde_json_like(c);
            assert_eq!(json, c.as_str());
        }
    }

    /// A message a person reads carries no Rust debug formatting: names are printed as they
    /// are (in plain quotes), never as `QueueName("jobs")` or `Some(..)`.
    pub(crate) fn assert_plain(msg: &str) {
        for bad in ["(\"", "Some(", "None", "\\\""] {
            assert!(!msg.contains(bad), "debug formatting ({bad}) in: {msg}");
        }
    }

    /// Every variant, with the values the engines put in them.
    fn every_variant() -> Vec<StoreError> {
        let all = vec![
            StoreError::InvalidArgument("bad".into()),
            StoreError::QueueNotFound("tmpq.dlq".into()),
            StoreError::MessageNotFound(MessageId(42)),
            StoreError::RedriveNotFound("00000000000000a1".into()),
            StoreError::ReceiptStale,
            StoreError::Conflict("busy".into()),
            StoreError::queue_exists("tmpq"),
            StoreError::RedriveRunning {
                running: "00000000000000a1".into(),
                queue: "tmpq".into(),
            },
            StoreError::PayloadTooLarge("big".into()),
            StoreError::NoBreaker("tmpq".into()),
            StoreError::NoKeyBreaker("tmpq".into()),
            StoreError::ScheduleNotFound("nightly".into()),
            StoreError::QueueFull {
                queue: "tmpq".into(),
                max_depth: 3,
                retry_after: Duration::from_millis(2500),
            },
            StoreError::unavailable("disk full"),
        ];
        // Fails to compile when a variant is added without a case here.
        for e in &all {
            match e {
                StoreError::InvalidArgument(_)
                | StoreError::QueueNotFound(_)
                | StoreError::MessageNotFound(_)
                | StoreError::RedriveNotFound(_)
                | StoreError::ScheduleNotFound(_)
                | StoreError::ReceiptStale
                | StoreError::Conflict(_)
                | StoreError::QueueExists(_)
                | StoreError::RedriveRunning { .. }
                | StoreError::NoBreaker(_)
                | StoreError::NoKeyBreaker(_)
                | StoreError::PayloadTooLarge(_)
                | StoreError::QueueFull { .. }
                | StoreError::Unavailable { .. } => {}
            }
        }
        all
    }

    #[test]
    fn store_errors_read_without_debug_formatting() {
        for e in every_variant() {
            let msg = e.to_string();
            assert_plain(&msg);
        }
        let e = StoreError::QueueNotFound("tmpq.dlq".into()).to_string();
        assert!(e.starts_with("queue \"tmpq.dlq\" does not exist"), "{e}");
        let full = every_variant()
            .into_iter()
            .find(|e| matches!(e, StoreError::QueueFull { .. }))
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(full.contains("retry after 2.5s"), "{full}");
    }

    #[test]
    fn validation_errors_read_without_debug_formatting() {
        use crate::config::{QueueConfig, QueueConfigPatch};
        use crate::name::QueueName;
        let q = QueueName::new("tmpq").expect("name");
        let patches = [
            QueueConfigPatch {
                dead_letter_queue: Some(Some(q.clone())),
                ..Default::default()
            },
            QueueConfigPatch {
                dead_letter_queue: Some(None),
                ..Default::default()
            },
        ];
        for p in patches {
            let e = QueueConfig::defaults_for(&q)
                .apply(&q, &p)
                .expect_err("refused");
            assert_plain(&e.to_string());
            assert!(e.to_string().contains("\"tmpq\""), "{e}");
        }
        let e = QueueName::new("a b").expect_err("refused").to_string();
        assert_plain(&e);
        let e = crate::redrive::already_running("00000000000000a1", &q).to_string();
        assert_plain(&e);
        let e = "zz".parse::<MessageId>().expect_err("refused").to_string();
        assert_plain(&e);
    }

    fn serde_json_like(c: ErrorCode) -> String {
        // The serde name must equal the wire form.
        format!("{c}")
    }
}
