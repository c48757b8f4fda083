//! Every request's deadline. A request not answered within `request_timeout` beyond its own
//! long-poll wait is answered 503 with `Retry-After`, so a store that cannot commit (a
//! database whose synchronous standby is gone, a network that stalls) costs clients a
//! bounded wait and never a hang.
//!
//! The wait is known only to the handler that parses it, so the deadline starts at
//! `request_timeout` and a long poll extends it by its wait through [`Deadline::allow`].
//! A write answered 503 this way may still have been applied (PostgreSQL may have committed
//! it locally): its outcome is unknown, and a retry with the same idempotency key or
//! deduplication id is safe.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use sluice_core::ErrorCode;
use tokio::time::Instant;

use crate::http::error::ApiError;

/// A request's handle on its own deadline: a long poll calls [`Deadline::allow`] with its
/// wait before it waits. Outside the deadline layer (a handler called directly) it does
/// nothing.
#[derive(Clone, Default)]
pub struct Deadline(Option<Arc<AtomicU64>>);

impl Deadline {
    /// Lets the request take `wait` longer than the base deadline (the longest wait given
    /// counts, not their sum).
    pub fn allow(&self, wait: Duration) {
        if let Some(extra) = &self.0 {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            extra.fetch_max(ms, Ordering::Relaxed);
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Deadline {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Deadline>()
            .cloned()
            .unwrap_or_default())
    }
}

/// Answers 503 for a request that outlives its deadline (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer {
    base: Duration,
}

impl DeadlineLayer {
    /// A deadline of `base` beyond each request's long-poll wait.
    pub fn new(base: Duration) -> Self {
        DeadlineLayer { base }
    }
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            base: self.base,
        }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Clone, Debug)]
pub struct DeadlineService<S> {
    inner: S,
    base: Duration,
}

impl<S, B> tower::Service<Request<B>> for DeadlineService<S>
where
    S: tower::Service<Request<B>, Response = axum::response::Response>,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let extra = Arc::new(AtomicU64::new(0));
        req.extensions_mut()
            .insert(Deadline(Some(Arc::clone(&extra))));
        let answer = self.inner.call(req);
        let base = self.base;
        Box::pin(async move {
            let started = Instant::now();
            tokio::pin!(answer);
            loop {
                let allowed = base + Duration::from_millis(extra.load(Ordering::Relaxed));
                tokio::select! {
                    biased;
                    r = &mut answer => return r,
                    () = tokio::time::sleep_until(started + allowed) => {
                        // A long poll may have extended the deadline while this slept.
                        let now = base + Duration::from_millis(extra.load(Ordering::Relaxed));
                        if now <= allowed {
                            return Ok(past_deadline(base));
                        }
                    }
                }
            }
        })
    }
}

/// The answer to a request past its deadline.
fn past_deadline(base: Duration) -> Response<axum::body::Body> {
    tracing::warn!(
        request_timeout_ms = base.as_millis() as u64,
        "a request was not answered within its deadline; answered 503 (the store may be \
         unable to commit or unreachable)"
    );
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "the request was not answered within {} beyond its wait (the store is slow or \
             unreachable); a write may or may not have been applied: retry it with the same \
             Idempotency-Key or dedup_id",
            sluice_core::human::fmt_duration(base)
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    fn slow(
        sleep: Duration,
        allow: Duration,
    ) -> impl tower::Service<
        Request<()>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone {
        tower::service_fn(move |req: Request<()>| {
            let deadline = req.extensions().get::<Deadline>().cloned().unwrap();
            async move {
                deadline.allow(allow);
                tokio::time::sleep(sleep).await;
                Ok::<_, std::convert::Infallible>(axum::http::StatusCode::OK.into_response())
            }
        })
    }

    async fn status(req: impl Fn() -> Request<()>, sleep: Duration, allow: Duration) -> u16 {
        let mut s = DeadlineLayer::new(Duration::from_secs(10)).layer(slow(sleep, allow));
        s.ready()
            .await
            .unwrap()
            .call(req())
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// Past `base` a request is a 503 with `Retry-After`; a long poll's allowance extends it.
    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_is_a_503_unless_its_wait_allows_it() {
        let req = || Request::new(());
        assert_eq!(
            status(req, Duration::from_secs(9), Duration::ZERO).await,
            200
        );
        assert_eq!(
            status(req, Duration::from_secs(11), Duration::ZERO).await,
            503
        );
        assert_eq!(
            status(req, Duration::from_secs(35), Duration::from_secs(30)).await,
            200
        );
        assert_eq!(
            status(req, Duration::from_secs(41), Duration::from_secs(30)).await,
            503
        );
        let mut s = DeadlineLayer::new(Duration::from_secs(1))
            .layer(slow(Duration::from_secs(2), Duration::ZERO));
        let resp = s.ready().await.unwrap().call(req()).await.unwrap();
        assert!(resp.headers().contains_key("retry-after"));
    }
}
