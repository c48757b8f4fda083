//! Sluice alone under a backlog (`--backlog N,…`): for each queue depth N, a fresh broker is
//! filled with N messages of 1 KiB, then the usual load (send, receive, ack at each batch
//! size) runs on top of them, so the depth stays at N while it is measured; then the broker
//! is killed with SIGKILL and started again on the same data directory.
//!
//! Reported per depth: how fast the queue filled, the log's size on disk, throughput at
//! each batch size with N queued (and its ratio to the smallest depth measured), the time
//! from starting the killed broker again to its listening (recovery: replay of the whole
//! log), and the broker's resident memory after recovery, as bytes per queued message
//! beyond an empty broker's.
//!
//! Bounded: the fill stops with an error after `--fill-timeout`, each load phase after
//! `--timeout`, recovery after `--fill-timeout`. The data directory is deleted at the end of
//! each depth (and refused up front when the disk has too little room for it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::load::{self, Producer as _, System as _};
use crate::sluice::Sluice;

/// Messages per send request while filling (the API's batch limit).
const FILL_BATCH: u64 = 1000;
/// Concurrent senders while filling.
const FILL_SENDERS: usize = 4;
/// Disk a queued 1 KiB message needs: its record, plus room for compaction's copies.
const DISK_PER_MESSAGE: u64 = 2 * 1200;

/// What the backlog mode needs to know.
pub struct Options {
    pub bin: PathBuf,
    pub depths: Vec<u64>,
    pub batches: Vec<usize>,
    pub producers: usize,
    pub consumers: usize,
    pub messages: u64,
    pub warmup: u64,
    pub rounds: usize,
    pub timeout: Duration,
    pub fill_timeout: Duration,
    pub dir: Option<PathBuf>,
}

/// One batch size at one depth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    pub batch: usize,
    /// Median of the rounds.
    pub msgs_per_s: f64,
    /// Every round's.
    pub rounds_msgs_per_s: Vec<f64>,
    /// The broker's CPU seconds per million messages (median of the rounds): unlike
    /// msg/s, hardly moved by other work on the machine.
    pub cpu_s_per_m: Option<f64>,
    pub timed_out: bool,
}

/// One depth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Depth {
    /// Messages queued.
    pub queued: u64,
    /// Messages per second while filling (batches of 1,000).
    pub fill_msgs_per_s: f64,
    /// Bytes of log on disk after the load (preallocated space included).
    pub log_bytes: u64,
    /// Throughput with `queued` messages waiting, per batch size.
    pub throughput: Vec<Throughput>,
    /// From starting the killed broker again to its listening.
    pub recovery_s: f64,
    /// Resident memory of an empty broker (bytes).
    pub rss_empty: u64,
    /// Resident memory after the fill, before the kill (bytes).
    pub rss_filled: u64,
    /// Resident memory right after recovery (bytes).
    pub rss_recovered: u64,
}

impl Depth {
    /// RAM per queued message beyond an empty broker's, after recovery.
    pub fn bytes_per_message(&self) -> f64 {
        self.rss_recovered.saturating_sub(self.rss_empty) as f64 / self.queued.max(1) as f64
    }
}

/// The whole backlog run.
#[derive(Debug, Serialize, Deserialize)]
pub struct Output {
    pub rounds: usize,
    pub producers: usize,
    pub consumers: usize,
    pub messages: u64,
    pub body_bytes: usize,
    pub depths: Vec<Depth>,
}

/// Runs every depth, smallest first as given.
pub async fn run(o: &Options) -> anyhow::Result<Output> {
    let mut depths = Vec::new();
    for &n in &o.depths {
        eprintln!("peerbench backlog: {n} queued messages …");
        let d = one_depth(o, n)
            .await
            .with_context(|| format!("backlog {n}"))?;
        eprintln!(
            "peerbench backlog: {n} queued: recovery {:.1} s, {:.0} B of RAM per message",
            d.recovery_s,
            d.bytes_per_message()
        );
        depths.push(d);
    }
    Ok(Output {
        rounds: o.rounds.max(1),
        producers: o.producers,
        consumers: o.consumers,
        messages: o.messages,
        body_bytes: load::BODY_BYTES,
        depths,
    })
}

async fn one_depth(o: &Options, n: u64) -> anyhow::Result<Depth> {
    let dir = match &o.dir {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .context("creating a data directory")?;
    let need = n * DISK_PER_MESSAGE + (256 << 20);
    if let Some(free) = free_bytes(dir.path())
        && free < need
    {
        bail!(
            "{} has {} MiB free; {n} queued messages need about {} MiB (choose another place with --backlog-dir)",
            dir.path().display(),
            free >> 20,
            need >> 20
        );
    }
    let (mut child, url, _) =
        crate::spawn_sluice(&o.bin, dir.path(), Duration::from_secs(30)).await?;
    let pid = child.id().context("the broker has no pid")?;
    let sys = Sluice::open(&url, true).await?;
    let rss_empty = rss(pid)?;

    let started = Instant::now();
    fill(&sys, n, o.fill_timeout).await?;
    let fill_msgs_per_s = n as f64 / started.elapsed().as_secs_f64().max(1e-6);
    let depth = sys.depth().await?;
    if depth != n {
        bail!("filled {n} messages but the queue holds {depth}");
    }
    let rss_filled = rss(pid)?;

    let mut throughput = Vec::new();
    for &batch in &o.batches {
        // Consumers may ack a few more than were sent in a phase: top the depth up again.
        let depth = sys.depth().await?;
        if depth < n {
            fill(&sys, n - depth, o.fill_timeout).await?;
        }
        eprintln!("peerbench backlog: {n} queued, batch {batch} …");
        throughput.push(load_on_top(o, &sys, batch, pid).await?);
    }
    let log_bytes = dir_bytes(&dir.path().join("log"));
    let before = sys.depth().await?;

    // A crash, then a start on the same directory: the whole log is replayed.
    child.kill().await.context("killing the broker")?;
    let started = Instant::now();
    let (child, url, _) = crate::spawn_sluice(&o.bin, dir.path(), o.fill_timeout).await?;
    let recovery_s = started.elapsed().as_secs_f64();
    let pid = child.id().context("the broker has no pid")?;
    let rss_recovered = rss(pid)?;
    let sys = Sluice::open(&url, false).await?;
    let after = sys.depth().await?;
    if after != before {
        bail!("{before} messages were queued before the kill, {after} after recovery");
    }
    drop(child);
    // Give the killed broker a moment to let go of its files before they are deleted.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(dir);
    Ok(Depth {
        queued: n,
        fill_msgs_per_s,
        log_bytes,
        throughput,
        recovery_s,
        rss_empty,
        rss_filled,
        rss_recovered,
    })
}

/// Sends `n` messages in batches from a few concurrent senders.
async fn fill(sys: &Sluice, n: u64, limit: Duration) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let deadline = tokio::time::Instant::now() + limit;
    let step = (n / 10).max(1);
    let mut tasks = Vec::new();
    for _ in 0..FILL_SENDERS {
        let mut p = sys.producer().await?;
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(FILL_BATCH, Ordering::Relaxed);
                if first >= n {
                    return anyhow::Ok(());
                }
                let last = (first + FILL_BATCH).min(n);
                let bodies = (first..last)
                    .map(|i| load::body(0, i, load::Fill::Filler))
                    .collect();
                tokio::time::timeout_at(deadline, p.send(bodies))
                    .await
                    .context("filling took longer than --fill-timeout")??;
                if n >= 100_000 && first / step != last / step {
                    eprintln!("peerbench backlog: {last} of {n} queued");
                }
            }
        }));
    }
    for t in tasks {
        t.await.context("a filling task panicked")??;
    }
    Ok(())
}

/// The usual load at one batch size, on top of the backlog: as many sends as acks, so the
/// depth stays where it is. Only throughput is kept: consumers take the oldest messages
/// first, so the latency they see is the backlog's age.
async fn load_on_top(
    o: &Options,
    sys: &Sluice,
    batch: usize,
    pid: u32,
) -> anyhow::Result<Throughput> {
    let mut ps = Vec::new();
    let mut cs = Vec::new();
    for _ in 0..o.producers {
        ps.push(sys.producer().await?);
    }
    for _ in 0..o.consumers {
        cs.push(sys.consumer().await?);
    }
    if o.warmup > 0 {
        let (_, p2, c2) =
            load::phase(ps, cs, o.warmup, batch, load::Fill::Filler, o.timeout).await?;
        ps = p2;
        cs = c2;
    }
    let target = crate::cpu::Target::Pid(pid);
    let tick = crate::cpu::ticks_per_second();
    let mut rates = Vec::new();
    let mut cpus = Vec::new();
    let mut timed_out = false;
    for _ in 0..o.rounds.max(1) {
        let before = crate::cpu::ticks(&target);
        let (m, p2, c2) =
            load::phase(ps, cs, o.messages, batch, load::Fill::Filler, o.timeout).await?;
        let after = crate::cpu::ticks(&target);
        (ps, cs) = (p2, c2);
        if m.acked == 0 {
            bail!(
                "nothing was acked in {} s (first error: {})",
                o.timeout.as_secs(),
                m.first_error.unwrap_or_else(|| "none".to_owned())
            );
        }
        timed_out |= m.timed_out;
        rates.push(m.acked as f64 / m.elapsed.as_secs_f64().max(1e-6));
        if let (Some(b), Some(a)) = (before, after) {
            cpus.push(a.saturating_sub(b) as f64 / tick / m.acked as f64 * 1e6);
        }
    }
    Ok(Throughput {
        batch,
        msgs_per_s: median(&rates),
        cpu_s_per_m: (!cpus.is_empty()).then(|| median(&cpus)),
        rounds_msgs_per_s: rates,
        timed_out,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Resident set size of a process, from `/proc/<pid>/status`.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no VmRSS in {path}"))?;
    Ok(kb * 1024)
}

/// Free bytes on the file system holding `dir`, as `df` reports them.
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let kb: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn mib(b: u64) -> String {
    format!("{:.0}", b as f64 / (1024.0 * 1024.0))
}

impl Output {
    /// The table as Markdown.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let batches: Vec<usize> = self
            .depths
            .first()
            .map(|d| d.throughput.iter().map(|t| t.batch).collect())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "Sluice alone, messages of {} bytes; load on top of the backlog: {} messages per batch size and round, {} producers, {} consumers, median of {} round(s)\n",
            self.body_bytes, self.messages, self.producers, self.consumers, self.rounds
        );
        let mut head = String::from("| queued | fill msg/s | log on disk (MiB) |");
        let mut rule = String::from("|---|---|---|");
        for b in &batches {
            let _ = write!(
                head,
                " msg/s at B = {b} (÷ first row) | server CPU s per 1M msgs at B = {b} |"
            );
            rule.push_str("---|---|");
        }
        head.push_str(
            " recovery after kill -9 (s) | RSS empty / filled / recovered (MiB) | RAM per queued message |",
        );
        rule.push_str("---|---|---|");
        let _ = writeln!(s, "{head}\n{rule}");
        let first = self.depths.first();
        for d in &self.depths {
            let mut row = format!(
                "| {} | {:.0} | {} |",
                d.queued,
                d.fill_msgs_per_s,
                mib(d.log_bytes)
            );
            for t in &d.throughput {
                let base = first
                    .and_then(|f| f.throughput.iter().find(|x| x.batch == t.batch))
                    .map_or(t.msgs_per_s, |x| x.msgs_per_s);
                let flag = if t.timed_out { " (timed out)" } else { "" };
                let cpu = t
                    .cpu_s_per_m
                    .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.0}"));
                let _ = write!(
                    row,
                    " {:.0} ({:.2}){flag} | {cpu} |",
                    t.msgs_per_s,
                    t.msgs_per_s / base.max(1e-9)
                );
            }
            let _ = write!(
                row,
                " {:.1} | {} / {} / {} | {:.0} B |",
                d.recovery_s,
                mib(d.rss_empty),
                mib(d.rss_filled),
                mib(d.rss_recovered),
                d.bytes_per_message()
            );
            let _ = writeln!(s, "{row}");
        }
        s
    }
}
