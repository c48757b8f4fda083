//! Refuses requests that a browser sent on behalf of a page from another site.
//!
//! With API keys, a foreign page cannot act: browsers do not attach an `Authorization` header
//! by themselves, and the console keeps its key in session storage, out of other origins'
//! reach. A keyless broker (the loopback default) has no such barrier, so two checks apply:
//!
//! - **Cross-origin writes.** Some requests need no CORS preflight (a form's POST), so a POST,
//!   PUT, PATCH or DELETE whose `Origin` is not this broker's own (scheme aside, its host and
//!   port must equal the `Host` header), or that the browser marks `Sec-Fetch-Site:
//!   cross-site`, is answered 403 before any handler runs.
//! - **DNS rebinding.** A page of `evil.example` can point its own name at 127.0.0.1; its
//!   requests are then same-origin to the browser, with `Host: evil.example:7878`. Without
//!   keys the broker listens on loopback only, so it answers only requests whose `Host` names
//!   a loopback address (`localhost`, `127.0.0.1`, `[::1]`, any port) and refuses the rest,
//!   reads included.
//!
//! Clients that are not browsers (the CLI, the SDKs, curl) send no `Origin` and name the
//! address they connect to, so they are not affected. Behind a reverse proxy, the proxy must
//! pass the browser's `Host` on (nginx: `proxy_set_header Host $http_host;`), and a broker
//! reached through one needs API keys.

use std::task::{Context, Poll};

use axum::http::{Method, Request, header};
use axum::response::{IntoResponse, Response};
use futures::future::{Either, Ready, ready};
use tower::{Layer, Service};

use crate::error::ApiError;

/// The layer: wraps a service with [`OriginGuard`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OriginGuardLayer {
    /// Answer only requests whose `Host` is a loopback name (a broker without API keys).
    pub loopback_hosts_only: bool,
}

impl<S> Layer<S> for OriginGuardLayer {
    type Service = OriginGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        OriginGuard {
            inner,
            loopback_hosts_only: self.loopback_hosts_only,
        }
    }
}

/// The service that refuses cross-origin writes and, without keys, requests for other hosts
/// (see the module docs).
#[derive(Debug, Clone)]
pub struct OriginGuard<S> {
    inner: S,
    loopback_hosts_only: bool,
}

/// Whether `host` (a `Host` header: name, optional port) names a loopback address.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why a request for another host is refused, if it is (keyless brokers only).
fn wrong_host<B>(req: &Request<B>) -> Option<String> {
    let host = req.headers().get(header::HOST)?.to_str().unwrap_or("");
    if is_loopback_host(host) {
        return None;
    }
    Some(format!(
        "request for host \"{host}\" refused: a broker without API keys answers only to \
         localhost, 127.0.0.1 or [::1] (a page of another site may point its name here); \
         reach it by one of those, or configure API keys"
    ))
}

/// Why a write is refused as cross-origin, if it is.
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
        let why = if self.loopback_hosts_only {
            wrong_host(&req)
        } else {
            None
        }
        .or_else(|| {
            refusal(&req).map(|why| {
                format!(
                    "cross-origin write refused: {why}; use the console served by this \
                     broker, or a client that is not a browser page"
                )
            })
        });
        match why {
            None => Either::Left(self.inner.call(req)),
            Some(why) => Either::Right(ready(Ok(ApiError::forbidden(why).into_response()))),
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
