//! Sluice's HTTP broker: the v1 JSON API over any [`Store`] engine.
//!
//! A request passes the HTTP layers (origin guard, the caller's key and its permission for
//! the operation ([`auth`]), idempotency replay, deadline, error envelope), then one
//! handler, which makes one `Store` call and translates between the wire types of
//! [`sluice_wire`] and the core types.
//!
//! The crate is laid out by kind: `http` (the layers), `routes` (handlers only), [`listen`]
//! (HTTP, frames, TLS and connection rules), [`jobs`] (redrive runner, scheduler, stats
//! sampler, push delivery), [`openapi`] (the document) and [`metrics`].
//!
//! ```no_run
//! # async fn run(store: std::sync::Arc<dyn sluice_core::Store>) -> std::io::Result<()> {
//! let broker = sluice_server::Broker::new(store, sluice_server::ServerOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! broker.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

pub mod auth;
pub(crate) mod console;
mod http;
pub mod jobs;
pub mod listen;
pub mod metrics;
pub mod openapi;
pub(crate) mod routes;
pub(crate) mod walk;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use sluice_core::Store;

use http::{extract, idempotency};
use jobs::{push, redrive, sampler, scheduler};
use listen::{connections, frames, tls};
use tokio::sync::watch;

pub use auth::{ApiKeyConfig, KeyRing, Role};
pub use http::deadline::{Deadline, DeadlineLayer};
pub use http::error::ApiError;
pub use listen::connections::ConnectionLimits;

/// How long a request may take beyond its long-poll wait by default: well past what a
/// healthy store needs for the largest batch, and short of the 30 s clients commonly give
/// up after, so that they hear a 503 rather than time out on their own.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How the broker serves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The API keys; empty means authentication is off.
    pub keys: KeyRing,
    /// Largest request body read (default 24 MiB: a 16 MiB batch in base64 plus JSON).
    pub max_body_bytes: usize,
    /// Longest a request may take beyond its own long-poll wait before it is answered 503
    /// with `Retry-After` ([`DEFAULT_REQUEST_TIMEOUT`]); see [`DeadlineLayer`].
    pub request_timeout: Duration,
    /// Whether queues may push over plain `http` to hosts that are not loopback (default
    /// false: push targets must be `https`, or `http` on loopback).
    pub push_allow_http: bool,
    /// Networks and host names push may call although they are not public (loopback,
    /// private, link-local…); empty by default: push calls public addresses only. The
    /// broker's own listeners are refused whatever this says.
    pub push_allow: Vec<push::PushAllow>,
    /// TLS for every listener; `None` serves plain text (default).
    pub tls: Option<tls::TlsConfig>,
    /// Header-read and idle timeouts and the cap on open connections, applied to every
    /// listener (see [`listen::connections`]).
    pub connections: ConnectionLimits,
    /// Which queues get series of their own in `/metrics`.
    pub metrics: metrics::MetricsScope,
    /// Host names besides loopback ones that a broker without keys answers to (the name its
    /// listen address was given by); see [`sluice_origin`].
    pub hosts: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            keys: KeyRing::open(),
            max_body_bytes: extract::DEFAULT_BODY_LIMIT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            push_allow_http: false,
            push_allow: Vec::new(),
            tls: None,
            connections: ConnectionLimits::default(),
            metrics: metrics::MetricsScope::default(),
            hosts: Vec::new(),
        }
    }
}

/// What every handler sees.
#[derive(Clone)]
pub struct AppState {
    /// The storage engine.
    pub store: Arc<dyn Store>,
    /// The API keys.
    pub keys: Arc<KeyRing>,
    /// Turns true when the broker begins to shut down: long polls return at once.
    pub shutdown: Arc<watch::Sender<bool>>,
    /// Histograms this node observes, and the `/metrics` renderer.
    pub metrics: Arc<metrics::Metrics>,
    /// Which push targets this broker may call.
    pub push: Arc<push::PushRules>,
    /// Answers remembered under idempotency keys, over HTTP and frames.
    pub(crate) idempotency: idempotency::IdempotencyLayer,
}

impl auth::HasKeys for AppState {
    fn keys(&self) -> &KeyRing {
        &self.keys
    }
}

impl AppState {
    /// Records an operator action in the audit log. The action already happened, so a failure
    /// to record it is logged, not answered.
    pub async fn audit(
        &self,
        caller: &auth::Caller,
        action: &str,
        queue: Option<&sluice_core::QueueName>,
        message_id: Option<String>,
        details: &[(&str, String)],
    ) {
        use sluice_core::Clock as _;
        debug_assert!(
            caller.operation().is_none_or(|o| o.audit.contains(&action)),
            "{action} is not among the audit actions the permission table declares for {:?}",
            caller.operation().map(|o| o.name)
        );
        let event = sluice_core::AuditEvent {
            at: sluice_core::SystemClock.now(),
            actor: caller.name().unwrap_or("anonymous").to_string(),
            action: action.to_string(),
            queue: queue.map(ToString::to_string),
            message_id,
            details: details
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
            outcome: "ok".to_string(),
        };
        if let Err(e) = self.store.audit_append(vec![event]).await {
            tracing::error!(error = %e, action, "could not write the audit log");
        }
    }

    /// Resolves when shutdown begins (never, if it never does).
    pub async fn shutting_down(&self) {
        let mut rx = self.shutdown.subscribe();
        if rx.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Leases as a consumer's receive does over either protocol: a long poll must not hold
    /// up shutdown, so it answers empty once shutdown begins. Dropping the store's receive is
    /// safe: a lease taken in the instant before the drop expires and the message is
    /// delivered again.
    pub(crate) async fn lease(
        &self,
        queue: &sluice_core::QueueName,
        req: sluice_core::ReceiveRequest,
    ) -> Result<Vec<sluice_core::Delivery>, sluice_core::StoreError> {
        if req.wait.is_zero() {
            return self.store.receive(queue, req).await;
        }
        tokio::select! {
            r = self.store.receive(queue, req) => r,
            () = self.shutting_down() => Ok(Vec::new()),
        }
    }

    /// Acknowledges in the store and counts each ack that took, for the processing-time
    /// metrics; one outcome per request, in order.
    pub(crate) async fn ack(
        &self,
        queue: &sluice_core::QueueName,
        acks: Vec<sluice_core::AckRequest>,
    ) -> Result<Vec<Result<(), sluice_core::StoreError>>, sluice_core::StoreError> {
        let ids: Vec<_> = acks.iter().map(|a| a.receipt.id).collect();
        let out = self.store.ack(queue, acks).await?;
        let took = out.iter().zip(ids).filter(|(r, _)| r.is_ok());
        self.metrics.acked(queue, took.map(|(_, id)| id));
        Ok(out)
    }
}

/// The broker: a store plus options, ready to serve.
pub struct Broker {
    state: AppState,
    options: ServerOptions,
    frames: Option<tokio::net::TcpListener>,
    /// More HTTP listeners, each with the router it serves and its name in metrics.
    more_http: Vec<(&'static str, tokio::net::TcpListener, Router)>,
}

impl Broker {
    /// A broker over `store`.
    pub fn new(store: Arc<dyn Store>, options: ServerOptions) -> Self {
        let (tx, _) = watch::channel(false);
        let keys = Arc::new(options.keys.clone());
        let state = AppState {
            idempotency: idempotency::IdempotencyLayer::new(store.clone(), keys.clone()),
            store,
            keys,
            shutdown: Arc::new(tx),
            metrics: Arc::new(metrics::Metrics::new(options.metrics.clone())),
            push: Arc::new(push::PushRules::new(
                options.push_allow_http,
                options.push_allow.clone(),
            )),
        };
        Broker {
            state,
            options,
            frames: None,
            more_http: Vec::new(),
        }
    }

    /// Also serves the frame protocol ([`sluice_wire::frame`]) on `listener`, beside HTTP and
    /// until the same shutdown. Frames may be as large as `max_body_bytes`.
    #[must_use]
    pub fn with_frames(mut self, listener: tokio::net::TcpListener) -> Self {
        self.own_listener("frames", &listener);
        self.frames = Some(listener);
        self
    }

    /// Also serves `router` on `listener` (e.g. the SQS API), with this broker's TLS,
    /// connection limits and shutdown; its connections are counted under
    /// `listener="{name}"` in `/metrics`.
    #[must_use]
    pub fn with_http(
        mut self,
        name: &'static str,
        listener: tokio::net::TcpListener,
        router: Router,
    ) -> Self {
        self.own_listener(name, &listener);
        self.more_http.push((name, listener, router));
        self
    }

    /// Records a listener of this broker, which push never calls.
    fn own_listener(&self, name: &'static str, listener: &tokio::net::TcpListener) {
        if let Ok(addr) = listener.local_addr() {
            self.state.push.add_own(name, addr);
        }
    }

    /// The router with every route and layer, for serving or for `tower::ServiceExt::oneshot`.
    pub fn router(&self) -> Router {
        http::router(self.state.clone(), &self.options)
    }

    /// Begins shutdown: pending long polls answer at once with what they have (nothing), and
    /// a running [`Broker::serve`] stops as if its shutdown future had resolved.
    pub fn begin_shutdown(&self) {
        self.state.shutdown.send_replace(true);
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting connections,
    /// lets in-flight requests finish (long polls return early with no messages) and returns.
    ///
    /// Every listener applies [`ServerOptions::connections`].
    ///
    /// # Errors
    /// None at present: a failed accept is logged and retried.
    ///
    /// # Cancel safety
    /// Dropping the future closes every connection of every listener at once; a request in progress either
    /// completed its store write (durable) or did not start it.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.own_listener("http", &listener);
        let router = self.router();
        let tx = self.state.shutdown.clone();
        let runner = tokio::spawn(redrive::run(self.state.store.clone(), tx.subscribe()));
        let sampler = tokio::spawn(sampler::run(self.state.store.clone(), tx.subscribe()));
        let scheduler = tokio::spawn(scheduler::run(self.state.store.clone(), tx.subscribe()));
        let pusher = tokio::spawn(push::run(self.state.clone(), tx.subscribe()));
        let limits = self.options.connections;
        let metrics = &self.state.metrics;
        // The other listeners, in a set so that dropping this future ends them too.
        let mut listeners = tokio::task::JoinSet::new();
        if let Some(l) = self.frames {
            let gate = metrics.gate("frames", limits.max_connections);
            listeners.spawn(frames::serve(
                l,
                self.state.clone(),
                self.options.clone(),
                gate,
            ));
        }
        for (name, l, router) in self.more_http {
            listeners.spawn(connections::serve_http(
                l,
                router,
                self.options.tls.clone(),
                limits,
                metrics.gate(name, limits.max_connections),
                tx.subscribe(),
            ));
        }
        let main = connections::serve_http(
            listener,
            router,
            self.options.tls.clone(),
            limits,
            metrics.gate("http", limits.max_connections),
            tx.subscribe(),
        );
        tokio::pin!(main);
        tokio::select! {
            () = &mut main => {}
            () = shutdown => {
                tracing::info!("shutting down: finishing in-flight requests");
                tx.send_replace(true);
                main.await;
            }
        }
        while listeners.join_next().await.is_some() {}
        // The runner stops at the shutdown signal; a step it is taking completes first.
        self.state.shutdown.send_replace(true);
        let _ = runner.await;
        let _ = sampler.await;
        let _ = scheduler.await;
        let _ = pusher.await;
        self.state.store.close().await;
        Ok(())
    }
}

/// The Rust samples of the push guide (`docs/push.md`: verifying a push signature), compiled
/// as doctests so that the documentation keeps up with what the broker signs.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/push.md")]
struct PushGuide;
