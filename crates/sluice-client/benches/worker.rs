//! End-to-end worker throughput: trivial tasks through a real broker.
//!
//! ```text
//! cargo bench -p sluice-client --bench worker            # broker in-process (embedded store in a temp dir)
//! SLUICE_URL=http://127.0.0.1:7878 SLUICE_FRAMES=127.0.0.1:7879 cargo bench -p sluice-client --bench worker   # a running `sluice serve`
//! BENCH_TASKS=50000 BENCH_CONCURRENCY=256 cargo bench -p sluice-client --bench worker
//! ```
//!
//! Two measurements, each of `BENCH_TASKS` tasks (default 20,000) whose handler returns its
//! argument plus one (so every ack stores a result), made once with the worker leasing and
//! settling over HTTP and once over the frame protocol (skipped for a running broker unless
//! `SLUICE_FRAMES` names its frame listener):
//! - **drain**: the tasks are enqueued first (batches of 1000); the figure is the time from the
//!   worker's start to the last task acknowledged;
//! - **end to end**: a producer enqueues (batches of 100) while the worker runs; the figure
//!   is the time from the first enqueue to the last ack.
//!
//! Not a timed test: it prints figures for `docs/benchmarks.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_client::frames::FramePool;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, Outcome, OutgoingMessage, TaskContext, TaskEnvelope, Worker};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_server::{Broker, ServerOptions};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn enqueue(client: &Client, queue: &str, from: usize, n: usize, batch: usize) {
    let mut i = from;
    while i < from + n {
        let k = batch.min(from + n - i);
        let msgs = (i..i + k)
            .map(|x| TaskEnvelope::new("inc", &x).and_then(|e| e.to_message()))
            .collect::<Result<Vec<OutgoingMessage>, _>>()
            .expect("envelopes");
        client.send_batch(queue, msgs).await.expect("send batch");
        i += k;
    }
}

async fn run_worker(
    client: &Client,
    frames: Option<&str>,
    queue: &str,
    concurrency: usize,
    total: u64,
    producer: Option<tokio::task::JoinHandle<()>>,
) -> Duration {
    let mut builder = Worker::builder(client.clone(), queue);
    if let Some(addr) = frames {
        builder = builder.frames(FramePool::new(addr, None));
    }
    let worker = builder
        .concurrency(concurrency)
        .poll_wait(Duration::from_millis(100))
        .handler("inc", |_ctx: TaskContext, x: u64| async move { Ok(x + 1) })
        .build()
        .expect("worker");
    let metrics = worker.metrics();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let start = Instant::now();
    let handle = tokio::spawn(worker.run_until(async {
        let _ = rx.await;
    }));
    while metrics.snapshot().completed(Outcome::Success) < total {
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "benchmark stalled"
        );
    }
    let took = start.elapsed();
    if let Some(p) = producer {
        p.await.expect("producer");
    }
    let _ = tx.send(());
    handle.await.expect("worker task").expect("worker");
    let s = metrics.snapshot();
    assert_eq!(s.completed(Outcome::Success), total, "{s:?}");
    took
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tasks = env_usize("BENCH_TASKS", 20_000);
        let concurrency = env_usize("BENCH_CONCURRENCY", 256);
        let (url, frames, _keep) = match std::env::var("SLUICE_URL") {
            Ok(u) => (u, std::env::var("SLUICE_FRAMES").ok(), None),
            Err(_) => {
                let dir = tempfile::tempdir().expect("tempdir");
                let (store, _) =
                    EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("store");
                let broker = Broker::new(Arc::new(store), ServerOptions::default());
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let addr = listener.local_addr().expect("addr");
                let frames = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let frames_addr = frames.local_addr().expect("addr");
                let broker = broker.with_frames(frames);
                tokio::spawn(broker.serve(listener, std::future::pending()));
                (
                    format!("http://{addr}"),
                    Some(frames_addr.to_string()),
                    Some(dir),
                )
            }
        };
        let client = Client::new(&url).expect("client");
        println!(
            "worker benchmark: {tasks} trivial tasks, concurrency {concurrency}, broker {}",
            if _keep.is_some() {
                "in-process (embedded store)"
            } else {
                url.as_str()
            }
        );
        let suffix = std::process::id();
        let mut lanes = vec![("HTTP", None)];
        if let Some(f) = frames.as_deref() {
            lanes.push(("frames", Some(f)));
        }
        for (lane, frames) in lanes {
            let q = format!("bench-drain-{suffix}-{lane}");
            client
                .put_queue(&q, &QueueConfigRequest::default())
                .await
                .expect("queue");
            let t = Instant::now();
            enqueue(&client, &q, 0, tasks, 1000).await;
            let enq = t.elapsed();
            println!(
                "{lane}: enqueue: {tasks} in {:.2}s = {:.0} tasks/s (batches of 1000, HTTP)",
                enq.as_secs_f64(),
                tasks as f64 / enq.as_secs_f64()
            );
            let took = run_worker(&client, frames, &q, concurrency, tasks as u64, None).await;
            println!(
                "{lane}: drain: {tasks} in {:.2}s = {:.0} tasks/s (lease, run, ack with result)",
                took.as_secs_f64(),
                tasks as f64 / took.as_secs_f64()
            );
            let _ = client.delete_queue(&q).await;

            let q = format!("bench-e2e-{suffix}-{lane}");
            client
                .put_queue(&q, &QueueConfigRequest::default())
                .await
                .expect("queue");
            let pc = client.clone();
            let pq = q.clone();
            let producer = tokio::spawn(async move { enqueue(&pc, &pq, 0, tasks, 100).await });
            let took =
                run_worker(&client, frames, &q, concurrency, tasks as u64, Some(producer)).await;
            println!(
                "{lane}: end to end: {tasks} in {:.2}s = {:.0} tasks/s (enqueue over HTTP while the worker runs)",
                took.as_secs_f64(),
                tasks as f64 / took.as_secs_f64()
            );
            let _ = client.delete_queue(&q).await;
        }
    });
}
