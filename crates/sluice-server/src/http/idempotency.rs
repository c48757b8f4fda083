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
//! **One effect across nodes.** Before a request with a key runs, it claims the key in the
//! store ([`Records::idempotency_claim`](sluice_core::store::Records::idempotency_claim)),
//! atomically for every node sharing it. Only the request that gets the claim runs; it then
//! stores its answer, which ends the claim. A request that finds the key claimed by another
//! (on this node or any other) waits for that answer, looking again with a growing pause, and
//! replays it; after [`WAIT_FOR_HOLDER`] without one it answers 503 `unavailable` with
//! `Retry-After` (outcome unknown: retry with the same key). A claim whose holder died
//! without answering runs out after [`IDEMPOTENCY_CLAIM_LEASE`] and the next request takes
//! it over. Once claimed, the request runs to its end in a task of its own, so a client that
//! hangs up (or the request timeout) does not leave the key claimed without an answer.
//!
//! Keys are scoped to the caller (a digest of its credentials), the method and the path, so
//! two tenants cannot collide. Only definite answers are remembered: a 5xx or 429 means "try
//! again", so such a request releases its claim and a retry with the same key runs the
//! request again; so does an answer too large to remember (over 1 MiB).
//!
//! **Only authenticated, authorised requests are remembered.** The caller's API key is
//! checked from the headers before the body is read or a claim is made, so a request without
//! a valid key is answered 401 having cost the broker its headers only, and stores nothing. A
//! 401 or 403 from the route itself is never remembered either (its claim is released): a
//! refusal changed nothing, and a replayed refusal would outlive the fix of its cause (a key
//! added, a role widened).
//!
//! One window is left open, by design: if the broker dies after applying a request but before
//! remembering its response, a retry after the claim's lease applies it again. For sends, a
//! `dedup_id` closes it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, Either};
use sha2::{Digest, Sha256};
use sluice_core::store::{
    ClaimOutcome, IDEMPOTENCY_CLAIM_LEASE, IdempotencyClaim, IdempotentResponse,
    MAX_IDEMPOTENCY_KEY_BYTES, MAX_IDEMPOTENT_RESPONSE_BYTES,
};
use sluice_core::{Clock, ErrorCode, Store, StoreError, SystemClock};
use tower::{Layer, Service, ServiceExt};

use crate::auth::{Caller, KeyRing};
use crate::http::error::ApiError;
use crate::http::extract::read_body;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Longest key accepted.
pub const MAX_KEY_BYTES: usize = 255;

/// How long a request waits for the answer of another request that holds its key.
pub const WAIT_FOR_HOLDER: Duration = Duration::from_secs(30);
/// The first pause between looks at a key another request holds; each pause doubles.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between looks at a key another request holds.
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// The middleware as a layer: requests without a key (nearly all) go straight to the inner
/// service, with no boxing or cloning, since this sits in front of every request.
#[derive(Clone)]
pub struct IdempotencyLayer {
    store: Arc<dyn Store>,
    /// The API keys, checked before a request with a key is read or claims it.
    keys: Arc<KeyRing>,
}

impl IdempotencyLayer {
    /// Claims keys and remembers responses in `store`, for callers holding one of `keys`.
    pub fn new(store: Arc<dyn Store>, keys: Arc<KeyRing>) -> Self {
        IdempotencyLayer { store, keys }
    }

    /// What a request under `scope` (a store key, see [`scope_key`]) with `fingerprint` is to
    /// do: run (holding the key's claim), replay the key's answer, or be refused because
    /// the key's first request was another. Waits while another request holds the key.
    ///
    /// # Errors
    /// The store's error (503 when it cannot be reached); 503 `unavailable` when the key's
    /// holder has not answered within [`WAIT_FOR_HOLDER`].
    pub(crate) async fn take_turn(
        &self,
        scope: String,
        fingerprint: [u8; 32],
    ) -> Result<Turn, ApiError> {
        let claim = IdempotencyClaim {
            fingerprint,
            token: rand::random(),
            lease: IDEMPOTENCY_CLAIM_LEASE,
        };
        let deadline = tokio::time::Instant::now() + WAIT_FOR_HOLDER;
        let mut pause = FIRST_PAUSE;
        loop {
            let found = match self.store.idempotency_claim(&scope, claim).await {
                Ok(found) => found,
                Err(e) => {
                    // The claim may have been made all the same: give it up, so that a retry
                    // does not wait for a lease nobody will answer.
                    release_in_background(self.store.clone(), scope, claim.token);
                    return Err(e.into());
                }
            };
            match found {
                ClaimOutcome::Claimed => {
                    return Ok(Turn::Run(Held::new(self.store.clone(), scope, claim.token)));
                }
                ClaimOutcome::Answered(kept) => return Ok(Turn::Replay(kept)),
                ClaimOutcome::Pending {
                    fingerprint: theirs,
                    ..
                } if theirs != fingerprint => return Ok(Turn::Mismatch),
                ClaimOutcome::Pending { .. } => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(ApiError::new(
                            ErrorCode::Unavailable,
                            "a request with this idempotency key is still running (on this or \
                             another broker node) and has not answered yet; retry with the same \
                             key to get its answer",
                        ));
                    }
                    tokio::time::sleep(pause.min(deadline - now)).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        }
    }
}

/// What a request under an idempotency key does ([`IdempotencyLayer::take_turn`]).
pub(crate) enum Turn {
    /// Run it: it holds the key's claim, which it must answer or release.
    Run(Held),
    /// The key's answer, for a request with the same fingerprint (a replay) or another one
    /// (a mismatch).
    Replay(IdempotentResponse),
    /// The key's first request, still running, was another (its fingerprint differs).
    Mismatch,
}

/// A claim on an idempotency key held by a running request. Dropped without being answered
/// or released (a panic, a cancelled request), it is released in the background.
pub(crate) struct Held {
    store: Arc<dyn Store>,
    scope: String,
    token: u64,
    settled: bool,
}

impl Held {
    fn new(store: Arc<dyn Store>, scope: String, token: u64) -> Self {
        Held {
            store,
            scope,
            token,
            settled: false,
        }
    }

    /// Stores the request's answer under the key, ending the claim. `Some` is the answer
    /// kept already (another request took the key over after this one's lease ran out and
    /// answered first): every request with the key is to answer as it did.
    ///
    /// # Errors
    /// The store's, after which the claim is released: a retry runs the request again.
    pub(crate) async fn answer(
        mut self,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        let out = self.store.idempotency_put(&self.scope, response).await;
        if out.is_ok() {
            self.settled = true;
        }
        out
    }

    /// Gives the key up, so that a retry runs the request again.
    pub(crate) async fn release(mut self) {
        self.settled = true;
        if let Err(e) = self
            .store
            .idempotency_release(&self.scope, self.token)
            .await
        {
            tracing::warn!(error = %e, "could not release an idempotency key; a retry with it waits until its claim runs out");
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.settled {
            release_in_background(
                self.store.clone(),
                std::mem::take(&mut self.scope),
                self.token,
            );
        }
    }
}

/// Releases `token`'s claim on `scope` in a task of its own (from `Drop`, or where the caller
/// does not wait).
fn release_in_background(store: Arc<dyn Store>, scope: String, token: u64) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            if let Err(e) = store.idempotency_release(&scope, token).await {
                tracing::warn!(error = %e, "could not release an idempotency key; a retry with it waits until its claim runs out");
            }
        });
    }
}

/// `scope` as a store key: itself, or its digest when it is longer than a store keeps (a
/// very long path), so that such a request is still held to its key.
pub(crate) fn scope_key(scope: String) -> String {
    if scope.len() <= MAX_IDEMPOTENCY_KEY_BYTES {
        return scope;
    }
    format!("sha256:{}", hex::encode(Sha256::digest(scope.as_bytes())))
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
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    // Who is calling is known from the headers: a caller without a valid key is refused
    // before its body is read and before its key claims anything.
    Caller::from_headers(req.headers(), &idem.keys).map_err(IntoResponse::into_response)?;
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
    let scope = scope_key(format!("{caller}|POST {}|{key}", parts.uri.path()));

    let held = match idem.take_turn(scope, fingerprint).await {
        Ok(Turn::Run(held)) => held,
        Ok(Turn::Replay(kept)) => return Ok(replay(kept, &fingerprint)),
        Ok(Turn::Mismatch) => return Err(mismatch().into_response()),
        Err(e) => return Err(e.into_response()),
    };
    // The request runs to its end and its answer is remembered even if this future is
    // dropped (the client hung up, the request timed out): other requests with the key wait
    // for that answer.
    let req = Request::from_parts(parts, Body::from(body));
    match tokio::spawn(run_holding(held, inner, req, fingerprint)).await {
        Ok(resp) => Ok(resp),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(api_msg(
            "the broker is shutting down; retry with the same idempotency key".to_owned(),
        )),
    }
}

/// Runs a request that holds its key's claim, then remembers its answer or, for an answer
/// that is not to be remembered, releases the claim.
async fn run_holding<S>(held: Held, inner: S, req: Request, fingerprint: [u8; 32]) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let resp = match inner.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    let status = resp.status();
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::UNAUTHORIZED
        || status == StatusCode::FORBIDDEN
    {
        held.release().await;
        return resp;
    }
    let (rparts, rbody) = resp.into_parts();
    let bytes = match to_bytes(rbody, MAX_IDEMPOTENT_RESPONSE_BYTES + 1).await {
        Ok(bytes) => bytes,
        Err(e) => {
            held.release().await;
            return api_msg(format!("could not read the response to remember it: {e}"));
        }
    };
    if bytes.len() > MAX_IDEMPOTENT_RESPONSE_BYTES {
        held.release().await;
        return Response::from_parts(rparts, Body::from(bytes));
    }
    let remembered = IdempotentResponse {
        fingerprint,
        status: status.as_u16(),
        body: bytes.clone(),
        created_at: SystemClock.now(),
    };
    match held.answer(remembered).await {
        // Another request answered the key first (it took the claim over): answer as it did.
        Ok(Some(kept)) => return replay(kept, &fingerprint),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not remember a response for its Idempotency-Key; a retry will run the request again");
        }
    }
    Response::from_parts(rparts, Body::from(bytes))
}

/// The refusal of a key used with another request.
fn mismatch() -> ApiError {
    ApiError::new(
        ErrorCode::IdempotencyMismatch,
        "this Idempotency-Key was used with a different request on this route in the last 24 hours; \
         use a new key for a new request",
    )
}

/// The remembered answer, or 422 when the key came with a different request.
fn replay(kept: IdempotentResponse, fingerprint: &[u8; 32]) -> Response {
    if &kept.fingerprint != fingerprint {
        return mismatch().into_response();
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

fn api_msg(m: String) -> Response {
    ApiError::new(ErrorCode::Unavailable, m).into_response()
}
