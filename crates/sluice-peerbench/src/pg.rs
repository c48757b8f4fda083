//! PostgreSQL through tokio-postgres: a queue table in schema `peerbench`, taken with
//! `FOR UPDATE SKIP LOCKED` (the pgmq approach: a read sets a visibility deadline, the ack
//! deletes), batched where B > 1. Every statement commits on its own (synchronous_commit as
//! the server has it).

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_postgres::{Client, NoTls, Statement};

use crate::load::{Consumer, Producer, System};

/// A PostgreSQL database holding the bench schema.
pub struct Postgres {
    conninfo: String,
    admin: Client,
    /// `synchronous_commit` and `fsync` as the server has them.
    pub settings: String,
}

async fn open(conninfo: &str) -> anyhow::Result<Client> {
    let (client, conn) = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio_postgres::connect(conninfo, NoTls),
    )
    .await
    .context("connecting to PostgreSQL timed out")??;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

impl Postgres {
    /// Connects (as `postgres`, else `root`) and creates the schema and table afresh.
    pub async fn connect(host: &str, port: u16, db: &str) -> anyhow::Result<Self> {
        let (conninfo, admin) = first_user(host, port, db).await?;
        admin
            .batch_execute(
                "DROP SCHEMA IF EXISTS peerbench CASCADE;
                 CREATE SCHEMA peerbench;
                 CREATE TABLE peerbench.queue (
                     id bigserial PRIMARY KEY,
                     vt timestamptz NOT NULL DEFAULT now(),
                     read_ct int NOT NULL DEFAULT 0,
                     body bytea NOT NULL);
                 CREATE INDEX ON peerbench.queue (vt);",
            )
            .await
            .context("creating schema peerbench")?;
        let mut settings = Vec::new();
        for s in ["synchronous_commit", "fsync", "wal_sync_method"] {
            let row = admin.query_one(&format!("SHOW {s}"), &[]).await?;
            settings.push(format!("{s}={}", row.get::<_, String>(0)));
        }
        Ok(Postgres {
            conninfo,
            admin,
            settings: settings.join(", "),
        })
    }

    /// Drops the schema.
    pub async fn teardown(&self) -> anyhow::Result<()> {
        self.admin
            .batch_execute("DROP SCHEMA IF EXISTS peerbench CASCADE")
            .await
            .context("dropping schema peerbench")
    }
}

/// One connection inserting rows.
pub struct PgProducer {
    client: Client,
    one: Statement,
    many: Statement,
}

/// One connection leasing rows and another deleting them, so a delete runs while the next
/// rows are leased.
pub struct PgConsumer {
    client: Client,
    read: Statement,
    acker: Arc<Client>,
    delete: Statement,
    ids: Vec<i64>,
}

impl System for Postgres {
    type P = PgProducer;
    type C = PgConsumer;

    async fn producer(&self) -> anyhow::Result<PgProducer> {
        let client = open(&self.conninfo).await?;
        let one = client
            .prepare("INSERT INTO peerbench.queue (body) VALUES ($1)")
            .await?;
        let many = client
            .prepare("INSERT INTO peerbench.queue (body) SELECT unnest($1::bytea[])")
            .await?;
        Ok(PgProducer { client, one, many })
    }

    async fn consumer(&self) -> anyhow::Result<PgConsumer> {
        let client = open(&self.conninfo).await?;
        let read = client
            .prepare(
                "UPDATE peerbench.queue SET vt = now() + interval '30 seconds',
                        read_ct = read_ct + 1
                 WHERE id IN (SELECT id FROM peerbench.queue WHERE vt <= now()
                              ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
                 RETURNING id, body",
            )
            .await?;
        let acker = open(&self.conninfo).await?;
        let delete = acker
            .prepare("DELETE FROM peerbench.queue WHERE id = ANY($1)")
            .await?;
        Ok(PgConsumer {
            client,
            read,
            acker: Arc::new(acker),
            delete,
            ids: Vec::new(),
        })
    }
}

impl Producer for PgProducer {
    async fn send(&mut self, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
        if bodies.len() == 1 {
            self.client.execute(&self.one, &[&bodies[0]]).await?;
        } else {
            self.client.execute(&self.many, &[&bodies]).await?;
        }
        Ok(())
    }
}

impl Consumer for PgConsumer {
    async fn receive(&mut self, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
        let limit = i64::try_from(max).unwrap_or(1);
        let mut rows = self.client.query(&self.read, &[&limit]).await?;
        if rows.is_empty() {
            // A queue table has no long poll: wait a little before asking again.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            rows = self.client.query(&self.read, &[&limit]).await?;
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            self.ids.push(r.get(0));
            out.push(r.get(1));
        }
        Ok(out)
    }

    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
        let ids = std::mem::take(&mut self.ids);
        let acker = self.acker.clone();
        let delete = self.delete.clone();
        async move {
            acker.execute(&delete, &[&ids]).await?;
            Ok(())
        }
    }
}

/// Drops `schema` (the one a Sluice broker on PostgreSQL used), as the first user that
/// connects.
pub async fn drop_schema(host: &str, port: u16, db: &str, schema: &str) -> anyhow::Result<()> {
    let (_, admin) = first_user(host, port, db).await?;
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .with_context(|| format!("dropping schema {schema}"))
}

/// A connection as the first of `postgres` and `root` that the server accepts, and its
/// connection string.
async fn first_user(host: &str, port: u16, db: &str) -> anyhow::Result<(String, Client)> {
    let mut last = None;
    for user in ["postgres", "root"] {
        let conninfo = format!("host={host} port={port} user={user} dbname={db}");
        match open(&conninfo).await {
            Ok(client) => return Ok((conninfo, client)),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("no user"))
        .context(format!("connecting to PostgreSQL at {host}:{port} db {db}")))
}
