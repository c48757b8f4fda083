//! Receiving messages: the request and the leased deliveries.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::error::StoreError;
use sluice_core::message::Delivery;
use sluice_core::time::rfc3339;

use crate::body::{BodyFields, wire_struct};
use crate::convert::opt_millis;
use crate::settle::AckItem;
use crate::settle::AckOutcome;

/// `POST /v1/queues/{q}/receive`; every field optional (an empty body is allowed).
// The JSON twin of the engine's `sluice_core::ReceiveRequest`, which `to_core` builds; the
// OpenAPI document keeps the name `ReceiveRequest` (a doc line here would change its text).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReceiveRequest)]
pub struct ReceiveRequestWire {
    /// Most messages to lease, 1 – 1000. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max: Option<u32>,
    /// Long poll: how long to wait for a first message, 0 – 30000. Default: the queue's
    /// `receive_wait_ms` (0 unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 30000)]
    pub wait_ms: Option<i64>,
    /// Lease length for these deliveries, 0 – 12 h; default the queue's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 43200000)]
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

impl ReceiveRequestWire {
    /// The acknowledgements this receive carries; `None` when there are none.
    ///
    /// # Errors
    /// `InvalidArgument` when there are more than the batch limit.
    pub fn acks(&mut self) -> Result<Option<Vec<AckItem>>, StoreError> {
        use sluice_core::config::limits::MAX_BATCH;
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
    pub fn to_core(&self) -> Result<sluice_core::store::ReceiveRequest, StoreError> {
        let req = sluice_core::store::ReceiveRequest {
            max: self.max.unwrap_or(1),
            wait: opt_millis("wait_ms", self.wait_ms)?.unwrap_or(Duration::ZERO),
            visibility: opt_millis("visibility_timeout_ms", self.visibility_timeout_ms)?,
            consumer: self.consumer.clone(),
        };
        sluice_core::store::validate_receive(&req)?;
        Ok(req)
    }
}

wire_struct! {
    /// One leased message.
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    pub struct DeliveryView {
        /// Message id.
        pub id: String,
        /// Names this delivery for ack, nack, reject, move and extend.
        pub receipt: String,
        @view {
            /// The body when it was sent as JSON (or as text: see `body_encoding`).
            body,
            /// The body when it was sent as bytes.
            body_base64,
            /// `"text"` when `body` is a string holding a `text/plain` body.
            body_encoding,
        }
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
        /// Its FIFO message group; absent for a message sent without one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub group: Option<String>,
        /// Its key; absent for a message sent without one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub key: Option<String>,
        /// The priority it was delivered at (0 – 9): its own, else the queue's
        /// `default_priority`. Read as 4 from a broker that has no priorities.
        #[serde(default = "crate::receive::default_priority")]
        #[schema(minimum = 0, maximum = 9)]
        pub priority: u8,
        /// The W3C trace context it was sent with; absent for a message sent without one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub trace: Option<crate::TraceView>,
    }
}

/// The priority of a delivery from a broker that has none.
pub(crate) fn default_priority() -> u8 {
    sluice_core::fair::DEFAULT_PRIORITY
}

impl From<&Delivery> for DeliveryView {
    fn from(d: &Delivery) -> Self {
        let body = BodyFields::of(Some(&d.body));
        DeliveryView {
            id: d.id.to_string(),
            receipt: d.receipt.to_string(),
            body: body.json,
            body_base64: body.base64,
            body_encoding: body.encoding,
            attributes: d.attributes.clone(),
            receive_count: d.receive_count,
            max_receive_count: d.max_receive_count,
            enqueued_at: rfc3339(d.enqueued_at),
            last_error: d.last_error.clone(),
            lease_deadline: rfc3339(d.lease_deadline),
            group: d.group.as_ref().map(|g| g.to_string()),
            key: d.key.as_ref().map(|k| k.to_string()),
            priority: d.priority,
            trace: d.trace.as_ref().map(Into::into),
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
