//! Sluice over its frame protocol (`sluice serve --frames-listen`): the same broker and queue
//! as the HTTP row, with producers and consumers on `sluice_client::frames` connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sluice_client::frames::{Body, FrameConnection, FrameMessage, FrameReceipt};

use crate::load::{Consumer, Producer, System};
use crate::sluice::{QUEUE, Sluice};

/// A running broker with a frame listener.
pub struct SluiceFrames {
    addr: String,
}

impl SluiceFrames {
    /// Creates and purges the queue over HTTP (`base`); connections go to `addr`.
    pub async fn connect(base: &str, addr: &str) -> anyhow::Result<Self> {
        Sluice::connect(base).await?;
        Ok(SluiceFrames {
            addr: addr.to_owned(),
        })
    }

    async fn open(&self) -> anyhow::Result<FrameConnection> {
        FrameConnection::connect(self.addr.as_str(), None)
            .await
            .with_context(|| format!("connecting to Sluice's frame listener at {}", self.addr))
    }
}

/// A producer or a consumer, with a consumer's second connection for the acks it sends while
/// it receives (one ack in flight at a time), as over HTTP.
pub struct FramesConn {
    conn: FrameConnection,
    acks: Option<Arc<tokio::sync::Mutex<FrameConnection>>>,
    receipts: Vec<FrameReceipt>,
}

impl System for SluiceFrames {
    type P = FramesConn;
    type C = FramesConn;

    async fn producer(&self) -> anyhow::Result<FramesConn> {
        Ok(FramesConn {
            conn: self.open().await?,
            acks: None,
            receipts: Vec::new(),
        })
    }

    async fn consumer(&self) -> anyhow::Result<FramesConn> {
        Ok(FramesConn {
            conn: self.open().await?,
            acks: Some(Arc::new(tokio::sync::Mutex::new(self.open().await?))),
            receipts: Vec::new(),
        })
    }
}

impl Producer for FramesConn {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let messages = bodies
            .into_iter()
            .map(|b| FrameMessage::new(Body::binary(b)))
            .collect();
        self.conn.send(QUEUE, messages).await?;
        Ok(())
    }
}

impl Consumer for FramesConn {
    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let max = u32::try_from(max).unwrap_or(1000);
        let got = self
            .conn
            .receive(QUEUE, max, Duration::from_millis(200))
            .await?;
        let mut bodies = Vec::with_capacity(got.len());
        for d in got {
            self.receipts.push(d.receipt);
            bodies.push(d.body.bytes.to_vec());
        }
        Ok(bodies)
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let receipts = std::mem::take(&mut self.receipts);
        let acks = self.acks.clone();
        async move {
            let acks = acks.context("a producer cannot acknowledge")?;
            let mut conn = acks.lock().await;
            let out = conn.ack(QUEUE, receipts).await?;
            if let Some(e) = out.into_iter().flatten().next() {
                bail!("ack: {}", e.code);
            }
            Ok(())
        }
    }
}
