//! Schedules: messages enqueued on a cron expression or an interval by the broker.

use reqwest::Method;
use sluice_core::schedule::ScheduleName;
use sluice_wire::{ScheduleList, ScheduleRequest, ScheduleView, TriggerAnswer};

use crate::client::{Call, Client};
use crate::error::{Error, Result};
use crate::retry::Safety;

/// Validates a schedule name before it goes into a path.
fn name(n: &str) -> Result<ScheduleName> {
    ScheduleName::new(n).map_err(|e| Error::InvalidInput(e.to_string()))
}

impl Client {
    /// Creates the schedule `name` or replaces it (the role that manages its queue). A new
    /// trigger starts counting now; the same trigger keeps its progress.
    ///
    /// # Errors
    /// `invalid_argument` for a bad cron expression, zone, interval or body;
    /// `queue_not_found` for its queue; `permission_denied`.
    pub async fn put_schedule(
        &self,
        schedule: &str,
        request: &ScheduleRequest,
    ) -> Result<ScheduleView> {
        let n = name(schedule)?;
        let call = Call::new(
            Method::PUT,
            format!("/v1/schedules/{n}"),
            Safety::Idempotent,
        )
        .json(request)?;
        self.call_json(call).await
    }

    /// Every schedule whose queue the key sees, by name.
    ///
    /// # Errors
    /// Transport or decode failures.
    pub async fn list_schedules(&self) -> Result<Vec<ScheduleView>> {
        let list: ScheduleList = self
            .call_json(Call::new(
                Method::GET,
                "/v1/schedules".into(),
                Safety::Idempotent,
            ))
            .await?;
        Ok(list.schedules)
    }

    /// One schedule with its progress and next five firings.
    ///
    /// # Errors
    /// `not_found` for an unknown schedule.
    pub async fn get_schedule(&self, schedule: &str) -> Result<ScheduleView> {
        let n = name(schedule)?;
        self.call_json(Call::new(
            Method::GET,
            format!("/v1/schedules/{n}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Deletes a schedule; the messages it enqueued stay.
    ///
    /// # Errors
    /// `not_found` for an unknown schedule.
    pub async fn delete_schedule(&self, schedule: &str) -> Result<()> {
        let n = name(schedule)?;
        self.execute(&Call::new(
            Method::DELETE,
            format!("/v1/schedules/{n}"),
            Safety::Idempotent,
        ))
        .await?;
        Ok(())
    }

    /// Stops a schedule firing until [`Client::resume_schedule`]. Pausing a paused schedule
    /// changes nothing.
    ///
    /// # Errors
    /// `not_found` for an unknown schedule.
    pub async fn pause_schedule(&self, schedule: &str) -> Result<ScheduleView> {
        self.schedule_action(schedule, "pause").await
    }

    /// Resumes a paused schedule; what it missed while paused is handled by its `catch_up`.
    ///
    /// # Errors
    /// `not_found` for an unknown schedule.
    pub async fn resume_schedule(&self, schedule: &str) -> Result<ScheduleView> {
        self.schedule_action(schedule, "resume").await
    }

    async fn schedule_action(&self, schedule: &str, verb: &str) -> Result<ScheduleView> {
        let n = name(schedule)?;
        self.call_json(Call::new(
            Method::POST,
            format!("/v1/schedules/{n}/{verb}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Sends the schedule's message now, once, besides its firings. Not retried after a
    /// lost answer (a retry would send a second message); retried when the broker was never
    /// reached.
    ///
    /// # Errors
    /// `not_found`; `queue_not_found`; `queue_full`.
    pub async fn trigger_schedule(&self, schedule: &str) -> Result<TriggerAnswer> {
        let n = name(schedule)?;
        self.call_json(Call::new(
            Method::POST,
            format!("/v1/schedules/{n}/trigger"),
            Safety::Unsafe,
        ))
        .await
    }
}
