//! `sluice bench` over the frame protocol (`sluice serve --frames-listen`): binary frames
//! on connections kept in a pool, each carrying one request at a time.

use std::sync::Mutex;
use std::time::Duration;

use sluice_client::TlsOptions;
use sluice_client::frames::{Body, FrameClientError, FrameConnection, FrameMessage, FrameReceipt};

use super::RECEIVE_WAIT_MS;
use super::producer::stamped_body;
use super::state::{Acked, Failed, Shared};

/// Connections to the frame listener that no request is using.
pub(super) struct Pool {
    addr: String,
    /// TLS settings when the listener speaks TLS.
    tls: Option<TlsOptions>,
    idle: Mutex<Vec<FrameConnection>>,
}

impl Pool {
    /// A pool of connections to `addr` (`host:port`), opened as requests need them, over
    /// TLS when `tls` is given.
    pub(super) fn new(addr: String, tls: Option<TlsOptions>) -> Self {
        Pool {
            tls,
            addr,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The listener's address.
    pub(super) fn addr(&self) -> &str {
        &self.addr
    }

    /// Checks the listener answers (and takes the key), so a wrong address fails the run at
    /// once rather than as errors in its report.
    pub(super) async fn check(&self, token: Option<&str>) -> Result<(), FrameClientError> {
        let conn = self.connect(token).await?;
        self.put(conn);
        Ok(())
    }

    async fn take(&self, shared: &Shared) -> Result<FrameConnection, Failed> {
        let idle = self.idle.lock().map(|mut v| v.pop()).unwrap_or_default();
        match idle {
            Some(conn) => Ok(conn),
            None => self
                .connect(shared.token.as_deref())
                .await
                .map_err(|_| Failed::new("connect", None)),
        }
    }

    async fn connect(&self, token: Option<&str>) -> Result<FrameConnection, FrameClientError> {
        match &self.tls {
            Some(tls) => FrameConnection::connect_tls(&self.addr, tls, token).await,
            None => FrameConnection::connect(&self.addr, token).await,
        }
    }

    fn put(&self, conn: FrameConnection) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }

    /// Runs one call on a pooled connection; a connection that failed is dropped, one whose
    /// request the broker refused goes back to the pool.
    async fn with<T>(
        &self,
        shared: &Shared,
        call: impl AsyncFnOnce(&mut FrameConnection) -> Result<T, FrameClientError>,
    ) -> Result<T, Failed> {
        let mut conn = self.take(shared).await?;
        let out = tokio::time::timeout(super::REQUEST_TIMEOUT, call(&mut conn)).await;
        match out {
            Ok(Ok(v)) => {
                self.put(conn);
                Ok(v)
            }
            Ok(Err(FrameClientError::Refused(e))) => {
                self.put(conn);
                Err(Failed::new(
                    &e.code,
                    e.retry_after_ms.map(Duration::from_millis),
                ))
            }
            Ok(Err(FrameClientError::Io(_))) => Err(Failed::new("transport", None)),
            Ok(Err(FrameClientError::Protocol(_))) => Err(Failed::new("bad_response", None)),
            Ok(Err(FrameClientError::Tls(_))) => Err(Failed::new("tls", None)),
            Err(_) => Err(Failed::new("timeout", None)),
        }
    }
}

/// Sends `n` messages stamped with `t_us`; returns how many were stored.
pub(super) async fn send(
    shared: &Shared,
    pool: &Pool,
    n: u32,
    t_us: u64,
    pad: &str,
) -> Result<u64, Failed> {
    let messages = (0..n)
        .map(|_| {
            FrameMessage::new(Body::json(stamped_body(
                &shared.run,
                t_us,
                shared.body_bytes,
                pad,
            )))
        })
        .collect();
    let queue = shared.queue.as_str();
    let sent = pool
        .with(shared, async move |c| c.send(queue, messages).await)
        .await?;
    Ok(sent.len() as u64)
}

/// One long-polling receive: the receipts, and the send times stamped in this run's bodies
/// that were sent inside the measured window.
pub(super) async fn receive(
    shared: &Shared,
    pool: &Pool,
) -> Result<(Vec<FrameReceipt>, Vec<u64>), Failed> {
    let queue = shared.queue.as_str();
    let wait = Duration::from_millis(RECEIVE_WAIT_MS.unsigned_abs());
    let max = shared.batch;
    let got = pool
        .with(shared, async move |c| c.receive(queue, max, wait).await)
        .await?;
    let receipts = got.iter().map(|d| d.receipt).collect();
    let stamps = got
        .iter()
        .filter_map(|d| shared.stamp(&d.body.bytes))
        .collect();
    Ok((receipts, stamps))
}

/// Acknowledges `receipts` in one call.
pub(super) async fn ack(
    shared: &Shared,
    pool: &Pool,
    receipts: Vec<FrameReceipt>,
) -> Result<Acked, Failed> {
    let queue = shared.queue.as_str();
    let outcomes = pool
        .with(shared, async move |c| c.ack(queue, receipts).await)
        .await?;
    let total = outcomes.len() as u64;
    let refused: Vec<String> = outcomes.into_iter().flatten().map(|e| e.code).collect();
    Ok(Acked {
        count: total - refused.len() as u64,
        refused,
    })
}
