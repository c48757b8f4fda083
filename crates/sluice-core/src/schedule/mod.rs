//! Schedules: a message enqueued on a cron expression in a named time zone, or every fixed
//! interval, each firing exactly once across restarts and across the nodes of one database.
//!
//! Rules every engine follows:
//! - a schedule's firings are the times its trigger names after its *anchor* (when it was
//!   created, or when its trigger last changed); `last_fired` is the latest firing time the
//!   schedule has passed, enqueued or skipped;
//! - a firing is one atomic step: the message is enqueued and `last_fired` moves to the
//!   firing's time together, and only if `last_fired` is still what the step was worked out
//!   from, the schedule is not paused and the time is after its anchor — so of two nodes
//!   firing the same time, one enqueues and the other changes nothing, and a crash mid-firing
//!   leaves either both or neither;
//! - each message carries the attributes `schedule` (the name) and `scheduled_for` (the
//!   firing's time, RFC 3339) and the dedup id `schedule:NAME:at:MS`;
//! - firings missed while no broker ran are handled by `catch_up` (see [`CatchUp`]);
//! - a paused schedule fires nothing; when resumed, what it missed meanwhile is handled by
//!   `catch_up` as after an outage.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::message::{Attributes, Body, NewMessage};
use crate::name::QueueName;
use crate::time::{Timestamp, rfc3339};

#[cfg(feature = "triggers")]
mod trigger;
#[cfg(feature = "triggers")]
pub use trigger::{Due, ON_TIME_MS, Trigger, time_zone_names};

/// The most missed firings a schedule with `catch_up: all` enqueues at once (the latest
/// ones; older ones are counted as missed).
pub const MAX_CATCH_UP: usize = 1000;
/// Shortest interval of an `every_ms` schedule.
pub const MIN_EVERY_MS: u64 = 1000;
/// Longest interval of an `every_ms` schedule (a year).
pub const MAX_EVERY_MS: u64 = 366 * 24 * 3600 * 1000;

/// A validated schedule name: the same rules as a queue name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScheduleName(String);

impl ScheduleName {
    /// Validates `name`: 1–80 characters of `[A-Za-z0-9_.-]`.
    ///
    /// # Errors
    /// `InvalidArgument` naming what is wrong.
    pub fn new(name: impl Into<String>) -> Result<Self, StoreError> {
        let name = name.into();
        QueueName::new(name.clone()).map_err(|e| {
            StoreError::invalid(e.to_string().replace("queue name", "schedule name"))
        })?;
        Ok(ScheduleName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ScheduleName {
    type Error = StoreError;
    fn try_from(s: String) -> Result<Self, StoreError> {
        ScheduleName::new(s)
    }
}

impl From<ScheduleName> for String {
    fn from(n: ScheduleName) -> String {
        n.0
    }
}

impl std::fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerSpec {
    /// A cron expression (5 fields, or 6 with seconds first) read in an IANA time zone
    /// (`UTC` when none is given).
    Cron {
        /// The expression, e.g. `*/5 * * * *`.
        expr: String,
        /// The zone, e.g. `Europe/Berlin`.
        timezone: String,
    },
    /// Every `every_ms` milliseconds after the anchor.
    Every {
        /// The interval.
        every_ms: u64,
    },
}

/// What a schedule does with firings it missed (the broker was down, or it was paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Missed firings are skipped: a firing is enqueued only while it is on time (within
    /// 10 seconds of its time; see `ON_TIME_MS`).
    #[default]
    None,
    /// The latest missed firing is enqueued once; older ones are skipped.
    One,
    /// Every missed firing is enqueued, the latest [`MAX_CATCH_UP`] of them at most.
    All,
}

impl CatchUp {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::One => "one",
            CatchUp::All => "all",
        }
    }
}

/// What a schedule enqueues, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    /// When it fires.
    pub trigger: TriggerSpec,
    /// Where its messages go.
    pub queue: QueueName,
    /// The body of each message (stored as base64: a schedule is kept as JSON, where raw
    /// bytes would become an array of numbers four times their size).
    #[serde(with = "body_base64")]
    pub body: Body,
    /// Attributes of each message (besides `schedule` and `scheduled_for`).
    pub attributes: Attributes,
    /// The key of each message (the tenant it runs for): fair delivery and the queue's
    /// per-key limits treat it as any message of that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<crate::fair::MessageKey>,
    /// The priority of each message, 0 – 9; `None`: the queue's `default_priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// What happens to missed firings.
    pub catch_up: CatchUp,
    /// A paused schedule fires nothing.
    pub paused: bool,
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Its name.
    pub name: ScheduleName,
    /// What it enqueues, and when.
    pub spec: ScheduleSpec,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last changed.
    pub updated_at: Timestamp,
    /// Firings are counted after this time: the creation, or the last change of trigger.
    pub anchor: Timestamp,
    /// The latest firing time the schedule has passed, enqueued or skipped, if any.
    pub last_fired: Option<Timestamp>,
    /// Firings enqueued so far (not counting triggers by hand).
    pub fired: u64,
    /// Firings skipped under `catch_up`.
    pub missed: u64,
}

impl Schedule {
    /// The time after which firings are still to come.
    pub fn fired_through(&self) -> Timestamp {
        self.last_fired.map_or(self.anchor, |t| t.max(self.anchor))
    }

    /// The message of the firing at `at`. `by_hand` marks a trigger by hand, whose dedup id
    /// differs from any scheduled firing's.
    pub fn message(&self, at: Timestamp, by_hand: bool) -> NewMessage {
        let mut attributes = self.spec.attributes.clone();
        attributes.insert("schedule".into(), self.name.as_str().to_owned());
        attributes.insert("scheduled_for".into(), rfc3339(at));
        let kind = if by_hand { "now" } else { "at" };
        NewMessage {
            body: self.spec.body.clone(),
            attributes,
            delay: Some(std::time::Duration::ZERO),
            dedup_id: Some(format!("schedule:{}:{kind}:{}", self.name, at.as_millis())),
            key: self.spec.key.clone(),
            priority: self.spec.priority,
            ..NewMessage::new(self.spec.body.clone())
        }
    }
}

/// A change to a schedule, or its creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulePut {
    /// The schedule's full new spec.
    pub spec: ScheduleSpec,
}

/// What one firing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireOutcome {
    /// The message was enqueued with this id.
    Fired(crate::message::MessageId),
    /// Another node (or an earlier attempt) fired this time already; nothing changed.
    AlreadyFired,
}

/// Checks a spec's message fields (the trigger, interval range included, is checked by
/// `Trigger::parse`).
///
/// # Errors
/// `InvalidArgument` naming the field.
pub fn validate_spec(spec: &ScheduleSpec) -> Result<(), StoreError> {
    NewMessage {
        attributes: spec.attributes.clone(),
        key: spec.key.clone(),
        priority: spec.priority,
        ..NewMessage::new(spec.body.clone())
    }
    .validate()?;
    for reserved in ["schedule", "scheduled_for"] {
        if spec.attributes.contains_key(reserved) {
            return Err(StoreError::invalid(format!(
                "attribute {reserved:?} is set by the schedule itself; use another name"
            )));
        }
    }
    Ok(())
}

/// A body as `{"kind": …, "base64": …}` in a schedule's stored form.
mod body_base64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::message::{Body, BodyKind};

    #[derive(Serialize, Deserialize)]
    struct Stored {
        kind: BodyKind,
        base64: String,
    }

    pub fn serialize<S: Serializer>(body: &Body, s: S) -> Result<S::Ok, S::Error> {
        Stored {
            kind: body.kind,
            base64: STANDARD.encode(&body.bytes),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Body, D::Error> {
        let stored = Stored::deserialize(d)?;
        let bytes = STANDARD
            .decode(stored.base64)
            .map_err(serde::de::Error::custom)?;
        Ok(Body {
            kind: stored.kind,
            bytes: bytes.into(),
        })
    }
}
