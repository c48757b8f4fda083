//! The HTTP/1.1 transport of the `sluice` rows' producers and consumers: one keep-alive
//! connection per producer and per consumer (and one for its acks), driven inside the task
//! that uses it, JSON in and out.
//!
//! Why not a pooled client: reqwest (which the setup calls use) wraps hyper's pooled client
//! in layers a benchmark at one message per request pays for on every call (a redirect
//! follower after which every response's URL is parsed again was a tenth of the tool's CPU
//! at B = 1). hyper's pooled client without those layers still runs each connection in a
//! task of its own, so every request crosses from the caller's task to the connection's and
//! back: two wake-ups, often on the other thread. A producer or consumer here has one
//! request in flight at a time, so it polls its connection itself. On two shared cores the
//! client's CPU is the broker's loss; the figures are in `docs/benchmarks.md`.

use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::{Request, Uri, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpStream;

type Conn = Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// A keep-alive connection to one broker, reconnected when the broker closed it.
pub struct Http {
    /// `host:port` of the broker.
    authority: String,
    open: Option<(SendRequest<Full<Bytes>>, Conn)>,
    timeout: Duration,
}

impl Http {
    /// A connection to `authority` (`host:port`), opened at the first request; every
    /// request fails after `timeout`.
    pub fn new(authority: String, timeout: Duration) -> Self {
        Http {
            authority,
            open: None,
            timeout,
        }
    }

    async fn connect(&self) -> anyhow::Result<(SendRequest<Full<Bytes>>, Conn)> {
        let tcp = TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to {}", self.authority))?;
        tcp.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .context("HTTP/1.1 handshake")?;
        Ok((sender, Box::pin(conn)))
    }

    /// POSTs `body` as JSON to the path of `uri`; the answer's body when the status is 2xx,
    /// else an error with the status and what the broker said (`what` names the call).
    pub async fn post_json(
        &mut self,
        uri: &Uri,
        body: &impl Serialize,
        what: &str,
    ) -> anyhow::Result<Bytes> {
        let json = serde_json::to_vec(body).context("encoding a request")?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let req = Request::post(path)
            .header(header::HOST, &self.authority)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)))
            .context("building a request")?;
        let timeout = self.timeout;
        let (status, body) = tokio::time::timeout(timeout, self.call(req))
            .await
            .with_context(|| format!("{what}: no answer within {timeout:?}"))?
            .with_context(|| format!("{what}: request to {uri} failed"))?;
        if !status.is_success() {
            bail!("{what}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }

    async fn call(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
        let open = match self.open.take().filter(|(s, _)| !s.is_closed()) {
            Some(open) => open,
            None => self.connect().await?,
        };
        let (sender, conn) = self.open.insert(open);
        let exchange = async {
            sender.ready().await?;
            let resp = sender.send_request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        };
        // The connection makes progress only while it is polled: here, with the exchange.
        let out = tokio::select! {
            biased;
            r = exchange => r,
            r = conn.as_mut() => match r {
                Ok(()) => Err(anyhow::anyhow!("the broker closed the connection")),
                Err(e) => Err(e.into()),
            },
        };
        if out.is_err() {
            self.open = None;
        }
        out
    }
}
