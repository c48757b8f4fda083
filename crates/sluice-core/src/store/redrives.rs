//! [`Redrives`]: jobs that move dead letters back at a rate.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::redrive::{RedriveControl, RedriveId, RedriveJob, RedriveSpec, RedriveStep};

/// Redrive jobs: the store keeps each job and makes each of its steps atomic; the broker's
/// runner decides when to step.
#[async_trait]
pub trait Redrives: Send + Sync + 'static {
    /// Creates a redrive job, running. The broker's job runner then calls
    /// [`Redrives::redrive_step`] at the job's rate.
    ///
    /// # Errors
    /// `QueueNotFound` for the source or destination; `Conflict` while another job of the same
    /// source runs; `InvalidArgument` for a bad spec.
    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError>;

    /// One job.
    ///
    /// # Errors
    /// `RedriveNotFound` (code `message_not_found`) for an unknown id.
    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError>;

    /// All jobs kept (running ones and the most recent finished ones), newest first.
    ///
    /// # Errors
    /// `Unavailable` when storage cannot be read.
    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError>;

    /// Cancels, pauses or resumes a job (see [`RedriveJob::control`]); moves already made
    /// stay. A control that changes nothing returns the job as it is.
    ///
    /// # Errors
    /// `RedriveNotFound` for an unknown id; `Conflict` for pausing or resuming a finished job.
    async fn control_redrive(
        &self,
        id: RedriveId,
        control: RedriveControl,
    ) -> Result<RedriveJob, StoreError>;

    /// Moves up to `max` (1–1000) matching dead letters of a running job, atomically with the
    /// job's progress: a crash between steps never moves a message twice or loses one. Stops
    /// early (setting `blocked`) when the next message's destination is paused or at its
    /// `max_in_flight`. Completes the job when its limit is reached or no match is left.
    ///
    /// # Errors
    /// `RedriveNotFound` for an unknown id; `Conflict` when the job is not running.
    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError>;
}
