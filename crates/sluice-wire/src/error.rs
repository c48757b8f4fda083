//! The body of every error answer.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::error::{ErrorCode, StoreError};

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorEnvelope {
    /// What went wrong.
    pub error: ErrorBody,
}

/// One error: a stable code and a human-readable message.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// One of `invalid_argument`, `unauthenticated`, `permission_denied`, `queue_not_found`,
    /// `message_not_found`, `receipt_stale`, `conflict`, `payload_too_large`,
    /// `idempotency_mismatch`, `rate_limited`, `queue_full`, `unavailable`.
    #[schema(example = "receipt_stale")]
    pub code: String,
    /// What happened and, where it helps, what to do about it.
    pub message: String,
}

impl ErrorEnvelope {
    /// An envelope for `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            error: ErrorBody::new(code, message),
        }
    }
}

impl ErrorBody {
    /// An error body for `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code: code.as_str().to_owned(),
            message: message.into(),
        }
    }
}

impl From<&StoreError> for ErrorBody {
    fn from(e: &StoreError) -> Self {
        ErrorBody::new(e.code(), e.to_string())
    }
}
