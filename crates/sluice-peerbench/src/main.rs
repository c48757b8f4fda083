//! `sluice-peerbench`: the same durable work-queue load against Sluice and, side by side,
//! against RabbitMQ, NATS JetStream, PostgreSQL and Redis running on this machine.
//!
//! Workload, the same for all: at-least-once work-queue semantics on durable storage. A
//! message counts as sent only when the server confirmed it durable, and as done only when a
//! consumer acked it. 1 KiB bodies, P producers and C consumers, batch size B, a fixed
//! message count after an uncounted warm-up. The systems alternate within one run: for each
//! batch size every system runs once (per round) before the next batch size.
//!
//! Reported per system and batch size: throughput (messages acked ÷ time from the first send
//! to the last counted ack), end-to-end latency (send started → delivered to a consumer)
//! p50/p99/p99.9 from an HDR histogram, the server process's CPU seconds per million
//! messages (`/proc/<pid>/stat`, utime + stime, before and after the measured phase) and the
//! ratio of Sluice to each peer. A system that cannot be reached is skipped with a message.
//! Every phase is bounded by `--timeout`.

mod backlog;
mod cpu;
mod http;
mod load;
mod nats;
mod pg;
mod rabbit;
mod redisq;
mod report;
mod sluice;
mod sluice_frames;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use tokio::io::AsyncBufReadExt as _;

use crate::load::System;
use crate::report::{Row, Skipped};

/// Systems in their default order.
const ALL: [&str; 10] = [
    "sluice",
    "sluice-frames",
    "sluice-relaxed",
    "sluice-postgres",
    "sluice-postgres-frames",
    "rabbitmq",
    "nats",
    "postgres",
    "redis",
    "redis-everysec",
];

/// Command-line options.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Messages counted per system and batch size.
    #[arg(long, default_value_t = 20_000)]
    messages: u64,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,100", value_delimiter = ',')]
    batch: Vec<usize>,
    /// What pads each 1 KiB body after its send time and number: `filler` (one repeated
    /// letter, very compressible) or `random` (fresh random letters and digits, next to
    /// incompressible; costs the tool about a microsecond per body).
    #[arg(long, value_enum, default_value_t = load::Fill::Filler)]
    body: load::Fill,
    /// Concurrent producers.
    #[arg(long, default_value_t = 4)]
    producers: usize,
    /// Concurrent consumers.
    #[arg(long, default_value_t = 4)]
    consumers: usize,
    /// Messages sent and acked before the measured phase, not counted.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Systems to run, comma-separated, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sluice,sluice-frames,sluice-relaxed,sluice-postgres,sluice-postgres-frames,rabbitmq,nats,postgres,redis,redis-everysec"
    )]
    systems: Vec<String>,
    /// Times each system runs per batch size (alternating); the median run is reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Longest one phase (warm-up or measured) of one system may take, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// A running Sluice broker; without it the `sluice` binary is started on a temporary
    /// data directory and an ephemeral port.
    #[arg(long, value_name = "URL")]
    sluice_url: Option<String>,
    /// The frame listener (`host:port`) of the broker of --sluice-url, for the
    /// `sluice-frames` row (started with `sluice serve --frames-listen`).
    #[arg(long, value_name = "ADDR")]
    sluice_frames: Option<String>,
    /// A running broker with relaxed durability (`sluice serve --sync-interval 1s
    /// --frames-listen …`) for the `sluice-relaxed` row, with its frame listener in
    /// --sluice-relaxed-frames; without it the tool starts one.
    #[arg(long, value_name = "URL", requires = "sluice_relaxed_frames")]
    sluice_relaxed_url: Option<String>,
    /// The frame listener of --sluice-relaxed-url.
    #[arg(long, value_name = "ADDR", requires = "sluice_relaxed_url")]
    sluice_relaxed_frames: Option<String>,
    /// A running Sluice broker on the PostgreSQL engine for the `sluice-postgres` row; without
    /// it the `sluice` binary is started with `--store` on the database of `--pg-*`.
    #[arg(long, value_name = "URL")]
    sluice_pg_url: Option<String>,
    /// The frame listener of --sluice-pg-url, for the `sluice-postgres-frames` row.
    #[arg(long, value_name = "ADDR", requires = "sluice_pg_url")]
    sluice_pg_frames: Option<String>,
    /// The `sluice` binary to start when --sluice-url is not given.
    #[arg(long, default_value = "target/release/sluice")]
    sluice_bin: PathBuf,
    /// RabbitMQ URL.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    rabbitmq_url: String,
    /// NATS URL (JetStream must be on).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// PostgreSQL host.
    #[arg(long, default_value = "127.0.0.1")]
    pg_host: String,
    /// PostgreSQL port.
    #[arg(long, default_value_t = 5432)]
    pg_port: u16,
    /// PostgreSQL user of the `sluice-postgres` broker (the `postgres` peer tries `postgres`,
    /// then `root`).
    #[arg(long, default_value = "postgres")]
    pg_user: String,
    /// PostgreSQL database (schemas `peerbench` and `peerbench_sluice` are created in it and
    /// dropped afterwards).
    #[arg(long, default_value = "test")]
    pg_db: String,
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    redis_url: String,
    /// How Sluice consumers acknowledge: `separate` (an ack request of their own while they
    /// receive, as the worker SDK's ack batcher does) or `in-receive` (the last batch's
    /// receipts ride on the next receive: one request per batch fewer, but each receive then
    /// waits for its acks' sync).
    #[arg(long, value_enum, default_value_t = SluiceAcks::Separate)]
    sluice_acks: SluiceAcks,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Write an SVG bar chart of throughput per system and batch size to this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Sluice alone under a backlog, instead of the side-by-side run: for each of these
    /// queue depths (e.g. 1000000,10000000) fill a fresh broker, measure throughput at each
    /// --batch on top of the backlog, kill it, and measure recovery time and RAM per queued
    /// message. Needs about 2.4 KB of free disk per queued message; the data is deleted
    /// afterwards.
    #[arg(long, value_delimiter = ',', value_name = "N,…")]
    backlog: Vec<u64>,
    /// Where the backlog mode puts its data directories (default: the system's temporary
    /// directory).
    #[arg(long, value_name = "DIR")]
    backlog_dir: Option<PathBuf>,
    /// Longest the backlog mode may take to fill one depth, or to recover it, in seconds.
    #[arg(long, default_value_t = 1800)]
    fill_timeout: u64,
    /// Run nothing: print the table (and write --svg) from the `--json` output of an
    /// earlier run.
    #[arg(long, value_name = "JSON_FILE")]
    replot: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.replot {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let out: report::Output = serde_json::from_str(&text)
            .with_context(|| format!("{} is not sluice-peerbench --json output", path.display()))?;
        print!("{}", out.table());
        if let Some(svg) = &args.svg {
            std::fs::write(svg, out.svg()).with_context(|| format!("writing {}", svg.display()))?;
        }
        return Ok(());
    }
    for s in &args.systems {
        if !ALL.contains(&s.as_str()) {
            bail!("unknown system {s:?}; known: {}", ALL.join(", "));
        }
    }
    if args.batch.iter().any(|b| *b == 0 || *b > 1000) {
        bail!("batch sizes must be 1 – 1000");
    }
    if args.producers == 0 || args.consumers == 0 || args.messages == 0 {
        bail!("--producers, --consumers and --messages must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    if !args.backlog.is_empty() {
        return rt.block_on(run_backlog(&args));
    }
    rt.block_on(run(args))
}

async fn run_backlog(args: &Args) -> anyhow::Result<()> {
    if args.sluice_url.is_some() {
        bail!("--backlog starts (and kills) its own brokers; drop --sluice-url");
    }
    if args.backlog.contains(&0) {
        bail!("--backlog depths must be at least 1");
    }
    let out = backlog::run(&backlog::Options {
        bin: args.sluice_bin.clone(),
        depths: args.backlog.clone(),
        batches: args.batch.clone(),
        producers: args.producers,
        consumers: args.consumers,
        messages: args.messages,
        warmup: args.warmup,
        rounds: args.rounds,
        timeout: Duration::from_secs(args.timeout),
        fill_timeout: Duration::from_secs(args.fill_timeout),
        dir: args.backlog_dir.clone(),
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        eprint!("{}", out.table());
    } else {
        print!("{}", out.table());
    }
    Ok(())
}

/// A Sluice broker this tool started.
struct OwnSluice {
    child: tokio::process::Child,
    url: String,
    frames: String,
    _dir: tempfile::TempDir,
}

async fn start_sluice(bin: &PathBuf) -> anyhow::Result<OwnSluice> {
    let dir = tempfile::tempdir().context("creating a data directory")?;
    let (child, url, frames) = spawn_sluice(bin, dir.path(), Duration::from_secs(30)).await?;
    Ok(OwnSluice {
        child,
        url,
        frames,
        _dir: dir,
    })
}

/// Starts `sluice serve` on `data_dir` and ephemeral loopback ports; returns once it
/// listens (recovery is done by then), at most after `limit`: the child, its HTTP URL and its
/// frame listener's address.
pub(crate) async fn spawn_sluice(
    bin: &PathBuf,
    data_dir: &std::path::Path,
    limit: Duration,
) -> anyhow::Result<(tokio::process::Child, String, String)> {
    spawn_sluice_with(bin, &["--data-dir".as_ref(), data_dir.as_os_str()], limit).await
}

/// Starts `sluice serve` with `store_args` (`--data-dir DIR` or `--store URL`) on ephemeral
/// loopback ports (HTTP and frames); returns once it listens, at most after `limit`.
pub(crate) async fn spawn_sluice_with(
    bin: &PathBuf,
    store_args: &[&std::ffi::OsStr],
    limit: Duration,
) -> anyhow::Result<(tokio::process::Child, String, String)> {
    let mut child = tokio::process::Command::new(bin)
        .arg("serve")
        .args(store_args)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--frames-listen")
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it: cargo build --release -p sluice, or give --sluice-url)",
                bin.display()
            )
        })?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let (url, frames) = tokio::time::timeout(limit, async {
        let mut frames = None;
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = line.strip_prefix("sluice frames listening on ") {
                frames = Some(addr.trim().to_owned());
            } else if let Some(url) = line.strip_prefix("sluice listening on ") {
                let frames = frames.context("sluice printed no frame listener")?;
                return anyhow::Ok((url.trim().to_owned(), frames));
            }
        }
        bail!("sluice exited before listening")
    })
    .await
    .with_context(|| format!("sluice did not start listening in {} s", limit.as_secs()))??;
    // Keep draining stdout so the broker never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, url, frames))
}

/// The relaxed-durability broker's sync interval: Redis `everysec`'s promise.
const RELAXED_SYNC_INTERVAL: &str = "1s";

/// The schema of the Sluice broker on PostgreSQL this tool starts (dropped afterwards).
const PG_SCHEMA: &str = "peerbench_sluice";

struct Ctx {
    args: Args,
    sluice_url: Option<String>,
    sluice_frames: Option<String>,
    sluice_pid: Option<u32>,
    sluice_pg_url: Option<String>,
    sluice_pg_frames: Option<String>,
    sluice_pg_pid: Option<u32>,
    /// The relaxed-durability broker: base URL, frame listener, pid.
    sluice_relaxed: Option<(String, String, Option<u32>)>,
    tick: f64,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut own = None;
    let mut skipped: Vec<Skipped> = Vec::new();
    let embedded = ["sluice", "sluice-frames"];
    let (sluice_url, sluice_frames, sluice_pid) =
        if !args.systems.iter().any(|s| embedded.contains(&s.as_str())) {
            (None, None, None)
        } else if let Some(u) = &args.sluice_url {
            (Some(u.clone()), args.sluice_frames.clone(), None)
        } else {
            match start_sluice(&args.sluice_bin).await {
                Ok(o) => {
                    let r = (Some(o.url.clone()), Some(o.frames.clone()), o.child.id());
                    own = Some(o);
                    r
                }
                Err(e) => {
                    for name in embedded {
                        skipped.push(Skipped::new(name, &e));
                    }
                    (None, None, None)
                }
            }
        };
    let mut own_pg = None;
    let on_pg = ["sluice-postgres", "sluice-postgres-frames"];
    let (sluice_pg_url, sluice_pg_frames, sluice_pg_pid) =
        if !args.systems.iter().any(|s| on_pg.contains(&s.as_str())) {
            (None, None, None)
        } else if let Some(u) = &args.sluice_pg_url {
            (Some(u.clone()), args.sluice_pg_frames.clone(), None)
        } else {
            let store = format!(
                "postgres://{}@{}:{}/{}?schema={PG_SCHEMA}",
                args.pg_user, args.pg_host, args.pg_port, args.pg_db
            );
            match spawn_sluice_with(
                &args.sluice_bin,
                &["--store".as_ref(), store.as_ref()],
                Duration::from_secs(30),
            )
            .await
            {
                Ok((child, url, frames)) => {
                    let r = (Some(url), Some(frames), child.id());
                    own_pg = Some(child);
                    r
                }
                Err(e) => {
                    for name in on_pg {
                        skipped.push(Skipped::new(name, &e));
                    }
                    (None, None, None)
                }
            }
        };
    // A broker of its own, so the durable rows' broker keeps syncing before every answer.
    let mut own_relaxed = None;
    let sluice_relaxed = if !args.systems.iter().any(|s| s == "sluice-relaxed") {
        None
    } else if let (Some(u), Some(f)) = (&args.sluice_relaxed_url, &args.sluice_relaxed_frames) {
        Some((u.clone(), f.clone(), None))
    } else {
        let dir = tempfile::tempdir().context("creating a data directory")?;
        let store_args = [
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
            "--sync-interval".as_ref(),
            RELAXED_SYNC_INTERVAL.as_ref(),
        ];
        match spawn_sluice_with(&args.sluice_bin, &store_args, Duration::from_secs(30)).await {
            Ok((child, url, frames)) => {
                let pid = child.id();
                own_relaxed = Some((child, dir));
                Some((url, frames, pid))
            }
            Err(e) => {
                skipped.push(Skipped::new("sluice-relaxed", &e));
                None
            }
        }
    };
    let ctx = Ctx {
        sluice_relaxed,
        sluice_url,
        sluice_frames,
        sluice_pid,
        sluice_pg_url,
        sluice_pg_frames,
        sluice_pg_pid,
        tick: cpu::ticks_per_second(),
        args,
    };
    let mut rows: Vec<Row> = Vec::new();
    for &batch in &ctx.args.batch {
        let mut runs: Vec<Vec<Row>> = vec![Vec::new(); ctx.args.systems.len()];
        for _round in 0..ctx.args.rounds {
            for (i, name) in ctx.args.systems.iter().enumerate() {
                if skipped.iter().any(|s| s.system == *name) {
                    continue;
                }
                eprintln!("peerbench: {name}, batch {batch} …");
                match run_one(&ctx, name, batch).await {
                    Ok(row) => {
                        eprintln!(
                            "peerbench: {name}, batch {batch}: {:.0} msg/s",
                            row.msgs_per_s
                        );
                        runs[i].push(row);
                    }
                    Err(e) => {
                        eprintln!("peerbench: SKIPPING {name}: {e:#}");
                        skipped.push(Skipped::new(name, &e));
                    }
                }
            }
        }
        for mut r in runs {
            if r.is_empty() {
                continue;
            }
            r.sort_by(|a, b| a.msgs_per_s.total_cmp(&b.msgs_per_s));
            let all: Vec<f64> = r.iter().map(|x| x.msgs_per_s).collect();
            let mid = r.len() / 2;
            let mut row = r.swap_remove(mid);
            row.rounds_msgs_per_s = all;
            rows.push(row);
        }
    }
    if let Some(mut o) = own {
        let _ = o.child.kill().await;
    }
    if let Some((mut child, _dir)) = own_relaxed {
        let _ = child.kill().await;
    }
    if let Some(mut child) = own_pg {
        let _ = child.kill().await;
        if let Err(e) = pg::drop_schema(
            &ctx.args.pg_host,
            ctx.args.pg_port,
            &ctx.args.pg_db,
            PG_SCHEMA,
        )
        .await
        {
            eprintln!("peerbench: could not drop schema {PG_SCHEMA}: {e:#}");
        }
    }
    let out = report::Output {
        messages: ctx.args.messages,
        warmup: ctx.args.warmup,
        producers: ctx.args.producers,
        consumers: ctx.args.consumers,
        rounds: ctx.args.rounds,
        body_bytes: load::BODY_BYTES,
        body_fill: clap::ValueEnum::to_possible_value(&ctx.args.body)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default(),
        rows,
        skipped,
    };
    if ctx.args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        eprint!("{}", out.table());
    } else {
        print!("{}", out.table());
    }
    if let Some(path) = &ctx.args.svg {
        std::fs::write(path, out.svg()).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// How the Sluice rows' consumers acknowledge (`--sluice-acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SluiceAcks {
    /// An ack request of their own, in flight while the next receive runs.
    Separate,
    /// Within the next receive (its `ack` field).
    InReceive,
}

/// Connects to one system, runs warm-up and measured phase, tears down.
async fn run_one(ctx: &Ctx, name: &str, batch: usize) -> anyhow::Result<Row> {
    let a = &ctx.args;
    match name {
        "sluice" | "sluice-postgres" => {
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
        "sluice-frames" | "sluice-relaxed" | "sluice-postgres-frames" => {
            let (url, addr, pid, durability, settings) = if name == "sluice-postgres-frames" {
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
            };
            let sys = sluice_frames::SluiceFrames::connect(&url, &addr).await?;
            let target = match pid {
                Some(p) => cpu::Target::Pid(p),
                None => cpu::Target::Name("sluice".to_owned()),
            };
            measure(ctx, &sys, name, &durability, &settings, batch, target).await
        }
        "rabbitmq" => {
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
        "nats" => {
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
        "postgres" => {
            let sys = pg::Postgres::connect(&a.pg_host, a.pg_port, &a.pg_db).await?;
            let settings = format!("queue table, FOR UPDATE SKIP LOCKED, {}", sys.settings);
            let durability = if sys.settings.contains("synchronous_commit=on")
                && sys.settings.contains("fsync=on")
            {
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
        "redis" | "redis-everysec" => {
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
        other => bail!("unknown system {other}"),
    }
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

/// Opens the connections, runs the warm-up and the measured phase, and builds the row.
async fn measure<S: System>(
    ctx: &Ctx,
    sys: &S,
    name: &str,
    durability: &str,
    settings: &str,
    batch: usize,
    target: cpu::Target,
) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let limit = Duration::from_secs(a.timeout);
    let mut ps = Vec::new();
    let mut cs = Vec::new();
    for _ in 0..a.producers {
        ps.push(sys.producer().await.context("opening a producer")?);
    }
    for _ in 0..a.consumers {
        cs.push(sys.consumer().await.context("opening a consumer")?);
    }
    if a.warmup > 0 {
        let (w, p2, c2) = load::phase(ps, cs, a.warmup, batch, a.body, limit).await?;
        if w.timed_out || w.acked < a.warmup {
            bail!(
                "warm-up did not finish in {} s ({} of {} acked; first error: {})",
                a.timeout,
                w.acked,
                a.warmup,
                w.first_error.unwrap_or_else(|| "none".to_owned())
            );
        }
        ps = p2;
        cs = c2;
    }
    let before = cpu::ticks(&target);
    let (m, ps, cs) = load::phase(ps, cs, a.messages, batch, a.body, limit).await?;
    let after = cpu::ticks(&target);
    drop((ps, cs));
    if m.acked == 0 {
        bail!(
            "nothing was acked in {} s (first error: {})",
            a.timeout,
            m.first_error.unwrap_or_else(|| "none".to_owned())
        );
    }
    let secs = m.elapsed.as_secs_f64().max(1e-6);
    let cpu_s_per_m = match (before, after) {
        (Some(b), Some(a)) => Some((a.saturating_sub(b)) as f64 / ctx.tick / m.acked as f64 * 1e6),
        _ => None,
    };
    Ok(Row {
        system: name.to_owned(),
        durability: durability.to_owned(),
        settings: settings.to_owned(),
        batch,
        acked: m.acked,
        seconds: secs,
        msgs_per_s: m.acked as f64 / secs,
        p50_us: m.e2e_us.value_at_quantile(0.50),
        p99_us: m.e2e_us.value_at_quantile(0.99),
        p999_us: m.e2e_us.value_at_quantile(0.999),
        cpu_s_per_m,
        errors: m.errors,
        timed_out: m.timed_out,
        first_error: m.first_error,
        rounds_msgs_per_s: Vec::new(),
    })
}
