//! Sluice's wire formats: the JSON of the HTTP API v1 (the request and answer views, shared
//! by the server, the CLI and the Rust SDK, and the conversions between them and the core
//! types) and the binary [`frame`] protocol.
//!
//! The views live here rather than in `sluice-core` so that the model and the storage
//! contract carry no HTTP shapes and no OpenAPI derives; every view is re-exported at the
//! crate root, so `sluice_wire::DeliveryView` names it wherever its module is.
//!
//! Conventions:
//! - durations are integer milliseconds in fields ending `_ms`; a negative value is refused
//!   with `invalid_argument`, a value above a limit is refused by the core validation;
//! - times are RFC 3339 strings in UTC (`2026-01-01T00:00:00.25Z`);
//! - request objects refuse unknown fields, so a typo (`visiblity_timeout_ms`) is a 400, not a
//!   silently ignored setting;
//! - ids are 16 lowercase hex digits; receipts are opaque strings.
//!
//! # Bodies
//! A message body (and a task result) is bytes plus the form it was sent in, and it comes
//! back in that form:
//!
//! | sent as | stored as | comes back as |
//! |---|---|---|
//! | `"body": <any JSON>` | the JSON text, exactly as written | `"body": <the same JSON>` |
//! | `"body_base64": "..."` (standard alphabet, padded) | the decoded bytes | `"body_base64": "..."` |
//! | a raw request with `Content-Type: application/octet-stream` | the bytes | `"body_base64": "..."` |
//! | a raw request with `Content-Type: text/plain` (UTF-8) | the text | `"body": "<the text as a JSON string>"` plus `"body_encoding": "text"` |
//!
//! So a consumer can always tell a JSON string body (`"body": "hi"`) from a text body
//! (`"body": "hi", "body_encoding": "text"`), and every body round-trips byte-exact.

mod audit;
mod body;
mod browse;
mod convert;
mod error;
mod flow;
pub mod frame;
mod health;
mod keys;
mod overview;
mod queues;
mod receive;
pub mod receive_answer;
mod redrive;
mod schedule;
mod send;
mod settle;
mod stats;
mod summary;
mod task;
mod trace;

pub use audit::{AuditEntryView, AuditList};
pub use body::{BodyEncoding, BodyForm, JsonText};
pub use browse::*;
pub use convert::{as_ms, millis};
pub use error::*;
pub use flow::*;
pub use health::*;
pub use keys::*;
pub use overview::{Overview, OverviewRow, WhoAmI};
pub use queues::*;
pub use receive::*;
pub use redrive::*;
pub use schedule::*;
pub use send::*;
pub use settle::*;
pub use sluice_core::time::{parse_rfc3339, rfc3339};
pub use stats::*;
pub use summary::*;
pub use task::*;
pub use trace::TraceView;
