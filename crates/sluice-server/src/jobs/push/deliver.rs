//! One queue's delivery loop: lease, call the endpoint, settle from its answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_core::message::BodyKind;
use sluice_core::store::{AckRequest, Failure, ReceiveRequest};
use sluice_core::{Clock, Delivery, ErrorCode, PushTarget, PushVerdict, QueueName, SystemClock};
use tokio::sync::{Semaphore, mpsc, watch};

use super::{PushOutcome, signature};
use crate::AppState;

/// How long a lease outlives the request timeout: room to settle after the answer.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How long one receive waits for a first message.
const POLL: Duration = Duration::from_secs(2);
/// Most of an answer's body read; the rest is dropped (with its connection).
const ANSWER_LIMIT: usize = 16 * 1024;
/// Most of an error answer's body kept as the message's `last_error`.
const ERROR_SNIPPET: usize = 512;
/// Most settlements applied in one store call.
const SETTLE_BATCH: usize = 512;
/// The longest `Retry-After` honoured: the longest delay a nack may ask for.
const MAX_RETRY_AFTER: Duration = sluice_core::config::limits::MAX_DELAY;

/// A push request's end, waiting to be applied to the store.
struct Settled {
    delivery: Delivery,
    verdict: PushVerdict,
    error: Option<String>,
}

/// Pushes `queue`'s messages to `target` until `stop` turns true, then waits for the requests
/// in flight and their settlements.
pub(super) async fn run(
    state: AppState,
    client: reqwest::Client,
    queue: QueueName,
    target: PushTarget,
    mut stop: watch::Receiver<bool>,
) {
    let target = Arc::new(target);
    let concurrency = target.concurrency;
    let slots = Arc::new(Semaphore::new(concurrency as usize));
    let (settle_tx, settle_rx) = mpsc::channel::<Settled>(SETTLE_BATCH * 2);
    let settler = tokio::spawn(settle(state.clone(), queue.clone(), settle_rx));
    let consumer = format!("push:{}", target.shown_url());
    let mut told_failing = false;
    loop {
        let first = tokio::select! {
            p = slots.clone().acquire_owned() => p,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(mut permits) = first else { break };
        let spare = slots
            .available_permits()
            .min(sluice_core::config::limits::MAX_BATCH - 1);
        if spare > 0
            && let Ok(more) = slots.clone().try_acquire_many_owned(spare as u32)
        {
            permits.merge(more);
        }
        let req = ReceiveRequest {
            max: u32::try_from(permits.num_permits()).unwrap_or(1),
            wait: POLL,
            visibility: Some(target.timeout + LEASE_MARGIN),
            consumer: Some(consumer.clone()),
        };
        if *stop.borrow() {
            break;
        }
        // Not raced against `stop`: a receive dropped after it leased would strand its
        // messages until their leases ran out. It ends within `POLL`.
        let leased = state.store.receive(&queue, req).await;
        if *stop.borrow()
            && let Ok(deliveries) = &leased
        {
            // Handed back without counting as attempts, for the next loop or broker.
            for d in deliveries {
                let _ = state.store.release(&queue, d.receipt).await;
            }
            break;
        }
        let deliveries = match leased {
            Ok(d) => {
                told_failing = false;
                d
            }
            Err(e) => {
                if !std::mem::replace(&mut told_failing, true) {
                    tracing::warn!(queue = %queue, error = %e, "push delivery cannot lease; retrying");
                }
                let wait = e.retry_after().unwrap_or(Duration::from_secs(1));
                tokio::select! {
                    () = tokio::time::sleep(wait) => continue,
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        };
        state.metrics.delivered(&queue, &deliveries);
        for d in deliveries {
            let Some(permit) = permits.split(1) else {
                break;
            };
            let (client, target, queue, state, tx) = (
                client.clone(),
                target.clone(),
                queue.clone(),
                state.clone(),
                settle_tx.clone(),
            );
            tokio::spawn(async move {
                let settled = push(&client, &target, &queue, &state, d).await;
                let _ = tx.send(settled).await;
                drop(permit);
            });
        }
    }
    // Every slot back means every request has ended and handed over its settlement.
    let _ = slots.acquire_many(concurrency).await;
    drop(settle_tx);
    let _ = settler.await;
}

/// Calls the endpoint with one delivery and reads its verdict.
async fn push(
    client: &reqwest::Client,
    target: &PushTarget,
    queue: &QueueName,
    state: &AppState,
    d: Delivery,
) -> Settled {
    let started = Instant::now();
    let answer = request(client, target, queue, &d).send().await;
    let (verdict, error, outcome) = match answer {
        Ok(resp) => judge(resp, target).await,
        Err(e) if e.is_timeout() => (
            PushVerdict::Retry,
            Some(format!(
                "push to {} got no answer within {} ms",
                target.shown_url(),
                target.timeout.as_millis()
            )),
            PushOutcome::Timeout,
        ),
        // The request could not even be built (a header value the HTTP library refuses):
        // sending it again cannot help.
        Err(e) if e.is_builder() => (
            PushVerdict::Reject,
            Some(format!(
                "push to {} could not be made: {}",
                target.shown_url(),
                chain(&e.without_url())
            )),
            PushOutcome::ClientError,
        ),
        Err(e) => (
            PushVerdict::Retry,
            Some(format!(
                "push to {} failed: {}",
                target.shown_url(),
                chain(&e.without_url())
            )),
            PushOutcome::ConnectionError,
        ),
    };
    state
        .metrics
        .pushed(queue, outcome, started.elapsed().as_secs_f64());
    Settled {
        delivery: d,
        verdict,
        error,
    }
}

fn request(
    client: &reqwest::Client,
    target: &PushTarget,
    queue: &QueueName,
    d: &Delivery,
) -> reqwest::RequestBuilder {
    let method = reqwest::Method::from_bytes(target.method.as_str().as_bytes())
        .unwrap_or(reqwest::Method::POST);
    let mut rb = client
        .request(method, &target.url)
        .timeout(target.timeout)
        .header("Sluice-Message-Id", d.id.to_string())
        .header("Sluice-Queue", queue.as_str())
        .header("Sluice-Receive-Count", d.receive_count)
        .header("Sluice-Max-Receive-Count", d.max_receive_count)
        .header(
            "Sluice-Enqueued-At",
            sluice_core::time::rfc3339(d.enqueued_at),
        );
    if !d.attributes.is_empty() {
        rb = rb.header("Sluice-Attributes", ascii_json(&d.attributes));
    }
    if !target
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("content-type"))
    {
        rb = rb.header(
            "Content-Type",
            match d.body.kind {
                BodyKind::Json => "application/json",
                BodyKind::Text => "text/plain; charset=utf-8",
                BodyKind::Binary => "application/octet-stream",
            },
        );
    }
    for (k, v) in &target.headers {
        rb = rb.header(k, v);
    }
    let body: Bytes = d.body.bytes.clone();
    if let Some(secret) = &target.secret {
        let now = SystemClock.now().as_millis().div_euclid(1000);
        rb = rb.header(
            signature::HEADER,
            signature::sign(secret.as_bytes(), now, &body),
        );
    }
    rb.body(body)
}

/// The verdict of an answer, with the error to record and the outcome to count.
async fn judge(
    mut resp: reqwest::Response,
    target: &PushTarget,
) -> (PushVerdict, Option<String>, PushOutcome) {
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // Reading the answer to its end lets its connection serve the next request.
    let mut body = Vec::new();
    while body.len() < ANSWER_LIMIT {
        match resp.chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    let verdict = PushVerdict::of_status(status.as_u16(), retry_after, target);
    let outcome = match status.as_u16() {
        200..=299 => PushOutcome::Delivered,
        429 | 503 => PushOutcome::Throttled,
        400..=499 => PushOutcome::ClientError,
        500..=599 => PushOutcome::ServerError,
        _ => PushOutcome::Unexpected,
    };
    if verdict == PushVerdict::Delivered {
        return (verdict, None, outcome);
    }
    let mut error = format!("push to {} answered {status}", target.shown_url());
    if let Some(d) = retry_after {
        error.push_str(&format!(" (Retry-After {} s)", d.as_secs()));
    }
    if status.is_redirection()
        && let Some(loc) = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
    {
        error.push_str(&format!(
            "; redirects are not followed: set push.url to {loc} if that is the endpoint"
        ));
    }
    let snippet = String::from_utf8_lossy(&body[..body.len().min(ERROR_SNIPPET)]);
    let snippet = snippet.trim();
    if !snippet.is_empty() {
        error.push_str(": ");
        error.push_str(snippet);
    }
    (verdict, Some(error), outcome)
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    let d = match v.parse::<u64>() {
        Ok(s) => Duration::from_secs(s),
        Err(_) => httpdate::parse_http_date(v)
            .ok()?
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    Some(d.min(MAX_RETRY_AFTER))
}

/// An error with its causes, which reqwest keeps in the source chain.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// JSON of the attributes with every non-ASCII character escaped, so it fits in a header.
fn ascii_json(attrs: &sluice_core::message::Attributes) -> String {
    let text = serde_json::to_string(attrs).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() && c != '\x7f' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// Applies settlements as they come, acknowledgements in batches.
async fn settle(state: AppState, queue: QueueName, mut rx: mpsc::Receiver<Settled>) {
    let mut batch = Vec::with_capacity(SETTLE_BATCH);
    while rx.recv_many(&mut batch, SETTLE_BATCH).await > 0 {
        let mut acks = Vec::new();
        let mut failed = Vec::new();
        for s in batch.drain(..) {
            if s.verdict == PushVerdict::Delivered {
                acks.push(AckRequest {
                    receipt: s.delivery.receipt,
                    result: None,
                });
            } else {
                failed.push(s);
            }
        }
        if !acks.is_empty() {
            match state.ack(&queue, acks).await {
                Ok(outs) => {
                    for e in outs.into_iter().filter_map(Result::err) {
                        // The lease ran out before the answer: the message comes again.
                        tracing::debug!(queue = %queue, error = %e, "a pushed message could not be acknowledged");
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "pushed messages could not be acknowledged; they will be pushed again when their leases end");
                }
            }
        }
        futures::future::join_all(failed.into_iter().map(|s| fail(&state, &queue, s))).await;
    }
}

/// Nacks or rejects one failed push.
async fn fail(state: &AppState, queue: &QueueName, s: Settled) {
    let id = s.delivery.id;
    let receipt = s.delivery.receipt;
    let failure = Failure {
        error: s.error,
        consumer: Some("push".to_owned()),
        retry_after: false,
    };
    let r = match s.verdict {
        PushVerdict::Reject => match state.store.reject(queue, receipt, failure.clone()).await {
            // A queue without a DLQ keeps its messages: retried with backoff instead.
            Err(e) if e.code() == ErrorCode::Conflict => state
                .store
                .nack(queue, receipt, None, failure)
                .await
                .map(drop),
            r => r.map(drop),
        },
        // The target said how long to wait: its Retry-After, a congestion signal.
        PushVerdict::Throttled(d) => state
            .store
            .nack(
                queue,
                receipt,
                Some(d),
                Failure {
                    retry_after: true,
                    ..failure
                },
            )
            .await
            .map(drop),
        _ => state
            .store
            .nack(queue, receipt, None, failure)
            .await
            .map(drop),
    };
    state.metrics.settled(id);
    if let Err(e) = r {
        tracing::debug!(queue = %queue, error = %e, "a failed push could not be settled; its lease will end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120));
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("99999999999"), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn attributes_fit_in_a_header() {
        let mut a = sluice_core::message::Attributes::new();
        a.insert("city".into(), "Zürich 🚋\x7f".into());
        let s = ascii_json(&a);
        assert!(s.is_ascii());
        let back: sluice_core::message::Attributes = serde_json::from_str(&s).unwrap();
        assert_eq!(back, a);
    }
}
