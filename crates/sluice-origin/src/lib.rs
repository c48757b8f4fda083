//! Refuses requests that a browser sent on behalf of a page from another site, and, on a
//! listener without keys, requests addressed to a host it does not answer to. Every HTTP
//! listener of the broker (its API and console, the SQS endpoint) wraps its routes in this one
//! layer; each says which of its methods may act and how a refusal is answered.
//!
//! With keys, a foreign page cannot act: browsers do not attach an `Authorization` header or
//! a SigV4 signature by themselves, and the console keeps its key in session storage, out of
//! other origins' reach. A keyless listener (loopback only) has no such barrier, so:
//!
//! - **Requests from another origin.** Some requests need no CORS preflight (a form's POST
//!   or GET, an image's GET), so a request that may act is refused before any handler runs
//!   when the browser marks it `Sec-Fetch-Site: cross-site` or `same-site` (another port of
//!   the same host is another origin), or when its `Origin` or `Referer` names another host
//!   and port than its `Host` (`Origin: null` included). On the HTTP API the methods that may
//!   act are POST, PUT, PATCH and DELETE (a link to the console from another site still
//!   opens); on the SQS endpoint every method may, since a query-protocol GET can delete a
//!   queue.
//! - **DNS rebinding.** A page of `evil.example` can point its own name at 127.0.0.1; its
//!   requests are then same-origin to the browser, with `Host: evil.example:7878`. Without
//!   keys a listener binds loopback addresses only, so it answers only requests whose `Host`
//!   names a loopback address (`localhost`, `127.0.0.1`, `[::1]`), or a name it was configured
//!   with (the name of its listen address, the SQS endpoint's public URL), on any port, and
//!   refuses the rest, reads included.
//!
//! Clients that are not browsers (the CLI, the SDKs, the AWS CLI, curl) send none of these
//! headers and name the address they connect to, so they are not affected. Behind a reverse
//! proxy, the proxy must pass the browser's `Host` on (nginx: `proxy_set_header Host
//! $http_host;`), and a listener reached through one needs keys.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderMap, Method, Request, header};
use axum::response::Response;
use futures::future::{Either, Ready, ready};
use tower::{Layer, Service};

/// How a listener answers a refused request: from the request's headers (to pick a format)
/// and why it was refused, a 403 in the listener's own error format.
pub type Refuse = fn(&HeaderMap, String) -> Response;

/// The `Host` names a listener answers to.
#[derive(Debug, Clone, Default)]
pub enum Hosts {
    /// Any name: a listener with keys, which a page cannot use without them.
    #[default]
    Any,
    /// Loopback names and these names (each without a port; any port is taken): a
    /// listener without keys.
    Loopback(Vec<String>),
}

impl Hosts {
    /// Loopback names and `names` (host names, or `host:port` and URLs, whose host is kept).
    pub fn loopback_and<I, S>(names: I) -> Hosts
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kept: Vec<String> = names
            .into_iter()
            .filter_map(|n| {
                let n = n.as_ref();
                let n = n.split_once("://").map_or(n, |(_, rest)| rest);
                let n = n.split(['/', '?', '#']).next().unwrap_or("");
                let name = host_name(n.rsplit_once('@').map_or(n, |(_, h)| h));
                (!name.is_empty() && !is_loopback_name(name)).then(|| name.to_ascii_lowercase())
            })
            .collect();
        kept.sort();
        kept.dedup();
        Hosts::Loopback(kept)
    }

    /// Whether a request for `host` (a `Host` header: name, optional port) is answered.
    fn admit(&self, host: &str) -> bool {
        match self {
            Hosts::Any => true,
            Hosts::Loopback(names) => {
                let name = host_name(host);
                is_loopback_name(name) || names.iter().any(|n| n.eq_ignore_ascii_case(name))
            }
        }
    }
}

/// What a listener's guard checks, and how its refusals read.
#[derive(Debug, Clone)]
pub struct OriginRules {
    /// The names this listener answers to.
    pub hosts: Hosts,
    /// Whether GET, HEAD, OPTIONS and TRACE only read (the HTTP API), so that requests of
    /// those methods from other origins pass; false where any method may act (the SQS
    /// endpoint's query protocol).
    pub safe_methods_read: bool,
    /// What a refused page should use instead (ends the cross-origin refusal), e.g. "use the
    /// console served by this broker, or a client that is not a browser page".
    pub instead: &'static str,
    /// How to give this listener keys (ends a refusal of its host), e.g. "configure API keys
    /// ([[keys]])".
    pub keys: &'static str,
}

/// The layer: wraps a service with [`OriginGuard`].
#[derive(Clone)]
pub struct OriginGuardLayer {
    rules: Arc<OriginRules>,
    refuse: Refuse,
}

impl OriginGuardLayer {
    /// A guard applying `rules`, answering refusals with `refuse`.
    pub fn new(rules: OriginRules, refuse: Refuse) -> OriginGuardLayer {
        OriginGuardLayer {
            rules: Arc::new(rules),
            refuse,
        }
    }
}

impl<S> Layer<S> for OriginGuardLayer {
    type Service = OriginGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        OriginGuard {
            inner,
            rules: self.rules.clone(),
            refuse: self.refuse,
        }
    }
}

/// The service that refuses requests from other origins and, without keys, requests for
/// other hosts (see the module docs).
#[derive(Clone)]
pub struct OriginGuard<S> {
    inner: S,
    rules: Arc<OriginRules>,
    refuse: Refuse,
}

/// The name part of `host` (a `Host` header or an authority: name, optional port).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    }
}

/// Whether `name` (without a port) names a loopback address.
fn is_loopback_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host (and port) the request was sent to: its `Host` header, or the authority of its
/// URI (HTTP/2).
fn request_host<B>(req: &Request<B>) -> Option<&str> {
    match req.headers().get(header::HOST) {
        Some(h) => Some(h.to_str().unwrap_or("")),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

/// The authority (`host[:port]`) of a URL as `Origin` and `Referer` carry it; empty for
/// `null` and anything without a scheme.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or("")
}

/// Why the request, sent to `host`, is refused as coming from another origin, if it is.
fn other_origin<B>(rules: &OriginRules, req: &Request<B>, host: &str) -> Option<String> {
    if rules.safe_methods_read
        && matches!(
            *req.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        )
    {
        return None;
    }
    let h = req.headers();
    let text = |name| h.get(name).map(|v| v.to_str().unwrap_or(""));
    if let Some(site @ ("cross-site" | "same-site")) = text("sec-fetch-site") {
        return Some(format!(
            "the browser marks it Sec-Fetch-Site: {site} (sent by a page of another origin)"
        ));
    }
    for (name, value) in [("Origin", text("origin")), ("Referer", text("referer"))] {
        let Some(value) = value else { continue };
        let from = authority(value);
        if host.is_empty() || !from.eq_ignore_ascii_case(host) {
            return Some(format!(
                "its {name} \"{value}\" is not this listener's origin (host {host})"
            ));
        }
    }
    None
}

/// Why `rules` refuse `req`, if they do.
fn refusal<B>(rules: &OriginRules, req: &Request<B>) -> Option<String> {
    let host = request_host(req).unwrap_or("");
    if request_host(req).is_some() && !rules.hosts.admit(host) {
        return Some(format!(
            "request for host \"{host}\" refused: a listener without keys answers only to \
             localhost, 127.0.0.1, [::1]{} (a page of another site may point its own name \
             here); reach it by one of those, or {}",
            match &rules.hosts {
                Hosts::Loopback(names) if !names.is_empty() => format!(" and {}", names.join(", ")),
                _ => String::new(),
            },
            rules.keys
        ));
    }
    other_origin(rules, req, host).map(|why| {
        format!(
            "request from another origin refused: {why}; {}",
            rules.instead
        )
    })
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
        match refusal(&self.rules, &req) {
            None => Either::Left(self.inner.call(req)),
            Some(why) => Either::Right(ready(Ok((self.refuse)(req.headers(), why)))),
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

    /// The HTTP API's rules: safe methods only read.
    fn api() -> OriginRules {
        OriginRules {
            hosts: Hosts::Any,
            safe_methods_read: true,
            instead: "use the console served by this broker",
            keys: "configure API keys ([[keys]])",
        }
    }

    fn every_method() -> OriginRules {
        OriginRules {
            safe_methods_read: false,
            ..api()
        }
    }

    #[test]
    fn writes_from_another_origin_are_refused_and_the_rest_pass() {
        let host = ("host", "127.0.0.1:7878");
        let refused = |m, h: &[(&str, &str)]| refusal(&api(), &req(m, h)).is_some();
        assert!(
            !refused(Method::POST, &[host]),
            "no Origin: not a browser page"
        );
        assert!(!refused(
            Method::POST,
            &[host, ("origin", "http://127.0.0.1:7878")]
        ));
        assert!(!refused(
            Method::POST,
            &[host, ("sec-fetch-site", "same-origin")]
        ));
        assert!(refused(
            Method::DELETE,
            &[host, ("origin", "http://evil.example")]
        ));
        assert!(refused(Method::POST, &[host, ("origin", "null")]));
        assert!(refused(
            Method::PUT,
            &[host, ("sec-fetch-site", "cross-site")]
        ));
        assert!(
            refused(Method::PUT, &[host, ("sec-fetch-site", "same-site")]),
            "another port of the same host is another origin"
        );
        assert!(refused(
            Method::POST,
            &[host, ("referer", "http://127.0.0.1:9999/page")]
        ));
        assert!(!refused(
            Method::POST,
            &[host, ("referer", "http://127.0.0.1:7878/#/queues")]
        ));
        assert!(
            !refused(Method::GET, &[host, ("origin", "http://evil.example")]),
            "reads change nothing; the browser's CORS rules keep their answers from the page"
        );
    }

    #[test]
    fn where_any_method_may_act_reads_from_another_origin_are_refused_too() {
        let host = ("host", "127.0.0.1:9324");
        let refused = |m, h: &[(&str, &str)]| refusal(&every_method(), &req(m, h)).is_some();
        assert!(refused(
            Method::GET,
            &[host, ("referer", "http://127.0.0.1:5555/")]
        ));
        assert!(refused(
            Method::GET,
            &[host, ("sec-fetch-site", "same-site")]
        ));
        assert!(!refused(Method::GET, &[host, ("sec-fetch-site", "none")]));
        assert!(!refused(Method::GET, &[host]));
    }

    #[test]
    fn without_keys_only_loopback_and_configured_names_are_answered() {
        let rules = OriginRules {
            hosts: Hosts::loopback_and(["https://sqs.example.com:8443/", "LOCALHOST:1"]),
            ..every_method()
        };
        assert!(matches!(&rules.hosts, Hosts::Loopback(n) if n == &["sqs.example.com"]));
        let refused = |host: &str| refusal(&rules, &req(Method::GET, &[("host", host)]));
        for ok in [
            "localhost",
            "localhost:9324",
            "127.0.0.1:9324",
            "[::1]:9324",
            "sqs.example.com",
            "SQS.example.com:443",
        ] {
            assert!(refused(ok).is_none(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9324",
            "sqs.example.com.evil.example",
        ] {
            let why = refused(bad).unwrap_or_else(|| panic!("{bad} is answered"));
            assert!(
                why.contains("sqs.example.com") && why.contains("[[keys]]"),
                "{why}"
            );
        }
        let any = api();
        assert!(refusal(&any, &req(Method::GET, &[("host", "evil.example")])).is_none());
    }
}
