//! How a worker leases and settles: over HTTP through its [`Client`], or over the frame
//! protocol when its builder was given a [`FramePool`] (`WorkerBuilder::frames`). Both carry
//! the same operations with the same rules and answers; frames cost the broker and the worker
//! less per message. Queue settings and task lookups always go over HTTP.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::message::{Body, Delivery, MessageId};
use sluice_core::receipt::Receipt;
use sluice_core::time::Timestamp;
use sluice_wire::{AckItem, AckRequestWire, DeliveryView, FailureState};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::frames::{
    FrameAck, FrameDelivery, FramePool, FrameReceipt, TaggedFrameDelivery, TracedFrameDelivery,
};
use crate::messages::{NackOptions, ReceiveOptions};
use crate::worker::settle::AckJob;

/// The way to the broker for one worker's leases and settlements.
#[derive(Clone)]
pub(crate) enum Lane {
    /// JSON over HTTP.
    Http(Arc<Client>),
    /// The frame protocol.
    Frames(Arc<FramePool>),
}

impl Lane {
    /// Leases deliveries.
    pub async fn receive(
        &self,
        queue: &str,
        options: &ReceiveOptions,
    ) -> Result<Vec<DeliveryView>> {
        match self {
            Lane::Http(c) => c.receive(queue, options).await,
            Lane::Frames(p) => {
                let mut conn = p.get().await?;
                if conn.broker_version() >= 3 {
                    let got = conn.receive_traced(queue, options).await?;
                    return Ok(got.into_iter().map(traced_view).collect());
                }
                if conn.broker_version() >= 2 {
                    let got = conn.receive_tagged(queue, options).await?;
                    return Ok(got.into_iter().map(tagged_view).collect());
                }
                // A broker older than tagged deliveries: the task is told no key and the
                // default priority.
                let got = conn.receive_with(queue, options).await?;
                Ok(got
                    .into_iter()
                    .map(|d| view(d, None, None, sluice_core::fair::DEFAULT_PRIORITY))
                    .collect())
            }
        }
    }

    /// Acknowledges a batch, each job with its result; one outcome per job, in order.
    pub async fn ack(&self, queue: &str, jobs: &[AckJob]) -> Result<Vec<Result<()>>> {
        match self {
            Lane::Http(c) => {
                let req = AckRequestWire {
                    acks: Some(
                        jobs.iter()
                            .map(|j| AckItem {
                                receipt: j.receipt.clone(),
                                result: j.result.clone(),
                                result_base64: None,
                            })
                            .collect(),
                    ),
                    ..AckRequestWire::default()
                };
                let answer = c.ack_items(queue, &req).await?;
                let mut results = answer.results.into_iter();
                Ok(jobs
                    .iter()
                    .map(|_| match results.next() {
                        Some(o) if o.ok => Ok(()),
                        Some(o) => Err(o.error.as_ref().map_or_else(
                            || Error::Decode("ack outcome without an error".to_owned()),
                            Error::from_item,
                        )),
                        None => Err(Error::Decode("ack answer is missing an outcome".to_owned())),
                    })
                    .collect())
            }
            Lane::Frames(p) => {
                let acks = jobs
                    .iter()
                    .map(|j| {
                        Ok(FrameAck {
                            receipt: receipt(&j.receipt)?,
                            result: j.result.as_ref().map(|r| Body::json(r.get().to_owned())),
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let out = p.get().await?.ack_with_results(queue, acks).await?;
                if out.len() != jobs.len() {
                    return Err(Error::Decode(format!(
                        "{} ack outcomes for {} acks",
                        out.len(),
                        jobs.len()
                    )));
                }
                Ok(out
                    .into_iter()
                    .map(|o| {
                        o.map_or(Ok(()), |e| {
                            Err(crate::frames::FrameClientError::Refused(e).into())
                        })
                    })
                    .collect())
            }
        }
    }

    /// Gives a delivery back for another attempt; where it went.
    pub async fn nack(
        &self,
        queue: &str,
        receipt_s: &str,
        options: &NackOptions,
    ) -> Result<FailureState> {
        match self {
            Lane::Http(c) => Ok(c.nack(queue, receipt_s, options).await?.state),
            Lane::Frames(p) => {
                let mut conn = p.get().await?;
                let (_, dead) = match options.delay.filter(|_| options.retry_after) {
                    Some(wait) => {
                        conn.nack_retry_after(
                            queue,
                            receipt(receipt_s)?,
                            wait,
                            options.error.clone(),
                            options.consumer.clone(),
                        )
                        .await?
                    }
                    None => {
                        conn.nack_as(
                            queue,
                            receipt(receipt_s)?,
                            options.delay,
                            options.error.clone(),
                            options.consumer.clone(),
                        )
                        .await?
                    }
                };
                Ok(if dead {
                    FailureState::DeadLettered
                } else {
                    FailureState::Visible
                })
            }
        }
    }

    /// Dead-letters a delivery now.
    pub async fn reject(&self, queue: &str, receipt_s: &str, error: &str) -> Result<()> {
        match self {
            Lane::Http(c) => c.reject(queue, receipt_s, Some(error)).await.map(drop),
            Lane::Frames(p) => {
                let r = receipt(receipt_s)?;
                let mut conn = p.get().await?;
                conn.reject(queue, r, Some(error.to_owned())).await?;
                Ok(())
            }
        }
    }

    /// Moves a delivery to queue `to`.
    pub async fn move_message(
        &self,
        queue: &str,
        receipt_s: &str,
        to: &str,
        reason: &str,
    ) -> Result<()> {
        match self {
            Lane::Http(c) => c
                .move_message(queue, receipt_s, to, Some(reason))
                .await
                .map(drop),
            Lane::Frames(p) => {
                let r = receipt(receipt_s)?;
                let mut conn = p.get().await?;
                Ok(conn
                    .move_message(queue, r, to, Some(reason.to_owned()))
                    .await?)
            }
        }
    }

    /// Hands a delivery back without counting the attempt.
    pub async fn release(&self, queue: &str, receipt_s: &str) -> Result<()> {
        match self {
            Lane::Http(c) => c.release(queue, receipt_s).await.map(drop),
            Lane::Frames(p) => {
                let r = receipt(receipt_s)?;
                Ok(p.get().await?.release(queue, r).await?)
            }
        }
    }

    /// Extends a lease; whether the task was cancelled.
    pub async fn extend(&self, queue: &str, receipt_s: &str, visibility: Duration) -> Result<bool> {
        match self {
            Lane::Http(c) => Ok(c
                .extend(queue, receipt_s, visibility)
                .await?
                .cancel_requested),
            Lane::Frames(p) => {
                let r = receipt(receipt_s)?;
                let (_, cancel) = p.get().await?.extend(queue, r, visibility).await?;
                Ok(cancel)
            }
        }
    }

    /// Reports a task's progress; whether the task was cancelled.
    pub async fn progress(
        &self,
        queue: &str,
        receipt_s: &str,
        pct: f64,
        detail: Option<&str>,
    ) -> Result<bool> {
        match self {
            Lane::Http(c) => Ok(c
                .progress(queue, receipt_s, pct, detail)
                .await?
                .cancel_requested),
            Lane::Frames(p) => {
                let r = receipt(receipt_s)?;
                let detail = detail.map(str::to_owned);
                let (_, cancel) = p.get().await?.progress(queue, r, pct, detail).await?;
                Ok(cancel)
            }
        }
    }
}

/// The frame form of a receipt string (the same two numbers).
fn receipt(s: &str) -> Result<FrameReceipt> {
    let r: Receipt = s
        .parse()
        .map_err(|e: sluice_core::StoreError| Error::InvalidInput(e.to_string()))?;
    Ok(r.into())
}

/// A frame delivery as the HTTP API shows it, so a task runs the same whichever way it came.
fn tagged_view(d: TaggedFrameDelivery) -> DeliveryView {
    let group = d.group.and_then(|g| sluice_core::GroupName::new(g).ok());
    let key = d.key.and_then(|k| sluice_core::MessageKey::new(k).ok());
    view(d.delivery, group, key, d.priority)
}

/// A traced frame delivery as the HTTP API shows it.
fn traced_view(d: TracedFrameDelivery) -> DeliveryView {
    let mut v = tagged_view(d.delivery);
    v.trace = d.trace.map(|t| sluice_wire::TraceView {
        traceparent: t.traceparent,
        tracestate: t.tracestate,
    });
    v
}

fn view(
    d: FrameDelivery,
    group: Option<sluice_core::GroupName>,
    key: Option<sluice_core::MessageKey>,
    priority: u8,
) -> DeliveryView {
    let delivery = Delivery {
        trace: None,
        id: MessageId(d.id),
        receipt: d.receipt.into(),
        body: d.body,
        attributes: d.attributes,
        receive_count: d.receive_count,
        max_receive_count: d.max_receive_count,
        enqueued_at: Timestamp(d.enqueued_at_ms),
        last_error: d.last_error,
        lease_deadline: Timestamp(d.lease_deadline_ms),
        group,
        key,
        priority,
    };
    DeliveryView::from(&delivery)
}
