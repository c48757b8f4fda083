//! [`Schedules`]: schedules kept by the store, and each of their steps made atomic.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::message::MessageId;
use crate::schedule::{Schedule, ScheduleName, ScheduleSpec};
use crate::time::Timestamp;

/// One step of a schedule, computed by the broker's scheduler from the schedule it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleStep {
    /// The schedule's `last_fired` when the step was computed; the step applies only if it
    /// still is (so of two nodes stepping the same schedule, one applies).
    pub expected: Option<Timestamp>,
    /// The schedule's `last_fired` after the step.
    pub through: Timestamp,
    /// Whether the firing at `through` is enqueued (else the step only skips).
    pub fire: bool,
    /// Firings skipped up to `through`, added to the schedule's `missed`.
    pub missed: u64,
}

/// What a step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// The firing was enqueued with this id (`duplicate` when the queue's dedup window
    /// already held it), and the schedule moved on.
    Fired {
        /// The message.
        id: MessageId,
    },
    /// The schedule moved on without enqueuing (a skip step).
    Skipped,
    /// The schedule's target queue does not exist: the firing was counted as missed and the
    /// schedule moved on.
    QueueMissing,
    /// The schedule was no longer at `expected` (another node stepped it, or it changed):
    /// nothing changed.
    Stale,
}

/// Schedules: the store keeps each schedule and applies each of its steps atomically — the
/// firing's message and the schedule's progress are durable together or not at all, across
/// a crash and across the nodes of one database. The broker's scheduler decides when.
#[async_trait]
pub trait Schedules: Send + Sync + 'static {
    /// Creates the schedule `name` or replaces its spec; answers the schedule and whether it
    /// was created. A new schedule, or one whose trigger changed, is anchored at now and has
    /// not fired; otherwise its progress and counts are kept.
    ///
    /// # Errors
    /// `QueueNotFound` for the spec's queue; `InvalidArgument` for a bad spec.
    async fn put_schedule(
        &self,
        name: &ScheduleName,
        spec: ScheduleSpec,
    ) -> Result<(Schedule, bool), StoreError>;

    /// One schedule.
    ///
    /// # Errors
    /// `ScheduleNotFound` (code `not_found`) for an unknown name.
    async fn get_schedule(&self, name: &ScheduleName) -> Result<Schedule, StoreError>;

    /// All schedules, by name.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn list_schedules(&self) -> Result<Vec<Schedule>, StoreError>;

    /// Deletes a schedule; messages it enqueued stay.
    ///
    /// # Errors
    /// `ScheduleNotFound` for an unknown name.
    async fn delete_schedule(&self, name: &ScheduleName) -> Result<(), StoreError>;

    /// Applies one step (see [`ScheduleStep`]): when the schedule's `last_fired` is still
    /// `expected`, enqueues [`Schedule::message`] of the firing at `through` into its queue
    /// if `fire`, sets `last_fired` to `through`, adds one to `fired` if it enqueued and
    /// `missed` to `missed` — all in one atomic write. A paused schedule is stepped like any
    /// other (the scheduler does not step it).
    ///
    /// # Errors
    /// `ScheduleNotFound` for an unknown name; `InvalidArgument` when `through` is not after
    /// `expected`.
    async fn step_schedule(
        &self,
        name: &ScheduleName,
        step: ScheduleStep,
    ) -> Result<StepOutcome, StoreError>;
}
