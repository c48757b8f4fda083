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
//!
//! This file holds the entry point; the options are in `args`, the side-by-side run in
//! `compare` (its brokers in `brokers`, each system's row in `systems`, one measurement in
//! `measure`), and the backlog mode in `backlog`.

mod args;
mod backlog;
mod brokers;
mod compare;
mod cpu;
mod http;
mod load;
mod measure;
mod nats;
mod pg;
mod rabbit;
mod redisq;
mod report;
mod sluice;
mod sluice_frames;
mod spawn;
mod systems;

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;

use crate::args::Args;
pub(crate) use crate::spawn::spawn_sluice;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.replot {
        return replot(path, &args);
    }
    args.check()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    if !args.backlog.is_empty() {
        return rt.block_on(run_backlog(&args));
    }
    rt.block_on(compare::run(args))
}

/// Prints the table (and writes --svg) from the `--json` output of an earlier run.
fn replot(path: &std::path::Path, args: &Args) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let out: report::Output = serde_json::from_str(&text)
        .with_context(|| format!("{} is not sluice-peerbench --json output", path.display()))?;
    print!("{}", out.table());
    if let Some(svg) = &args.svg {
        std::fs::write(svg, out.svg()).with_context(|| format!("writing {}", svg.display()))?;
    }
    Ok(())
}

/// Sluice alone under a backlog of each `--backlog` depth.
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
