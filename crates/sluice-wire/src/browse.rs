//! Browsing a queue and looking up one message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use sluice_core::error::StoreError;
use sluice_core::message::{
    Attempt, AttemptOutcome, Attributes, DeadLetterReason, Message, MessageState,
};
use sluice_core::store::{BrowsePage, BrowseState};
use sluice_core::time::rfc3339;

use crate::body::{BodyFields, wire_struct};
use crate::redrive::RedriveFilterView;
use crate::settle::ProgressView;

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
    #[param(inline)]
    pub state: Option<BrowseStateWire>,
    /// Page size, 1 – 1000. Default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
    /// Only messages whose `last_error` contains this text.
    #[serde(default)]
    pub error_contains: Option<String>,
    /// Only messages whose `last_error` is exactly this text.
    #[serde(default)]
    pub error_is: Option<String>,
    /// Only messages dead-lettered for this reason.
    #[serde(default)]
    pub reason: Option<DeadLetterReasonView>,
    /// Only messages dead-lettered or moved from this queue.
    #[serde(default)]
    pub source_queue: Option<String>,
    /// Only messages sent with this key.
    #[serde(default)]
    pub key: Option<String>,
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
    pub fn filter(&self) -> Result<Option<sluice_core::redrive::RedriveFilter>, StoreError> {
        let mut attributes = Attributes::new();
        if let Some(a) = &self.attribute {
            let (k, v) = a.split_once('=').ok_or_else(|| {
                StoreError::invalid(format!("attribute must be written key=value, got \"{a}\""))
            })?;
            attributes.insert(k.to_string(), v.to_string());
        }
        // A person types these: RFC 3339, or how long ago (`10m`).
        let now = sluice_core::time::Clock::now(&sluice_core::time::SystemClock);
        let time = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(|s| sluice_core::human::parse_time(field, s, now).map(rfc3339))
                .transpose()
        };
        let view = RedriveFilterView {
            error_contains: self.error_contains.clone(),
            error_is: self.error_is.clone(),
            reason: self.reason,
            source_queue: self.source_queue.clone(),
            key: self.key.clone(),
            attributes,
            dead_lettered_before: time("dead_lettered_before", &self.dead_lettered_before)?,
            dead_lettered_after: time("dead_lettered_after", &self.dead_lettered_after)?,
        };
        let filter = view.to_core()?;
        Ok((filter != sluice_core::redrive::RedriveFilter::default()).then_some(filter))
    }

    /// The core request, validated.
    ///
    /// # Errors
    /// `InvalidArgument` for a limit out of range.
    pub fn to_core(&self) -> Result<sluice_core::store::BrowseRequest, StoreError> {
        let limit = self.limit.unwrap_or(100);
        sluice_core::store::validate_limit(limit)?;
        Ok(sluice_core::store::BrowseRequest {
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

impl From<DeadLetterReasonView> for DeadLetterReason {
    fn from(r: DeadLetterReasonView) -> Self {
        match r {
            DeadLetterReasonView::Exhausted => DeadLetterReason::Exhausted,
            DeadLetterReasonView::LeaseExpired => DeadLetterReason::LeaseExpired,
            DeadLetterReasonView::Rejected => DeadLetterReason::Rejected,
            DeadLetterReasonView::Expired => DeadLetterReason::Expired,
        }
    }
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
    /// Acknowledged: the delivery that completed the message.
    Acked,
}

impl From<AttemptOutcome> for AttemptOutcomeView {
    fn from(o: AttemptOutcome) -> Self {
        match o {
            AttemptOutcome::Nacked => AttemptOutcomeView::Nacked,
            AttemptOutcome::LeaseExpired => AttemptOutcomeView::LeaseExpired,
            AttemptOutcome::Rejected => AttemptOutcomeView::Rejected,
            AttemptOutcome::Moved => AttemptOutcomeView::Moved,
            AttemptOutcome::Acked => AttemptOutcomeView::Acked,
        }
    }
}

/// One finished delivery (the last 20 are kept, the acknowledged one included).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// When it ended.
    pub at: String,
    /// How it ended.
    pub outcome: AttemptOutcomeView,
    /// The error reported.
    pub error: Option<String>,
    /// The consumer that held it: the name it gave when it settled the delivery, else the
    /// one it gave when it received it.
    pub consumer: Option<String>,
    /// When the delivery began (its lease was handed out); absent for deliveries recorded
    /// before lease starts were kept. `at` less this is how long the consumer held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            at: rfc3339(a.at),
            outcome: a.outcome.into(),
            error: a.error.clone(),
            consumer: a.consumer.clone(),
            started_at: a.started_at.map(rfc3339),
        }
    }
}

wire_struct! {
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
        @view {
            /// The body when sent as JSON or text (absent for a completed record).
            body,
            /// The body when sent as bytes.
            body_base64,
            /// `"text"` when `body` holds a text body.
            body_encoding,
        }
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
        @view {
            /// The stored result of a completed message, when JSON or text.
            result,
            /// The stored result when binary.
            result_base64,
            /// `"text"` when `result` holds text.
            result_encoding,
        }
        /// When it was acknowledged.
        pub completed_at: Option<String>,
        /// Cancellation was requested (running) or the task ended cancelled (completed).
        pub cancelled: bool,
        /// The last progress its running handler reported.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub progress: Option<ProgressView>,
        /// Its FIFO message group; absent for a message sent without one. Kept through
        /// dead-lettering, moves and redrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub group: Option<String>,
        /// Its key; absent for a message sent without one. Kept through dead-lettering, moves
        /// and redrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 128)]
        pub key: Option<String>,
        /// The priority it was sent with (0 – 9); absent when it named none and so is
        /// delivered at its queue's `default_priority`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 9)]
        pub priority: Option<u8>,
        /// The W3C trace context it was sent with; absent for a message sent without one and
        /// for a completed record. Kept through retries, dead-lettering, moves and redrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub trace: Option<crate::TraceView>,
    }
}

impl From<&Message> for MessageView {
    fn from(m: &Message) -> Self {
        let body = BodyFields::of(m.body.as_ref());
        let result = BodyFields::of(m.result.as_ref());
        MessageView {
            id: m.id.to_string(),
            queue: m.queue.to_string(),
            state: m.state.into(),
            dead_lettered: m.dead_letter.is_some(),
            body: body.json,
            body_base64: body.base64,
            body_encoding: body.encoding,
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
            result: result.json,
            result_base64: result.base64,
            result_encoding: result.encoding,
            completed_at: m.completed_at.map(rfc3339),
            cancelled: m.cancelled,
            progress: m.progress.as_ref().map(ProgressView::from),
            group: m.group.as_ref().map(|g| g.to_string()),
            key: m.key.as_ref().map(|k| k.to_string()),
            priority: m.priority,
            trace: m.trace.as_ref().map(Into::into),
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
