//! The HTTP/1.1 transport of the `sluice` rows' producers and consumers: hyper's pooled
//! keep-alive client, JSON in and out.
//!
//! reqwest (which the setup calls use) wraps the same hyper client in layers a benchmark at
//! one message per request pays for on every call: a redirect follower after which every
//! response's URL is parsed again (a tenth of the tool's CPU in a profile at B = 1), a retry
//! layer, per-request timers. On two shared cores that CPU is the broker's loss: measured at
//! B = 1 with 4 producers and 4 consumers, 2,695 – 2,823 msg/s with reqwest against
//! 2,808 – 3,075 with this client, alternating, and p99.9 end to end 7.2 – 8.6 ms against
//! 3.8 – 5.3 ms.

use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Uri, header};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

/// A pooled keep-alive client; clones share the pool.
#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Http {
    /// A client whose every request fails after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector);
        Http { client, timeout }
    }

    /// POSTs `body` as JSON; the answer's body when the status is 2xx, else an error with
    /// the status and what the broker said (`what` names the call).
    pub async fn post_json(
        &self,
        uri: &Uri,
        body: &impl Serialize,
        what: &str,
    ) -> anyhow::Result<Bytes> {
        let json = serde_json::to_vec(body).context("encoding a request")?;
        let req = Request::post(uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)))
            .context("building a request")?;
        let call = async {
            let resp = self.client.request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, call)
            .await
            .with_context(|| format!("{what}: no answer within {:?}", self.timeout))?
            .with_context(|| format!("{what}: request to {uri} failed"))?;
        if !status.is_success() {
            bail!("{what}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}
