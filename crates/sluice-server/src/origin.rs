//! Refuses state-changing requests that a browser sent on behalf of a page from another
//! origin.
//!
//! With API keys, a foreign page cannot act: browsers do not attach an `Authorization` header
//! by themselves, and the console keeps its key in session storage, out of other origins'
//! reach. A keyless broker (the loopback default) has no such barrier, and some requests need
//! no CORS preflight (a form's POST), so this layer checks what browsers say about where a
//! request comes from: a POST, PUT, PATCH or DELETE whose `Origin` is not this broker's own
//! (scheme aside, its host and port must equal the `Host` header), or that the browser marks
//! `Sec-Fetch-Site: cross-site`, is answered 403 before any handler runs. Clients that are
//! not browsers (the CLI, the SDKs, curl) send neither header and are not affected.

use std::task::{Context, Poll};

use axum::http::{Method, Request, header};
use axum::response::{IntoResponse, Response};
use futures::future::{Either, Ready, ready};
use tower::{Layer, Service};

use crate::error::ApiError;

/// The layer: wraps a service with [`OriginGuard`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OriginGuardLayer;

impl<S> Layer<S> for OriginGuardLayer {
    type Service = OriginGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        OriginGuard { inner }
    }
}

/// The service that refuses cross-origin writes (see the module docs).
#[derive(Debug, Clone)]
pub struct OriginGuard<S> {
    inner: S,
}

/// Why a request is refused, if it is.
fn refusal<B>(req: &Request<B>) -> Option<String> {
    if matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    ) {
        return None;
    }
    let h = req.headers();
    if h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("cross-site") {
        return Some("the browser marks this request cross-site".to_owned());
    }
    let origin = h.get(header::ORIGIN)?.to_str().unwrap_or("");
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // `Origin: null` (sandboxed frames, some redirects) is never this broker.
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    if !host.is_empty() && origin_host.eq_ignore_ascii_case(host) {
        return None;
    }
    Some(format!(
        "its Origin \"{origin}\" is not this broker (\"{host}\")"
    ))
}

impl<S, B> Service<Request<B>> for OriginGuard<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match refusal(&req) {
            None => Either::Left(self.inner.call(req)),
            Some(why) => Either::Right(ready(Ok(ApiError::forbidden(format!(
                "cross-origin write refused: {why}; use the console served by this broker, \
                 or a client that is not a browser page"
            ))
            .into_response()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri("/v1/queues/q/pause");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request")
    }

    #[test]
    fn writes_from_another_origin_are_refused_and_the_rest_pass() {
        let host = ("host", "127.0.0.1:7878");
        assert!(
            refusal(&req(Method::POST, &[host])).is_none(),
            "no Origin: not a browser page"
        );
        assert!(
            refusal(&req(
                Method::POST,
                &[host, ("origin", "http://127.0.0.1:7878")]
            ))
            .is_none()
        );
        assert!(
            refusal(&req(
                Method::DELETE,
                &[host, ("origin", "http://evil.example")]
            ))
            .is_some()
        );
        assert!(refusal(&req(Method::POST, &[host, ("origin", "null")])).is_some());
        assert!(refusal(&req(Method::PUT, &[host, ("sec-fetch-site", "cross-site")])).is_some());
        assert!(
            refusal(&req(
                Method::GET,
                &[host, ("origin", "http://evil.example")]
            ))
            .is_none(),
            "reads change nothing; the browser's CORS rules keep their answers from the page"
        );
    }
}
