//! `Idempotency-Key` on POST routes: the same key on the same route within 24 h
//! replays the first response and has no second effect; the same key with a different request
//! is refused with 422 `idempotency_mismatch`.
//!
//! Why at the HTTP layer: a client that lost a response (timeout, broken connection) cannot
//! know whether its send was applied. Retrying with the same key is then always safe, for
//! every POST, without each handler knowing about it. Responses are remembered by the store,
//! durably, so a replay works across a broker restart and, with the PostgreSQL engine, on any
//! node.
//!
//! Keys are scoped to the caller (a digest of its credentials), the method and the path, so
//! two tenants cannot collide. Only definite answers are remembered: a 5xx or 429 means "try
//! again", so a retry with the same key runs the request again.
//!
//! One window is left open, by design: if the broker dies after applying a request but before
//! remembering its response, a retry applies it again. For sends, a `dedup_id` closes it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, Either};
use sha2::{Digest, Sha256};
use sluice_core::store::{IdempotentResponse, MAX_IDEMPOTENT_RESPONSE_BYTES};
use sluice_core::{Clock, ErrorCode, Store, SystemClock};
use tokio::sync::Mutex;
use tower::{Layer, Service, ServiceExt};

use crate::error::ApiError;
use crate::extract::read_body;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Longest key accepted.
pub const MAX_KEY_BYTES: usize = 255;

/// Concurrent requests with one key run one after the other, so the second sees the first's
/// remembered response instead of racing it. Keys are spread over a fixed set of locks.
const STRIPES: usize = 64;

/// The middleware as a layer: requests without a key (nearly all) go straight to the inner
/// service, with no boxing or cloning, since this sits in front of every request.
#[derive(Clone)]
pub struct IdempotencyLayer {
    store: Arc<dyn Store>,
    stripes: Arc<Vec<Mutex<()>>>,
}

impl IdempotencyLayer {
    /// Remembers responses in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        IdempotencyLayer {
            store,
            stripes: Arc::new((0..STRIPES).map(|_| Mutex::new(())).collect()),
        }
    }
}

impl IdempotencyLayer {
    /// Holds `scope`'s lock: requests under one key run one after the other, so the second
    /// sees the first's remembered answer instead of racing it.
    pub(crate) async fn lock(&self, scope: &str) -> tokio::sync::MutexGuard<'_, ()> {
        self.stripes[stripe_of(scope)].lock().await
    }
}

/// What an idempotency key may be, said to a client that sent another.
fn key_rule() -> ApiError {
    ApiError::invalid(format!(
        "an idempotency key (the Idempotency-Key header over HTTP) must be 1 to {MAX_KEY_BYTES} visible ASCII characters, e.g. a UUID"
    ))
}

/// Checks an idempotency key (over HTTP and frames alike).
///
/// # Errors
/// 400 `invalid_argument` stating the rule.
pub(crate) fn check_key(key: &str) -> Result<&str, ApiError> {
    let ok =
        !key.is_empty() && key.len() <= MAX_KEY_BYTES && key.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some(key).ok_or_else(key_rule)
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            idem: self.clone(),
            inner,
        }
    }
}

/// See [`IdempotencyLayer`]: passes through anything but a POST with an `Idempotency-Key`.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    idem: IdempotencyLayer,
    inner: S,
}

impl<S> Service<Request> for IdempotencyService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let raw = match req.headers().get(HEADER) {
            Some(raw) if req.method() == Method::POST => raw.clone(),
            _ => return Either::Left(self.inner.call(req)),
        };
        // The service that was polled ready serves this request; its clone takes its place.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        let idem = self.idem.clone();
        Either::Right(Box::pin(async move {
            Ok(match handle(idem, raw, req, inner).await {
                Ok(resp) | Err(resp) => resp,
            })
        }))
    }
}

async fn handle<S>(
    idem: IdempotencyLayer,
    raw: HeaderValue,
    req: Request,
    inner: S,
) -> Result<Response, Response>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let key = raw
        .to_str()
        .map_err(|_| key_rule())
        .and_then(check_key)
        .map_err(IntoResponse::into_response)?
        .to_string();
    let caller = caller_tag(req.headers());
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let media = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let (parts, body) = read_body(req).await.map_err(IntoResponse::into_response)?;
    let fingerprint: [u8; 32] = Sha256::new()
        .chain_update(path.as_bytes())
        .chain_update([0])
        .chain_update(media.as_bytes())
        .chain_update([0])
        .chain_update(&body)
        .finalize()
        .into();
    let scope = format!("{caller}|POST {}|{key}", parts.uri.path());

    let _one_at_a_time = idem.lock(&scope).await;
    if let Some(kept) = idem.store.idempotency_get(&scope).await.map_err(api)? {
        return Ok(replay(kept, &fingerprint));
    }
    let resp = match inner
        .oneshot(Request::from_parts(parts, Body::from(body)))
        .await
    {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    let status = resp.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Ok(resp);
    }
    let (rparts, rbody) = resp.into_parts();
    let bytes = to_bytes(rbody, MAX_IDEMPOTENT_RESPONSE_BYTES + 1)
        .await
        .map_err(|e| api_msg(format!("could not read the response to remember it: {e}")))?;
    if bytes.len() <= MAX_IDEMPOTENT_RESPONSE_BYTES {
        let remembered = IdempotentResponse {
            fingerprint,
            status: status.as_u16(),
            body: bytes.clone(),
            created_at: SystemClock.now(),
        };
        match idem.store.idempotency_put(&scope, remembered).await {
            // Another broker node answered the same key first: answer as it did.
            Ok(Some(kept)) => return Ok(replay(kept, &fingerprint)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not remember a response for its Idempotency-Key; a retry will run the request again")
            }
        }
    }
    Ok(Response::from_parts(rparts, Body::from(bytes)))
}

/// The remembered answer, or 422 when the key came with a different request.
fn replay(kept: IdempotentResponse, fingerprint: &[u8; 32]) -> Response {
    if &kept.fingerprint != fingerprint {
        return ApiError::new(
            ErrorCode::IdempotencyMismatch,
            "this Idempotency-Key was used with a different request on this route in the last 24 hours; \
             use a new key for a new request",
        )
        .into_response();
    }
    let status = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    let mut resp = Response::new(Body::from(kept.body.clone()));
    *resp.status_mut() = status;
    if !kept.body.is_empty() {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    resp.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    resp
}

/// A short digest of the caller's credentials: keys are scoped per caller without storing
/// the credential itself.
fn caller_tag(headers: &axum::http::HeaderMap) -> String {
    match headers.get(header::AUTHORIZATION) {
        Some(v) => hex::encode(&Sha256::digest(v.as_bytes())[..8]),
        None => "anonymous".to_string(),
    }
}

fn stripe_of(scope: &str) -> usize {
    let d = Sha256::digest(scope.as_bytes());
    usize::from(d[0]) % STRIPES
}

fn api(e: sluice_core::StoreError) -> Response {
    ApiError::from(e).into_response()
}

fn api_msg(m: String) -> Response {
    ApiError::new(ErrorCode::Unavailable, m).into_response()
}
