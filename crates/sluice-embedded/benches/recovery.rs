//! Start-up recovery time and RAM per queued message, for a backlog of N messages of 1 KiB
//! (default 1,000,000; set `SLUICE_BENCH_MESSAGES`). The store is filled in this process, then
//! opened in a fresh child process that reports the time to open and its resident memory
//! before and after, so no memory of the fill phase is counted.
//!
//! Run with `cargo bench -p sluice-embedded --bench recovery`.

use std::time::{Duration, Instant};

use sluice_core::store::prelude::*;
use sluice_core::{Body, NewMessage, QueueConfigPatch, QueueName};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--open") {
        open_and_report(&args[i + 1]);
        return;
    }
    let n: usize = std::env::var("SLUICE_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fill = Instant::now();
    rt.block_on(async {
        let (store, _) = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("open");
        let q = QueueName::new("backlog").expect("name");
        store
            .put_queue(&q, &QueueConfigPatch::default())
            .await
            .expect("queue");
        let mut sent = 0;
        while sent < n {
            let k = 1000.min(n - sent);
            let msgs = (0..k)
                .map(|_| NewMessage::new(Body::binary(vec![0x5a; 1024])))
                .collect();
            store.send(&q, msgs).await.expect("send");
            sent += k;
        }
    });
    drop(rt);
    println!(
        "filled {n} messages of 1 KiB in {:.1} s",
        fill.elapsed().as_secs_f64()
    );
    let exe = std::env::current_exe().expect("exe");
    let status = std::process::Command::new(exe)
        .args(["--open", &dir.path().display().to_string()])
        .status()
        .expect("child");
    assert!(status.success());
}

fn open_and_report(dir: &str) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _guard = rt.enter();
    let before = rss_bytes();
    let start = Instant::now();
    let (store, report) = EmbeddedStore::open(
        dir,
        EmbeddedOptions {
            maintenance_interval: Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .expect("open");
    let elapsed = start.elapsed();
    let after = rss_bytes();
    let n = report.messages.max(1);
    println!(
        "recovered {} messages ({} records, {:.0} MiB of log) in {:.2} s",
        report.messages,
        report.records,
        report.bytes as f64 / 1048576.0,
        elapsed.as_secs_f64()
    );
    println!(
        "resident memory: {:.1} MiB before open, {:.1} MiB after; {:.0} bytes per queued message",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / n as f64
    );
    drop(store);
}
