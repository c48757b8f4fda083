//! Throughput of the embedded engine alone, 1 KiB bodies, every write durable (fsync'd):
//! send in batches of 1 and 100, receive+ack in batches of 100, with 1 and 16 concurrent
//! callers. Run with `cargo bench -p sluice-embedded --bench engine`.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_core::store::prelude::*;
use sluice_core::{
    AckRequest, Body, Checked, NewMessage, QueueConfigPatch, QueueName, ReceiveRequest,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use tokio::runtime::Runtime;

const BODY: usize = 1024;

fn rt() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn fresh(rt: &Runtime) -> (tempfile::TempDir, Arc<Checked<EmbeddedStore>>, QueueName) {
    let dir = tempfile::tempdir().expect("temp dir");
    let q = QueueName::new("bench").expect("name");
    let store = rt.block_on(async {
        let (s, _) = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("open");
        s.put_queue(
            &q,
            &QueueConfigPatch {
                result_ttl: Some(Duration::ZERO),
                ..Default::default()
            },
        )
        .await
        .expect("queue");
        s
    });
    (dir, Arc::new(store), q)
}

fn batch(n: usize) -> Vec<NewMessage> {
    (0..n)
        .map(|_| NewMessage::new(Body::binary(vec![0x5a; BODY])))
        .collect()
}

/// Sends `total` messages with `callers` concurrent tasks in batches of `size`.
async fn send_load(
    store: &Arc<Checked<EmbeddedStore>>,
    q: &QueueName,
    total: usize,
    size: usize,
    callers: usize,
) {
    let per = total / callers / size;
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (store, q) = (store.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                store.send(&q, batch(size)).await.expect("send");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

/// Receives and acks `total` messages with `callers` concurrent tasks in batches of `size`.
async fn drain_load(
    store: &Arc<Checked<EmbeddedStore>>,
    q: &QueueName,
    total: usize,
    size: usize,
    callers: usize,
) {
    let per = total / callers;
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (store, q) = (store.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < per {
                let req = ReceiveRequest {
                    max: size.min(per - done) as u32,
                    ..Default::default()
                };
                let got = store.receive(&q, req).await.expect("receive");
                if got.is_empty() {
                    continue;
                }
                done += got.len();
                let acks = got
                    .into_iter()
                    .map(|d| AckRequest {
                        receipt: d.receipt,
                        result: None,
                    })
                    .collect();
                store.ack(&q, acks).await.expect("ack");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

fn send(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("send");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for (size, callers, total) in [
        (1, 1, 2_000),
        (1, 16, 16_000),
        (100, 1, 50_000),
        (100, 16, 160_000),
    ] {
        let (_dir, store, q) = fresh(&rt);
        g.throughput(Throughput::Elements(total as u64));
        g.bench_with_input(
            BenchmarkId::new(format!("batch{size}"), format!("{callers}callers")),
            &(),
            |b, _| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        rt.block_on(send_load(&store, &q, total, size, callers));
                    }
                    start.elapsed()
                })
            },
        );
    }
    g.finish();
}

fn receive_ack(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("receive_ack");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for callers in [1, 16] {
        let total = 32_000;
        let (_dir, store, q) = fresh(&rt);
        g.throughput(Throughput::Elements(total as u64));
        g.bench_with_input(
            BenchmarkId::new("batch100", format!("{callers}callers")),
            &(),
            |b, _| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        rt.block_on(send_load(&store, &q, total, 100, 1));
                        let start = Instant::now();
                        rt.block_on(drain_load(&store, &q, total, 100, callers));
                        spent += start.elapsed();
                    }
                    spent
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, send, receive_ack);
criterion_main!(benches);
