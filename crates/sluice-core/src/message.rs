//! Messages, their bodies, states and attempt history.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::limits;
use crate::error::StoreError;
use crate::fair::MessageKey;
use crate::group::GroupName;
use crate::name::QueueName;
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// A message id: unique within a store, assigned at send, kept through dead-lettering,
/// moves and redrives. Shown as 16 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for MessageId {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        parse_hex16(s, "message id").map(MessageId)
    }
}

/// An id written as exactly 16 hex digits (`what` names it in the error). Only digits: Rust's
/// radix parser would also take a leading `+`, which no id is written with.
pub(crate) fn parse_hex16(s: &str, what: &str) -> Result<u64, StoreError> {
    let bad = || StoreError::invalid(format!("{what} \"{s}\" is not 16 hex digits"));
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(s, 16).map_err(|_| bad())
}

/// How a body was sent, so it comes back in the same form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BodyKind {
    /// A JSON value (the bytes are its UTF-8 text).
    Json,
    /// UTF-8 text.
    Text,
    /// Arbitrary bytes.
    Binary,
}

/// A message body or a task result: bytes plus the form they were given in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Body {
    /// The form the bytes were sent in.
    pub kind: BodyKind,
    /// The exact bytes.
    pub bytes: Bytes,
}

impl Body {
    /// A JSON body from its text. The caller vouches that `text` is valid JSON.
    pub fn json(text: impl Into<Bytes>) -> Self {
        Body {
            kind: BodyKind::Json,
            bytes: text.into(),
        }
    }

    /// A text body.
    pub fn text(text: impl Into<String>) -> Self {
        Body {
            kind: BodyKind::Text,
            bytes: Bytes::from(text.into()),
        }
    }

    /// A binary body.
    pub fn binary(bytes: impl Into<Bytes>) -> Self {
        Body {
            kind: BodyKind::Binary,
            bytes: bytes.into(),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for an empty body.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// String attributes of a message, in key order.
pub type Attributes = BTreeMap<String, String>;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// The body.
    pub body: Body,
    /// String attributes.
    pub attributes: Attributes,
    /// Delivery delay; `None` takes the queue's default.
    pub delay: Option<std::time::Duration>,
    /// A second send with the same id within the queue's `dedup_window` stores nothing and
    /// returns the first message's id.
    pub dedup_id: Option<String>,
    /// The FIFO group: messages of one group are delivered in send order, at most the
    /// queue's `max_in_flight_per_group` at a time (see [`crate::group`]).
    pub group: Option<GroupName>,
    /// The tenant, customer or account it belongs to: deliveries are shared fairly among a
    /// queue's keys (see [`crate::fair`]). `None` joins the implicit key.
    pub key: Option<MessageKey>,
    /// 0 – 9, 9 most urgent; `None` takes the queue's `default_priority`.
    pub priority: Option<u8>,
    /// The producer's trace context, handed to every consumer (see [`crate::trace`]).
    pub trace: Option<TraceContext>,
}

impl NewMessage {
    /// A message with this body and nothing else.
    pub fn new(body: Body) -> Self {
        NewMessage {
            body,
            attributes: Attributes::new(),
            delay: None,
            dedup_id: None,
            group: None,
            key: None,
            priority: None,
            trace: None,
        }
    }

    /// The same message in FIFO group `group`.
    #[must_use]
    pub fn in_group(mut self, group: GroupName) -> Self {
        self.group = Some(group);
        self
    }

    /// The same message under key `key`.
    #[must_use]
    pub fn with_key(mut self, key: MessageKey) -> Self {
        self.key = Some(key);
        self
    }

    /// The same message carrying trace context `t`.
    #[must_use]
    pub fn with_trace(mut self, t: TraceContext) -> Self {
        self.trace = Some(t);
        self
    }

    /// The same message at priority `p` (0 – 9, checked by [`NewMessage::validate`]).
    #[must_use]
    pub fn with_priority(mut self, p: u8) -> Self {
        self.priority = Some(p);
        self
    }

    /// Checks the parts that do not depend on the queue (a JSON body's nesting, attributes,
    /// dedup id, delay, group).
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the offending field.
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.body.kind == BodyKind::Json {
            crate::json_depth::check("body", &self.body.bytes)?;
        }
        if self.attributes.len() > limits::MAX_ATTRIBUTES {
            return Err(StoreError::invalid(format!(
                "a message may carry at most {} attributes, got {}",
                limits::MAX_ATTRIBUTES,
                self.attributes.len()
            )));
        }
        // Lengths are in characters, as JSON Schema (and so the API's document) counts them.
        for (k, v) in &self.attributes {
            let key = k.chars().count();
            if key == 0 || key > limits::MAX_ATTRIBUTE_KEY_CHARS {
                return Err(StoreError::invalid(format!(
                    "attribute names must be 1 to {} characters, got {key}",
                    limits::MAX_ATTRIBUTE_KEY_CHARS,
                )));
            }
            let value = v.chars().count();
            if value > limits::MAX_ATTRIBUTE_VALUE_CHARS {
                return Err(StoreError::invalid(format!(
                    "attribute \"{k}\" is {value} characters; values may be at most {}",
                    limits::MAX_ATTRIBUTE_VALUE_CHARS
                )));
            }
        }
        crate::text::refuse_nul_in_map("attribute", &self.attributes)?;
        if let Some(d) = &self.dedup_id {
            crate::text::refuse_nul("dedup_id", d)?;
            let len = d.chars().count();
            if len == 0 || len > limits::MAX_DEDUP_ID_CHARS {
                return Err(StoreError::invalid(format!(
                    "dedup_id must be 1 to {} characters, got {len}",
                    limits::MAX_DEDUP_ID_CHARS,
                )));
            }
        }
        if let Some(d) = self.delay
            && d > limits::MAX_DELAY
        {
            return Err(StoreError::invalid(format!(
                "delay must be at most {} ms, got {} ms",
                limits::MAX_DELAY.as_millis(),
                d.as_millis()
            )));
        }
        if let Some(g) = &self.group {
            // A `GroupName` is valid when made; checked again because it is cheap and the
            // contract promises that no engine ever stores an invalid one.
            GroupName::new(g.as_str())?;
        }
        if let Some(k) = &self.key {
            MessageKey::new(k.as_str())?;
        }
        if let Some(p) = self.priority {
            crate::fair::check_priority("priority", p)?;
        }
        Ok(())
    }
}

/// Where a message is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Waiting for its delay (or retry backoff) to pass.
    Delayed,
    /// Ready to be received.
    Visible,
    /// Leased to a consumer.
    InFlight,
    /// Acknowledged; the record (and result) is kept for the queue's `result_ttl`.
    Completed,
}

impl MessageState {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Delayed => "delayed",
            MessageState::Visible => "visible",
            MessageState::InFlight => "in_flight",
            MessageState::Completed => "completed",
        }
    }
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    /// A nack on its last allowed attempt.
    Exhausted,
    /// Its lease expired on its last allowed attempt.
    LeaseExpired,
    /// A consumer rejected it.
    Rejected,
    /// It outlived its queue's retention.
    Expired,
}

impl DeadLetterReason {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::Exhausted => "exhausted",
            DeadLetterReason::LeaseExpired => "lease_expired",
            DeadLetterReason::Rejected => "rejected",
            DeadLetterReason::Expired => "expired",
        }
    }
}

impl std::str::FromStr for DeadLetterReason {
    type Err = crate::error::StoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            DeadLetterReason::Exhausted,
            DeadLetterReason::LeaseExpired,
            DeadLetterReason::Rejected,
            DeadLetterReason::Expired,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| {
            crate::error::StoreError::invalid(format!(
                "reason must be exhausted, lease_expired, rejected or expired, got {s:?}"
            ))
        })
    }
}

/// How one delivery ended, as kept in a message's `attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The consumer nacked it.
    Nacked,
    /// The lease ran out.
    LeaseExpired,
    /// The consumer rejected it.
    Rejected,
    /// The consumer moved it to another queue.
    Moved,
    /// The consumer acknowledged it: the delivery that completed the message.
    Acked,
}

/// One finished delivery: every delivery that ends (acknowledged, nacked, rejected, moved,
/// or its lease run out) adds one to its message's `attempts`; a delivery handed back with
/// `release` adds none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When it ended.
    pub at: Timestamp,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error the consumer reported, if any.
    pub error: Option<String>,
    /// The consumer that held it: the name it gave when it settled the delivery, else the
    /// one it gave when it received it; `None` when it named itself neither time.
    pub consumer: Option<String>,
    /// When the delivery began (its lease was handed out); `None` for deliveries recorded
    /// before lease starts were kept.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
}

/// The lease a delivery runs under, as far as its history needs it: when it was handed out
/// and the name its consumer gave when receiving it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// When the lease was handed out; `None` when the engine does not know (a lease granted
    /// before lease starts were kept).
    pub started_at: Option<Timestamp>,
    /// The name given in the receive, if any.
    pub consumer: Option<String>,
}

/// Dead-letter details of a message in a DLQ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Why.
    pub reason: DeadLetterReason,
    /// When.
    pub at: Timestamp,
}

/// What a running handler last reported about its progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Percent done, 0 to 100.
    pub pct: f64,
    /// A short note, e.g. "page 3 of 10".
    pub detail: Option<String>,
    /// When it was reported.
    pub at: Timestamp,
}

impl Progress {
    /// Checks the percentage and the detail's length.
    ///
    /// # Errors
    /// `InvalidArgument` for a percentage outside 0–100 (or not a number) or a detail over
    /// 1 KiB.
    pub fn validate(&self) -> Result<(), StoreError> {
        if !(0.0..=100.0).contains(&self.pct) {
            return Err(StoreError::invalid(format!(
                "pct must be a number from 0 to 100, got {}",
                self.pct
            )));
        }
        if let Some(d) = &self.detail {
            crate::text::refuse_nul("progress detail", d)?;
        }
        if self
            .detail
            .as_ref()
            .is_some_and(|d| d.chars().count() > 1024)
        {
            return Err(StoreError::invalid(
                "progress detail may be at most 1024 characters",
            ));
        }
        Ok(())
    }
}

/// A message as browse and get show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its id.
    pub id: MessageId,
    /// The queue it is in now.
    pub queue: QueueName,
    /// Its state.
    pub state: MessageState,
    /// The body; absent for a completed record.
    pub body: Option<Body>,
    /// Attributes.
    pub attributes: Attributes,
    /// When it was first sent.
    pub enqueued_at: Timestamp,
    /// When it entered the queue it is in now (its send, dead-lettering, move or redrive).
    pub entered_at: Timestamp,
    /// When it becomes visible (delayed), or its lease ends (in flight).
    pub visible_at: Option<Timestamp>,
    /// Deliveries so far.
    pub receive_count: u32,
    /// The last error reported for it.
    pub last_error: Option<String>,
    /// The newest finished attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// The dedup id it was sent with.
    pub dedup_id: Option<String>,
    /// The queue it was dead-lettered or moved from.
    pub source_queue: Option<QueueName>,
    /// Set while it sits in a DLQ.
    pub dead_letter: Option<DeadLetter>,
    /// The stored result of a completed message.
    pub result: Option<Body>,
    /// When it was acknowledged.
    pub completed_at: Option<Timestamp>,
    /// Cancelled: for a running task, cancellation was requested; for a completed
    /// record, the task ended cancelled. Sticky: a late success does not undo it.
    pub cancelled: bool,
    /// The last progress its running handler reported.
    pub progress: Option<Progress>,
    /// Its FIFO group, if it was sent with one (kept through dead-lettering, moves and
    /// redrives).
    pub group: Option<GroupName>,
    /// Its key, if it was sent with one (kept through dead-lettering, moves and redrives).
    pub key: Option<MessageKey>,
    /// The priority it was sent with; `None` when it named none and so takes its queue's
    /// `default_priority`.
    pub priority: Option<u8>,
    /// The trace context it was sent with (kept through retries, dead-lettering, moves and
    /// redrives); `None` on a completed record.
    pub trace: Option<TraceContext>,
}

/// A leased message handed to a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its id.
    pub id: MessageId,
    /// Names this delivery for ack, nack, reject, move and extend.
    pub receipt: crate::receipt::Receipt,
    /// The body, as sent.
    pub body: Body,
    /// Attributes.
    pub attributes: Attributes,
    /// Deliveries including this one.
    pub receive_count: u32,
    /// The queue's attempt limit (0 = unlimited).
    pub max_receive_count: u32,
    /// When it was first sent.
    pub enqueued_at: Timestamp,
    /// The last error reported for it.
    pub last_error: Option<String>,
    /// When this lease ends unless extended.
    pub lease_deadline: Timestamp,
    /// Its FIFO group, if it was sent with one.
    pub group: Option<GroupName>,
    /// Its key, if it was sent with one.
    pub key: Option<MessageKey>,
    /// The priority it was delivered at: its own, else its queue's `default_priority`.
    pub priority: u8,
    /// The trace context it was sent with.
    pub trace: Option<TraceContext>,
}

/// Cuts an error text to [`limits::MAX_ERROR_BYTES`] on a character boundary.
pub fn clip_error(mut e: String) -> String {
    if e.len() > limits::MAX_ERROR_BYTES {
        let mut cut = limits::MAX_ERROR_BYTES - 16;
        while !e.is_char_boundary(cut) {
            cut -= 1;
        }
        e.truncate(cut);
        e.push_str("… [truncated]");
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_as_hex() {
        let id = MessageId(0x0123_4567_89ab_cdef);
        assert_eq!(id.to_string(), "0123456789abcdef");
        assert_eq!(id.to_string().parse::<MessageId>().unwrap(), id);
        assert!("xyz".parse::<MessageId>().is_err());
        assert!("0123456789abcdeg".parse::<MessageId>().is_err());
        // A sign is not a hex digit, though the radix parser would take it.
        assert!("+123456789abcdef".parse::<MessageId>().is_err());
        assert!("+123456789abcdef".parse::<crate::RedriveId>().is_err());
        assert_eq!(
            "0123456789ABCDEF".parse::<MessageId>().ok(),
            Some(id),
            "either case"
        );
    }

    #[test]
    fn long_errors_are_clipped_on_a_char_boundary() {
        let e = clip_error("é".repeat(10_000));
        assert!(e.len() <= limits::MAX_ERROR_BYTES);
        assert!(e.ends_with("[truncated]"));
    }
}
