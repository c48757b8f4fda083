//! Message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask) as
//! Sluice redrive jobs: the same job an operator starts with `sluice redrive`, so it keeps
//! Sluice's pacing (at most `MaxNumberOfMessagesPerSecond`, spread evenly), resumes after a
//! restart without moving a message twice, and shows in the console and the audit log. A
//! task's handle is the job's id.
//!
//! As in SQS: the source must be a dead-letter queue, without a destination each message goes
//! back to the queue it was dead-lettered from, moved messages start over with a receive count
//! of zero, one task at a time runs per source, and the rate is at most 500 messages a second
//! (also the rate when none is given).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::config::RateLimit;
use sluice_core::redrive::{RedriveControl, RedriveFilter, RedriveId, RedriveJob, RedriveSpec};
use sluice_core::{RedriveState, StoreError};

use crate::error::SqsError;
use crate::queue_url::queue_of_arn;
use crate::{Call, Sqs};

/// SQS's ceiling on a task's rate, and the rate of a task that names none.
const MAX_PER_SECOND: u32 = 500;

/// How many tasks ListMessageMoveTasks answers at most.
const MAX_LISTED: usize = 10;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StartMessageMoveTask {
    source_arn: String,
    destination_arn: Option<String>,
    max_number_of_messages_per_second: Option<i64>,
}

pub(crate) async fn start(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: StartMessageMoveTask = call.input()?;
    let source = queue_of_arn(&req.source_arn)?;
    call.allow(&source)?;
    let destination = match &req.destination_arn {
        Some(arn) => {
            let d = queue_of_arn(arn)?;
            call.allow(&d)?;
            Some(d)
        }
        None if !call.covers_all() => {
            return Err(SqsError::access_denied_implicit_destination());
        }
        None => None,
    };
    let per_second = match req.max_number_of_messages_per_second {
        None => MAX_PER_SECOND,
        Some(n) if (1..=i64::from(MAX_PER_SECOND)).contains(&n) => n as u32,
        Some(n) => {
            return Err(SqsError::invalid_parameter(format!(
                "MaxNumberOfMessagesPerSecond must be 1 to {MAX_PER_SECOND}, got {n}."
            )));
        }
    };
    let queues = sqs.store.list_queues().await?;
    if !queues.iter().any(|q| q.name == source) {
        return Err(SqsError::resource_not_found(format!(
            "The source queue {source} does not exist."
        )));
    }
    if !queues
        .iter()
        .any(|q| q.config.dead_letter_queue.as_ref() == Some(&source))
    {
        return Err(SqsError::unsupported(format!(
            "The source queue {source} is not the dead-letter queue of any queue; a move \
             task moves messages out of a dead-letter queue."
        )));
    }
    if let Some(d) = &destination
        && !queues.iter().any(|q| &q.name == d)
    {
        return Err(SqsError::resource_not_found(format!(
            "The destination queue {d} does not exist."
        )));
    }
    let spec = RedriveSpec {
        source: source.clone(),
        destination: destination.clone(),
        limit: None,
        rate: Some(RateLimit::per_second(per_second)),
        filter: RedriveFilter::default(),
        reset_receive_count: true,
        dry_run: false,
        guard: None,
    };
    let job = sqs.store.create_redrive(spec).await.map_err(|e| match e {
        StoreError::RedriveRunning { running, .. } => SqsError::unsupported(format!(
            "The move task {running} is already running on {source}; one task at a time \
             moves a queue's messages (cancel it with CancelMessageMoveTask)."
        )),
        other => other.into(),
    })?;
    call.audit(
        sqs,
        "redrive.create",
        &source,
        vec![
            ("job", job.id.to_string()),
            ("rate", format!("{per_second}/s")),
            (
                "destination",
                destination.map_or("source queues".into(), |d| d.to_string()),
            ),
            ("via", "StartMessageMoveTask".into()),
        ],
    )
    .await;
    Ok(json!({ "TaskHandle": job.id.to_string() }))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListMessageMoveTasks {
    source_arn: String,
    max_results: Option<i64>,
}

pub(crate) async fn list(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: ListMessageMoveTasks = call.input()?;
    let source = queue_of_arn(&req.source_arn)?;
    call.allow(&source)?;
    let max = match req.max_results {
        None => 1,
        Some(n) if (1..=MAX_LISTED as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(SqsError::invalid_parameter(format!(
                "MaxResults must be 1 to {MAX_LISTED}, got {n}."
            )));
        }
    };
    let visible = match sqs.store.stats(&source).await {
        Ok(s) => s.visible,
        Err(StoreError::QueueNotFound(_)) => {
            return Err(SqsError::resource_not_found(format!(
                "The source queue {source} does not exist."
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let mut jobs: Vec<RedriveJob> = sqs
        .store
        .list_redrives()
        .await?
        .into_iter()
        .filter(|j| j.spec.source == source && !j.spec.dry_run)
        // As over HTTP, a task belongs to every queue it names: one whose destination the
        // key does not cover is not listed, so that its ARN is not revealed.
        .filter(|j| j.spec.queues().all(|q| call.may(q.as_str())))
        .collect();
    jobs.sort_by_key(|j| std::cmp::Reverse((j.created_at, j.id)));
    let results: Vec<Value> = jobs
        .iter()
        .take(max)
        .map(|j| task_view(sqs, j, visible))
        .collect();
    Ok(json!({ "Results": results }))
}

/// A job as SQS shows a task. A job paused by an operator or its guard still holds its source,
/// so it shows as running; one cancelled shows as cancelled.
fn task_view(sqs: &Sqs, job: &RedriveJob, visible: u64) -> Value {
    let status = match job.state {
        RedriveState::Running | RedriveState::Paused => "RUNNING",
        RedriveState::Completed => "COMPLETED",
        RedriveState::Cancelled => "CANCELLED",
    };
    let mut view = json!({
        "TaskHandle": job.id.to_string(),
        "Status": status,
        "SourceArn": sqs.identity.arn(job.spec.source.as_str()),
        "ApproximateNumberOfMessagesMoved": job.moved,
        "StartedTimestamp": job.created_at.as_millis(),
    });
    if let Some(d) = &job.spec.destination {
        view["DestinationArn"] = json!(sqs.identity.arn(d.as_str()));
    }
    if let Some(rate) = &job.spec.rate
        && rate.period == Duration::from_secs(1)
    {
        view["MaxNumberOfMessagesPerSecond"] = json!(rate.limit);
    }
    if status == "RUNNING" {
        view["ApproximateNumberOfMessagesToMove"] = json!(job.moved + visible);
    }
    view
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CancelMessageMoveTask {
    task_handle: String,
}

pub(crate) async fn cancel(sqs: &Sqs, call: &Call) -> Result<Value, SqsError> {
    let req: CancelMessageMoveTask = call.input()?;
    let unknown = || {
        SqsError::resource_not_found(format!(
            "There is no move task with the handle \"{}\".",
            req.task_handle
        ))
    };
    let id: RedriveId = req.task_handle.parse().map_err(|_| unknown())?;
    let job = match sqs.store.get_redrive(id).await {
        Ok(j) => j,
        Err(StoreError::RedriveNotFound(_)) => return Err(unknown()),
        Err(e) => return Err(e.into()),
    };
    // A task naming a queue outside the key's patterns reads as one that does not exist.
    if !job.spec.queues().all(|q| call.may(q.as_str())) {
        return Err(unknown());
    }
    if !matches!(job.state, RedriveState::Running | RedriveState::Paused) {
        return Err(SqsError::unsupported(format!(
            "The move task {} is {} and can no longer be cancelled.",
            req.task_handle,
            job.state.as_str()
        )));
    }
    let job = sqs
        .store
        .control_redrive(id, RedriveControl::Cancel)
        .await?;
    call.audit(
        sqs,
        "redrive.cancel",
        &job.spec.source,
        vec![
            ("job", job.id.to_string()),
            ("moved", job.moved.to_string()),
            ("via", "CancelMessageMoveTask".into()),
        ],
    )
    .await;
    Ok(json!({ "ApproximateNumberOfMessagesMoved": job.moved }))
}
