//! Sluice over its HTTP API (`sluice_wire` types), embedded engine.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::value::RawValue;
use sluice_wire::{
    AckBatchResponse, AckOutcome, AckRequestWire, QueueConfigRequest, ReceiveRequestWire,
    SendMessage, SendRequest,
};

use crate::http::Http;
use crate::load::{Consumer, Producer, System};

/// The queue every Sluice row uses.
pub const QUEUE: &str = "peerbench";

/// A running broker.
pub struct Sluice {
    client: reqwest::Client,
    /// `host:port` of the broker, for the producers' and consumers' own connections.
    authority: String,
    base: String,
    acks_in_receive: bool,
}

impl Sluice {
    /// Checks the broker answers, creates the queue and purges it.
    pub async fn connect(base: &str) -> anyhow::Result<Self> {
        Self::open(base, true).await
    }

    /// Checks the broker answers and creates the queue if needed; purges it if asked.
    pub async fn open(base: &str, purge: bool) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(64)
            .build()
            .context("building the HTTP client")?;
        let base = base.trim_end_matches('/').to_owned();
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .with_context(|| format!("Sluice is not answering at {base}"))?;
        let q = format!("{base}/v1/queues/{QUEUE}");
        client
            .put(&q)
            .json(&QueueConfigRequest::default())
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .context("creating the Sluice queue")?;
        if purge {
            client
                .post(format!("{q}/purge"))
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .context("purging the Sluice queue")?;
        }
        let parsed: hyper::Uri = base
            .parse()
            .with_context(|| format!("{base} is not a URL"))?;
        let host = parsed
            .host()
            .with_context(|| format!("{base} names no host"))?;
        let authority = format!("{host}:{}", parsed.port_u16().unwrap_or(80));
        Ok(Sluice {
            client,
            authority,
            base,
            acks_in_receive: false,
        })
    }

    /// How consumers acknowledge: in a request of their own while they receive (the
    /// default: the receive does not wait for the acks' sync), or within their next receive
    /// (one request per batch fewer).
    #[must_use]
    pub fn acks_in_receive(mut self, yes: bool) -> Self {
        self.acks_in_receive = yes;
        self
    }

    /// Parsed once per connection, as a real client would: parsing a URL per request costs
    /// a client a tenth of its CPU at one message per request.
    fn url(&self, tail: &str) -> anyhow::Result<hyper::Uri> {
        let url = format!("{}/v1/queues/{QUEUE}/{tail}", self.base);
        url.parse().with_context(|| format!("{url} is not a URL"))
    }
}

/// The part of a receive answer a consumer uses (as `sluice bench` reads it): the other
/// fields of each delivery are skipped, not built.
#[derive(Deserialize)]
struct Received<'a> {
    #[serde(borrow)]
    messages: Vec<Leased<'a>>,
    #[serde(default)]
    acked: Option<Vec<AckOutcome>>,
}

#[derive(Deserialize)]
struct Leased<'a> {
    receipt: String,
    #[serde(default, borrow)]
    body: Option<&'a RawValue>,
}

/// A producer or a consumer, with a connection of its own, and a consumer's second one for
/// the acks it sends while it receives (one ack in flight at a time).
pub struct SluiceConn {
    http: Http,
    ack_http: Arc<tokio::sync::Mutex<Http>>,
    send_url: hyper::Uri,
    receive_url: hyper::Uri,
    ack_url: hyper::Uri,
    receipts: Vec<String>,
    acks_in_receive: bool,
}

impl System for Sluice {
    type P = SluiceConn;
    type C = SluiceConn;

    async fn producer(&self) -> anyhow::Result<SluiceConn> {
        self.conn()
    }

    async fn consumer(&self) -> anyhow::Result<SluiceConn> {
        self.conn()
    }
}

impl Sluice {
    /// Messages in the queue: visible, delayed and in flight.
    pub async fn depth(&self) -> anyhow::Result<u64> {
        let resp = self
            .client
            .get(format!("{}/v1/queues/{QUEUE}/stats", self.base))
            .send()
            .await?;
        let v: serde_json::Value = ok(resp, "stats").await?.json().await?;
        ["visible", "delayed", "in_flight"]
            .iter()
            .map(|k| {
                v[k].as_u64()
                    .context("stats without the counts of messages")
            })
            .sum()
    }

    fn conn(&self) -> anyhow::Result<SluiceConn> {
        let http = || Http::new(self.authority.clone(), Duration::from_secs(10));
        Ok(SluiceConn {
            http: http(),
            ack_http: Arc::new(tokio::sync::Mutex::new(http())),
            send_url: self.url("messages")?,
            receive_url: self.url("receive")?,
            ack_url: self.url("ack")?,
            receipts: Vec::new(),
            acks_in_receive: self.acks_in_receive,
        })
    }
}

fn raw(b: Vec<u8>) -> anyhow::Result<Box<RawValue>> {
    let s = String::from_utf8(b).context("body is not UTF-8")?;
    RawValue::from_string(s).context("body is not JSON")
}

async fn ok(resp: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    bail!("{what}: {status} {text}")
}

impl Producer for SluiceConn {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let req = if bodies.len() == 1 {
            let mut bodies = bodies;
            let b = bodies.pop().context("no body")?;
            SendRequest {
                trace: None,
                body: Some(raw(b)?),
                body_base64: None,
                attributes: None,
                delay_ms: None,
                dedup_id: None,
                group: None,
                messages: None,
                key: None,
                priority: None,
            }
        } else {
            let messages = bodies
                .into_iter()
                .map(|b| {
                    Ok(SendMessage {
                        trace: None,
                        body: Some(raw(b)?),
                        body_base64: None,
                        attributes: None,
                        delay_ms: None,
                        dedup_id: None,
                        group: None,
                        key: None,
                        priority: None,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            SendRequest {
                trace: None,
                body: None,
                body_base64: None,
                attributes: None,
                delay_ms: None,
                dedup_id: None,
                group: None,
                messages: Some(messages),
                key: None,
                priority: None,
            }
        };
        self.http.post_json(&self.send_url, &req, "send").await?;
        Ok(())
    }
}

impl SluiceConn {
    /// One receive request; `ack` receipts are settled first, and every one must succeed.
    async fn receive_with(
        &mut self,
        max: usize,
        ack: Option<Vec<String>>,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        // A receive that carries acks does not long-poll: the acks' outcomes come with its
        // answer, and an empty queue must not hold them back. The next receive, with nothing
        // to ack, waits.
        let wait_ms = if ack.is_some() { 0 } else { 200 };
        let req = ReceiveRequestWire {
            max: Some(u32::try_from(max).unwrap_or(1000)),
            wait_ms: Some(wait_ms),
            visibility_timeout_ms: None,
            consumer: None,
            ack,
        };
        let answer = self
            .http
            .post_json(&self.receive_url, &req, "receive")
            .await?;
        let got: Received<'_> =
            serde_json::from_slice(&answer).context("receive: an answer that is not JSON")?;
        if let Some(e) = got.acked.iter().flatten().find_map(|o| o.error.as_ref()) {
            bail!("ack in a receive: {}", e.code);
        }
        let mut bodies = Vec::with_capacity(got.messages.len());
        for m in got.messages {
            bodies.push(
                m.body
                    .map(|b| b.get().as_bytes().to_vec())
                    .unwrap_or_default(),
            );
            self.receipts.push(m.receipt);
        }
        Ok(bodies)
    }
}

impl Consumer for SluiceConn {
    fn acks_in_receive(&self) -> bool {
        self.acks_in_receive
    }

    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        self.receive_with(max, None).await
    }

    async fn receive_acking(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let receipts = std::mem::take(&mut self.receipts);
        self.receive_with(max, Some(receipts)).await
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let receipts = std::mem::take(&mut self.receipts);
        let http = self.ack_http.clone();
        let url = self.ack_url.clone();
        async move {
            let mut http = http.lock().await;
            if receipts.len() == 1 {
                let req = AckRequestWire {
                    receipt: receipts.into_iter().next(),
                    ..AckRequestWire::default()
                };
                http.post_json(&url, &req, "ack").await?;
                return Ok(());
            }
            let req = AckRequestWire {
                receipts: Some(receipts),
                ..AckRequestWire::default()
            };
            let answer = http.post_json(&url, &req, "ack").await?;
            let r: AckBatchResponse =
                serde_json::from_slice(&answer).context("ack: an answer that is not JSON")?;
            if let Some(e) = r.results.into_iter().find_map(|o| o.error) {
                bail!("ack: {}", e.code);
            }
            Ok(())
        }
    }
}
