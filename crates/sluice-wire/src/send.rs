//! Sending messages: one or a batch, JSON or raw.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use sluice_core::error::StoreError;
use sluice_core::fair::MessageKey;
use sluice_core::group::GroupName;
use sluice_core::message::{Attributes, Body, NewMessage};

use crate::body::{body_from, wire_struct};
use crate::convert::opt_millis;
use crate::trace::TraceView;

wire_struct! {
    /// One message of a send.
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct SendMessage {
        @request {
            /// The body as any JSON value (kept as the exact JSON text).
            body,
            /// The body as bytes, in base64 (standard alphabet, padded).
            body_base64,
        }
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
        /// FIFO message group (1 – 128 characters, no control characters): messages of one
        /// group are delivered in send order, at most the queue's `max_in_flight_per_group`
        /// (default 1) at a time, while other groups and ungrouped messages flow.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub group: Option<String>,
        /// The tenant, customer or account the message belongs to (1 – 128 characters, no
        /// control characters): deliveries go round-robin across a queue's keys, so one key's
        /// backlog does not hold the others back. Messages without one share an implicit key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub key: Option<String>,
        /// 0 – 9, 9 most urgent: a visible message of a higher priority is delivered before
        /// any of a lower one. Default the queue's `default_priority` (4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 9)]
        pub priority: Option<u8>,
        /// W3C trace context of the span that sends it, handed to every consumer; default
        /// the request's `traceparent` and `tracestate` headers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub trace: Option<TraceView>,
    }
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
            trace: self.trace.map(TraceView::into_context).transpose()?,
            body,
            attributes: self.attributes.unwrap_or_default(),
            delay: opt_millis("delay_ms", self.delay_ms)?,
            dedup_id: self.dedup_id,
            group: group_from(self.group)?,
            key: key_from(self.key)?,
            priority: self.priority,
        };
        m.validate()?;
        Ok(m)
    }
}

/// A wire key as the core's, checked.
fn key_from(key: Option<String>) -> Result<Option<MessageKey>, StoreError> {
    key.map(MessageKey::new).transpose()
}

/// A wire group name as the core's, checked.
fn group_from(group: Option<String>) -> Result<Option<GroupName>, StoreError> {
    group.map(GroupName::new).transpose()
}

wire_struct! {
    /// `POST /v1/queues/{q}/messages` with a JSON body: one message (`body` or `body_base64`
    /// plus options at the top level) or a batch (`messages`, 1 – 1000, nothing else).
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct SendRequest {
        @request {
            /// One message: the body as any JSON value.
            body,
            /// One message: the body as bytes in base64.
            body_base64,
        }
        /// One message: string attributes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attributes: Option<BTreeMap<String, String>>,
        /// One message: delivery delay.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub delay_ms: Option<i64>,
        /// One message: dedup id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dedup_id: Option<String>,
        /// One message: FIFO message group (1 – 128 characters, no control characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub group: Option<String>,
        /// One message: its key (1 – 128 characters, no control characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub key: Option<String>,
        /// One message: its priority, 0 – 9 (9 most urgent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 9)]
        pub priority: Option<u8>,
        /// One message: its W3C trace context; default the request's `traceparent` and
        /// `tracestate` headers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub trace: Option<TraceView>,
        /// A batch of 1 – 1000 messages (16 MiB of bodies in all), stored all or nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub messages: Option<Vec<SendMessage>>,
    }
}

impl SendRequest {
    /// The messages to send and whether the request was a batch (which answers with `ids`).
    ///
    /// # Errors
    /// `InvalidArgument` naming the message and field at fault.
    pub fn into_messages(self) -> Result<(Vec<NewMessage>, bool), StoreError> {
        use sluice_core::config::limits::MAX_BATCH;
        match self.messages {
            Some(batch) => {
                if self.body.is_some()
                    || self.body_base64.is_some()
                    || self.attributes.is_some()
                    || self.delay_ms.is_some()
                    || self.dedup_id.is_some()
                    || self.group.is_some()
                    || self.key.is_some()
                    || self.priority.is_some()
                    || self.trace.is_some()
                {
                    return Err(StoreError::invalid(
                        "a batch send holds everything inside \"messages\"; body, body_base64, \
                         attributes, delay_ms, dedup_id, group, key, priority and trace are not \
                         allowed beside it",
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
                    group: self.group,
                    key: self.key,
                    priority: self.priority,
                    trace: self.trace,
                }
                .into_new_message()?;
                Ok((vec![m], false))
            }
        }
    }
}

/// Options of a raw send (`application/octet-stream` or `text/plain` body), as query
/// parameters: `?delay_ms=&dedup_id=&group=&key=&priority=`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RawSendParams {
    /// Delivery delay of a raw send (0 – 7 days); with JSON, of each message without its own.
    pub delay_ms: Option<i64>,
    /// Dedup id of a raw send; with JSON, of each message without its own.
    pub dedup_id: Option<String>,
    /// FIFO message group of a raw send (1 – 128 characters, no control characters); with
    /// JSON, of each message without its own.
    #[param(min_length = 1, max_length = 128)]
    pub group: Option<String>,
    /// Key of a raw send (1 – 128 characters); with JSON, of each message without its own.
    #[param(min_length = 1, max_length = 128)]
    pub key: Option<String>,
    /// Priority of a raw send (0 – 9, 9 most urgent); with JSON, of each message without
    /// its own.
    #[param(minimum = 0, maximum = 9)]
    pub priority: Option<u8>,
}

impl RawSendParams {
    /// True when no option is given.
    pub fn is_empty(&self) -> bool {
        self.delay_ms.is_none()
            && self.dedup_id.is_none()
            && self.group.is_none()
            && self.key.is_none()
            && self.priority.is_none()
    }

    /// Gives each of `messages` the options it does not set itself: with a JSON body, the
    /// query string's options are defaults for its messages.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative or too long delay, a bad dedup id, group, key or
    /// priority.
    pub fn fill(self, messages: &mut [NewMessage]) -> Result<(), StoreError> {
        let delay = opt_millis("delay_ms", self.delay_ms)?;
        let group = group_from(self.group)?;
        let key = key_from(self.key)?;
        for m in messages {
            if m.key.is_none() {
                m.key.clone_from(&key);
            }
            m.priority = m.priority.or(self.priority);
            m.delay = m.delay.or(delay);
            if m.dedup_id.is_none() {
                m.dedup_id.clone_from(&self.dedup_id);
            }
            if m.group.is_none() {
                m.group.clone_from(&group);
            }
            m.validate()?;
        }
        Ok(())
    }

    /// The core message for a raw body.
    ///
    /// # Errors
    /// `InvalidArgument` for a negative delay, a bad dedup id or a bad group.
    pub fn into_new_message(self, body: Body) -> Result<NewMessage, StoreError> {
        let m = NewMessage {
            trace: None,
            body,
            attributes: Attributes::new(),
            delay: opt_millis("delay_ms", self.delay_ms)?,
            dedup_id: self.dedup_id,
            group: group_from(self.group)?,
            key: key_from(self.key)?,
            priority: self.priority,
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
