//! Leasing and settling: `POST /v1/queues/{q}/receive|ack|nack|reject|move|extend`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use sluice_core::{Failure, QueueName, StoreError};
use sluice_wire::{
    AckBatchResponse, AckForm, AckItem, AckOutcome, AckRequestWire, AckResponse, ErrorBody,
    ErrorEnvelope, ExtendRequest, ExtendResponse, FailureResponse, FailureState, MessageStateView,
    MoveRequest, NackRequest, ProgressRequest, ReceiveRequestWire, ReceiveResponse, RejectRequest,
    ReleaseRequest, parse_receipt, rfc3339,
};

use crate::AppState;
use crate::auth::Caller;
use crate::http::deadline::Deadline;
use crate::http::error::{ApiError, http_message};
use crate::http::extract::{JsonBody, OptionalJsonBody, QueuePath};

/// Leases up to `max` messages, waiting up to `wait_ms` (long poll; without it, the queue's
/// `receive_wait_ms`) for the first; first acknowledges the receipts in `ack`, if any.
#[utoipa::path(
    post, path = "/v1/queues/{q}/receive", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = ReceiveRequestWire, content_type = "application/json",
        description = "All fields optional; an empty body leases one message, waiting as long as the queue's receive_wait_ms"),
    responses(
        (status = 200, description = "The deliveries (possibly none)", body = ReceiveResponse),
        (status = 400, description = "invalid_argument", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
    )
)]
pub async fn receive(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    deadline: Deadline,
    OptionalJsonBody(mut req): OptionalJsonBody<ReceiveRequestWire>,
) -> Result<Response, ApiError> {
    let acks = req.acks()?;
    let wait_given = req.wait_ms.is_some();
    let mut req = req.to_core()?;
    if !wait_given {
        // A receive that names no wait waits as the queue says (its `receive_wait`); a queue
        // that does not exist is reported by the lease below.
        if let Ok(info) = st.store.get_queue(&q).await {
            req.wait = info.config.receive_wait;
        }
    }
    deadline.allow(req.wait);
    // The acks are applied before anything is leased, so a worker that hands back its last
    // batch here never holds more than one batch at a time; each outcome is durable.
    let acks_given = acks.is_some();
    let ack = async {
        match acks {
            Some(items) => ack_batch(&st, &q, items).await.map(Some),
            None => Ok(None),
        }
    };
    let lease = st.lease(&q, req);
    // `join` polls the ack first, and the engine says whether the lease may run while the ack
    // is being made durable; otherwise the ack finishes before the lease starts. Should the
    // acks fail after the lease succeeded, the answer is the error and those messages come
    // back when their leases expire, as after any lost answer.
    let overlap = acks_given && st.store.lease_may_overlap_ack(&q).await;
    let (acked, deliveries) = if overlap {
        futures::future::join(ack, lease).await
    } else {
        let acked = ack.await?;
        (Ok(acked), lease.await)
    };
    let (acked, deliveries) = (acked?, deliveries?);
    st.metrics.delivered(&q, &deliveries);
    // The bytes of `ReceiveResponse`, written without a value per delivery.
    let json = sluice_wire::receive_answer::to_json(&deliveries, acked.as_deref());
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}

fn ack_request(item: &mut AckItem) -> Result<sluice_core::AckRequest, StoreError> {
    Ok(sluice_core::AckRequest {
        receipt: parse_receipt(&item.receipt)?,
        result: item.take_result()?,
    })
}

/// Acknowledges (deletes) messages, optionally storing a result.
///
/// The single form answers 409 `receipt_stale` for a stale receipt; the batch forms
/// (`receipts` or `acks`) answer 200 with one outcome per receipt.
#[utoipa::path(
    post, path = "/v1/queues/{q}/ack", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = AckRequestWire, content_type = "application/json"),
    responses(
        (status = 200, description = "Single form: acknowledged", body = AckResponse),
        (status = "2XX", description = "Batch forms: per-receipt outcomes (status 200)", body = AckBatchResponse),
        (status = 400, description = "invalid_argument (e.g. a malformed receipt)", body = ErrorEnvelope),
        (status = 409, description = "receipt_stale", body = ErrorEnvelope),
    )
)]
pub async fn ack(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<AckRequestWire>,
) -> Result<Response, ApiError> {
    match req.into_form()? {
        AckForm::Single(mut item) => {
            let a = ack_request(&mut item)?;
            let id = a.receipt.id;
            let mut out = st.ack(&q, vec![a]).await?;
            match out.pop() {
                Some(Ok(())) => Ok(Json(AckResponse {
                    id: id.to_string(),
                    state: MessageStateView::Completed,
                })
                .into_response()),
                Some(Err(e)) => Err(e.into()),
                None => Err(StoreError::unavailable("store returned no ack outcome").into()),
            }
        }
        AckForm::Batch(items) => {
            let results = ack_batch(&st, &q, items).await?;
            let acked = results.iter().filter(|r| r.ok).count();
            Ok(Json(AckBatchResponse { results, acked }).into_response())
        }
    }
}

/// Acknowledges a batch: malformed receipts get their own outcome, the rest go to the
/// store together.
async fn ack_batch(
    st: &AppState,
    q: &QueueName,
    items: Vec<AckItem>,
) -> Result<Vec<AckOutcome>, ApiError> {
    let mut results: Vec<AckOutcome> = Vec::with_capacity(items.len());
    let mut valid = Vec::new();
    let mut slots = Vec::new();
    for (i, mut item) in items.into_iter().enumerate() {
        let outcome = AckOutcome {
            receipt: item.receipt.clone(),
            ok: false,
            error: None,
        };
        match ack_request(&mut item) {
            Ok(a) => {
                valid.push(a);
                slots.push(i);
                results.push(outcome);
            }
            Err(e) => results.push(AckOutcome {
                error: Some(ErrorBody::new(e.code(), http_message(&e))),
                ..outcome
            }),
        }
    }
    if !valid.is_empty() {
        let out = st.ack(q, valid).await?;
        for (slot, r) in slots.into_iter().zip(out) {
            match r {
                Ok(()) => results[slot].ok = true,
                Err(e) => results[slot].error = Some(ErrorBody::new(e.code(), http_message(&e))),
            }
        }
    }
    Ok(results)
}

/// Returns a message for another attempt (after `delay_ms`, `retry_after_ms` or the queue's
/// backoff), or dead-letters it when its attempts are used up. `retry_after_ms` is the wait
/// the dependency itself asked for (a 429 or 503 with Retry-After): the message waits that
/// long, and a queue with an adaptive rate counts it as congestion.
#[utoipa::path(
    post, path = "/v1/queues/{q}/nack", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = NackRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Where the message went", body = FailureResponse),
        (status = 409, description = "receipt_stale", body = ErrorEnvelope),
    )
)]
pub async fn nack(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<NackRequest>,
) -> Result<Json<FailureResponse>, ApiError> {
    let receipt = parse_receipt(&req.receipt)?;
    let delay = req.delay()?;
    let failure = Failure {
        retry_after: req.retry_after_ms.is_some(),
        error: req.error,
        consumer: req.consumer,
    };
    let out = st.store.nack(&q, receipt, delay, failure).await?;
    st.metrics.settled(receipt.id);
    Ok(Json(FailureResponse::from(&out)))
}

/// Dead-letters a message now, whatever its receive count.
#[utoipa::path(
    post, path = "/v1/queues/{q}/reject", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = RejectRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Dead-lettered", body = FailureResponse),
        (status = 409, description = "receipt_stale, or the queue has no DLQ (conflict)", body = ErrorEnvelope),
    )
)]
pub async fn reject(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<RejectRequest>,
) -> Result<Json<FailureResponse>, ApiError> {
    let receipt = parse_receipt(&req.receipt)?;
    let failure = Failure {
        error: req.error,
        consumer: req.consumer,
        retry_after: false,
    };
    let dlq = st.store.reject(&q, receipt, failure).await?;
    st.metrics.settled(receipt.id);
    Ok(Json(FailureResponse {
        state: FailureState::DeadLettered,
        queue: dlq.to_string(),
    }))
}

/// Hands a delivery back without counting the attempt: visible again at once, with the
/// receive count it had before (for a worker shutting down with unstarted or unfinished work).
#[utoipa::path(
    post, path = "/v1/queues/{q}/release", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = ReleaseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Visible again", body = FailureResponse),
        (status = 409, description = "receipt_stale", body = ErrorEnvelope),
    )
)]
pub async fn release(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<ReleaseRequest>,
) -> Result<Json<FailureResponse>, ApiError> {
    let receipt = parse_receipt(&req.receipt)?;
    st.store.release(&q, receipt).await?;
    st.metrics.settled(receipt.id);
    Ok(Json(FailureResponse {
        state: FailureState::Visible,
        queue: q.to_string(),
    }))
}

/// Moves a leased message to queue `to`, atomically (e.g. `<q>.unprocessable`). The key
/// must cover both queues.
#[utoipa::path(
    post, path = "/v1/queues/{q}/move", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = MoveRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Moved; visible in `queue`", body = FailureResponse),
        (status = 404, description = "queue_not_found (either queue)", body = ErrorEnvelope),
        (status = 409, description = "receipt_stale, or conflict: `to` is the queue the message is in", body = ErrorEnvelope),
    )
)]
pub async fn move_message(
    State(st): State<AppState>,
    caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<MoveRequest>,
) -> Result<Json<FailureResponse>, ApiError> {
    let to = req.to_queue()?;
    caller.allow_also(&to)?;
    let receipt = parse_receipt(&req.receipt)?;
    let failure = Failure {
        error: req.error,
        consumer: req.consumer,
        retry_after: false,
    };
    st.store.move_message(&q, receipt, &to, failure).await?;
    st.metrics.settled(receipt.id);
    Ok(Json(FailureResponse {
        state: FailureState::Visible,
        queue: to.to_string(),
    }))
}

/// Sets a lease to end `visibility_timeout_ms` from now.
#[utoipa::path(
    post, path = "/v1/queues/{q}/extend", tag = "messages",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = ExtendRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The new deadline", body = ExtendResponse),
        (status = 409, description = "receipt_stale", body = ErrorEnvelope),
    )
)]
pub async fn extend(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<ExtendRequest>,
) -> Result<Json<ExtendResponse>, ApiError> {
    let receipt = parse_receipt(&req.receipt)?;
    let visibility = req.visibility()?;
    let lease = st.store.extend(&q, receipt, visibility).await?;
    Ok(Json(ExtendResponse {
        lease_deadline: rfc3339(lease.deadline),
        cancel_requested: lease.cancel_requested,
    }))
}

/// A running handler reports its progress (shown in task status and its events); the answer
/// tells it whether the task was cancelled. The lease is not extended.
#[utoipa::path(
    post, path = "/v1/queues/{q}/progress", tag = "tasks",
    params(("q" = String, Path, description = "Queue name")),
    request_body(content = ProgressRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded", body = ExtendResponse),
        (status = 400, description = "invalid_argument (pct outside 0–100, detail too long)", body = ErrorEnvelope),
        (status = 409, description = "receipt_stale", body = ErrorEnvelope),
    )
)]
pub async fn progress(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    JsonBody(req): JsonBody<ProgressRequest>,
) -> Result<Json<ExtendResponse>, ApiError> {
    let receipt = parse_receipt(&req.receipt)?;
    let progress = sluice_core::Progress {
        pct: req.pct,
        detail: req.detail,
        at: sluice_core::Timestamp(0),
    };
    let lease = st.store.progress(&q, receipt, progress).await?;
    Ok(Json(ExtendResponse {
        lease_deadline: rfc3339(lease.deadline),
        cancel_requested: lease.cancel_requested,
    }))
}
