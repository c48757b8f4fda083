//! Operator calls: redrive jobs, the audit log and a queue's stats history.
//!
//! Redrive jobs and the audit log need the operator role. Starting a redrive is a POST that
//! acts (it moves messages), so [`Client::create_redrive`] always sends an `Idempotency-Key`:
//! a retry after a lost answer replays the first job instead of starting a second one.

use reqwest::Method;
use sluice_core::RedriveId;
use sluice_wire::{AuditList, HistoryView, RedriveList, RedriveRequest, RedriveView};

use crate::client::{Call, Client, new_idempotency_key, queue};
use crate::error::{Error, Result};
use crate::retry::Safety;

/// What [`Client::audit`] asks for; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this queue's entries.
    pub queue: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only these actions (`queue.purge`, `message.dead_lettered`, …); empty for any.
    pub actions: Vec<String>,
    /// Only entries by this actor (an API key's name, `sluice` for the broker itself).
    pub actor: Option<String>,
    /// Only entries of this kind: `operator` (actions taken by a key or a person), `message`
    /// (dead letters and expiries) or `broker` (the broker's other records).
    pub kind: Option<String>,
    /// At most this many, the newest (the broker's default is 100, its maximum 10000).
    pub limit: Option<usize>,
    /// The page before an earlier answer: its `next_cursor`.
    pub cursor: Option<String>,
}

/// Validates a redrive job id (16 hex digits) before it goes into a path.
fn job_id(id: &str) -> Result<RedriveId> {
    id.trim()
        .parse::<RedriveId>()
        .map_err(|e| Error::InvalidInput(format!("{e}; pass the id `redrive` printed")))
}

impl Client {
    /// Starts a redrive job (operator role). `idempotency_key` makes a repeat of the same
    /// request replay the first job instead of starting another; without one a fresh key is
    /// used, so the client's own retries are still safe.
    ///
    /// # Errors
    /// `queue_not_found` for an unknown source or destination; `conflict` while another job of
    /// the same source runs; `invalid_argument` for a bad rate, limit or filter;
    /// `permission_denied` without the operator role; `idempotency_mismatch` for a reused key
    /// with a different request.
    pub async fn create_redrive(
        &self,
        request: &RedriveRequest,
        idempotency_key: Option<&str>,
    ) -> Result<RedriveView> {
        queue(&request.source)?;
        if let Some(d) = &request.destination {
            queue(d)?;
        }
        let mut call =
            Call::new(Method::POST, "/v1/redrives".into(), Safety::Idempotent).json(request)?;
        call.idempotency_key = Some(
            idempotency_key
                .map(str::to_owned)
                .unwrap_or_else(new_idempotency_key),
        );
        self.call_json(call).await
    }

    /// Running redrive jobs and the most recent finished ones, newest first.
    ///
    /// # Errors
    /// `permission_denied` without the operator role; transport or decode failures.
    pub async fn list_redrives(&self) -> Result<Vec<RedriveView>> {
        let list: RedriveList = self
            .call_json(Call::new(
                Method::GET,
                "/v1/redrives".into(),
                Safety::Idempotent,
            ))
            .await?;
        Ok(list.redrives)
    }

    /// One redrive job and its progress.
    ///
    /// # Errors
    /// `message_not_found` for an unknown job; [`Error::InvalidInput`] for an id that is not
    /// 16 hex digits.
    pub async fn get_redrive(&self, id: &str) -> Result<RedriveView> {
        let id = job_id(id)?;
        self.call_json(Call::new(
            Method::GET,
            format!("/v1/redrives/{id}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Stops a running redrive job; what it moved stays moved. Cancelling a finished job
    /// changes nothing and answers the job as it is.
    ///
    /// # Errors
    /// As [`Client::get_redrive`].
    pub async fn cancel_redrive(&self, id: &str) -> Result<RedriveView> {
        self.control_redrive(id, "cancel").await
    }

    /// Pauses a running redrive job; it keeps its place and its source until resumed. Pausing
    /// a paused job changes nothing.
    ///
    /// # Errors
    /// As [`Client::get_redrive`]; `conflict` when the job has finished.
    pub async fn pause_redrive(&self, id: &str) -> Result<RedriveView> {
        self.control_redrive(id, "pause").await
    }

    /// Resumes a paused redrive job (paused by hand or by its guard). Resuming a running job
    /// changes nothing.
    ///
    /// # Errors
    /// As [`Client::get_redrive`]; `conflict` when the job has finished.
    pub async fn resume_redrive(&self, id: &str) -> Result<RedriveView> {
        self.control_redrive(id, "resume").await
    }

    async fn control_redrive(&self, id: &str, verb: &str) -> Result<RedriveView> {
        let id = job_id(id)?;
        self.call_json(Call::new(
            Method::POST,
            format!("/v1/redrives/{id}/{verb}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// The newest audit log entries (oldest first) that match every condition of `query`.
    ///
    /// # Errors
    /// `invalid_argument` for a `since` that is not RFC 3339 or an unknown kind;
    /// `permission_denied` without the operator role.
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditList> {
        let mut call = Call::new(Method::GET, "/v1/audit".into(), Safety::Idempotent);
        if let Some(q) = &query.queue {
            call.query.push(("queue", queue(q)?.to_string()));
        }
        if let Some(s) = &query.since {
            call.query.push(("since", s.clone()));
        }
        if !query.actions.is_empty() {
            call.query.push(("action", query.actions.join(",")));
        }
        if let Some(a) = &query.actor {
            call.query.push(("actor", a.clone()));
        }
        if let Some(k) = &query.kind {
            call.query.push(("kind", k.clone()));
        }
        if let Some(l) = query.limit {
            call.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &query.cursor {
            call.query.push(("cursor", c.clone()));
        }
        self.call_json(call).await
    }

    /// A queue's stats history: a point every 10 s, kept for 24 h, oldest first. `since` is an
    /// RFC 3339 time; without it the broker answers the last hour.
    ///
    /// # Errors
    /// `queue_not_found`; `invalid_argument` for a `since` that is not RFC 3339.
    pub async fn stats_history(&self, name: &str, since: Option<&str>) -> Result<HistoryView> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::GET,
            format!("/v1/queues/{q}/stats/history"),
            Safety::Idempotent,
        );
        if let Some(s) = since {
            call.query.push(("since", s.to_owned()));
        }
        self.call_json(call).await
    }
}
