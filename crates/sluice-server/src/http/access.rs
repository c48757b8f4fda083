//! The one place the HTTP API enforces permissions: before any handler runs, a request's
//! operation is looked up in the permission table (`sluice_core::access::operations`), its
//! caller is authenticated from its headers, and the actions the table declares are checked
//! against the caller's role and, for an operation on the queue its path names, against that
//! queue. Handlers then check only what the path does not say (the queue of an id once it is
//! found, the queues a body names), with the same actions, through the [`Caller`] this layer
//! hands them.
//!
//! A request whose method and path match no operation goes on unchecked, for the router to
//! answer (404, or 405 for a known path): tests hold the table to the OpenAPI document, so a
//! route cannot be served without its line.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Method, Request};
use axum::response::{IntoResponse, Response};
use futures::future::{Either, Ready, ready};
use sluice_core::QueueName;
use sluice_core::access::operations::{OPERATIONS, Operation, Scope};
use tower::{Layer, Service};

use crate::auth::{Caller, KeyRing};
use crate::http::error::ApiError;

/// Checks every request against the permission table (see the module docs).
#[derive(Clone)]
pub(crate) struct AccessLayer {
    keys: Arc<KeyRing>,
}

impl AccessLayer {
    pub(crate) fn new(keys: Arc<KeyRing>) -> Self {
        AccessLayer { keys }
    }
}

impl<S> Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Access {
            inner,
            keys: self.keys.clone(),
        }
    }
}

/// The service [`AccessLayer`] makes.
#[derive(Clone)]
pub(crate) struct Access<S> {
    inner: S,
    keys: Arc<KeyRing>,
}

impl<S, B> Service<Request<B>> for Access<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let Some((op, queue)) = operation(req.method(), req.uri().path()) else {
            return Either::Left(self.inner.call(req));
        };
        if op.scope == Scope::Open {
            return Either::Left(self.inner.call(req));
        }
        match authorize(&self.keys, req.headers(), op, queue.as_deref()) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                Either::Left(self.inner.call(req))
            }
            Err(e) => Either::Right(ready(Ok(e.into_response()))),
        }
    }
}

/// The operation at `method` and `path`, with the queue its path names (`{q}`, decoded).
fn operation(method: &Method, path: &str) -> Option<(&'static Operation, Option<String>)> {
    // A HEAD is answered as its GET.
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    OPERATIONS.iter().find_map(|op| {
        let (m, template) = op.http?;
        if m != method {
            return None;
        }
        matches(template, path).map(|q| (op, q))
    })
}

/// Whether `path` fits route `template`; `Some(queue)` with the decoded `{q}` segment when it
/// has one.
fn matches(template: &str, path: &str) -> Option<Option<String>> {
    let mut queue = None;
    let mut segments = path.split('/');
    for part in template.split('/') {
        if part.starts_with("{*") {
            return Some(queue);
        }
        let seg = segments.next()?;
        match part {
            "{q}" => {
                let decoded = percent_encoding::percent_decode_str(seg)
                    .decode_utf8()
                    .ok()?;
                queue = Some(decoded.into_owned());
            }
            p if p.starts_with('{') => {}
            p if p == seg => {}
            _ => return None,
        }
    }
    segments.next().is_none().then_some(queue)
}

/// The caller of a request for `op`, once its role may do every action `op` declares and,
/// for an operation on the queue its path names, on that queue.
fn authorize(
    keys: &KeyRing,
    headers: &axum::http::HeaderMap,
    op: &'static Operation,
    queue: Option<&str>,
) -> Result<Caller, ApiError> {
    let caller = Caller::from_headers(headers, keys)?.doing(op);
    for action in op.actions {
        caller.allow_role(*action)?;
    }
    // A path that names no valid queue is the handler's 400: nothing can be done to it.
    if op.scope == Scope::Queue
        && let Some(q) = queue.and_then(|q| QueueName::new(q).ok())
    {
        for action in op.actions {
            caller.allow(*action, &q)?;
        }
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_find_their_operation_and_queue() {
        let find = |m: Method, p: &str| operation(&m, p).map(|(o, q)| (o.name, q));
        assert_eq!(
            find(Method::POST, "/v1/queues/orders.eu/ack"),
            Some(("message.ack", Some("orders.eu".to_owned())))
        );
        assert_eq!(
            find(Method::GET, "/v1/queues/a%2Db/stats/history"),
            Some(("queue.history", Some("a-b".to_owned())))
        );
        assert_eq!(find(Method::HEAD, "/v1/queues"), Some(("queue.list", None)));
        assert_eq!(find(Method::GET, "/v1/tasks/123"), Some(("task.get", None)));
        assert_eq!(
            find(Method::GET, "/console/pages/queue.js"),
            Some(("console.assets", None))
        );
        assert_eq!(find(Method::GET, "/v1/queues/a/b/c"), None);
        assert_eq!(find(Method::PATCH, "/v1/queues/a"), None);
    }

    /// Every operation of the OpenAPI document has its line in the permission table: a route
    /// cannot be served without one.
    #[test]
    fn every_documented_operation_is_declared() {
        let doc = crate::openapi::openapi();
        let mut n = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("item").keys() {
                let method = method.to_ascii_uppercase();
                let declared = OPERATIONS.iter().any(|o| o.http == Some((&method, path)));
                assert!(declared, "{method} {path} is not in the permission table");
                n += 1;
            }
        }
        assert!(n > 40, "the document lists the operations ({n})");
    }
}
