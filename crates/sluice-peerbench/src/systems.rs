//! One row of the side-by-side run per system: how each system is connected to and set up,
//! and what its row says about durability and settings.

use anyhow::{Context as _, bail};

use crate::args::SluiceAcks;
use crate::brokers::RELAXED_SYNC_INTERVAL;
use crate::compare::Ctx;
use crate::measure::measure;
use crate::report::Row;
use crate::{cpu, nats, pg, rabbit, redisq, sluice, sluice_frames};

/// Connects to one system, runs warm-up and measured phase, tears down.
pub(crate) async fn run_one(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    match name {
        "sluice" | "sluice-postgres" => sluice_http(ctx, name, batch).await,
        "sluice-frames" | "sluice-relaxed" | "sluice-postgres-frames" => {
            sluice_frames(ctx, name, batch).await
        }
        "rabbitmq" => rabbitmq_row(ctx, name, batch).await,
        "nats" => nats_row(ctx, name, batch).await,
        "postgres" => postgres_row(ctx, name, batch).await,
        "redis" | "redis-everysec" => redis_row(ctx, name, batch).await,
        other => bail!("unknown system {other}"),
    }
}

/// A Sluice row over the HTTP API: the embedded broker or the one on PostgreSQL.
async fn sluice_http(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let (url, pid, durability, settings) = if name == "sluice" {
        (
            &ctx.sluice_url,
            ctx.sluice_pid,
            "durable (fdatasync per group commit)",
            "embedded engine, HTTP API",
        )
    } else {
        (
            &ctx.sluice_pg_url,
            ctx.sluice_pg_pid,
            "durable (WAL flushed at commit)",
            "PostgreSQL engine (one node, same server as the postgres row), HTTP API",
        )
    };
    let in_receive = a.sluice_acks == SluiceAcks::InReceive;
    let settings = format!(
        "{settings}; consumers ack {}",
        if in_receive {
            "within their next receive"
        } else {
            "in a request of their own while receiving"
        }
    );
    let url = url.clone().with_context(|| format!("no {name} broker"))?;
    let sys = sluice::Sluice::connect(&url)
        .await?
        .acks_in_receive(in_receive);
    let target = match pid {
        Some(p) => cpu::Target::Pid(p),
        None => cpu::Target::Name("sluice".to_owned()),
    };
    measure(ctx, &sys, name, durability, &settings, batch, target).await
}

/// The broker, frame listener and pid of a frame-protocol row, and what its table row says
/// about durability and settings.
fn frames_broker(
    ctx: &Ctx,
    name: &str,
) -> anyhow::Result<(String, String, Option<u32>, String, String)> {
    Ok(if name == "sluice-postgres-frames" {
        let url = ctx
            .sluice_pg_url
            .clone()
            .context("no sluice-postgres broker")?;
        let addr = ctx.sluice_pg_frames.clone().context(
            "no frame listener: start the broker with --frames-listen and give --sluice-pg-frames",
        )?;
        (
            url,
            addr,
            ctx.sluice_pg_pid,
            "durable (WAL flushed at commit)".to_owned(),
            "PostgreSQL engine (one node, same server as the postgres row), frame protocol, as sluice-frames".to_owned(),
        )
    } else if name == "sluice-frames" {
        let url = ctx.sluice_url.clone().context("no sluice broker")?;
        let addr = ctx.sluice_frames.clone().context(
            "no frame listener: start the broker with --frames-listen and give --sluice-frames",
        )?;
        (
            url,
            addr,
            ctx.sluice_pid,
            "durable (fdatasync per group commit)".to_owned(),
            "embedded engine, frame protocol (binary bodies); consumers ack on a connection of their own while receiving".to_owned(),
        )
    } else {
        let (url, addr, pid) = ctx
            .sluice_relaxed
            .clone()
            .context("no relaxed-durability broker")?;
        (
            url,
            addr,
            pid,
            format!(
                "WEAKER: answered before fdatasync (--sync-interval {RELAXED_SYNC_INTERVAL}): \
                 up to {RELAXED_SYNC_INTERVAL} of acked writes lost on a machine crash, none on a broker crash"
            ),
            format!(
                "embedded engine with --sync-interval {RELAXED_SYNC_INTERVAL}, frame protocol, as sluice-frames"
            ),
        )
    })
}

/// A Sluice row over the frame protocol: embedded, relaxed durability or on PostgreSQL.
async fn sluice_frames(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let (url, addr, pid, durability, settings) = frames_broker(ctx, name)?;
    let sys = sluice_frames::SluiceFrames::connect(&url, &addr).await?;
    let target = match pid {
        Some(p) => cpu::Target::Pid(p),
        None => cpu::Target::Name("sluice".to_owned()),
    };
    measure(ctx, &sys, name, &durability, &settings, batch, target).await
}

/// The RabbitMQ row: a durable quorum queue.
async fn rabbitmq_row(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let sys = rabbit::Rabbit::connect(&a.rabbitmq_url, batch).await?;
    let r = measure(
        ctx,
        &sys,
        name,
        "durable (quorum queue: fsync before confirm)",
        "durable quorum queue, persistent messages, publisher confirms, manual acks (multiple=true per batch), prefetch = B",
        batch,
        cpu::Target::Name("beam.smp".to_owned()),
    )
    .await;
    let t = sys.teardown().await;
    let r = r?;
    t?;
    Ok(r)
}

/// The NATS JetStream row: a work-queue stream on file storage.
async fn nats_row(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let sys = nats::Nats::connect(&a.nats_url, batch).await?;
    let (durability, version) = nats_durability();
    let r = measure(
        ctx,
        &sys,
        name,
        &durability,
        &format!("{version}, file storage, work-queue retention, publish with ack, pull consumer (up to B per pull request), explicit acks"),
        batch,
        cpu::Target::Name("nats-server".to_owned()),
    )
    .await;
    let t = sys.teardown().await;
    let r = r?;
    t?;
    Ok(r)
}

/// The PostgreSQL row: a queue table read with `FOR UPDATE SKIP LOCKED`.
async fn postgres_row(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let sys = pg::Postgres::connect(&a.pg_host, a.pg_port, &a.pg_db).await?;
    let settings = format!("queue table, FOR UPDATE SKIP LOCKED, {}", sys.settings);
    let durability =
        if sys.settings.contains("synchronous_commit=on") && sys.settings.contains("fsync=on") {
            "durable (WAL flushed at commit)"
        } else {
            "NOT durable (synchronous_commit or fsync off)"
        };
    let r = measure(
        ctx,
        &sys,
        name,
        durability,
        &settings,
        batch,
        cpu::Target::Name("postgres".to_owned()),
    )
    .await;
    let t = sys.teardown().await;
    let r = r?;
    t?;
    Ok(r)
}

/// The Redis rows: lists on an append-only file synced always or every second.
async fn redis_row(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let fsync = if name == "redis" {
        "always"
    } else {
        "everysec"
    };
    let mut sys = redisq::Redis::connect(&a.redis_url, fsync).await?;
    let durability = if fsync == "always" {
        "durable (AOF, fsync per write)"
    } else {
        "WEAKER: up to 1 s of acked writes lost on a crash"
    };
    let settings = format!("LMOVE + LREM, {}", sys.settings);
    let r = measure(
        ctx,
        &sys,
        name,
        durability,
        &settings,
        batch,
        cpu::Target::Name("redis-server".to_owned()),
    )
    .await;
    let t = sys.teardown().await;
    let r = r?;
    t?;
    Ok(r)
}

/// What `nats-server --version` says and whether that version can fsync every write.
fn nats_durability() -> (String, String) {
    let version = std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "nats-server (version unknown)".to_owned());
    let v = version.rsplit('v').next().unwrap_or("");
    let mut parts = v.split('.').map(|p| p.trim().parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let durability = if (major, minor) >= (2, 10) {
        "NOT durable unless the server runs with sync_interval: always (default: fsync every 2 min)"
    } else {
        "NOT durable (this version acks before any fsync; per-write sync needs 2.10+ sync_interval: always)"
    };
    (durability.to_owned(), version)
}
