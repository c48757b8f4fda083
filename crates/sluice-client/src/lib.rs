//! A typed async client of Sluice's HTTP API v1.
//!
//! One [`Client`] holds one connection pool; clone it freely. Requests and answers are the
//! wire types of [`sluice_wire`], shared with the server, so the client cannot drift
//! from what the broker speaks. Errors keep the broker's stable [`ErrorCode`] and message
//! ([`Error::Api`]), so a caller matches on `err.code()`.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_client::{BodyExt, Client, ReceiveOptions};
//!
//! # async fn run() -> Result<(), sluice_client::Error> {
//! let client = Client::new("http://127.0.0.1:7878")?;
//! client.put_queue("emails", &Default::default()).await?;
//! client.send_json("emails", &serde_json::json!({"to": "a@example.com"})).await?;
//! for d in client.receive("emails", &ReceiveOptions::new(10, Duration::from_secs(20))).await? {
//!     let job: serde_json::Value = d.body_json()?;
//!     // ... do the work ...
//! #   let _ = job;
//!     client.ack("emails", &d.receipt).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Tasks and workers
//! [`Client::enqueue`] sends a task envelope (`{"task", "args", "kwargs"}`, see [`envelope`]),
//! [`Client::call`] enqueues and waits for the result, [`Client::task_status`],
//! [`Client::task_events`] and [`Client::cancel`] follow and stop a task. A [`Worker`] runs
//! typed handlers registered by task name and maps their outcomes to the task lifecycle
//! ([`worker`] has the table); handlers get a [`TaskContext`] for progress, cancellation and
//! stable idempotency keys, and may share a [`RateLimiter`] for an upstream's quota.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_client::{Client, TaskContext, Worker};
//!
//! # async fn run() -> Result<(), sluice_client::Error> {
//! let client = Client::new("http://127.0.0.1:7878")?;
//! let worker = Worker::builder(client.clone(), "math")
//!     .handler("add", |_ctx: TaskContext, (a, b): (i64, i64)| async move { Ok(a + b) })
//!     .build()?;
//! tokio::spawn(worker.run());
//! let sum: i64 = client.call("math", "add", &(2, 3), Duration::from_secs(5)).await?;
//! # let _ = sum; Ok(()) }
//! ```
//!
//! The `examples/` directory has one runnable scenario per failure mode (`cargo run -p
//! sluice-client --example flaky_handler`, with `SLUICE_URL` pointing at `sluice serve`).
//!
//! # Timeouts and retries
//! Each attempt has a timeout (30 s by default, plus a receive's long-poll wait, so a long
//! poll is never cut short by the client). Calls are retried with exponential backoff and full
//! jitter on connection failures, 503 and 429 (honouring `Retry-After`) when repeating them
//! cannot act twice; [`retry`] explains which calls those are and why. A send is retried only
//! when it carries an `Idempotency-Key` ([`SendOptions`], or
//! [`ClientBuilder::idempotent_sends`]) or every message has a `dedup_id`.

mod body;
mod client;
pub mod envelope;
mod error;
pub mod frames;
mod idempotency;
mod inspect;
mod json;
mod messages;
pub mod ops;
mod overview;
mod queues;
pub mod ratelimit;
pub mod retry;
mod schedules;
mod sse;
mod summary;
mod tasks;
pub mod tls;
pub mod worker;

pub use body::{BodyExt, DecodedBody, OutgoingMessage, ResultExt};
pub use client::{Client, ClientBuilder, IDEMPOTENCY_KEY};
pub use envelope::TaskEnvelope;
pub use error::{Error, Result};
pub use idempotency::idempotency_key;
pub use messages::{NackOptions, ReceiveOptions, SendOptions};
pub use queues::QueuePut;
pub use ratelimit::RateLimiter;
pub use retry::RetryPolicy;
pub use sluice_core::adaptive::BreakerForce;
pub use sluice_core::{ErrorCode, TaskStatus};
/// The JSON wire types of the API, shared with the server.
pub use sluice_wire as wire;
pub use sluice_wire::{AuditEntryView, AuditList, Overview, OverviewRow, WhoAmI};
pub use tasks::TaskEvents;
pub use tls::TlsOptions;
pub use worker::{
    HookError, MetricsSnapshot, Outcome, TaskContext, TaskError, TaskErrorKind, Worker,
    WorkerBuilder, WorkerMetrics,
};

/// The Rust samples of the HTTP API reference (`docs/http-api.md`), compiled as doctests so
/// that the documentation keeps up with the client.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/http-api.md")]
struct HttpApiReference;
