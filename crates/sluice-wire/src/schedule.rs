//! Schedules: `PUT /v1/schedules/{name}` and the views of a schedule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use sluice_core::error::StoreError;
use sluice_core::name::QueueName;
use sluice_core::schedule::{CatchUp, Schedule, ScheduleSpec, TriggerSpec};
use sluice_core::time::{Timestamp, rfc3339};

use crate::body::{BodyFields, body_from, wire_struct};

/// What a schedule does with firings it missed while no broker ran or while it was paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUpWire {
    /// Skip them: a firing is enqueued only within 10 s of its time.
    #[default]
    None,
    /// Enqueue the latest missed firing once.
    One,
    /// Enqueue every missed firing, the latest 1,000 at most.
    All,
}

impl From<CatchUpWire> for CatchUp {
    fn from(c: CatchUpWire) -> Self {
        match c {
            CatchUpWire::None => CatchUp::None,
            CatchUpWire::One => CatchUp::One,
            CatchUpWire::All => CatchUp::All,
        }
    }
}

impl From<CatchUp> for CatchUpWire {
    fn from(c: CatchUp) -> Self {
        match c {
            CatchUp::None => CatchUpWire::None,
            CatchUp::One => CatchUpWire::One,
            CatchUp::All => CatchUpWire::All,
        }
    }
}

wire_struct! {
    /// `PUT /v1/schedules/{name}`: creates the schedule or replaces it. Give `cron` (with an
    /// optional `timezone`) or `every_ms`.
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ScheduleRequest {
        /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6
        /// with seconds first, e.g. `*/5 * * * *`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cron: Option<String>,
        /// The IANA time zone the expression is read in, e.g. `Europe/Berlin`; default `UTC`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub timezone: Option<String>,
        /// Fire every this many milliseconds (1,000 to a year), counted from when the
        /// schedule was created or its trigger last changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub every_ms: Option<u64>,
        /// The queue each firing is sent to.
        pub queue: String,
        @request {
            /// The body of each message as any JSON value.
            body,
            /// The body of each message as bytes in base64.
            body_base64,
        }
        /// Attributes of each message; `schedule` and `scheduled_for` are added.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attributes: Option<BTreeMap<String, String>>,
        /// The key of each message (the tenant it runs for), 1 – 128 characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub key: Option<String>,
        /// The priority of each message, 0 – 9 (9 most urgent); default the queue's
        /// `default_priority`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 9)]
        pub priority: Option<u8>,
        /// What happens to firings missed while no broker ran or the schedule was paused
        /// (default `none`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub catch_up: Option<CatchUpWire>,
        /// A paused schedule fires nothing (default false).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub paused: Option<bool>,
    }
}

impl ScheduleRequest {
    /// The core spec. The cron expression and zone are checked by the store.
    ///
    /// # Errors
    /// `InvalidArgument` for both or neither of `cron` and `every_ms`, a `timezone` without
    /// `cron`, a bad queue name, or a missing or doubled body.
    pub fn into_spec(self) -> Result<ScheduleSpec, StoreError> {
        let trigger = match (self.cron, self.every_ms) {
            (Some(expr), None) => TriggerSpec::Cron {
                expr,
                timezone: self.timezone.unwrap_or_else(|| "UTC".to_owned()),
            },
            (None, Some(every_ms)) if self.timezone.is_none() => TriggerSpec::Every { every_ms },
            (None, Some(_)) => {
                return Err(StoreError::invalid(
                    "timezone applies to cron only; an every_ms schedule counts from its start",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(StoreError::invalid(
                    "give either cron or every_ms, not both",
                ));
            }
            (None, None) => {
                return Err(StoreError::invalid(
                    "missing trigger: give cron (e.g. \"*/5 * * * *\") or every_ms (e.g. 60000)",
                ));
            }
        };
        let queue = QueueName::new(self.queue)?;
        let body = body_from("body", self.body, self.body_base64, true)?
            .ok_or_else(|| StoreError::invalid("missing body"))?;
        Ok(ScheduleSpec {
            trigger,
            queue,
            body,
            attributes: self.attributes.unwrap_or_default(),
            key: self.key.map(sluice_core::MessageKey::new).transpose()?,
            priority: self.priority,
            catch_up: self.catch_up.unwrap_or_default().into(),
            paused: self.paused.unwrap_or(false),
        })
    }
}

wire_struct! {
    /// A schedule: its spec, its progress and its next firings.
    #[derive(Debug, Serialize, Deserialize, ToSchema)]
    pub struct ScheduleView {
        /// Its name.
        pub name: String,
        /// The cron expression, for a cron schedule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cron: Option<String>,
        /// The zone of the cron expression.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub timezone: Option<String>,
        /// The interval, for an interval schedule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub every_ms: Option<u64>,
        /// Where its messages go.
        pub queue: String,
        @view {
            /// The body of each message (JSON, or text with `body_encoding: "text"`).
            body,
            /// The body of each message in base64, when it is bytes.
            body_base64,
            /// `text` when `body` holds a text.
            body_encoding,
        }
        /// Attributes of each message (besides `schedule` and `scheduled_for`).
        pub attributes: BTreeMap<String, String>,
        /// The key of each message, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub key: Option<String>,
        /// The priority of each message, when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority: Option<u8>,
        /// What happens to missed firings.
        pub catch_up: CatchUpWire,
        /// Whether it is paused.
        pub paused: bool,
        /// When it was created.
        pub created_at: String,
        /// When it was last changed.
        pub updated_at: String,
        /// The time of the latest firing enqueued.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_fired: Option<String>,
        /// Firings enqueued so far.
        pub fired: u64,
        /// Firings skipped under `catch_up` (or because the queue was gone).
        pub missed: u64,
        /// The next five firings (none while paused).
        pub next: Vec<String>,
    }
}

impl ScheduleView {
    /// The view of `s` with its next firings.
    pub fn new(s: &Schedule, next: &[Timestamp]) -> Self {
        let body = BodyFields::of(Some(&s.spec.body));
        let (cron, timezone, every_ms) = match &s.spec.trigger {
            TriggerSpec::Cron { expr, timezone } => {
                (Some(expr.clone()), Some(timezone.clone()), None)
            }
            TriggerSpec::Every { every_ms } => (None, None, Some(*every_ms)),
        };
        ScheduleView {
            name: s.name.to_string(),
            cron,
            timezone,
            every_ms,
            queue: s.spec.queue.to_string(),
            body: body.json,
            body_base64: body.base64,
            body_encoding: body.encoding,
            attributes: s.spec.attributes.clone(),
            key: s.spec.key.as_ref().map(|k| k.as_str().to_owned()),
            priority: s.spec.priority,
            catch_up: s.spec.catch_up.into(),
            paused: s.spec.paused,
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
            last_fired: s.last_fired.map(rfc3339),
            fired: s.fired,
            missed: s.missed,
            next: next.iter().copied().map(rfc3339).collect(),
        }
    }
}

/// `GET /v1/schedules`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleView>,
}

/// `POST /v1/schedules/{name}/trigger`: the message sent now.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TriggerAnswer {
    /// The message's id.
    pub id: String,
    /// The time it was sent for (now).
    pub scheduled_for: String,
}
