//! NATS JetStream through async-nats: a file-storage stream with work-queue retention,
//! publish with ack, a pull consumer with explicit acks.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt as _;

use crate::load::{Consumer, Producer, System};

const STREAM: &str = "PEERBENCH";
const SUBJECT: &str = "peerbench.q";

/// A JetStream context with the bench stream created.
pub struct Nats {
    js: jetstream::Context,
    consumer: consumer::PullConsumer,
    batch: usize,
}

impl Nats {
    /// Connects, recreates the stream and its durable pull consumer.
    pub async fn connect(url: &str, batch: usize) -> anyhow::Result<Self> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .max_reconnects(Some(1))
            .connect(url);
        let client = tokio::time::timeout(Duration::from_secs(5), client)
            .await
            .context("connecting to NATS timed out")?
            .with_context(|| format!("connecting to NATS at {url}"))?;
        let js = jetstream::new(client);
        let _ = js.delete_stream(STREAM).await;
        let s = js
            .create_stream(stream::Config {
                name: STREAM.to_owned(),
                subjects: vec![SUBJECT.to_owned()],
                storage: stream::StorageType::File,
                retention: stream::RetentionPolicy::WorkQueue,
                ..stream::Config::default()
            })
            .await
            .map_err(|e| anyhow!("creating the JetStream stream (is JetStream on?): {e}"))?;
        let consumer = s
            .create_consumer(consumer::pull::Config {
                durable_name: Some("workers".to_owned()),
                ack_policy: consumer::AckPolicy::Explicit,
                max_ack_pending: 100_000,
                ..consumer::pull::Config::default()
            })
            .await
            .map_err(|e| anyhow!("creating the pull consumer: {e}"))?;
        Ok(Nats {
            js,
            consumer,
            batch,
        })
    }

    /// Deletes the stream.
    pub async fn teardown(&self) -> anyhow::Result<()> {
        self.js
            .delete_stream(STREAM)
            .await
            .map_err(|e| anyhow!("deleting the stream: {e}"))?;
        Ok(())
    }
}

/// Publishes with ack.
pub struct NatsProducer {
    js: jetstream::Context,
}

/// Pulls continuously (up to B messages per pull request) and acks each message explicitly.
pub struct NatsConsumer {
    messages: consumer::pull::Stream,
    held: Vec<jetstream::Message>,
}

impl System for Nats {
    type P = NatsProducer;
    type C = NatsConsumer;

    async fn producer(&self) -> anyhow::Result<NatsProducer> {
        Ok(NatsProducer {
            js: self.js.clone(),
        })
    }

    async fn consumer(&self) -> anyhow::Result<NatsConsumer> {
        let messages = self
            .consumer
            .stream()
            .max_messages_per_batch(self.batch)
            .messages()
            .await
            .map_err(|e| anyhow!("pull: {e}"))?;
        Ok(NatsConsumer {
            messages,
            held: Vec::new(),
        })
    }
}

impl Producer for NatsProducer {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(bodies.len());
        for b in bodies {
            acks.push(
                self.js
                    .publish(SUBJECT, b.into())
                    .await
                    .map_err(|e| anyhow!("publish: {e}"))?,
            );
        }
        for a in acks {
            a.await.map_err(|e| anyhow!("publish ack: {e}"))?;
        }
        Ok(())
    }
}

impl Consumer for NatsConsumer {
    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut wait = Duration::from_millis(200);
        while out.len() < max {
            match tokio::time::timeout(wait, self.messages.next()).await {
                Ok(Some(m)) => {
                    let m = m.map_err(|e| anyhow!("pull: {e}"))?;
                    out.push(m.payload.to_vec());
                    self.held.push(m);
                    // After the first message take what arrives next, briefly.
                    wait = Duration::from_millis(2);
                }
                Ok(None) => bail!("the pull stream ended"),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let held = std::mem::take(&mut self.held);
        async move {
            for m in held {
                m.ack().await.map_err(|e| anyhow!("ack: {e}"))?;
            }
            Ok(())
        }
    }
}
