//! The frame protocol: the hot path of the API (send, receive and every settlement a worker
//! makes: ack with results, nack, reject, release, move, extend, progress) over one TCP
//! connection, for producers and workers whose cost per message matters more than the
//! convenience of HTTP and JSON.
//!
//! A connection carries frames in both directions: a 4-byte little-endian payload length,
//! then the payload, the [postcard] encoding of a [`Request`] (client to broker) or a
//! [`Response`] (broker to client). The broker answers the requests of one connection in
//! the order they arrive, one [`Response`] per [`Request`] with the same `id`; a client may
//! write several requests before reading their answers (pipelining). The operations keep every
//! rule of the HTTP API: the same validation, limits, durability (an answer means durable),
//! error codes and API keys (sent once per connection in [`Op::Hello`]).
//!
//! [postcard]: https://docs.rs/postcard

use serde::{Deserialize, Serialize};

use sluice_core::error::{ErrorCode, StoreError};
use sluice_core::message::{Attributes, Body};

/// Bytes of a frame's length prefix.
pub const LENGTH_BYTES: usize = 4;

/// The protocol version a broker speaks; [`Reply::Hello`] carries it.
///
/// Version 2 added [`Op::SendTagged`] and [`Op::ReceiveTagged`], version 3
/// [`Op::SendTraced`] and [`Op::ReceiveTraced`]; a client that needs them checks the version
/// before using them, and an older broker is answered by the others.
pub const VERSION: u32 = 3;

/// The largest payload a broker with API keys reads before [`Op::Hello`] has succeeded on
/// the connection: room for a `Hello` with any key, and no more, so that a client that has
/// not said who it is cannot make the broker hold large frames. A larger length prefix
/// before then is answered with `unauthenticated` (response `id` 0) and the connection is
/// closed.
pub const MAX_FRAME_BEFORE_HELLO: usize = 4096;

/// One request, named by a client-chosen `id` its answer repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Echoed in the answer.
    pub id: u64,
    /// What to do.
    pub op: Op,
}

/// The operations. Queue names are checked as in the HTTP API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Authenticates the connection with an API key (required first when the broker has
    /// keys; allowed and ignored without). Answered with [`Reply::Hello`].
    Hello {
        /// The API key's secret.
        key: Option<String>,
    },
    /// Sends 1 – 1000 messages, all or nothing. Answered with [`Reply::Sent`].
    Send {
        /// The queue.
        queue: String,
        /// The messages.
        messages: Vec<FrameMessage>,
    },
    /// Leases up to `max` messages, waiting up to `wait_ms` for the first. Answered with
    /// [`Reply::Messages`].
    Receive {
        /// The queue.
        queue: String,
        /// 1 – 1000.
        max: u32,
        /// Long poll, 0 – 30,000 ms.
        wait_ms: u64,
        /// Lease length; `None` takes the queue's `visibility_timeout`.
        visibility_ms: Option<u64>,
        /// Who is receiving, for the attempt history.
        consumer: Option<String>,
    },
    /// Acknowledges deliveries, 1 – 1000. Answered with [`Reply::Acked`], one outcome each.
    Ack {
        /// The queue.
        queue: String,
        /// The deliveries.
        receipts: Vec<FrameReceipt>,
    },
    /// Returns one delivery for another attempt, or dead-letters it when its attempts are
    /// used up. Answered with [`Reply::Nacked`].
    Nack {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// Delay before the next attempt; `None` takes the queue's backoff.
        delay_ms: Option<u64>,
        /// The error, kept as `last_error` and in the attempt history.
        error: Option<String>,
        /// Who is reporting it.
        consumer: Option<String>,
    },
    /// Sends 1 – 1000 messages, each in an optional FIFO message group, all or nothing.
    /// Answered with [`Reply::Sent`]. A variant of its own so that [`Op::Send`] keeps its
    /// documented bytes.
    SendGrouped {
        /// The queue.
        queue: String,
        /// The messages.
        messages: Vec<GroupedFrameMessage>,
    },
    /// Acknowledges deliveries, 1 – 1000, each with an optional result kept with the
    /// completed task (as the HTTP API's `{"acks": [{"receipt", "result"}]}`). Answered with
    /// [`Reply::Acked`], one outcome each.
    AckWithResults {
        /// The queue.
        queue: String,
        /// The deliveries and their results.
        acks: Vec<FrameAck>,
    },
    /// Dead-letters one delivery now, whatever its receive count. Answered with
    /// [`Reply::Nacked`] naming the dead-letter queue.
    Reject {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// The error, kept as `last_error` and in the attempt history.
        error: Option<String>,
        /// Who is reporting it.
        consumer: Option<String>,
    },
    /// Hands one delivery back without counting the attempt: visible again at once. Answered
    /// with [`Reply::Nacked`] naming the queue.
    Release {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
    },
    /// Moves one leased message to queue `to`, atomically. The caller must be allowed to
    /// consume from both. Answered with [`Reply::Nacked`] naming `to`.
    Move {
        /// The queue it is leased from.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// Where it goes.
        to: String,
        /// Why, kept in the attempt history.
        error: Option<String>,
        /// Who moved it.
        consumer: Option<String>,
    },
    /// Sets a lease to end `visibility_ms` from now. Answered with [`Reply::Lease`].
    Extend {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// The new lease length, at most 12 hours.
        visibility_ms: u64,
    },
    /// Records a running task's progress (the lease is not extended). Answered with
    /// [`Reply::Lease`], which says whether the task was cancelled.
    Progress {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// 0 – 100.
        pct: f64,
        /// A short note, at most 1,024 bytes.
        detail: Option<String>,
    },
    /// [`Op::SendGrouped`] under an idempotency key: the same key with the same request
    /// within 24 hours answers as the first time and stores nothing more; with a different
    /// request it is refused with `idempotency_mismatch`. Answered with [`Reply::Sent`].
    SendIdempotent {
        /// 1 – 255 visible ASCII characters, e.g. a UUID; scoped to the API key and queue.
        key: String,
        /// The queue.
        queue: String,
        /// The messages.
        messages: Vec<GroupedFrameMessage>,
    },
    /// [`Op::Nack`] with the dependency's own Retry-After as the wait (as the HTTP API's
    /// `retry_after_ms`): the delivery waits that long, and a queue with an adaptive rate
    /// counts it as congestion. Answered with [`Reply::Nacked`].
    NackRetryAfter {
        /// The queue.
        queue: String,
        /// The delivery.
        receipt: FrameReceipt,
        /// The wait the dependency asked for.
        retry_after_ms: u64,
        /// The error, kept as `last_error` and in the attempt history.
        error: Option<String>,
        /// Who is reporting it.
        consumer: Option<String>,
    },
    /// Sends 1 – 1000 messages, each with an optional group, key and priority, all or
    /// nothing, under an optional idempotency key (as [`Op::SendIdempotent`]). Answered with
    /// [`Reply::Sent`]. Since protocol version 2.
    SendTagged {
        /// An idempotency key, 1 – 255 visible ASCII characters, or none.
        idempotency_key: Option<String>,
        /// The queue.
        queue: String,
        /// The messages.
        messages: Vec<TaggedFrameMessage>,
    },
    /// [`Op::Receive`] answered with [`Reply::TaggedMessages`]: each delivery with its group,
    /// key and priority. Since protocol version 2.
    ReceiveTagged {
        /// The queue.
        queue: String,
        /// 1 – 1000.
        max: u32,
        /// Long poll, 0 – 30,000 ms.
        wait_ms: u64,
        /// Lease length; `None` takes the queue's `visibility_timeout`.
        visibility_ms: Option<u64>,
        /// Who is receiving, for the attempt history.
        consumer: Option<String>,
    },
    /// [`Op::SendTagged`] with each message's W3C trace context. Answered with
    /// [`Reply::Sent`]. Since protocol version 3.
    SendTraced {
        /// An idempotency key, 1 – 255 visible ASCII characters, or none.
        idempotency_key: Option<String>,
        /// The queue.
        queue: String,
        /// The messages.
        messages: Vec<TracedFrameMessage>,
    },
    /// [`Op::ReceiveTagged`] answered with [`Reply::TracedMessages`]: each delivery also with
    /// its trace context. Since protocol version 3.
    ReceiveTraced {
        /// The queue.
        queue: String,
        /// 1 – 1000.
        max: u32,
        /// Long poll, 0 – 30,000 ms.
        wait_ms: u64,
        /// Lease length; `None` takes the queue's `visibility_timeout`.
        visibility_ms: Option<u64>,
        /// Who is receiving, for the attempt history.
        consumer: Option<String>,
    },
}

impl Op {
    /// The op's name, as the permission table lists it (`Send`, `Receive`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Hello { .. } => "Hello",
            Op::Send { .. } => "Send",
            Op::Receive { .. } => "Receive",
            Op::Ack { .. } => "Ack",
            Op::Nack { .. } => "Nack",
            Op::SendGrouped { .. } => "SendGrouped",
            Op::AckWithResults { .. } => "AckWithResults",
            Op::Reject { .. } => "Reject",
            Op::Release { .. } => "Release",
            Op::Move { .. } => "Move",
            Op::Extend { .. } => "Extend",
            Op::Progress { .. } => "Progress",
            Op::SendIdempotent { .. } => "SendIdempotent",
            Op::NackRetryAfter { .. } => "NackRetryAfter",
            Op::SendTagged { .. } => "SendTagged",
            Op::ReceiveTagged { .. } => "ReceiveTagged",
            Op::SendTraced { .. } => "SendTraced",
            Op::ReceiveTraced { .. } => "ReceiveTraced",
        }
    }
}

/// One delivery to acknowledge with [`Op::AckWithResults`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameAck {
    /// The delivery.
    pub receipt: FrameReceipt,
    /// The task's result, checked as a message body is (a `Json` result must be JSON).
    pub result: Option<Body>,
}

/// One message to send with [`Op::SendGrouped`]: a [`FrameMessage`] and its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupedFrameMessage {
    /// The message.
    pub message: FrameMessage,
    /// Its FIFO message group (1 – 128 characters, no control characters), or none.
    pub group: Option<String>,
}

/// One message to send with [`Op::SendTagged`]: a [`FrameMessage`], its group, the key it
/// belongs to and its priority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaggedFrameMessage {
    /// The message.
    pub message: FrameMessage,
    /// Its FIFO message group (1 – 128 characters, no control characters), or none.
    pub group: Option<String>,
    /// The key (tenant, customer, account) it is delivered fairly under, by the group's
    /// rule; none shares the queue's one implicit key.
    pub key: Option<String>,
    /// 0 – 9, 9 the most urgent; none takes the queue's `default_priority` at delivery.
    pub priority: Option<u8>,
}

impl From<FrameMessage> for TaggedFrameMessage {
    fn from(message: FrameMessage) -> Self {
        TaggedFrameMessage {
            message,
            group: None,
            key: None,
            priority: None,
        }
    }
}

/// W3C trace context in a frame: the producer's `traceparent` and `tracestate` (checked by
/// the broker as the HTTP API's `trace` is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameTrace {
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
    pub traceparent: String,
    /// Vendor entries, if any.
    pub tracestate: Option<String>,
}

impl FrameTrace {
    /// The core context, checked.
    ///
    /// # Errors
    /// `InvalidArgument` saying which rule of W3C Trace Context it breaks.
    pub fn into_context(self) -> Result<sluice_core::TraceContext, sluice_core::StoreError> {
        sluice_core::TraceContext::new(self.traceparent, self.tracestate)
    }
}

impl From<&sluice_core::TraceContext> for FrameTrace {
    fn from(t: &sluice_core::TraceContext) -> Self {
        FrameTrace {
            traceparent: t.traceparent().to_owned(),
            tracestate: t.tracestate().map(str::to_owned),
        }
    }
}

/// One message to send with [`Op::SendTraced`]: a [`TaggedFrameMessage`] and its trace
/// context, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedFrameMessage {
    /// The message, its group, key and priority.
    pub message: TaggedFrameMessage,
    /// Its trace context.
    pub trace: Option<FrameTrace>,
}

impl From<TaggedFrameMessage> for TracedFrameMessage {
    fn from(message: TaggedFrameMessage) -> Self {
        TracedFrameMessage {
            message,
            trace: None,
        }
    }
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameMessage {
    /// The body and its kind. A `Json` body must be valid JSON (it is checked), since HTTP
    /// consumers receive it as JSON.
    pub body: Body,
    /// String attributes.
    pub attributes: Attributes,
    /// Delivery delay; `None` takes the queue's default.
    pub delay_ms: Option<u64>,
    /// Deduplication id (see `dedup_window`).
    pub dedup_id: Option<String>,
}

impl FrameMessage {
    /// A message with this body and nothing else.
    pub fn new(body: Body) -> Self {
        FrameMessage {
            body,
            attributes: Attributes::new(),
            delay_ms: None,
            dedup_id: None,
        }
    }
}

/// A delivery's receipt: the message id and the lease token (the HTTP API's receipt string
/// holds the same two numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameReceipt {
    /// The message id.
    pub id: u64,
    /// The lease token.
    pub token: u64,
}

impl From<sluice_core::receipt::Receipt> for FrameReceipt {
    fn from(r: sluice_core::receipt::Receipt) -> Self {
        FrameReceipt {
            id: r.id.0,
            token: r.token,
        }
    }
}

impl From<FrameReceipt> for sluice_core::receipt::Receipt {
    fn from(r: FrameReceipt) -> Self {
        sluice_core::receipt::Receipt {
            id: sluice_core::message::MessageId(r.id),
            token: r.token,
        }
    }
}

/// The answer to one [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's `id` (0 when the request could not be decoded).
    pub id: u64,
    /// Its outcome.
    pub result: Result<Reply, FrameError>,
}

/// What a successful request returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// The connection is ready; the broker's protocol version.
    Hello {
        /// [`VERSION`] of the broker.
        version: u32,
    },
    /// The sent messages, in request order.
    Sent(Vec<SentMessage>),
    /// The leased messages (possibly none).
    Messages(Vec<FrameDelivery>),
    /// One outcome per receipt, in request order: `None` when acknowledged.
    Acked(Vec<Option<FrameError>>),
    /// Where a nacked, rejected, released or moved message went.
    Nacked {
        /// The queue it is in now (its DLQ when it was dead-lettered).
        queue: String,
        /// True when it was dead-lettered.
        dead_lettered: bool,
    },
    /// A lease after [`Op::Extend`] or [`Op::Progress`].
    Lease {
        /// When it ends unless extended, ms since the Unix epoch.
        deadline_ms: i64,
        /// True when the task was cancelled: the handler should stop.
        cancel_requested: bool,
    },
    /// The leased messages of [`Op::ReceiveTagged`] (possibly none).
    TaggedMessages(Vec<TaggedFrameDelivery>),
    /// The leased messages of [`Op::ReceiveTraced`] (possibly none).
    TracedMessages(Vec<TracedFrameDelivery>),
}

/// One stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    /// Its id (for a duplicate: the first message's id).
    pub id: u64,
    /// True when a send with the same `dedup_id` inside the window already stored it.
    pub duplicate: bool,
}

/// One leased message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameDelivery {
    /// Its id.
    pub id: u64,
    /// Names this delivery for ack and nack.
    pub receipt: FrameReceipt,
    /// The body, as sent.
    pub body: Body,
    /// Attributes.
    pub attributes: Attributes,
    /// Deliveries including this one.
    pub receive_count: u32,
    /// The queue's attempt limit (0 = unlimited).
    pub max_receive_count: u32,
    /// When it was first sent, ms since the Unix epoch.
    pub enqueued_at_ms: i64,
    /// When this lease ends unless extended, ms since the Unix epoch.
    pub lease_deadline_ms: i64,
    /// The last error reported for it.
    pub last_error: Option<String>,
}

impl From<sluice_core::message::Delivery> for FrameDelivery {
    fn from(d: sluice_core::message::Delivery) -> Self {
        FrameDelivery {
            id: d.id.0,
            receipt: d.receipt.into(),
            body: d.body,
            attributes: d.attributes,
            receive_count: d.receive_count,
            max_receive_count: d.max_receive_count,
            enqueued_at_ms: d.enqueued_at.0,
            lease_deadline_ms: d.lease_deadline.0,
            last_error: d.last_error,
        }
    }
}

/// One leased message with what [`FrameDelivery`] leaves out: its group, key and priority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaggedFrameDelivery {
    /// The delivery.
    pub delivery: FrameDelivery,
    /// Its FIFO message group, if any.
    pub group: Option<String>,
    /// Its key, if it was sent with one.
    pub key: Option<String>,
    /// The priority it was delivered at (its own, or the queue's default).
    pub priority: u8,
}

impl From<sluice_core::message::Delivery> for TaggedFrameDelivery {
    fn from(mut d: sluice_core::message::Delivery) -> Self {
        let group = d.group.take().map(|g| g.as_str().to_owned());
        let key = d.key.take().map(|k| k.as_str().to_owned());
        let priority = d.priority;
        TaggedFrameDelivery {
            delivery: d.into(),
            group,
            key,
            priority,
        }
    }
}

/// One leased message with its group, key, priority and trace context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedFrameDelivery {
    /// The delivery with its group, key and priority.
    pub delivery: TaggedFrameDelivery,
    /// The trace context it was sent with, if any.
    pub trace: Option<FrameTrace>,
}

impl From<sluice_core::message::Delivery> for TracedFrameDelivery {
    fn from(mut d: sluice_core::message::Delivery) -> Self {
        let trace = d.trace.take().as_ref().map(FrameTrace::from);
        TracedFrameDelivery {
            delivery: d.into(),
            trace,
        }
    }
}

/// A refused request: the HTTP API's error code and message, and when to retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct FrameError {
    /// One of the HTTP API's error codes (`invalid_argument`, `receipt_stale`, …).
    pub code: String,
    /// What happened and, where it helps, what to do about it.
    pub message: String,
    /// For `queue_full`, `rate_limited` and `unavailable`: when a retry may succeed.
    pub retry_after_ms: Option<u64>,
}

impl FrameError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        FrameError {
            code: code.as_str().to_owned(),
            message: message.into(),
            retry_after_ms: None,
        }
    }
}

impl From<&StoreError> for FrameError {
    fn from(e: &StoreError) -> Self {
        FrameError {
            code: e.code().as_str().to_owned(),
            message: e.to_string(),
            retry_after_ms: e
                .retry_after()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

impl From<StoreError> for FrameError {
    fn from(e: StoreError) -> Self {
        FrameError::from(&e)
    }
}

/// Appends one frame (length prefix and postcard payload) holding `value` to `out`.
///
/// # Panics
/// Never for the protocol's types: postcard cannot fail to encode them into memory.
pub fn encode_frame<T: Serialize>(value: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; LENGTH_BYTES]);
    let taken = std::mem::take(out);
    let mut filled = postcard::to_extend(value, taken)
        .unwrap_or_else(|e| panic!("postcard failed to encode a frame into memory: {e}"));
    let len = u32::try_from(filled.len() - start - LENGTH_BYTES).unwrap_or(u32::MAX);
    filled[start..start + LENGTH_BYTES].copy_from_slice(&len.to_le_bytes());
    *out = filled;
}

/// Decodes a frame's payload (without its length prefix).
///
/// # Errors
/// The payload is not an encoding of `T`.
pub fn decode_payload<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, FrameError> {
    postcard::from_bytes(payload).map_err(|e| {
        FrameError::new(
            ErrorCode::InvalidArgument,
            format!("a frame that does not decode as this protocol's message ({e}); is the client of the same version?"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_their_length_prefix() {
        let req = Request {
            id: 7,
            op: Op::Send {
                queue: "jobs".into(),
                messages: vec![FrameMessage::new(Body::binary(vec![1u8, 2, 3]))],
            },
        };
        let mut out = vec![9u8];
        encode_frame(&req, &mut out);
        let len = u32::from_le_bytes(out[1..5].try_into().unwrap()) as usize;
        assert_eq!(out.len(), 1 + LENGTH_BYTES + len);
        let back: Request = decode_payload(&out[5..]).unwrap();
        assert_eq!(back, req);
    }

    /// The byte examples of `docs/frames.md`: clients in other languages are written
    /// against them, so they must not change.
    #[test]
    fn the_wire_format_matches_the_documented_bytes() {
        let mut out = Vec::new();
        encode_frame(
            &Request {
                id: 1,
                op: Op::Hello { key: None },
            },
            &mut out,
        );
        assert_eq!(out, [0x03, 0, 0, 0, 0x01, 0x00, 0x00]);

        out.clear();
        let ok = Response {
            id: 1,
            result: Ok(Reply::Hello { version: 1 }),
        };
        encode_frame(&ok, &mut out);
        assert_eq!(out, [0x04, 0, 0, 0, 0x01, 0x00, 0x00, 0x01]);

        out.clear();
        let send = Request {
            id: 2,
            op: Op::Send {
                queue: "q".into(),
                messages: vec![FrameMessage::new(Body::binary(vec![0xabu8]))],
            },
        };
        encode_frame(&send, &mut out);
        assert_eq!(
            out,
            [
                0x0b, 0, 0, 0,    // length 11
                0x02, // id 2
                0x01, // Op::Send
                0x01, b'q', // queue "q"
                0x01, // one message
                0x02, 0x01, 0xab, // body: Binary, 1 byte
                0x00, // no attributes
                0x00, // delay_ms: None
                0x00, // dedup_id: None
            ]
        );

        out.clear();
        let release = Request {
            id: 3,
            op: Op::Release {
                queue: "q".into(),
                receipt: FrameReceipt { id: 5, token: 9 },
            },
        };
        encode_frame(&release, &mut out);
        assert_eq!(out, [0x06, 0, 0, 0, 0x03, 0x08, 0x01, b'q', 0x05, 0x09]);

        out.clear();
        let refused = Response {
            id: 2,
            result: Err(FrameError::new(ErrorCode::QueueNotFound, "x")),
        };
        encode_frame(&refused, &mut out);
        let mut want = vec![0x02, 0x01, 0x0f];
        want.extend_from_slice(b"queue_not_found");
        want.extend_from_slice(&[0x01, b'x', 0x00]);
        assert_eq!(&out[LENGTH_BYTES..], want.as_slice());
    }

    #[test]
    fn garbage_is_an_invalid_argument_not_a_panic() {
        let e = decode_payload::<Request>(&[0xff, 0xff, 0xff]).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
    }
}
