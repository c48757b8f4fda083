//! Sending, receiving and settling: `POST /v1/queues/{q}/messages|receive|ack|nack|reject|
//! move|extend`.

use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use serde::Serialize;
use sluice_wire::{
    AckBatchResponse, AckOutcome, AckRequestWire, AckResponse, DeliveryView, ExtendRequest,
    ExtendResponse, FailureResponse, MoveRequest, NackRequest, ReceiveRequestWire, ReceiveResponse,
    RejectRequest, SendBatchResponse, SendRequest, SendResponse,
};

use crate::body::{OutBody, OutgoingMessage};
use crate::client::{Call, Client, ReqBody, ms, new_idempotency_key, queue};
use crate::error::{Error, Result};
use crate::json::to_raw;
use crate::retry::Safety;

/// Per-call options of a send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// Sent as `Idempotency-Key`: the broker answers a repeat of this request (same key, same
    /// route, within 24 h) with the first answer and stores nothing. Makes the send safe to
    /// retry.
    pub idempotency_key: Option<String>,
}

impl SendOptions {
    /// Options with a fresh random idempotency key, which makes this one call safe to retry.
    pub fn idempotent() -> Self {
        SendOptions {
            idempotency_key: Some(new_idempotency_key()),
        }
    }

    /// Options with the caller's idempotency key (e.g. derived from an upstream request id).
    pub fn with_key(key: impl Into<String>) -> Self {
        SendOptions {
            idempotency_key: Some(key.into()),
        }
    }
}

/// Options of a receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// Most messages to lease, 1 – 1000. Default 1.
    pub max: u32,
    /// Long poll: how long the broker waits for a first message (0 – 30 s). Default 0. The
    /// client's timeout for this call is extended by this much.
    pub wait: Duration,
    /// Lease length for these deliveries; the queue's `visibility_timeout` otherwise.
    pub visibility: Option<Duration>,
    /// Who is receiving, recorded in each message's attempt history.
    pub consumer: Option<String>,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            max: 1,
            wait: Duration::ZERO,
            visibility: None,
            consumer: None,
        }
    }
}

impl ReceiveOptions {
    /// Up to `max` messages, waiting up to `wait` for the first.
    pub fn new(max: u32, wait: Duration) -> Self {
        ReceiveOptions {
            max,
            wait,
            ..ReceiveOptions::default()
        }
    }
}

/// Options of a nack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NackOptions {
    /// Retry after this delay instead of the queue's backoff.
    pub delay: Option<Duration>,
    /// `delay` is the dependency's own Retry-After (it answered 429 or 503 and said how long
    /// to wait): a queue with an adaptive rate counts the nack as congestion.
    pub retry_after: bool,
    /// The error, stored as `last_error` and in the attempt history.
    pub error: Option<String>,
    /// Who is reporting.
    pub consumer: Option<String>,
}

impl Client {
    /// Sends one message. A text or binary body without attributes goes as a raw
    /// `text/plain` or `application/octet-stream` request (no base64 overhead, and text comes
    /// back marked as text); anything else goes as JSON.
    ///
    /// Retried only when safe: the message has a `dedup_id`, or the client was built with
    /// [`crate::ClientBuilder::idempotent_sends`]; see [`Client::send_with`] for a key.
    ///
    /// # Errors
    /// `queue_not_found`, `invalid_argument`, `payload_too_large`, `queue_full` (429, with
    /// `retry_after`), and transport failures.
    pub async fn send(&self, queue_name: &str, message: OutgoingMessage) -> Result<SendResponse> {
        self.send_with(queue_name, message, &SendOptions::default())
            .await
    }

    /// Serializes `value` to JSON and sends it as one message.
    ///
    /// # Errors
    /// [`Error::InvalidInput`], before anything is sent, when `value` cannot be JSON (a NaN or
    /// infinite float, a map with non-string keys); otherwise as [`Client::send`].
    pub async fn send_json<T: Serialize + ?Sized>(
        &self,
        queue_name: &str,
        value: &T,
    ) -> Result<SendResponse> {
        self.send(queue_name, OutgoingMessage::json(value)?).await
    }

    /// Sends raw bytes as one binary message (`application/octet-stream`), byte-exact.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn send_raw(
        &self,
        queue_name: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<SendResponse> {
        self.send(queue_name, OutgoingMessage::bytes(bytes)).await
    }

    /// Sends one message with per-call options.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn send_with(
        &self,
        queue_name: &str,
        message: OutgoingMessage,
        options: &SendOptions,
    ) -> Result<SendResponse> {
        let q = queue(queue_name)?;
        let dedup = message.dedup_id.is_some();
        let mut call = self.send_call(format!("/v1/queues/{q}/messages"), options, dedup);
        let raw = match &message.body {
            _ if !message.attributes.is_empty() => None,
            OutBody::Text(t) => Some((Bytes::from(t.clone()), "text/plain; charset=utf-8")),
            OutBody::Bytes(b) => Some((b.clone(), "application/octet-stream")),
            OutBody::Json(_) => None,
        };
        match raw {
            Some((bytes, content_type)) => {
                if let Some(d) = message.delay {
                    call.query.push(("delay_ms", ms(d).to_string()));
                }
                if let Some(id) = &message.dedup_id {
                    call.query.push(("dedup_id", id.clone()));
                }
                if let Some(g) = &message.group {
                    call.query.push(("group", g.clone()));
                }
                if let Some(k) = &message.key {
                    call.query.push(("key", k.clone()));
                }
                if let Some(p) = message.priority {
                    call.query.push(("priority", p.to_string()));
                }
                call.trace.clone_from(&message.trace);
                call.body = Some(ReqBody::Raw {
                    bytes,
                    content_type,
                });
            }
            None => {
                let m = message.to_wire()?;
                let req = SendRequest {
                    body: m.body,
                    body_base64: m.body_base64,
                    attributes: m.attributes,
                    delay_ms: m.delay_ms,
                    dedup_id: m.dedup_id,
                    group: m.group,
                    messages: None,
                    key: m.key,
                    priority: m.priority,
                    trace: m.trace,
                };
                call = call.json(&req)?;
            }
        }
        self.call_json(call).await
    }

    /// Sends 1 – 1000 messages in one request, stored all or nothing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty batch; otherwise as [`Client::send`], for the
    /// whole batch.
    pub async fn send_batch(
        &self,
        queue_name: &str,
        messages: Vec<OutgoingMessage>,
    ) -> Result<SendBatchResponse> {
        self.send_batch_with(queue_name, messages, &SendOptions::default())
            .await
    }

    /// Sends a batch with per-call options.
    ///
    /// # Errors
    /// As [`Client::send_batch`].
    pub async fn send_batch_with(
        &self,
        queue_name: &str,
        messages: Vec<OutgoingMessage>,
        options: &SendOptions,
    ) -> Result<SendBatchResponse> {
        let q = queue(queue_name)?;
        if messages.is_empty() {
            return Err(Error::InvalidInput(
                "a batch needs at least one message".to_owned(),
            ));
        }
        let dedup = messages.iter().all(|m| m.dedup_id.is_some());
        let wire = messages
            .iter()
            .map(OutgoingMessage::to_wire)
            .collect::<Result<Vec<_>>>()?;
        let req = SendRequest {
            body: None,
            body_base64: None,
            attributes: None,
            delay_ms: None,
            dedup_id: None,
            group: None,
            messages: Some(wire),
            key: None,
            priority: None,
            trace: None,
        };
        let call = self
            .send_call(format!("/v1/queues/{q}/messages"), options, dedup)
            .json(&req)?;
        self.call_json(call).await
    }

    fn send_call(&self, path: String, options: &SendOptions, dedup: bool) -> Call {
        let key = options
            .idempotency_key
            .clone()
            .or_else(|| self.idempotent_sends().then(new_idempotency_key));
        let safety = if key.is_some() || dedup {
            Safety::Idempotent
        } else {
            Safety::Unsafe
        };
        let mut call = Call::new(Method::POST, path, safety);
        call.idempotency_key = key;
        call
    }

    /// Leases up to `options.max` messages, waiting up to `options.wait` for the first. An
    /// empty vector means nothing was ready in time.
    ///
    /// # Errors
    /// `queue_not_found`, `invalid_argument` (e.g. a wait over 30 s), transport failures.
    ///
    /// # Cancel safety
    /// Dropping the future may leave messages leased that the caller never saw; they become
    /// visible again when their lease ends.
    pub async fn receive(
        &self,
        queue_name: &str,
        options: &ReceiveOptions,
    ) -> Result<Vec<DeliveryView>> {
        Ok(self.lease(queue_name, options, None).await?.messages)
    }

    /// Acknowledges `receipts` (like [`Client::ack_batch`]) and then leases as
    /// [`Client::receive`] does, in one round trip: the loop of a worker that settles each
    /// batch before taking the next. Returns one outcome per receipt, in order, and the new
    /// deliveries.
    ///
    /// # Errors
    /// As [`Client::receive`]; a failed ack is an outcome, not an error. When the call fails
    /// after the broker applied the acks, acking those receipts again answers
    /// `receipt_stale`.
    pub async fn ack_and_receive(
        &self,
        queue_name: &str,
        receipts: &[String],
        options: &ReceiveOptions,
    ) -> Result<(Vec<AckOutcome>, Vec<DeliveryView>)> {
        let resp = self
            .lease(queue_name, options, Some(receipts.to_vec()))
            .await?;
        Ok((resp.acked.unwrap_or_default(), resp.messages))
    }

    async fn lease(
        &self,
        queue_name: &str,
        options: &ReceiveOptions,
        ack: Option<Vec<String>>,
    ) -> Result<ReceiveResponse> {
        let q = queue(queue_name)?;
        let req = ReceiveRequestWire {
            max: Some(options.max),
            // Always given: a receive without `wait_ms` waits as long as the queue's
            // `receive_wait`, and this client's zero means "do not wait".
            wait_ms: Some(ms(options.wait)),
            visibility_timeout_ms: options.visibility.map(ms),
            consumer: options.consumer.clone(),
            ack: ack.filter(|a| !a.is_empty()),
        };
        let mut call = Call::new(
            Method::POST,
            format!("/v1/queues/{q}/receive"),
            Safety::Idempotent,
        )
        .json(&req)?;
        call.extra_timeout = options.wait;
        self.call_json(call).await
    }

    /// Acknowledges (deletes) a delivered message.
    ///
    /// # Errors
    /// `receipt_stale` (409) when the receipt no longer names the current delivery; transport
    /// failures.
    pub async fn ack(&self, queue_name: &str, receipt: &str) -> Result<AckResponse> {
        let req = AckRequestWire {
            receipt: Some(receipt.to_owned()),
            ..AckRequestWire::default()
        };
        self.settle(queue_name, "ack", &req).await
    }

    /// Acknowledges a message and stores `result` (as JSON) with its completed record for the
    /// queue's `result_ttl`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `result` cannot be JSON; otherwise as [`Client::ack`].
    pub async fn ack_with_result<T: Serialize + ?Sized>(
        &self,
        queue_name: &str,
        receipt: &str,
        result: &T,
    ) -> Result<AckResponse> {
        let req = AckRequestWire {
            receipt: Some(receipt.to_owned()),
            result: Some(to_raw("result", result)?),
            ..AckRequestWire::default()
        };
        self.settle(queue_name, "ack", &req).await
    }

    /// Acknowledges 1 – 1000 deliveries in one request. The call succeeds even when some
    /// receipts fail: each has its own outcome (`ok`, or `error` with its code, e.g.
    /// `receipt_stale`), in request order.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty list; transport failures.
    pub async fn ack_batch<S: AsRef<str>>(
        &self,
        queue_name: &str,
        receipts: &[S],
    ) -> Result<AckBatchResponse> {
        if receipts.is_empty() {
            return Err(Error::InvalidInput(
                "ack_batch needs at least one receipt".to_owned(),
            ));
        }
        let req = AckRequestWire {
            receipts: Some(receipts.iter().map(|r| r.as_ref().to_owned()).collect()),
            ..AckRequestWire::default()
        };
        self.settle(queue_name, "ack", &req).await
    }

    /// Returns a message for another attempt (after `options.delay` or the queue's backoff),
    /// or dead-letters it when its attempts are used up; the answer says which.
    ///
    /// # Errors
    /// `receipt_stale`; transport failures.
    pub async fn nack(
        &self,
        queue_name: &str,
        receipt: &str,
        options: &NackOptions,
    ) -> Result<FailureResponse> {
        let req = NackRequest {
            receipt: receipt.to_owned(),
            delay_ms: options.delay.filter(|_| !options.retry_after).map(ms),
            retry_after_ms: options.delay.filter(|_| options.retry_after).map(ms),
            error: options.error.clone(),
            consumer: options.consumer.clone(),
        };
        self.settle(queue_name, "nack", &req).await
    }

    /// Hands a delivery back without counting the attempt: visible again at once with the
    /// receive count it had before. For work a shutting-down worker did not start or finish.
    ///
    /// # Errors
    /// `receipt_stale`; transport failures.
    pub async fn release(&self, queue_name: &str, receipt: &str) -> Result<FailureResponse> {
        let req = sluice_wire::ReleaseRequest {
            receipt: receipt.to_owned(),
        };
        self.settle(queue_name, "release", &req).await
    }

    /// Dead-letters a message now, whatever its receive count.
    ///
    /// # Errors
    /// `receipt_stale`; `conflict` when the queue has no DLQ; transport failures.
    pub async fn reject(
        &self,
        queue_name: &str,
        receipt: &str,
        error: Option<&str>,
    ) -> Result<FailureResponse> {
        let req = RejectRequest {
            receipt: receipt.to_owned(),
            error: error.map(str::to_owned),
            consumer: None,
        };
        self.settle(queue_name, "reject", &req).await
    }

    /// Moves a leased message to queue `to`, atomically.
    ///
    /// # Errors
    /// `receipt_stale`; `queue_not_found` for either queue; transport failures.
    pub async fn move_message(
        &self,
        queue_name: &str,
        receipt: &str,
        to: &str,
        error: Option<&str>,
    ) -> Result<FailureResponse> {
        queue(to)?;
        let req = MoveRequest {
            receipt: receipt.to_owned(),
            to: to.to_owned(),
            error: error.map(str::to_owned),
            consumer: None,
        };
        self.settle(queue_name, "move", &req).await
    }

    /// Sets the lease to end `visibility` from now (0 – 12 h).
    ///
    /// # Errors
    /// `receipt_stale`; transport failures.
    pub async fn extend(
        &self,
        queue_name: &str,
        receipt: &str,
        visibility: Duration,
    ) -> Result<ExtendResponse> {
        let req = ExtendRequest {
            receipt: receipt.to_owned(),
            visibility_timeout_ms: ms(visibility),
        };
        self.settle(queue_name, "extend", &req).await
    }

    pub(crate) async fn settle_public<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        queue_name: &str,
        action: &str,
        body: &B,
    ) -> Result<T> {
        self.settle(queue_name, action, body).await
    }

    async fn settle<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        queue_name: &str,
        action: &str,
        body: &B,
    ) -> Result<T> {
        let q = queue(queue_name)?;
        let call = Call::new(
            Method::POST,
            format!("/v1/queues/{q}/{action}"),
            Safety::Idempotent,
        )
        .json(body)?;
        self.call_json(call).await
    }
}
