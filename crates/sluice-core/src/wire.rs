//! The JSON wire format of the HTTP API v1, shared by the server, the CLI and the
//! Rust SDK, and the conversions between it and the core types.
//!
//! Over 1,000 lines: newer views live in `wire/` (stats, redrive); the rest moves there by
//! concern in one restructuring, so the wire format is not reshuffled twice.
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

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use crate::config::{QueueConfig, QueueConfigPatch, QueueInfo, RateLimit};
use crate::error::{ErrorCode, StoreError};
use crate::message::{
    Attempt, AttemptOutcome, Attributes, Body, BodyKind, DeadLetterReason, Delivery, Message,
    MessageState, NewMessage,
};
use crate::name::QueueName;
use crate::stats::Totals;
use crate::store::{BrowsePage, BrowseState, NackOutcome};
use crate::time::Timestamp;

mod redrive;
mod stats;
pub use crate::wire_summary::{SummaryGroupView, SummaryQuery, SummaryView};
pub use redrive::RedriveGuardView;
pub use stats::{FlowView, RatesView, StatsView};

/// Any JSON value, kept as its exact text.
pub type JsonText = Box<RawValue>;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Formats a time as RFC 3339 (UTC).
pub fn rfc3339(t: Timestamp) -> String {
    let nanos = i128::from(t.as_millis()) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| t.as_millis().to_string())
}

/// Parses an RFC 3339 time.
///
/// # Errors
/// `InvalidArgument` naming `field` when `s` is not an RFC 3339 time.
pub fn parse_rfc3339(field: &str, s: &str) -> Result<Timestamp, StoreError> {
    let d = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            StoreError::invalid(format!(
                "{field} must be an RFC 3339 time like 2026-01-01T00:00:00Z, got \"{s}\": {e}"
            ))
        })?;
    let ms = d.unix_timestamp_nanos() / 1_000_000;
    i64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| StoreError::invalid(format!("{field} is out of range: \"{s}\"")))
}

/// Converts a `*_ms` field to a duration, refusing negative values.
///
/// # Errors
/// `InvalidArgument` naming `field` for a negative value.
pub fn millis(field: &str, ms: i64) -> Result<Duration, StoreError> {
    u64::try_from(ms).map(Duration::from_millis).map_err(|_| {
        StoreError::invalid(format!(
            "{field} must be a non-negative whole number of milliseconds, got {ms}"
        ))
    })
}

fn opt_millis(field: &str, ms: Option<i64>) -> Result<Option<Duration>, StoreError> {
    ms.map(|v| millis(field, v)).transpose()
}

/// A duration as whole milliseconds, saturating.
pub fn as_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn queue_name(field: &str, s: String) -> Result<QueueName, StoreError> {
    QueueName::new(s).map_err(|e| StoreError::invalid(format!("{field}: {e}")))
}

/// Deserializes a present field, even `null`, as `Some`: the outer `Option` says whether the
/// field was given, the inner value is what was given.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn decode_base64(field: &str, s: &str) -> Result<bytes::Bytes, StoreError> {
    STANDARD.decode(s).map(bytes::Bytes::from).map_err(|e| {
        StoreError::invalid(format!(
            "{field} is not valid base64 (standard alphabet with padding): {e}"
        ))
    })
}

/// The form a body (or result) takes on the wire, decided from its kind and its bytes.
pub(crate) enum BodyForm<'a> {
    /// `body`: the JSON value as it is (without surrounding whitespace).
    Json(&'a RawValue),
    /// `body` as a JSON string, with `body_encoding: "text"`.
    Text(&'a str),
    /// `body_base64`: binary, or stored bytes that do not match their kind (base64 is
    /// always faithful).
    Base64,
}

impl<'a> BodyForm<'a> {
    /// How `body` goes on the wire; a JSON body is checked, not copied.
    pub(crate) fn of(body: &'a Body) -> Self {
        match body.kind {
            BodyKind::Json => {
                serde_json::from_slice(&body.bytes).map_or(BodyForm::Base64, BodyForm::Json)
            }
            BodyKind::Text => {
                std::str::from_utf8(&body.bytes).map_or(BodyForm::Base64, BodyForm::Text)
            }
            BodyKind::Binary => BodyForm::Base64,
        }
    }
}

/// How a body (or result) is put on the wire: `(json, base64, encoding)`.
fn body_fields(body: &Body) -> (Option<JsonText>, Option<String>, Option<BodyEncoding>) {
    match BodyForm::of(body) {
        BodyForm::Json(raw) => (Some(raw.to_owned()), None, None),
        BodyForm::Text(text) => match serde_json::value::to_raw_value(text) {
            Ok(raw) => (Some(raw), None, Some(BodyEncoding::Text)),
            Err(_) => (None, Some(STANDARD.encode(&body.bytes)), None),
        },
        BodyForm::Base64 => (None, Some(STANDARD.encode(&body.bytes)), None),
    }
}

/// Builds a body from the JSON and base64 alternatives of a request.
fn body_from(
    field: &str,
    json: Option<JsonText>,
    base64: Option<String>,
    required: bool,
) -> Result<Option<Body>, StoreError> {
    match (json, base64) {
        (Some(_), Some(_)) => Err(StoreError::invalid(format!(
            "give either {field} (a JSON value) or {field}_base64 (bytes in base64), not both"
        ))),
        // The parsed value already owns its text: it becomes the body without a copy.
        (Some(j), None) => Ok(Some(Body::json(String::from(Box::<str>::from(j))))),
        (None, Some(b)) => Ok(Some(Body::binary(decode_base64(
            &format!("{field}_base64"),
            &b,
        )?))),
        (None, None) if required => Err(StoreError::invalid(format!(
            "missing {field}: give {field} (a JSON value) or {field}_base64 (bytes in base64)"
        ))),
        (None, None) => Ok(None),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorEnvelope {
    /// What went wrong.
    pub error: ErrorBody,
}

/// One error: a stable code and a human-readable message.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// One of `invalid_argument`, `unauthenticated`, `permission_denied`, `queue_not_found`,
    /// `message_not_found`, `receipt_stale`, `conflict`, `payload_too_large`,
    /// `idempotency_mismatch`, `rate_limited`, `queue_full`, `unavailable`.
    #[schema(example = "receipt_stale")]
    pub code: String,
    /// What happened and, where it helps, what to do about it.
    pub message: String,
}

impl ErrorEnvelope {
    /// An envelope for `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            error: ErrorBody::new(code, message),
        }
    }
}

impl ErrorBody {
    /// An error body for `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code: code.as_str().to_owned(),
            message: message.into(),
        }
    }
}

impl From<&StoreError> for ErrorBody {
    fn from(e: &StoreError) -> Self {
        ErrorBody::new(e.code(), e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------------

/// A delivery rate limit: at most `limit` deliveries in any window of `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitWire {
    /// Deliveries allowed per period (1 – 1,000,000).
    pub limit: u32,
    /// The window, in milliseconds (100 ms – 24 h).
    pub period_ms: i64,
}

/// `PUT /v1/queues/{q}`: every field optional; an absent field keeps its current value (or
/// the default on creation). For `dead_letter_queue`, `rate_limit`, `max_in_flight` and
/// `max_depth`, an explicit `null` clears the setting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfigRequest {
    /// Lease length, 0 – 12 h. Default 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_timeout_ms: Option<i64>,
    /// Deliveries before dead-lettering, 0 (unlimited) – 1000. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_receive_count: Option<u32>,
    /// The DLQ's name, or `null` for none (only with `max_receive_count` 0).
    /// Default `<name>.dlq`, created with the queue.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub dead_letter_queue: Option<Option<String>>,
    /// First retry delay after a nack, 0 – 12 h. Default 1 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_base_ms: Option<i64>,
    /// Cap on the retry delay, 0 – 12 h. Default 15 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_max_ms: Option<i64>,
    /// Default delivery delay of a sent message, 0 – 7 days. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// How long a message may stay before it expires, 1 min – 30 days. Default 4 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
    /// Largest body accepted, 1 B – 16 MiB. Default 256 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u32>,
    /// How long a `dedup_id` is remembered, 0 – 24 h. Default 5 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_window_ms: Option<i64>,
    /// Most messages in flight across all consumers (1 – 1,000,000), or `null` for no limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<u32>)]
    pub max_in_flight: Option<Option<u32>>,
    /// Backpressure: most messages visible + delayed + in flight (1 – 1,000,000,000), or
    /// `null` for no limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<u64>)]
    pub max_depth: Option<Option<u64>>,
    /// Delivery rate limit across all consumers, or `null` for none.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<RateLimitWire>)]
    pub rate_limit: Option<Option<RateLimitWire>>,
    /// How long completed records and results are kept, 0 – 7 days. Default 1 h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ttl_ms: Option<i64>,
    /// A paused queue accepts sends and delivers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl QueueConfigRequest {
    /// The core patch this request asks for. Ranges are checked by the store (which knows the
    /// current config); this refuses what cannot even be expressed (negative durations, bad
    /// queue names).
    ///
    /// # Errors
    /// `InvalidArgument` naming the field.
    pub fn to_patch(&self) -> Result<QueueConfigPatch, StoreError> {
        let rate_limit = match self.rate_limit {
            None => None,
            Some(None) => Some(None),
            Some(Some(r)) => Some(Some(RateLimit {
                limit: r.limit,
                period: millis("rate_limit.period_ms", r.period_ms)?,
            })),
        };
        let dead_letter_queue = match &self.dead_letter_queue {
            None => None,
            Some(None) => Some(None),
            Some(Some(n)) => Some(Some(queue_name("dead_letter_queue", n.clone())?)),
        };
        Ok(QueueConfigPatch {
            visibility_timeout: opt_millis("visibility_timeout_ms", self.visibility_timeout_ms)?,
            max_receive_count: self.max_receive_count,
            dead_letter_queue,
            backoff_base: opt_millis("backoff_base_ms", self.backoff_base_ms)?,
            backoff_max: opt_millis("backoff_max_ms", self.backoff_max_ms)?,
            delay: opt_millis("delay_ms", self.delay_ms)?,
            retention: opt_millis("retention_ms", self.retention_ms)?,
            max_message_bytes: self.max_message_bytes,
            dedup_window: opt_millis("dedup_window_ms", self.dedup_window_ms)?,
            rate_limit,
            max_in_flight: self.max_in_flight,
            max_depth: self.max_depth,
            result_ttl: opt_millis("result_ttl_ms", self.result_ttl_ms)?,
            paused: self.paused,
        })
    }
}

/// The full configuration of a queue. Its object is accepted as is by `PUT /v1/queues/{q}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueConfigView {
    /// Lease length.
    pub visibility_timeout_ms: u64,
    /// Deliveries before dead-lettering; 0 is unlimited.
    pub max_receive_count: u32,
    /// The DLQ, or `null`.
    pub dead_letter_queue: Option<String>,
    /// First retry delay.
    pub backoff_base_ms: u64,
    /// Retry delay cap.
    pub backoff_max_ms: u64,
    /// Default delivery delay.
    pub delay_ms: u64,
    /// Retention.
    pub retention_ms: u64,
    /// Largest body.
    pub max_message_bytes: u32,
    /// Dedup window.
    pub dedup_window_ms: u64,
    /// In-flight limit, or `null`.
    pub max_in_flight: Option<u32>,
    /// Depth limit, or `null`.
    pub max_depth: Option<u64>,
    /// Delivery rate limit, or `null`.
    pub rate_limit: Option<RateLimitWire>,
    /// How long completed records are kept.
    pub result_ttl_ms: u64,
    /// Paused.
    pub paused: bool,
}

impl From<&QueueConfig> for QueueConfigView {
    fn from(c: &QueueConfig) -> Self {
        QueueConfigView {
            visibility_timeout_ms: as_ms(c.visibility_timeout),
            max_receive_count: c.max_receive_count,
            dead_letter_queue: c.dead_letter_queue.as_ref().map(|q| q.to_string()),
            backoff_base_ms: as_ms(c.backoff_base),
            backoff_max_ms: as_ms(c.backoff_max),
            delay_ms: as_ms(c.delay),
            retention_ms: as_ms(c.retention),
            max_message_bytes: c.max_message_bytes,
            dedup_window_ms: as_ms(c.dedup_window),
            max_in_flight: c.max_in_flight,
            max_depth: c.max_depth,
            rate_limit: c.rate_limit.map(|r| RateLimitWire {
                limit: r.limit,
                period_ms: i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX),
            }),
            result_ttl_ms: as_ms(c.result_ttl),
            paused: c.paused,
        }
    }
}

/// A queue: its name, creation time and full configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    /// The queue's name.
    pub name: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Its configuration.
    pub config: QueueConfigView,
    /// Advice about the configuration just written (only on `PUT`), e.g. unlimited attempts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl From<&QueueInfo> for QueueView {
    fn from(q: &QueueInfo) -> Self {
        QueueView {
            name: q.name.to_string(),
            created_at: rfc3339(q.created_at),
            config: QueueConfigView::from(&q.config),
            warnings: Vec::new(),
        }
    }
}

/// `GET /v1/queues`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    /// Every queue the caller may see, by name.
    pub queues: Vec<QueueView>,
}

/// `POST /v1/queues/{q}/purge`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PurgeResponse {
    /// How many messages were removed.
    pub purged: u64,
}

// ---------------------------------------------------------------------------------------------
// Send
// ---------------------------------------------------------------------------------------------

/// One message of a send.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The body as any JSON value (kept as the exact JSON text).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub body: Option<JsonText>,
    /// The body as bytes, in base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// String attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
    /// Delivery delay (0 – 7 days); default the queue's `delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// A second send with this id inside the queue's dedup window stores nothing and returns
    /// the first message's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_id: Option<String>,
}

impl SendMessage {
    /// The core message.
    ///
    /// # Errors
    /// `InvalidArgument` for a missing or doubled body, bad base64, a negative delay or bad
    /// attributes.
    pub fn into_new_message(self) -> Result<NewMessage, StoreError> {
        let body = body_from("body", self.body, self.body_base64, true)?
            .ok_or_else(|| StoreError::invalid("missing body"))?;
        let m = NewMessage {
            body,
            attributes: self.attributes.unwrap_or_default(),
            delay: opt_millis("delay_ms", self.delay_ms)?,
            dedup_id: self.dedup_id,
        };
        m.validate()?;
        Ok(m)
    }
}

/// `POST /v1/queues/{q}/messages` with a JSON body: one message (`body` or `body_base64`
/// plus options at the top level) or a batch (`messages`, 1 – 1000, nothing else).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    /// One message: the body as any JSON value.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub body: Option<JsonText>,
    /// One message: the body as bytes in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// One message: string attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
    /// One message: delivery delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// One message: dedup id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_id: Option<String>,
    /// A batch of 1 – 1000 messages (16 MiB of bodies in all), stored all or nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<SendMessage>>,
}

impl SendRequest {
    /// The messages to send and whether the request was a batch (which answers with `ids`).
    ///
    /// # Errors
    /// `InvalidArgument` naming the message and field at fault.
    pub fn into_messages(self) -> Result<(Vec<NewMessage>, bool), StoreError> {
        use crate::config::limits::MAX_BATCH;
        match self.messages {
            Some(batch) => {
                if self.body.is_some()
                    || self.body_base64.is_some()
                    || self.attributes.is_some()
                    || self.delay_ms.is_some()
                    || self.dedup_id.is_some()
                {
                    return Err(StoreError::invalid(
                        "a batch send holds everything inside \"messages\"; body, body_base64, \
                         attributes, delay_ms and dedup_id are not allowed beside it",
                    ));
                }
                if batch.is_empty() || batch.len() > MAX_BATCH {
                    return Err(StoreError::invalid(format!(
                        "messages must hold 1 to {MAX_BATCH} messages, got {}",
                        batch.len()
                    )));
                }
                let msgs = batch
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        m.into_new_message().map_err(|e| match e {
                            StoreError::InvalidArgument(s) => {
                                StoreError::invalid(format!("messages[{i}]: {s}"))
                            }
                            other => other,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((msgs, true))
            }
            None => {
                let m = SendMessage {
                    body: self.body,
                    body_base64: self.body_base64,
                    attributes: self.attributes,
                    delay_ms: self.delay_ms,
                    dedup_id: self.dedup_id,
                }
                .into_new_message()?;
                Ok((vec![m], false))
            }
        }
    }
}

/// Options of a raw send (`application/octet-stream` or `text/plain` body), as query
/// parameters: `?delay_ms=&dedup_id=`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RawSendParams {
    /// Delivery delay of a raw send.
    pub delay_ms: Option<i64>,
    /// Dedup id of a raw send.
    pub dedup_id: Option<String>,
}

impl RawSendParams {
    /// True when no option is given.
    pub fn is_empty(&self) -> bool {
        self.delay_ms.is_none() && self.dedup_id.is_none()
    }

    /// The core message for a raw body.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative delay or a bad dedup id.
    pub fn into_new_message(self, body: Body) -> Result<NewMessage, StoreError> {
        let m = NewMessage {
            body,
            attributes: Attributes::new(),
            delay: opt_millis("delay_ms", self.delay_ms)?,
            dedup_id: self.dedup_id,
        };
        m.validate()?;
        Ok(m)
    }
}

/// Answer to a single send.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SendResponse {
    /// The message id (for a duplicate: the first message's id).
    pub id: String,
    /// True when a send with the same `dedup_id` inside the window already stored it.
    pub duplicate: bool,
}

/// Answer to a batch send.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SendBatchResponse {
    /// The ids, in request order.
    pub ids: Vec<String>,
    /// Per message, whether it was a duplicate.
    pub duplicates: Vec<bool>,
}

// ---------------------------------------------------------------------------------------------
// Receive
// ---------------------------------------------------------------------------------------------

/// `POST /v1/queues/{q}/receive`; every field optional (an empty body is allowed).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiveRequest {
    /// Most messages to lease, 1 – 1000. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// Long poll: how long to wait for a first message, 0 – 30000. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<i64>,
    /// Lease length for these deliveries, 0 – 12 h; default the queue's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_timeout_ms: Option<i64>,
    /// Who is receiving, recorded in the attempt history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Receipts to acknowledge before leasing (0 – 1000), exactly as `POST …/ack` with
    /// `receipts` would: a worker settles its last batch and takes the next in one round trip.
    /// The outcomes come back in the answer's `acked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<Vec<String>>,
}

impl ReceiveRequest {
    /// The acknowledgements this receive carries; `None` when there are none.
    ///
    /// # Errors
    /// `InvalidArgument` when there are more than the batch limit.
    pub fn acks(&mut self) -> Result<Option<Vec<AckItem>>, StoreError> {
        use crate::config::limits::MAX_BATCH;
        let Some(receipts) = self.ack.take().filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        if receipts.len() > MAX_BATCH {
            return Err(StoreError::invalid(format!(
                "`ack` holds at most {MAX_BATCH} receipts, got {}",
                receipts.len()
            )));
        }
        Ok(Some(receipts.into_iter().map(AckItem::plain).collect()))
    }

    /// The core request, validated.
    ///
    /// # Errors
    /// `InvalidArgument` naming the field.
    pub fn to_core(&self) -> Result<crate::store::ReceiveRequest, StoreError> {
        let req = crate::store::ReceiveRequest {
            max: self.max.unwrap_or(1),
            wait: opt_millis("wait_ms", self.wait_ms)?.unwrap_or(Duration::ZERO),
            visibility: opt_millis("visibility_timeout_ms", self.visibility_timeout_ms)?,
            consumer: self.consumer.clone(),
        };
        crate::store::validate_receive(&req)?;
        Ok(req)
    }
}

/// Marks a `body` (or `result`) that holds UTF-8 text rather than a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BodyEncoding {
    /// `body` is a JSON string holding the text that was sent as `text/plain`.
    Text,
}

/// One leased message.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// Message id.
    pub id: String,
    /// Names this delivery for ack, nack, reject, move and extend.
    pub receipt: String,
    /// The body when it was sent as JSON (or as text: see `body_encoding`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub body: Option<JsonText>,
    /// The body when it was sent as bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// `"text"` when `body` is a string holding a `text/plain` body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<BodyEncoding>,
    /// String attributes.
    pub attributes: BTreeMap<String, String>,
    /// Deliveries including this one.
    pub receive_count: u32,
    /// The queue's attempt limit (0 = unlimited).
    pub max_receive_count: u32,
    /// When it was first sent.
    pub enqueued_at: String,
    /// The last error reported for it.
    pub last_error: Option<String>,
    /// When this lease ends unless extended.
    pub lease_deadline: String,
}

impl From<&Delivery> for DeliveryView {
    fn from(d: &Delivery) -> Self {
        let (body, body_base64, body_encoding) = body_fields(&d.body);
        DeliveryView {
            id: d.id.to_string(),
            receipt: d.receipt.to_string(),
            body,
            body_base64,
            body_encoding,
            attributes: d.attributes.clone(),
            receive_count: d.receive_count,
            max_receive_count: d.max_receive_count,
            enqueued_at: rfc3339(d.enqueued_at),
            last_error: d.last_error.clone(),
            lease_deadline: rfc3339(d.lease_deadline),
        }
    }
}

/// Answer to a receive.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReceiveResponse {
    /// The leased messages; empty when none was ready within `wait_ms`.
    pub messages: Vec<DeliveryView>,
    /// One outcome per receipt of the request's `ack`, in its order; absent without `ack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked: Option<Vec<AckOutcome>>,
}

// ---------------------------------------------------------------------------------------------
// Ack, nack, reject, move, extend
// ---------------------------------------------------------------------------------------------

/// One acknowledgement of a batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    /// The delivery.
    pub receipt: String,
    /// A result (any JSON) kept with the completed record for the queue's `result_ttl`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub result: Option<JsonText>,
    /// A binary result in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_base64: Option<String>,
}

impl AckItem {
    /// An acknowledgement without a result.
    pub fn plain(receipt: String) -> Self {
        AckItem {
            receipt,
            result: None,
            result_base64: None,
        }
    }

    /// The result to keep.
    ///
    /// # Errors
    /// `InvalidArgument` for both forms at once or bad base64.
    pub fn take_result(&mut self) -> Result<Option<Body>, StoreError> {
        body_from(
            "result",
            self.result.take(),
            self.result_base64.take(),
            false,
        )
    }
}

/// `POST /v1/queues/{q}/ack`: one of `{"receipt", "result"?}`, `{"receipts": [...]}` or
/// `{"acks": [{"receipt", "result"?}]}`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    /// Single form: the delivery. A stale receipt answers 409 `receipt_stale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// Single form: a result (any JSON).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub result: Option<JsonText>,
    /// Single form: a binary result in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_base64: Option<String>,
    /// Batch form without results (1 – 1000); answers 200 with one outcome per receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipts: Option<Vec<String>>,
    /// Batch form with results (1 – 1000); answers 200 with one outcome per receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acks: Option<Vec<AckItem>>,
}

/// The shape of an ack request once its form is known.
#[derive(Debug)]
pub enum AckForm {
    /// One receipt: errors are the answer's status.
    Single(AckItem),
    /// A batch: each receipt gets its own outcome.
    Batch(Vec<AckItem>),
}

impl AckRequest {
    /// Which form this is.
    ///
    /// # Errors
    /// `InvalidArgument` when the forms are mixed, none is given or a batch is empty or over
    /// 1000.
    pub fn into_form(self) -> Result<AckForm, StoreError> {
        use crate::config::limits::MAX_BATCH;
        let single =
            self.receipt.is_some() || self.result.is_some() || self.result_base64.is_some();
        let forms = usize::from(single)
            + usize::from(self.receipts.is_some())
            + usize::from(self.acks.is_some());
        if forms != 1 {
            return Err(StoreError::invalid(
                "give exactly one of {\"receipt\", \"result\"?}, {\"receipts\": [...]} or \
                 {\"acks\": [{\"receipt\", \"result\"?}]}",
            ));
        }
        let batch = match (self.receipts, self.acks) {
            (Some(r), _) => r.into_iter().map(AckItem::plain).collect(),
            (_, Some(a)) => a,
            (None, None) => {
                let receipt = self
                    .receipt
                    .ok_or_else(|| StoreError::invalid("missing receipt"))?;
                return Ok(AckForm::Single(AckItem {
                    receipt,
                    result: self.result,
                    result_base64: self.result_base64,
                }));
            }
        };
        if batch.is_empty() || batch.len() > MAX_BATCH {
            return Err(StoreError::invalid(format!(
                "an ack batch holds 1 to {MAX_BATCH} receipts, got {}",
                batch.len()
            )));
        }
        Ok(AckForm::Batch(batch))
    }
}

/// Answer to a single ack.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AckResponse {
    /// The acknowledged message.
    pub id: String,
    /// Always `completed`.
    pub state: MessageStateView,
}

/// The outcome of one receipt of a batch ack.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AckOutcome {
    /// The receipt as given.
    pub receipt: String,
    /// True when it was acknowledged.
    pub ok: bool,
    /// Why not (e.g. `receipt_stale`), when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Answer to a batch ack: always 200, one outcome per receipt, in request order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AckBatchResponse {
    /// The outcomes.
    pub results: Vec<AckOutcome>,
    /// How many were acknowledged.
    pub acked: usize,
}

/// `POST /v1/queues/{q}/nack`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    /// The delivery.
    pub receipt: String,
    /// Retry after this delay (0 – 7 days) instead of the queue's backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// The error, stored as `last_error` and in the attempt history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who is reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

impl NackRequest {
    /// The delay asked for.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative delay.
    pub fn delay(&self) -> Result<Option<Duration>, StoreError> {
        opt_millis("delay_ms", self.delay_ms)
    }
}

/// Where a nacked, rejected or moved message is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureState {
    /// Visible again at once.
    Visible,
    /// Waiting for its retry delay.
    Delayed,
    /// In the dead-letter queue named by `queue`.
    DeadLettered,
}

/// Answer to a nack, reject or move.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailureResponse {
    /// Its state now.
    pub state: FailureState,
    /// The queue it is in now.
    pub queue: String,
}

impl From<&NackOutcome> for FailureResponse {
    fn from(n: &NackOutcome) -> Self {
        let state = match n.state {
            Some(MessageState::Delayed) => FailureState::Delayed,
            Some(_) => FailureState::Visible,
            None => FailureState::DeadLettered,
        };
        FailureResponse {
            state,
            queue: n.queue.to_string(),
        }
    }
}

/// `POST /v1/queues/{q}/reject`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectRequest {
    /// The delivery.
    pub receipt: String,
    /// Why it cannot be processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who is reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

/// `POST /v1/queues/{q}/release`: hand a delivery back without counting the attempt.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The delivery.
    pub receipt: String,
}

/// `POST /v1/queues/{q}/move`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    /// The delivery.
    pub receipt: String,
    /// The queue to move it to.
    pub to: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who is reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

impl MoveRequest {
    /// The destination queue.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad name.
    pub fn to_queue(&self) -> Result<QueueName, StoreError> {
        queue_name("to", self.to.clone())
    }
}

/// `POST /v1/queues/{q}/extend`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    /// The delivery.
    pub receipt: String,
    /// The lease ends this long from now (0 – 12 h).
    pub visibility_timeout_ms: i64,
}

impl ExtendRequest {
    /// The new lease length.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative or over-long duration.
    pub fn visibility(&self) -> Result<Duration, StoreError> {
        let v = millis("visibility_timeout_ms", self.visibility_timeout_ms)?;
        crate::store::validate_visibility(v)?;
        Ok(v)
    }
}

/// Answer to an extend.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExtendResponse {
    /// When the lease now ends (RFC 3339).
    pub lease_deadline: String,
    /// The task was cancelled: stop and settle it (ack or nack); it ends CANCELLED either way.
    pub cancel_requested: bool,
}

/// `POST /v1/queues/{q}/progress`: a running handler reports how far it got.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressRequest {
    /// The delivery.
    pub receipt: String,
    /// Percent done, 0 to 100.
    pub pct: f64,
    /// A short note (at most 1 KiB).
    pub detail: Option<String>,
}

/// Progress as task status and events show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProgressView {
    /// Percent done.
    pub pct: f64,
    /// The handler's note.
    pub detail: Option<String>,
    /// When it was reported (RFC 3339).
    pub at: String,
}

impl From<&crate::message::Progress> for ProgressView {
    fn from(p: &crate::message::Progress) -> Self {
        ProgressView {
            pct: p.pct,
            detail: p.detail.clone(),
            at: rfc3339(p.at),
        }
    }
}

/// Parses a receipt string.
///
/// # Errors
/// `InvalidArgument` for a malformed receipt.
pub fn parse_receipt(s: &str) -> Result<crate::receipt::Receipt, StoreError> {
    s.parse()
}

// ---------------------------------------------------------------------------------------------
// Browse and messages
// ---------------------------------------------------------------------------------------------

/// Which messages a browse lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BrowseStateWire {
    /// Ready to be received, in delivery order.
    Visible,
    /// Waiting for a delay, soonest first.
    Delayed,
    /// Leased, soonest lease end first.
    InFlight,
    /// All, oldest first.
    #[default]
    All,
}

impl From<BrowseStateWire> for BrowseState {
    fn from(s: BrowseStateWire) -> Self {
        match s {
            BrowseStateWire::Visible => BrowseState::Visible,
            BrowseStateWire::Delayed => BrowseState::Delayed,
            BrowseStateWire::InFlight => BrowseState::InFlight,
            BrowseStateWire::All => BrowseState::All,
        }
    }
}

/// `GET /v1/queues/{q}/messages?state=&limit=&cursor=`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BrowseQuery {
    /// `visible`, `delayed`, `in_flight` or `all` (default).
    pub state: Option<BrowseStateWire>,
    /// Page size, 1 – 1000. Default 100.
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only messages whose `last_error` contains this text.
    #[serde(default)]
    pub error_contains: Option<String>,
    /// Only messages with this attribute value, written `key=value`.
    #[serde(default)]
    pub attribute: Option<String>,
    /// Only messages dead-lettered before this time: RFC 3339, or how long ago (`10m`,
    /// `1h`, `90s`, `2d`).
    #[serde(default)]
    pub dead_lettered_before: Option<String>,
    /// Only messages dead-lettered at or after this time: RFC 3339, or how long ago (`10m`,
    /// `1h`, `90s`, `2d`).
    #[serde(default)]
    pub dead_lettered_after: Option<String>,
}

impl BrowseQuery {
    /// The filter of the query, when it has one.
    ///
    /// # Errors
    /// `InvalidArgument` for an attribute not written `key=value` or a time not RFC 3339.
    pub fn filter(&self) -> Result<Option<crate::redrive::RedriveFilter>, StoreError> {
        let mut attributes = Attributes::new();
        if let Some(a) = &self.attribute {
            let (k, v) = a.split_once('=').ok_or_else(|| {
                StoreError::invalid(format!("attribute must be written key=value, got \"{a}\""))
            })?;
            attributes.insert(k.to_string(), v.to_string());
        }
        // A person types these: RFC 3339, or how long ago (`10m`).
        let now = crate::time::Clock::now(&crate::time::SystemClock);
        let time = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(|s| crate::human::parse_time(field, s, now).map(rfc3339))
                .transpose()
        };
        let view = RedriveFilterView {
            error_contains: self.error_contains.clone(),
            attributes,
            dead_lettered_before: time("dead_lettered_before", &self.dead_lettered_before)?,
            dead_lettered_after: time("dead_lettered_after", &self.dead_lettered_after)?,
        };
        let filter = view.to_core()?;
        Ok((filter != crate::redrive::RedriveFilter::default()).then_some(filter))
    }

    /// The core request, validated.
    ///
    /// # Errors
    /// `InvalidArgument` for a limit out of range.
    pub fn to_core(&self) -> Result<crate::store::BrowseRequest, StoreError> {
        let limit = self.limit.unwrap_or(100);
        crate::store::validate_limit(limit)?;
        Ok(crate::store::BrowseRequest {
            state: self.state.unwrap_or_default().into(),
            limit,
            cursor: self.cursor.clone(),
        })
    }
}

/// A message's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStateView {
    /// Waiting for a delay or retry backoff.
    Delayed,
    /// Ready to be received.
    Visible,
    /// Leased.
    InFlight,
    /// Acknowledged; the record is kept for `result_ttl`.
    Completed,
}

impl From<MessageState> for MessageStateView {
    fn from(s: MessageState) -> Self {
        match s {
            MessageState::Delayed => MessageStateView::Delayed,
            MessageState::Visible => MessageStateView::Visible,
            MessageState::InFlight => MessageStateView::InFlight,
            MessageState::Completed => MessageStateView::Completed,
        }
    }
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReasonView {
    /// Nacked on its last allowed attempt.
    Exhausted,
    /// Its lease expired on its last allowed attempt.
    LeaseExpired,
    /// Rejected by a consumer.
    Rejected,
    /// Outlived its queue's retention.
    Expired,
}

impl From<DeadLetterReason> for DeadLetterReasonView {
    fn from(r: DeadLetterReason) -> Self {
        match r {
            DeadLetterReason::Exhausted => DeadLetterReasonView::Exhausted,
            DeadLetterReason::LeaseExpired => DeadLetterReasonView::LeaseExpired,
            DeadLetterReason::Rejected => DeadLetterReasonView::Rejected,
            DeadLetterReason::Expired => DeadLetterReasonView::Expired,
        }
    }
}

/// How one delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcomeView {
    /// Nacked.
    Nacked,
    /// The lease ran out.
    LeaseExpired,
    /// Rejected.
    Rejected,
    /// Moved to another queue.
    Moved,
}

impl From<AttemptOutcome> for AttemptOutcomeView {
    fn from(o: AttemptOutcome) -> Self {
        match o {
            AttemptOutcome::Nacked => AttemptOutcomeView::Nacked,
            AttemptOutcome::LeaseExpired => AttemptOutcomeView::LeaseExpired,
            AttemptOutcome::Rejected => AttemptOutcomeView::Rejected,
            AttemptOutcome::Moved => AttemptOutcomeView::Moved,
        }
    }
}

/// One finished delivery that did not succeed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// When it ended.
    pub at: String,
    /// How it ended.
    pub outcome: AttemptOutcomeView,
    /// The error reported.
    pub error: Option<String>,
    /// The consumer that held it.
    pub consumer: Option<String>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            at: rfc3339(a.at),
            outcome: a.outcome.into(),
            error: a.error.clone(),
            consumer: a.consumer.clone(),
        }
    }
}

/// A message as browse and `GET /v1/messages/{id}` show it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageView {
    /// Message id.
    pub id: String,
    /// The queue it is in now.
    pub queue: String,
    /// Its state in the queue it is in now. A dead letter is `visible` in its DLQ (it can be
    /// received from there); `dead_lettered` tells it apart.
    pub state: MessageStateView,
    /// True while it sits in a dead-letter queue (`queue`), put there for
    /// `dead_letter_reason`; false once redriven, moved or never dead-lettered.
    #[serde(default)]
    pub dead_lettered: bool,
    /// The body when sent as JSON or text (absent for a completed record).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub body: Option<JsonText>,
    /// The body when sent as bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// `"text"` when `body` holds a text body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<BodyEncoding>,
    /// String attributes.
    pub attributes: BTreeMap<String, String>,
    /// When it was first sent.
    pub enqueued_at: String,
    /// When it entered the queue it is in now (its send, dead-lettering, move or redrive).
    #[serde(default)]
    pub entered_at: String,
    /// When it becomes visible (delayed) or its lease ends (in flight).
    pub visible_at: Option<String>,
    /// Deliveries so far.
    pub receive_count: u32,
    /// The last error reported.
    pub last_error: Option<String>,
    /// The newest finished attempts, oldest first (at most 20).
    pub attempts: Vec<AttemptView>,
    /// The dedup id it was sent with.
    pub dedup_id: Option<String>,
    /// The queue it was dead-lettered or moved from.
    pub source_queue: Option<String>,
    /// Why it is in a DLQ, while it is.
    pub dead_letter_reason: Option<DeadLetterReasonView>,
    /// When it was dead-lettered.
    pub dead_lettered_at: Option<String>,
    /// The stored result of a completed message, when JSON or text.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Value>)]
    pub result: Option<JsonText>,
    /// The stored result when binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_base64: Option<String>,
    /// `"text"` when `result` holds text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_encoding: Option<BodyEncoding>,
    /// When it was acknowledged.
    pub completed_at: Option<String>,
    /// Cancellation was requested (running) or the task ended cancelled (completed).
    pub cancelled: bool,
    /// The last progress its running handler reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
}

impl From<&Message> for MessageView {
    fn from(m: &Message) -> Self {
        let (body, body_base64, body_encoding) = m
            .body
            .as_ref()
            .map(body_fields)
            .unwrap_or((None, None, None));
        let (result, result_base64, result_encoding) = m
            .result
            .as_ref()
            .map(body_fields)
            .unwrap_or((None, None, None));
        MessageView {
            id: m.id.to_string(),
            queue: m.queue.to_string(),
            state: m.state.into(),
            dead_lettered: m.dead_letter.is_some(),
            body,
            body_base64,
            body_encoding,
            attributes: m.attributes.clone(),
            enqueued_at: rfc3339(m.enqueued_at),
            entered_at: rfc3339(m.entered_at),
            visible_at: m.visible_at.map(rfc3339),
            receive_count: m.receive_count,
            last_error: m.last_error.clone(),
            attempts: m.attempts.iter().map(AttemptView::from).collect(),
            dedup_id: m.dedup_id.clone(),
            source_queue: m.source_queue.as_ref().map(|q| q.to_string()),
            dead_letter_reason: m.dead_letter.as_ref().map(|d| d.reason.into()),
            dead_lettered_at: m.dead_letter.as_ref().map(|d| rfc3339(d.at)),
            result,
            result_base64,
            result_encoding,
            completed_at: m.completed_at.map(rfc3339),
            cancelled: m.cancelled,
            progress: m.progress.as_ref().map(ProgressView::from),
        }
    }
}

/// One page of a browse.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BrowseResponse {
    /// The messages.
    pub messages: Vec<MessageView>,
    /// Pass as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

impl From<&BrowsePage> for BrowseResponse {
    fn from(p: &BrowsePage) -> Self {
        BrowseResponse {
            messages: p.messages.iter().map(MessageView::from).collect(),
            next_cursor: p.next_cursor.clone(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Stats
// ---------------------------------------------------------------------------------------------

/// Event totals since the queue was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TotalsView {
    /// Messages stored by send.
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Acknowledgements.
    pub acked: u64,
    /// Nacks.
    pub nacked: u64,
    /// Messages sent to the DLQ.
    pub dead_lettered: u64,
    /// Messages redriven into this queue.
    pub redriven: u64,
    /// Messages that outlived retention.
    pub expired: u64,
}

impl From<&Totals> for TotalsView {
    fn from(t: &Totals) -> Self {
        TotalsView {
            sent: t.sent,
            received: t.received,
            acked: t.acked,
            nacked: t.nacked,
            dead_lettered: t.dead_lettered,
            redriven: t.redriven,
            expired: t.expired,
        }
    }
}

/// `GET /v1/tasks/{id}`: the status of a task (SPEC §6).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    /// Task id (its message id).
    pub id: String,
    /// `PENDING`, `STARTED`, `RETRY`, `SUCCESS`, `FAILURE`, `UNKNOWN` or `CANCELLED`.
    #[schema(value_type = String, example = "SUCCESS")]
    pub status: crate::task::TaskStatus,
    /// The queue it is in now (absent when unknown).
    pub queue: Option<String>,
    /// Deliveries so far.
    pub receive_count: u32,
    /// The result of a successful task, when JSON or text.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub result: Option<JsonText>,
    /// The result when binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_base64: Option<String>,
    /// `"text"` when `result` holds text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_encoding: Option<BodyEncoding>,
    /// The last error of a failed or retrying task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last progress its running handler reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
}

impl TaskView {
    /// The view of a task whose message is `m`.
    pub fn of(m: &Message) -> Self {
        let (result, result_base64, result_encoding) = m
            .result
            .as_ref()
            .map(body_fields)
            .unwrap_or((None, None, None));
        TaskView {
            id: m.id.to_string(),
            status: crate::task::TaskStatus::of(m),
            queue: Some(m.queue.to_string()),
            receive_count: m.receive_count,
            result,
            result_base64,
            result_encoding,
            error: m.last_error.clone(),
            progress: m.progress.as_ref().map(ProgressView::from),
        }
    }

    /// The view of an id nothing is known about.
    pub fn unknown(id: crate::message::MessageId) -> Self {
        TaskView {
            id: id.to_string(),
            status: crate::task::TaskStatus::Unknown,
            queue: None,
            receive_count: 0,
            result: None,
            result_base64: None,
            result_encoding: None,
            error: None,
            progress: None,
        }
    }
}

/// Query of `GET /v1/tasks/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskQuery {
    /// Long poll: wait up to this many ms (at most 30000) for the task to become final.
    #[param(default = 0, maximum = 30_000)]
    pub wait_ms: Option<u64>,
}

/// Query of `GET /v1/queues/{q}/scaling`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScalingQuery {
    /// How many waiting or running tasks one worker should carry (1 to 1000000; default 1).
    #[serde(default = "one")]
    #[param(default = 1, minimum = 1, maximum = 1_000_000)]
    pub per_worker: u64,
}

impl Default for ScalingQuery {
    fn default() -> Self {
        ScalingQuery { per_worker: one() }
    }
}

fn one() -> u64 {
    1
}

/// `GET /v1/queues/{q}/scaling`: how many workers the queue wants, for KEDA-style and Ray
/// Serve autoscalers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScalingView {
    /// `ceil((backlog + in_flight) / per_worker)`; 0 when the queue is idle.
    pub desired_workers: u64,
    /// Visible messages.
    pub backlog: u64,
    /// Leased messages.
    pub in_flight: u64,
}

/// One point of a queue's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SampleView {
    /// When it was taken (RFC 3339).
    pub at: String,
    /// Visible messages.
    pub visible: u64,
    /// Delayed messages.
    pub delayed: u64,
    /// Leased messages.
    pub in_flight: u64,
    /// Messages in its DLQ.
    pub dead_letter_depth: u64,
    /// Age of the longest-waiting visible message.
    pub oldest_visible_age_ms: u64,
    /// Event totals at that time.
    pub totals: TotalsView,
}

impl From<&crate::stats::StatsSample> for SampleView {
    fn from(s: &crate::stats::StatsSample) -> Self {
        SampleView {
            at: rfc3339(s.at),
            visible: s.visible,
            delayed: s.delayed,
            in_flight: s.in_flight,
            dead_letter_depth: s.dead_letter_depth,
            oldest_visible_age_ms: s.oldest_visible_age_ms,
            totals: TotalsView::from(&s.totals),
        }
    }
}

/// Query of `GET /v1/queues/{q}/stats/history`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Points at or after this time: RFC 3339 (`2026-01-01T10:00:00Z`), or how long ago
    /// (`10m`, `1h`, `90s`, `2d`); default: one hour ago.
    pub since: Option<String>,
}

/// `GET /v1/queues/{q}/stats/history`: a point every 10 s, kept for 24 h.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryView {
    /// The queue.
    pub queue: String,
    /// Time between points.
    pub interval_ms: u64,
    /// The points, oldest first.
    pub samples: Vec<SampleView>,
}

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// `ok` (alive) or `ready` (the store answers).
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_keeps_json_text_exact() {
        let req: SendRequest =
            serde_json::from_str(r#"{"body": {"b": 1,  "a": [1.50, "x"]}}"#).unwrap();
        let (msgs, batch) = req.into_messages().unwrap();
        assert!(!batch);
        assert_eq!(&msgs[0].body.bytes[..], br#"{"b": 1,  "a": [1.50, "x"]}"#);
    }

    #[test]
    fn null_body_is_a_json_null_not_a_missing_body() {
        let req: SendRequest = serde_json::from_str(r#"{"body": null}"#).unwrap();
        let (msgs, _) = req.into_messages().unwrap();
        assert_eq!(&msgs[0].body.bytes[..], b"null");
    }

    #[test]
    fn bodies_come_back_in_their_form() {
        let text = Body::text("héllo \"x\"");
        let (j, b, e) = body_fields(&text);
        assert_eq!(j.unwrap().get(), r#""héllo \"x\"""#);
        assert!(b.is_none());
        assert_eq!(e, Some(BodyEncoding::Text));
        let bin = Body::binary(vec![0xff, 0x00, 0xfe]);
        let (j, b, _) = body_fields(&bin);
        assert!(j.is_none());
        assert_eq!(b.unwrap(), "/wD+");
    }

    #[test]
    fn unknown_fields_and_negative_durations_are_refused() {
        assert!(
            serde_json::from_str::<QueueConfigRequest>(r#"{"visiblity_timeout_ms": 1}"#).is_err()
        );
        let req: QueueConfigRequest =
            serde_json::from_str(r#"{"visibility_timeout_ms": -1}"#).unwrap();
        assert!(req.to_patch().is_err());
        let req: QueueConfigRequest =
            serde_json::from_str(r#"{"dead_letter_queue": null, "max_depth": null}"#).unwrap();
        let p = req.to_patch().unwrap();
        assert_eq!(p.dead_letter_queue, Some(None));
        assert_eq!(p.max_depth, Some(None));
        assert_eq!(p.max_in_flight, None);
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(
            rfc3339(Timestamp(1_767_225_600_250)),
            "2026-01-01T00:00:00.25Z"
        );
        assert_eq!(
            parse_rfc3339("t", "2026-01-01T00:00:00.25Z").unwrap(),
            Timestamp(1_767_225_600_250)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Redrive jobs (SPEC §5)
// ---------------------------------------------------------------------------------------------

/// The message filter of a redrive job; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveFilterView {
    /// `last_error` contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_contains: Option<String>,
    /// Every one of these attributes has exactly this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Dead-lettered before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered_before: Option<String>,
    /// Dead-lettered at or after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered_after: Option<String>,
}

impl RedriveFilterView {
    /// The core filter.
    ///
    /// # Errors
    /// `InvalidArgument` for a time that is not RFC 3339.
    pub fn to_core(&self) -> Result<crate::redrive::RedriveFilter, StoreError> {
        Ok(crate::redrive::RedriveFilter {
            error_contains: self.error_contains.clone(),
            attributes: self.attributes.clone(),
            dead_lettered_before: self
                .dead_lettered_before
                .as_deref()
                .map(|s| parse_rfc3339("filter.dead_lettered_before", s))
                .transpose()?,
            dead_lettered_after: self
                .dead_lettered_after
                .as_deref()
                .map(|s| parse_rfc3339("filter.dead_lettered_after", s))
                .transpose()?,
        })
    }
}

impl From<&crate::redrive::RedriveFilter> for RedriveFilterView {
    fn from(f: &crate::redrive::RedriveFilter) -> Self {
        RedriveFilterView {
            error_contains: f.error_contains.clone(),
            attributes: f.attributes.clone(),
            dead_lettered_before: f.dead_lettered_before.map(rfc3339),
            dead_lettered_after: f.dead_lettered_after.map(rfc3339),
        }
    }
}

/// `POST /v1/redrives`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    /// The dead-letter queue to move from.
    pub source: String,
    /// Where to; absent sends each message back to its own `source_queue`.
    #[serde(default)]
    pub destination: Option<String>,
    /// Move at most this many.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Never more than `limit` moves in any sliding `period_ms`, spread evenly: e.g.
    /// `{"limit": 50, "period_ms": 60000}` for 50 a minute (at most 100,000 a second).
    #[serde(default)]
    pub rate: Option<RateLimitWire>,
    /// The same as `rate` with a period of one second (1 to 100000); give one or the other.
    #[serde(default)]
    pub rate_per_second: Option<u32>,
    /// Which messages.
    #[serde(default)]
    pub filter: Option<RedriveFilterView>,
    /// Pause the job when too many of the messages it moved fail again.
    #[serde(default)]
    pub pause_if_failing: Option<RedriveGuardView>,
    /// Start the moved messages' attempt count afresh (default true).
    #[serde(default)]
    pub reset_receive_count: Option<bool>,
    /// Count what would move, move nothing (default false).
    #[serde(default)]
    pub dry_run: Option<bool>,
}

impl RedriveRequest {
    /// The core spec.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad queue name, time or number.
    pub fn to_core(&self) -> Result<crate::redrive::RedriveSpec, StoreError> {
        let spec = crate::redrive::RedriveSpec {
            source: QueueName::new(self.source.clone())?,
            destination: self.destination.clone().map(QueueName::new).transpose()?,
            limit: self.limit,
            rate: match (&self.rate, self.rate_per_second) {
                (Some(_), Some(_)) => {
                    return Err(StoreError::invalid(
                        "give either rate or rate_per_second, not both",
                    ));
                }
                (Some(r), None) => Some(redrive::rate_to_core(r)?),
                (None, r) => r.map(RateLimit::per_second),
            },
            filter: self
                .filter
                .as_ref()
                .map(RedriveFilterView::to_core)
                .transpose()?
                .unwrap_or_default(),
            reset_receive_count: self.reset_receive_count.unwrap_or(true),
            dry_run: self.dry_run.unwrap_or(false),
            guard: self.pause_if_failing.as_ref().map(Into::into),
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// A redrive job and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RedriveView {
    /// Job id.
    pub id: String,
    /// `running`, `paused`, `completed` or `cancelled`.
    pub state: String,
    /// Why it is paused, while it is (by an operator, or by its guard with the failures seen).
    #[serde(default)]
    pub paused_reason: Option<String>,
    /// The dead-letter queue it moves from.
    pub source: String,
    /// Where to (absent: each message's `source_queue`).
    pub destination: Option<String>,
    /// Messages that matched so far (for a dry run: what would move).
    pub matched: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// Matching messages left in place: no `source_queue` and no destination, or their
    /// destination no longer exists.
    pub skipped: u64,
    /// Why it is waiting, while it is.
    pub blocked: Option<String>,
    /// The limit asked for.
    pub limit: Option<u64>,
    /// The rate asked for.
    #[serde(default)]
    pub rate: Option<RateLimitWire>,
    /// The rate asked for, when it is a whole number per second.
    pub rate_per_second: Option<u32>,
    /// The filter asked for.
    pub filter: RedriveFilterView,
    /// The guard asked for.
    #[serde(default)]
    pub pause_if_failing: Option<RedriveGuardView>,
    /// Whether attempt counts start afresh.
    pub reset_receive_count: bool,
    /// A dry run moves nothing.
    pub dry_run: bool,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it finished.
    pub finished_at: Option<String>,
}

impl From<&crate::redrive::RedriveJob> for RedriveView {
    fn from(j: &crate::redrive::RedriveJob) -> Self {
        RedriveView {
            id: j.id.to_string(),
            state: j.state.as_str().to_string(),
            paused_reason: j.paused_reason.clone(),
            source: j.spec.source.to_string(),
            destination: j.spec.destination.as_ref().map(|d| d.to_string()),
            matched: j.matched,
            moved: j.moved,
            skipped: j.skipped,
            blocked: j.blocked.clone(),
            limit: j.spec.limit,
            rate: j.spec.rate.as_ref().map(redrive::rate_to_wire),
            rate_per_second: j
                .spec
                .rate
                .filter(|r| r.period == Duration::from_secs(1))
                .map(|r| r.limit),
            filter: RedriveFilterView::from(&j.spec.filter),
            pause_if_failing: j.spec.guard.as_ref().map(RedriveGuardView::from),
            reset_receive_count: j.spec.reset_receive_count,
            dry_run: j.spec.dry_run,
            created_at: rfc3339(j.created_at),
            updated_at: rfc3339(j.updated_at),
            finished_at: j.finished_at.map(rfc3339),
        }
    }
}

/// `GET /v1/redrives`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RedriveList {
    /// Running jobs and the most recent finished ones, newest first.
    pub redrives: Vec<RedriveView>,
}
