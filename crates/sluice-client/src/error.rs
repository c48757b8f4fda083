//! The client's one error type. An answer from the broker keeps the broker's stable
//! [`ErrorCode`] and message, so `receipt_stale` means the same thing here as in the
//! server, the CLI and the other SDKs.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use sluice_core::{ErrorCode, TaskStatus};

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker answered with an error envelope (`{"error": {"code", "message"}}`), or with
    /// an error status and no envelope (then `code` is inferred from the status).
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The stable error code.
        code: ErrorCode,
        /// The broker's message: what happened and, where it helps, what to do.
        message: String,
        /// The broker's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The broker could not be reached or the exchange broke off (connection refused, reset,
    /// timed out, TLS failure). Whether the broker acted on the request is unknown unless
    /// [`Error::is_connect`] is true (then it never saw it).
    #[error("{}", transport_message(.0))]
    Transport(#[source] reqwest::Error),
    /// A frame-protocol connection failed or answered out of step (a refusal by the broker is
    /// an [`Error::Api`] instead). Like [`Error::Transport`], whether the broker acted on the
    /// request is unknown.
    #[error(transparent)]
    Frames(crate::frames::FrameClientError),
    /// The broker answered 2xx with something that is not the expected JSON.
    #[error("unexpected answer from the broker: {0}")]
    Decode(String),
    /// An argument was refused before anything was sent: the message says how to fix it.
    #[error("{0}")]
    InvalidInput(String),
    /// [`crate::Client::call`] or [`crate::Client::wait_for`] gave up: the task was not final
    /// when the timeout passed. The task itself goes on; look it up later by its id or cancel
    /// it with [`crate::Client::cancel`].
    #[error(
        "task {id} did not finish within {wait} (it is {st}); it is still queued or \
         running: wait longer, look it up later with task_status, or cancel it",
        st = .status.as_str(),
        wait = sluice_core::human::fmt_duration(*.timeout)
    )]
    TaskTimeout {
        /// The task id.
        id: String,
        /// How long the caller waited.
        timeout: Duration,
        /// Its last known status.
        status: TaskStatus,
    },
    /// [`crate::Client::call`] found the task final but not successful: `FAILURE` (dead-
    /// lettered), `CANCELLED`, or `UNKNOWN` (its record is gone, e.g. the queue keeps no
    /// results with `result_ttl` 0).
    #[error("task {id} ended {st}{detail}", st = .status.as_str(),
        detail = .error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    TaskFailed {
        /// The task id.
        id: String,
        /// The final status.
        status: TaskStatus,
        /// The task's last error, when it has one.
        error: Option<String>,
    },
}

/// `reqwest` puts the useful part ("Connection refused") deep in the source chain; show it.
fn transport_message(e: &reqwest::Error) -> String {
    let mut msg = if e.is_timeout() {
        "request timed out".to_owned()
    } else if e.is_connect() {
        "could not connect to the broker".to_owned()
    } else {
        "the exchange with the broker failed".to_owned()
    };
    if let Some(url) = e.url() {
        msg.push_str(&format!(" at {}", url.origin().ascii_serialization()));
    }
    let mut causes = Vec::<String>::new();
    let mut src: Option<&dyn StdError> = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !causes.iter().any(|c| c.contains(&text)) {
            causes.push(text);
        }
        src = s.source();
    }
    if let Some(last) = causes.last() {
        msg.push_str(": ");
        msg.push_str(last);
    }
    msg
}

impl Error {
    /// The stable code: the broker's for [`Error::Api`], `invalid_argument` for
    /// [`Error::InvalidInput`], none for transport and decode failures.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            Error::InvalidInput(_) => Some(ErrorCode::InvalidArgument),
            Error::Transport(_)
            | Error::Frames(_)
            | Error::Decode(_)
            | Error::TaskTimeout { .. }
            | Error::TaskFailed { .. } => None,
        }
    }

    /// The HTTP status of an [`Error::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The broker's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// True when the broker was never reached (connection refused, DNS failure): the request
    /// had no effect, so repeating it is always safe.
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Transport(e) if e.is_connect())
    }

    /// True when the request timed out (the broker may or may not have acted on it).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Transport(e) if e.is_timeout())
    }

    /// True for `queue_not_found` and `message_not_found`.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::QueueNotFound | ErrorCode::MessageNotFound)
        ) && self.status() == Some(404)
    }

    /// True for an error that a later attempt may not repeat: transport failures, 503
    /// `unavailable` and 429 `queue_full` / `rate_limited`.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Frames(e) => e.is_transient(),
            Error::Api { status, .. } => *status == 503 || *status == 429,
            _ => false,
        }
    }

    /// The error of one item of a batch answer (`{"code", "message"}`), with the HTTP status
    /// its code stands for.
    pub(crate) fn from_item(body: &sluice_wire::ErrorBody) -> Self {
        let code = ErrorCode::parse(&body.code).unwrap_or(ErrorCode::Unavailable);
        Error::Api {
            status: code.http_status(),
            code,
            message: body.message.clone(),
            retry_after: None,
        }
    }

    pub(crate) fn decode(what: &str, e: impl fmt::Display) -> Self {
        Error::Decode(format!("{what}: {e}"))
    }
}

impl From<crate::frames::FrameClientError> for Error {
    /// A refusal keeps its code, with the HTTP status that code stands for.
    fn from(e: crate::frames::FrameClientError) -> Self {
        match e {
            crate::frames::FrameClientError::Refused(r) => {
                let code = ErrorCode::parse(&r.code).unwrap_or(ErrorCode::Unavailable);
                Error::Api {
                    status: code.http_status(),
                    code,
                    message: r.message,
                    retry_after: r.retry_after_ms.map(Duration::from_millis),
                }
            }
            other => Error::Frames(other),
        }
    }
}

/// The code an error status stands for when the answer carried no (known) code.
pub(crate) fn code_for_status(status: u16) -> ErrorCode {
    match status {
        401 => ErrorCode::Unauthenticated,
        403 => ErrorCode::PermissionDenied,
        404 => ErrorCode::NotFound,
        405 => ErrorCode::MethodNotAllowed,
        409 => ErrorCode::Conflict,
        413 => ErrorCode::PayloadTooLarge,
        422 => ErrorCode::IdempotencyMismatch,
        429 => ErrorCode::RateLimited,
        s if s >= 500 => ErrorCode::Unavailable,
        _ => ErrorCode::InvalidArgument,
    }
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
