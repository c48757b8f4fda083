//! `sluice bench` over the HTTP API: JSON requests through one pooled keep-alive client.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use sluice_wire::{
    AckBatchResponse, AckRequestWire, ErrorEnvelope, ReceiveRequestWire, SendBatchResponse,
    SendMessage, SendRequest,
};

use super::RECEIVE_WAIT_MS;
use super::producer::stamped_body;
use super::state::{Acked, Failed, Shared};

impl Failed {
    fn transport(e: &reqwest::Error) -> Self {
        let code = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connect"
        } else {
            "transport"
        };
        Failed::new(code, None)
    }

    async fn from_response(resp: reqwest::Response) -> Self {
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let code = match resp.bytes().await {
            Ok(b) => serde_json::from_slice::<ErrorEnvelope>(&b)
                .map(|e| e.error.code)
                .unwrap_or_else(|_| http_code(status)),
            Err(_) => http_code(status),
        };
        Failed::new(&code, retry_after)
    }
}

fn http_code(status: StatusCode) -> String {
    format!("http_{}", status.as_u16())
}

/// Sends a request and reads a 2xx answer as `T`.
async fn call<T: for<'de> Deserialize<'de>>(req: reqwest::RequestBuilder) -> Result<T, Failed> {
    let resp = req.send().await.map_err(|e| Failed::transport(&e))?;
    if !resp.status().is_success() {
        return Err(Failed::from_response(resp).await);
    }
    let bytes = resp.bytes().await.map_err(|e| Failed::transport(&e))?;
    serde_json::from_slice(&bytes).map_err(|_| Failed::new("bad_response", None))
}

fn post(shared: &Shared, tail: &str) -> reqwest::RequestBuilder {
    let url = format!("{}/v1/queues/{}/{tail}", shared.base, shared.queue);
    let req = shared.client.post(url);
    match &shared.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

fn send_request(shared: &Shared, n: u32, t_us: u64, pad: &str) -> Result<SendRequest, Failed> {
    let body = |t| {
        RawValue::from_string(stamped_body(&shared.run, t, shared.body_bytes, pad))
            .map_err(|_| Failed::new("bad_body", None))
    };
    if shared.batch == 1 {
        return Ok(SendRequest {
            trace: None,
            body: Some(body(t_us)?),
            body_base64: None,
            attributes: None,
            delay_ms: None,
            dedup_id: None,
            group: shared.next_group(),
            messages: None,
            key: shared.next_key(),
            priority: None,
        });
    }
    let message = |t| -> Result<SendMessage, Failed> {
        Ok(SendMessage {
            trace: None,
            body: Some(body(t)?),
            body_base64: None,
            attributes: None,
            delay_ms: None,
            dedup_id: None,
            group: shared.next_group(),
            key: shared.next_key(),
            priority: None,
        })
    };
    Ok(SendRequest {
        trace: None,
        body: None,
        body_base64: None,
        attributes: None,
        delay_ms: None,
        dedup_id: None,
        group: None,
        messages: Some((0..n).map(|_| message(t_us)).collect::<Result<_, _>>()?),
        key: None,
        priority: None,
    })
}

/// Sends `n` messages stamped with `t_us`; returns how many were stored.
pub(super) async fn send(shared: &Shared, n: u32, t_us: u64, pad: &str) -> Result<u64, Failed> {
    let req = send_request(shared, n, t_us, pad)?;
    let builder = post(shared, "messages").json(&req);
    if shared.batch == 1 {
        call::<serde::de::IgnoredAny>(builder).await.map(|_| 1)
    } else {
        call::<SendBatchResponse>(builder)
            .await
            .map(|r| r.ids.len() as u64)
    }
}

/// The part of a receive answer the consumer needs.
#[derive(Deserialize)]
struct Received {
    messages: Vec<Leased>,
}

#[derive(Deserialize)]
struct Leased {
    receipt: String,
    #[serde(default)]
    body: Option<Box<RawValue>>,
}

/// One long-polling receive: the receipts, and the send times stamped in this run's bodies
/// that were sent inside the measured window.
pub(super) async fn receive(shared: &Shared) -> Result<(Vec<String>, Vec<u64>), Failed> {
    let req = ReceiveRequestWire {
        max: Some(shared.batch),
        wait_ms: Some(RECEIVE_WAIT_MS),
        visibility_timeout_ms: None,
        consumer: None,
        ack: None,
    };
    let got = call::<Received>(post(shared, "receive").json(&req)).await?;
    let mut receipts = Vec::with_capacity(got.messages.len());
    let mut stamps = Vec::with_capacity(got.messages.len());
    for m in got.messages {
        stamps.extend(m.body.and_then(|b| shared.stamp(b.get().as_bytes())));
        receipts.push(m.receipt);
    }
    Ok((receipts, stamps))
}

/// Acknowledges `receipts`: a single ack for one message at B = 1, else a batch ack.
pub(super) async fn ack(shared: &Shared, mut receipts: Vec<String>) -> Result<Acked, Failed> {
    if receipts.len() == 1 && shared.batch == 1 {
        let req = AckRequestWire {
            receipt: receipts.pop(),
            ..AckRequestWire::default()
        };
        call::<serde::de::IgnoredAny>(post(shared, "ack").json(&req)).await?;
        return Ok(Acked {
            count: 1,
            refused: Vec::new(),
        });
    }
    let req = AckRequestWire {
        receipts: Some(receipts),
        ..AckRequestWire::default()
    };
    let r = call::<AckBatchResponse>(post(shared, "ack").json(&req)).await?;
    Ok(Acked {
        count: r.acked as u64,
        refused: r
            .results
            .into_iter()
            .filter_map(|o| o.error.map(|e| e.code))
            .collect(),
    })
}
