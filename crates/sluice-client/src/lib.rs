//! A typed async client of Sluice's HTTP API v1 (SPEC §8).
//!
//! One [`Client`] holds one connection pool; clone it freely. Requests and answers are the
//! wire types of [`sluice_core::wire`], shared with the server, so the client cannot drift
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
//! # Timeouts and retries
//! Each attempt has a timeout (30 s by default, plus a receive's long-poll wait, so a long
//! poll is never cut short by the client). Calls are retried with exponential backoff and full
//! jitter on connection failures, 503 and 429 (honouring `Retry-After`) when repeating them
//! cannot act twice; [`retry`] explains which calls those are and why. A send is retried only
//! when it carries an `Idempotency-Key` ([`SendOptions`], or
//! [`ClientBuilder::idempotent_sends`]) or every message has a `dedup_id`.

mod body;
mod client;
mod error;
mod inspect;
mod json;
mod messages;
mod queues;
pub mod retry;

pub use body::{Body, BodyExt, NewMessage, ResultExt};
pub use client::{Client, ClientBuilder, IDEMPOTENCY_KEY};
pub use error::{Error, Result};
pub use messages::{NackOptions, ReceiveOptions, SendOptions};
pub use queues::QueuePut;
pub use retry::RetryPolicy;
pub use sluice_core::ErrorCode;
/// The JSON wire types of the API, shared with the server.
pub use sluice_core::wire;
