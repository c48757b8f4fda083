//! Errors as the API answers them: always the `{"error": {"code", "message"}}` envelope with
//! the status of its code, `Retry-After` where a retry will help, and never a plain-text or
//! empty error body — even for responses built by layers (timeouts, unknown routes, wrong
//! methods, panics), which [`ensure_envelope`] rewrites.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sluice_core::{ErrorCode, StoreError};
use sluice_wire::ErrorEnvelope;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    /// An error with `code`, answered with the code's status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// `invalid_argument` (400).
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::InvalidArgument, message)
    }

    /// `unauthenticated` (401).
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Unauthenticated, message)
    }

    /// `permission_denied` (403).
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::PermissionDenied, message)
    }

    /// `payload_too_large` (413).
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::PayloadTooLarge, message)
    }

    /// Overrides the status (e.g. 503 for a timeout, whatever status the layer chose).
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error as the frame protocol answers it.
    pub(crate) fn into_frame_error(self) -> sluice_wire::frame::FrameError {
        sluice_wire::frame::FrameError {
            code: self.code.as_str().to_owned(),
            message: self.message,
            retry_after_ms: self
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// A store error's message as the API words it: the store's wording, which holds for any
/// caller, plus the route that helps where there is one (creating a queue, listing or
/// cancelling redrive jobs).
pub fn http_message(e: &StoreError) -> String {
    match e {
        StoreError::QueueNotFound(q) => {
            format!("queue \"{q}\" does not exist; create it with PUT /v1/queues/{q}")
        }
        StoreError::RedriveNotFound(id) => {
            format!("no redrive job with id {id}; list them with GET /v1/redrives")
        }
        StoreError::QueueExists(name) => format!(
            "queue \"{name}\" already exists and was left unchanged; to change its settings, \
             PUT /v1/queues/{name} without If-None-Match (sluice queue update {name})"
        ),
        StoreError::NoBreaker(q) => format!(
            "queue \"{q}\" has no breaker; give it one first (PUT /v1/queues/{q} with \
             {{\"breaker\": {{}}}})"
        ),
        StoreError::NoKeyBreaker(q) => format!(
            "queue \"{q}\" has no per-key breaker; give it one first (PUT /v1/queues/{q} with \
             {{\"breaker\": {{\"scope\": \"key\"}}}}), or force the queue's own breaker \
             (POST /v1/queues/{q}/breaker)"
        ),
        StoreError::RedriveRunning { running, queue } => format!(
            "redrive job {running} of \"{queue}\" is still running; wait for it or cancel it \
             (POST /v1/redrives/{running}/cancel)"
        ),
        _ => e.to_string(),
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let mut err = ApiError::new(e.code(), http_message(&e));
        err.retry_after = e.retry_after();
        if err.status.is_server_error() {
            tracing::warn!(code = %e.code(), error = %e, "store error");
        }
        err
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorEnvelope::new(self.code, self.message);
        let mut resp = (self.status, axum::Json(body)).into_response();
        let retry = self.retry_after.or(match self.code {
            ErrorCode::QueueFull | ErrorCode::Unavailable | ErrorCode::RateLimited => {
                Some(Duration::from_secs(1))
            }
            _ => None,
        });
        if let Some(d) = retry {
            // Whole seconds, rounded up, at least one: `Retry-After: 0` invites a hot loop.
            let secs = d.as_millis().div_ceil(1000).max(1);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// Rewrites any error response that is not already JSON (from axum's routing, the timeout or
/// panic layers, or hyper) into the error envelope, so clients parse one shape.
///
/// Generic over the body so the layers below need no body conversion of their own; a plain
/// function (not an async one) so the layer that applies it allocates nothing per request.
pub fn ensure_envelope<B>(resp: axum::http::Response<B>) -> Response
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let resp = resp.map(axum::body::Body::new);
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (code, status, message) = match status {
        StatusCode::UNAUTHORIZED => (ErrorCode::Unauthenticated, status, "unauthenticated"),
        StatusCode::FORBIDDEN => (ErrorCode::PermissionDenied, status, "permission denied"),
        StatusCode::NOT_FOUND => (
            ErrorCode::NotFound,
            status,
            "no such route; see /openapi.json for the API",
        ),
        StatusCode::METHOD_NOT_ALLOWED => (
            ErrorCode::MethodNotAllowed,
            status,
            "this route does not accept that method; see /openapi.json for the API",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            ErrorCode::PayloadTooLarge,
            status,
            "request body is too large",
        ),
        StatusCode::TOO_MANY_REQUESTS => (ErrorCode::RateLimited, status, "too many requests"),
        StatusCode::REQUEST_TIMEOUT
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => (
            ErrorCode::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "the request took too long; retry later",
        ),
        s if s.is_server_error() => (
            ErrorCode::Unavailable,
            s,
            "internal error; the request may not have been applied, retry later",
        ),
        _ => (
            ErrorCode::InvalidArgument,
            StatusCode::BAD_REQUEST,
            "bad request",
        ),
    };
    let mut out = ApiError::new(code, message)
        .with_status(status)
        .into_response();
    // Keep headers such as `Allow` from the original.
    for (k, v) in resp.headers() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut()
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }
    drop(resp.into_body());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage trouble is a 503 with `Retry-After`, in the envelope, and a full
    /// queue a 429 likewise; clients back off instead of failing.
    #[test]
    fn retryable_store_errors_carry_retry_after() {
        let full = StoreError::QueueFull {
            queue: "q".into(),
            max_depth: 1,
            retry_after: Duration::from_millis(2500),
        };
        for (err, status, secs) in [
            (
                StoreError::unavailable("fsync failed: No space left on device"),
                503,
                "1",
            ),
            (full, 429, "3"),
        ] {
            let resp = ApiError::from(err).into_response();
            assert_eq!(resp.status().as_u16(), status);
            assert_eq!(resp.headers()[header::RETRY_AFTER], secs);
            assert!(
                resp.headers()[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with("application/json")
            );
        }
        let resp = ApiError::from(StoreError::ReceiptStale).into_response();
        assert_eq!(resp.status().as_u16(), 409);
        assert!(resp.headers().get(header::RETRY_AFTER).is_none());
    }
}
