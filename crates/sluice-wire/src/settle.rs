//! Settling deliveries: ack, nack, reject, release, move, extend and progress.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::error::StoreError;
use sluice_core::message::{Body, MessageState};
use sluice_core::name::QueueName;
use sluice_core::store::NackOutcome;
use sluice_core::time::rfc3339;

use crate::body::{body_from, wire_struct};
use crate::browse::MessageStateView;
use crate::convert::{millis, opt_millis, queue_name};
use crate::error::ErrorBody;

wire_struct! {
    /// One acknowledgement of a batch.
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct AckItem {
        /// The delivery.
        pub receipt: String,
        @request {
            /// A result (any JSON) kept with the completed record for the queue's `result_ttl`.
            result,
            /// A binary result in base64.
            result_base64,
        }
    }
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
    /// `InvalidArgument` for both forms at once, bad base64, or a JSON result nested deeper
    /// than [`MAX_JSON_DEPTH`](sluice_core::config::limits::MAX_JSON_DEPTH).
    pub fn take_result(&mut self) -> Result<Option<Body>, StoreError> {
        let result = body_from(
            "result",
            self.result.take(),
            self.result_base64.take(),
            false,
        )?;
        if let Some(r) = &result
            && r.kind == sluice_core::message::BodyKind::Json
        {
            sluice_core::json_depth::check("result", &r.bytes)?;
        }
        Ok(result)
    }
}

wire_struct! {
    /// `POST /v1/queues/{q}/ack`: one of `{"receipt", "result"?}`, `{"receipts": [...]}` or
    /// `{"acks": [{"receipt", "result"?}]}`.
    // The JSON twin of the engine's `sluice_core::AckRequest` (one per receipt, built from
    // `AckItem`s); the OpenAPI document keeps the name `AckRequest` (a doc line here would
    // change its text).
    #[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    #[schema(as = AckRequest)]
    pub struct AckRequestWire {
        /// Single form: the delivery. A stale receipt answers 409 `receipt_stale`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub receipt: Option<String>,
        @request {
            /// Single form: a result (any JSON).
            result,
            /// Single form: a binary result in base64.
            result_base64,
        }
        /// Batch form without results (1 – 1000); answers 200 with one outcome per receipt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub receipts: Option<Vec<String>>,
        /// Batch form with results (1 – 1000); answers 200 with one outcome per receipt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub acks: Option<Vec<AckItem>>,
    }
}

/// The shape of an ack request once its form is known.
#[derive(Debug)]
pub enum AckForm {
    /// One receipt: errors are the answer's status.
    Single(AckItem),
    /// A batch: each receipt gets its own outcome.
    Batch(Vec<AckItem>),
}

impl AckRequestWire {
    /// Which form this is.
    ///
    /// # Errors
    /// `InvalidArgument` when the forms are mixed, none is given or a batch is empty or over
    /// 1000.
    pub fn into_form(self) -> Result<AckForm, StoreError> {
        use sluice_core::config::limits::MAX_BATCH;
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
    #[schema(minimum = 0, maximum = 604800000)]
    pub delay_ms: Option<i64>,
    /// The dependency's own Retry-After (0 – 7 days): the message waits this long, and a queue
    /// with an adaptive rate counts the nack as congestion. Instead of `delay_ms`, not with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 604800000)]
    pub retry_after_ms: Option<i64>,
    /// The error, stored as `last_error` and in the attempt history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who is reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
}

impl NackRequest {
    /// The delay asked for: `delay_ms`, or the dependency's `retry_after_ms`.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative delay, or both fields at once.
    pub fn delay(&self) -> Result<Option<Duration>, StoreError> {
        match (self.delay_ms, self.retry_after_ms) {
            (Some(_), Some(_)) => Err(StoreError::invalid(
                "give delay_ms or retry_after_ms, not both: retry_after_ms is the dependency's \
                 own Retry-After, delay_ms any other wait",
            )),
            (_, Some(ms)) => opt_millis("retry_after_ms", Some(ms)),
            (ms, None) => opt_millis("delay_ms", ms),
        }
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
    #[schema(minimum = 0, maximum = 43200000)]
    pub visibility_timeout_ms: i64,
}

impl ExtendRequest {
    /// The new lease length.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative or over-long duration.
    pub fn visibility(&self) -> Result<Duration, StoreError> {
        let v = millis("visibility_timeout_ms", self.visibility_timeout_ms)?;
        sluice_core::store::validate_visibility(v)?;
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
    #[schema(minimum = 0, maximum = 100)]
    pub pct: f64,
    /// A short note (at most 1 KiB).
    #[schema(max_length = 1024)]
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

impl From<&sluice_core::message::Progress> for ProgressView {
    fn from(p: &sluice_core::message::Progress) -> Self {
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
pub fn parse_receipt(s: &str) -> Result<sluice_core::receipt::Receipt, StoreError> {
    s.parse()
}
