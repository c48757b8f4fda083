//! Bodies going out ([`OutgoingMessage`]) and coming back ([`DecodedBody`]).
//!
//! A body is sent in one of three forms and comes back in the same form:
//! JSON (kept as the exact JSON text), text (UTF-8, sent as `text/plain`) and bytes (sent as
//! `application/octet-stream` or base64).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use sluice_wire::{
    BodyEncoding, DeliveryView, JsonText, MessageView, SendMessage, TaskView, TraceView,
};

use crate::error::{Error, Result};
use crate::json::to_raw;

/// A body as the broker returns it, in the form it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedBody {
    /// A JSON value, as its exact text.
    Json(String),
    /// UTF-8 text (sent as `text/plain`).
    Text(String),
    /// Bytes (sent as `application/octet-stream` or base64).
    Bytes(Vec<u8>),
}

impl DecodedBody {
    /// Builds a body from the wire fields `body`, `body_base64` and `body_encoding` (or the
    /// `result*` fields). `None` when neither form is present.
    ///
    /// # Errors
    /// [`Error::Decode`] for bad base64 or a text body that is not a JSON string.
    pub fn from_wire(
        json: Option<&RawValue>,
        base64: Option<&str>,
        encoding: Option<BodyEncoding>,
    ) -> Result<Option<DecodedBody>> {
        if let Some(b) = base64 {
            return STANDARD
                .decode(b)
                .map(|v| Some(DecodedBody::Bytes(v)))
                .map_err(|e| Error::decode("body_base64", e));
        }
        match (json, encoding) {
            (None, _) => Ok(None),
            (Some(j), Some(BodyEncoding::Text)) => serde_json::from_str::<String>(j.get())
                .map(|s| Some(DecodedBody::Text(s)))
                .map_err(|e| Error::decode("text body", e)),
            (Some(j), None) => Ok(Some(DecodedBody::Json(j.get().to_owned()))),
        }
    }

    /// The body's bytes: the JSON text, the text, or the bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            DecodedBody::Json(s) | DecodedBody::Text(s) => s.as_bytes(),
            DecodedBody::Bytes(b) => b,
        }
    }

    /// Parses a JSON body into `T`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the body is not JSON or does not fit `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        match self {
            DecodedBody::Json(s) => {
                serde_json::from_str(s).map_err(|e| Error::decode("JSON body does not fit", e))
            }
            DecodedBody::Text(_) => Err(Error::Decode(
                "the body was sent as text, not JSON".to_owned(),
            )),
            DecodedBody::Bytes(_) => Err(Error::Decode(
                "the body was sent as bytes, not JSON".to_owned(),
            )),
        }
    }
}

/// Reading the body of a delivery or a message.
pub trait BodyExt {
    /// The body in the form it was sent.
    ///
    /// # Errors
    /// [`Error::Decode`] when the answer carries no body or a malformed one.
    fn decoded_body(&self) -> Result<DecodedBody>;

    /// The body parsed as JSON into `T`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the body is not JSON or does not fit `T`.
    fn body_json<T: DeserializeOwned>(&self) -> Result<T> {
        self.decoded_body()?.json()
    }
}

impl BodyExt for DeliveryView {
    fn decoded_body(&self) -> Result<DecodedBody> {
        DecodedBody::from_wire(
            self.body.as_deref(),
            self.body_base64.as_deref(),
            self.body_encoding,
        )?
        .ok_or_else(|| Error::Decode("delivery without a body".to_owned()))
    }
}

impl BodyExt for MessageView {
    fn decoded_body(&self) -> Result<DecodedBody> {
        DecodedBody::from_wire(
            self.body.as_deref(),
            self.body_base64.as_deref(),
            self.body_encoding,
        )?
        .ok_or_else(|| {
            Error::Decode(format!(
                "message {} has no body (a completed record keeps only its result)",
                self.id
            ))
        })
    }
}

/// Reading a stored result.
pub trait ResultExt {
    /// The stored result, if any, in the form it was given.
    ///
    /// # Errors
    /// [`Error::Decode`] for a malformed result.
    fn decoded_result(&self) -> Result<Option<DecodedBody>>;
}

impl ResultExt for MessageView {
    fn decoded_result(&self) -> Result<Option<DecodedBody>> {
        DecodedBody::from_wire(
            self.result.as_deref(),
            self.result_base64.as_deref(),
            self.result_encoding,
        )
    }
}

impl ResultExt for TaskView {
    fn decoded_result(&self) -> Result<Option<DecodedBody>> {
        DecodedBody::from_wire(
            self.result.as_deref(),
            self.result_base64.as_deref(),
            self.result_encoding,
        )
    }
}

#[derive(Debug, Clone)]
pub(crate) enum OutBody {
    Json(JsonText),
    Text(String),
    Bytes(Bytes),
}

/// A message to send: a body plus optional attributes, delay and dedup id.
///
/// ```
/// # fn f() -> Result<(), sluice_client::Error> {
/// use std::time::Duration;
/// let m = sluice_client::OutgoingMessage::json(&serde_json::json!({"order": 42}))?
///     .attribute("tenant", "acme")
///     .delay(Duration::from_secs(10))
///     .dedup_id("order-42");
/// # let _ = m; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OutgoingMessage {
    pub(crate) body: OutBody,
    pub(crate) attributes: BTreeMap<String, String>,
    pub(crate) delay: Option<Duration>,
    pub(crate) dedup_id: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) priority: Option<u8>,
    pub(crate) trace: Option<TraceView>,
}

impl OutgoingMessage {
    fn with_body(body: OutBody) -> Self {
        OutgoingMessage {
            body,
            attributes: BTreeMap::new(),
            delay: None,
            dedup_id: None,
            group: None,
            key: None,
            priority: None,
            trace: None,
        }
    }

    /// A JSON body serialized from `value`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `value` cannot be JSON: a NaN or infinite float, a map
    /// with non-string keys, or a failing `Serialize` implementation.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        Ok(OutgoingMessage::with_body(OutBody::Json(to_raw(
            "body", value,
        )?)))
    }

    /// A JSON body given as text, kept exactly as written.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `text` is not one JSON value.
    pub fn json_text(text: impl Into<String>) -> Result<Self> {
        let raw = RawValue::from_string(text.into()).map_err(|e| {
            Error::InvalidInput(format!(
                "body is not valid JSON ({e}); send it as text or bytes instead"
            ))
        })?;
        Ok(OutgoingMessage::with_body(OutBody::Json(raw)))
    }

    /// A text body. Sent alone it goes as `text/plain` and comes back as text; with
    /// attributes, or in a batch, the JSON API cannot mark text, so it goes as a JSON string.
    pub fn text(text: impl Into<String>) -> Self {
        OutgoingMessage::with_body(OutBody::Text(text.into()))
    }

    /// A binary body, kept byte-exact and returned as `body_base64`.
    pub fn bytes(bytes: impl Into<Bytes>) -> Self {
        OutgoingMessage::with_body(OutBody::Bytes(bytes.into()))
    }

    /// Adds a string attribute.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// Delays delivery (0 – 7 days); the queue's `delay` otherwise.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// A second send with this id inside the queue's dedup window stores nothing and returns
    /// the first message's id. It also makes the send safe to retry.
    pub fn dedup_id(mut self, id: impl Into<String>) -> Self {
        self.dedup_id = Some(id.into());
        self
    }

    /// Puts the message in a FIFO message group (1 – 128 characters, no control characters;
    /// checked by the broker): messages of one group are delivered in send order, at most
    /// the queue's `max_in_flight_per_group` (default 1) at a time.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Gives the message a key: the tenant, customer or account it belongs to (1 – 128
    /// characters, no control characters; checked by the broker). Deliveries go round-robin
    /// across a queue's keys, so one key's backlog does not hold the others back.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the priority, 0 – 9 (9 most urgent; checked by the broker): a visible message of a
    /// higher priority is delivered before any of a lower one. The queue's `default_priority`
    /// otherwise.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Carries W3C trace context (a `traceparent`, and a `tracestate` if any; checked by the
    /// broker): the broker keeps it with the message and hands it to every consumer, so that
    /// their spans join the trace of the span that sent it.
    pub fn trace(mut self, traceparent: impl Into<String>, tracestate: Option<String>) -> Self {
        self.trace = Some(TraceView {
            traceparent: traceparent.into(),
            tracestate,
        });
        self
    }

    /// The JSON-API form of this message.
    pub(crate) fn to_wire(&self) -> Result<SendMessage> {
        let (body, body_base64) = match &self.body {
            OutBody::Json(j) => (Some(j.clone()), None),
            OutBody::Text(t) => (Some(to_raw("body", t)?), None),
            OutBody::Bytes(b) => (None, Some(STANDARD.encode(b))),
        };
        Ok(SendMessage {
            body,
            body_base64,
            attributes: (!self.attributes.is_empty()).then(|| self.attributes.clone()),
            delay_ms: self.delay.map(crate::client::ms),
            dedup_id: self.dedup_id.clone(),
            group: self.group.clone(),
            key: self.key.clone(),
            priority: self.priority,
            trace: self.trace.clone(),
        })
    }
}
