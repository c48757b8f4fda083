//! RabbitMQ through lapin: a durable quorum queue, publisher confirms, manual acks,
//! prefetch = B.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::load::{Consumer, Producer, System};

const QUEUE: &str = "peerbench";

/// A RabbitMQ server with the bench queue declared.
pub struct Rabbit {
    conn: Connection,
    prefetch: u16,
}

impl Rabbit {
    /// Connects, deletes any old bench queue and declares a fresh quorum queue.
    pub async fn connect(url: &str, batch: usize) -> anyhow::Result<Self> {
        let conn = tokio::time::timeout(
            Duration::from_secs(5),
            Connection::connect(url, ConnectionProperties::default()),
        )
        .await
        .context("connecting to RabbitMQ timed out")?
        .with_context(|| format!("connecting to RabbitMQ at {url}"))?;
        let ch = conn.create_channel().await?;
        ch.queue_delete(QUEUE, QueueDeleteOptions::default())
            .await?;
        let mut args = FieldTable::default();
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        ch.queue_declare(
            QUEUE,
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .context("declaring the quorum queue")?;
        let _ = ch.close(200, "ok").await;
        Ok(Rabbit {
            conn,
            prefetch: u16::try_from(batch).unwrap_or(u16::MAX),
        })
    }

    /// Deletes the bench queue.
    pub async fn teardown(&self) -> anyhow::Result<()> {
        let ch = self.conn.create_channel().await?;
        ch.queue_delete(QUEUE, QueueDeleteOptions::default())
            .await?;
        let _ = self.conn.close(200, "bye").await;
        Ok(())
    }
}

/// A publishing channel in confirm mode.
pub struct RabbitProducer {
    ch: Channel,
}

/// A consuming channel with prefetch = B.
pub struct RabbitConsumer {
    ch: Channel,
    consumer: lapin::Consumer,
    last_tag: Option<u64>,
    pending: usize,
}

impl System for Rabbit {
    type P = RabbitProducer;
    type C = RabbitConsumer;

    async fn producer(&self) -> anyhow::Result<RabbitProducer> {
        let ch = self.conn.create_channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(RabbitProducer { ch })
    }

    async fn consumer(&self) -> anyhow::Result<RabbitConsumer> {
        let ch = self.conn.create_channel().await?;
        ch.basic_qos(self.prefetch, BasicQosOptions::default())
            .await?;
        let consumer = ch
            .basic_consume(
                QUEUE,
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(RabbitConsumer {
            ch,
            consumer,
            last_tag: None,
            pending: 0,
        })
    }
}

impl Producer for RabbitProducer {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let mut confirms = Vec::with_capacity(bodies.len());
        for b in &bodies {
            confirms.push(
                self.ch
                    .basic_publish(
                        "",
                        QUEUE,
                        BasicPublishOptions::default(),
                        b,
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await?,
            );
        }
        for c in confirms {
            let c = c.await?;
            if !c.is_ack() {
                bail!("publish was nacked");
            }
        }
        Ok(())
    }
}

impl Consumer for RabbitConsumer {
    /// With prefetch = B the server sends nothing more until the batch is acked.
    const DELIVERS_WHILE_UNACKED: bool = false;

    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut wait = Duration::from_millis(200);
        while out.len() < max {
            match tokio::time::timeout(wait, self.consumer.next()).await {
                Ok(Some(d)) => {
                    let d = d?;
                    self.last_tag = Some(d.delivery_tag);
                    out.push(d.data);
                    // After the first delivery take what arrives next, briefly.
                    wait = Duration::from_millis(2);
                }
                Ok(None) => bail!("the consumer was cancelled"),
                Err(_) => break,
            }
        }
        self.pending = out.len();
        Ok(out)
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let tag = self.last_tag.take();
        let multiple = self.pending > 1;
        let ch = self.ch.clone();
        async move {
            if let Some(tag) = tag {
                ch.basic_ack(tag, BasicAckOptions { multiple }).await?;
            }
            Ok(())
        }
    }
}
