//! Redis through redis-rs (tokio): a reliable list queue, LMOVE to a processing list and
//! LREM on ack, with the AOF on and `appendfsync always` (or, weaker, `everysec`).

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};
use redis::aio::MultiplexedConnection;

use crate::load::{Consumer, Producer, System};

const QUEUE: &str = "peerbench:queue";
const PROCESSING: &str = "peerbench:processing";

/// A Redis server switched to the AOF for the run; [`Redis::teardown`] restores it.
pub struct Redis {
    client: redis::Client,
    admin: MultiplexedConnection,
    saved: Vec<(String, String)>,
    /// `appendonly` / `appendfsync` as run.
    pub settings: String,
}

async fn config_get(c: &mut MultiplexedConnection, key: &str) -> anyhow::Result<String> {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(key)
        .query_async(c)
        .await?;
    v.get(1)
        .cloned()
        .with_context(|| format!("CONFIG GET {key}"))
}

async fn config_set(c: &mut MultiplexedConnection, key: &str, value: &str) -> anyhow::Result<()> {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query_async(c)
        .await
        .with_context(|| format!("CONFIG SET {key} {value}"))?;
    Ok(())
}

impl Redis {
    /// Connects, saves `appendonly`/`appendfsync`, turns the AOF on with `fsync`
    /// (`always` or `everysec`) and clears the bench keys.
    pub async fn connect(url: &str, fsync: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("parsing the Redis URL")?;
        let mut admin = tokio::time::timeout(
            Duration::from_secs(5),
            client.get_multiplexed_async_connection(),
        )
        .await
        .context("connecting to Redis timed out")?
        .with_context(|| format!("connecting to Redis at {url}"))?;
        let mut saved = Vec::new();
        for k in ["appendonly", "appendfsync"] {
            saved.push((k.to_owned(), config_get(&mut admin, k).await?));
        }
        let mut r = Redis {
            client,
            admin,
            saved,
            settings: format!("appendonly yes, appendfsync {fsync}"),
        };
        if let Err(e) = r.configure(fsync).await {
            let _ = r.teardown().await;
            return Err(e);
        }
        Ok(r)
    }

    async fn configure(&mut self, fsync: &str) -> anyhow::Result<()> {
        config_set(&mut self.admin, "appendfsync", fsync).await?;
        config_set(&mut self.admin, "appendonly", "yes").await?;
        // Turning the AOF on starts a rewrite; wait for it so it does not run in the load.
        let limit = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query_async(&mut self.admin)
                .await?;
            let busy = info.lines().any(|l| {
                l.trim() == "aof_rewrite_in_progress:1" || l.trim() == "aof_rewrite_scheduled:1"
            });
            if !busy {
                break;
            }
            if tokio::time::Instant::now() > limit {
                bail!("the AOF rewrite did not finish in 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let () = redis::cmd("DEL")
            .arg(QUEUE)
            .arg(PROCESSING)
            .query_async(&mut self.admin)
            .await?;
        Ok(())
    }

    /// Deletes the keys and restores the saved settings.
    pub async fn teardown(&mut self) -> anyhow::Result<()> {
        let _: redis::RedisResult<()> = redis::cmd("DEL")
            .arg(QUEUE)
            .arg(PROCESSING)
            .query_async(&mut self.admin)
            .await;
        let saved = self.saved.clone();
        // appendonly first, then appendfsync, in the saved order.
        for (k, v) in saved {
            config_set(&mut self.admin, &k, &v).await?;
        }
        Ok(())
    }
}

/// One connection pushing.
pub struct RedisProducer {
    c: MultiplexedConnection,
}

/// One connection moving to the processing list, and another removing on ack (a blocking
/// move holds up every later command on its connection).
pub struct RedisConsumer {
    c: MultiplexedConnection,
    acker: MultiplexedConnection,
    held: Vec<Vec<u8>>,
}

impl System for Redis {
    type P = RedisProducer;
    type C = RedisConsumer;

    async fn producer(&self) -> anyhow::Result<RedisProducer> {
        Ok(RedisProducer {
            c: self.client.get_multiplexed_async_connection().await?,
        })
    }

    async fn consumer(&self) -> anyhow::Result<RedisConsumer> {
        Ok(RedisConsumer {
            c: self.client.get_multiplexed_async_connection().await?,
            acker: self.client.get_multiplexed_async_connection().await?,
            held: Vec::new(),
        })
    }
}

impl Producer for RedisProducer {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let _: i64 = redis::cmd("LPUSH")
            .arg(QUEUE)
            .arg(bodies)
            .query_async(&mut self.c)
            .await?;
        Ok(())
    }
}

impl Consumer for RedisConsumer {
    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let first: Option<Vec<u8>> = redis::cmd("BLMOVE")
            .arg(QUEUE)
            .arg(PROCESSING)
            .arg("RIGHT")
            .arg("LEFT")
            .arg(0.2)
            .query_async(&mut self.c)
            .await?;
        let Some(first) = first else {
            return Ok(Vec::new());
        };
        let mut got = vec![first];
        if max > 1 {
            let mut pipe = redis::pipe();
            for _ in 1..max {
                pipe.cmd("LMOVE")
                    .arg(QUEUE)
                    .arg(PROCESSING)
                    .arg("RIGHT")
                    .arg("LEFT");
            }
            let more: Vec<Option<Vec<u8>>> = pipe.query_async(&mut self.c).await?;
            got.extend(more.into_iter().flatten());
        }
        self.held.extend(got.iter().cloned());
        Ok(got)
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let mut pipe = redis::pipe();
        for b in self.held.drain(..) {
            pipe.cmd("LREM").arg(PROCESSING).arg(1).arg(b).ignore();
        }
        let mut c = self.acker.clone();
        async move {
            let () = pipe.query_async(&mut c).await?;
            Ok(())
        }
    }
}
