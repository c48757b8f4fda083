//! The hot paths of the PostgreSQL engine against a real server: receive + ack of a backlog
//! by four consumers that each name themselves (so receives of different consumers are
//! combined into shared lease statements), at one message per call and at a hundred (as rows
//! and as packs), and a live stream of single-message sends taken by long-polling consumers
//! (sends handed straight to waiting receives). 1 KiB bodies, no records kept.
//!
//! Needs the server the tests use (`SLUICE_TEST_POSTGRES`, default
//! `postgres://postgres@127.0.0.1:5432/test`); each store gets a schema of its own, dropped at
//! the end. Run with `cargo bench -p sluice-postgres --bench hot`.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_core::store::prelude::*;
use sluice_core::{
    AckRequest, Body, Checked, NewMessage, QueueConfigPatch, QueueName, ReceiveRequest,
};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_testkit::postgres;
use tokio::runtime::Runtime;

const BODY: usize = 1024;
const CONSUMERS: usize = 4;

type Store = Arc<Checked<PostgresStore>>;

fn rt() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A store on a fresh schema (named in `schemas`, to drop later) with queue `bench`.
fn fresh(rt: &Runtime, pack_min: usize, schemas: &mut Vec<String>) -> (Store, QueueName) {
    let schema = postgres::unique_schema("bench");
    schemas.push(schema.clone());
    let q = QueueName::new("bench").expect("name");
    let store = rt.block_on(async {
        assert!(postgres::available().await, "PostgreSQL is needed");
        let options = PostgresOptions {
            schema,
            pack_min,
            ..PostgresOptions::default()
        };
        let s = PostgresStore::open(&postgres::url(), options)
            .await
            .expect("open");
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
    (Arc::new(store), q)
}

fn batch(n: usize) -> Vec<NewMessage> {
    (0..n)
        .map(|_| NewMessage::new(Body::binary(vec![0x5a; BODY])))
        .collect()
}

/// Sends `total` messages in batches of `size`, one after another.
async fn fill(store: &Store, q: &QueueName, total: usize, size: usize) {
    for _ in 0..total / size {
        store.send(q, batch(size)).await.expect("send");
    }
}

/// Receives and acks `total` messages with [`CONSUMERS`] tasks named `w0`, `w1`, … in
/// receives of up to `size`, each waiting up to `wait` for a first message.
async fn drain(store: &Store, q: &QueueName, total: usize, size: usize, wait: Duration) {
    let per = total / CONSUMERS;
    let mut tasks = Vec::new();
    for i in 0..CONSUMERS {
        let (store, q) = (store.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < per {
                let req = ReceiveRequest {
                    max: size.min(per - done) as u32,
                    wait,
                    consumer: Some(format!("w{i}")),
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

/// A backlog of `total` messages, drained by the consumers; only the draining is timed.
fn receive_ack(c: &mut Criterion) {
    let rt = rt();
    let mut schemas = Vec::new();
    let mut g = c.benchmark_group("receive_ack");
    g.sample_size(10);
    for (name, size, pack_min, total) in [
        ("batch1", 1, 0, 2_000),
        ("batch100_rows", 100, 0, 20_000),
        ("batch100_packs", 100, 10, 20_000),
    ] {
        let (store, q) = fresh(&rt, pack_min, &mut schemas);
        g.throughput(Throughput::Elements(total as u64));
        g.bench_with_input(
            BenchmarkId::new(name, format!("{CONSUMERS}consumers")),
            &(),
            |b, _| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        rt.block_on(fill(&store, &q, total, size.max(100)));
                        let start = Instant::now();
                        rt.block_on(drain(&store, &q, total, size, Duration::ZERO));
                        spent += start.elapsed();
                    }
                    spent
                })
            },
        );
        rt.block_on(async move { drop(store) });
    }
    g.finish();
    postgres::drop_schemas(schemas);
}

/// Four producers sending one message per call while four consumers long-poll for them.
fn stream(c: &mut Criterion) {
    let rt = rt();
    let mut schemas = Vec::new();
    let mut g = c.benchmark_group("stream");
    g.sample_size(10);
    let total = 2_000;
    let (store, q) = fresh(&rt, 10, &mut schemas);
    g.throughput(Throughput::Elements(total as u64));
    g.bench_function(BenchmarkId::new("batch1", "4+4"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(async {
                    let producers: Vec<_> = (0..CONSUMERS)
                        .map(|_| {
                            let (store, q) = (store.clone(), q.clone());
                            tokio::spawn(async move {
                                fill(&store, &q, total / CONSUMERS, 1).await;
                            })
                        })
                        .collect();
                    drain(&store, &q, total, 1, Duration::from_secs(1)).await;
                    for p in producers {
                        p.await.expect("producer");
                    }
                });
            }
            start.elapsed()
        })
    });
    rt.block_on(async move { drop(store) });
    g.finish();
    postgres::drop_schemas(schemas);
}

criterion_group!(benches, receive_ack, stream);
criterion_main!(benches);
