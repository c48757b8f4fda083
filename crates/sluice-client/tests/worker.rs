//! Worker behaviour against a real broker: outcome mapping, panics, hooks, lease extension,
//! cancellation, configuration errors, and the task routes of the client.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{
    Client, Error, ErrorCode, Outcome, TaskContext, TaskError, TaskStatus, Worker, WorkerMetrics,
};
use tokio::sync::oneshot;

async fn queue(c: &Client, name: &str, max: u32, visibility_ms: i64) {
    c.put_queue(
        name,
        &QueueConfigRequest {
            max_receive_count: Some(max),
            visibility_timeout_ms: Some(visibility_ms),
            backoff_base_ms: Some(10),
            backoff_max_ms: Some(20),
            ..QueueConfigRequest::default()
        },
    )
    .await
    .expect("put queue");
}

struct Bg {
    stop: oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<Result<(), Error>>,
    metrics: WorkerMetrics,
}

fn spawn(w: Worker) -> Bg {
    let metrics = w.metrics();
    let (stop, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(w.run_until(async {
        let _ = rx.await;
    }));
    Bg {
        stop,
        handle,
        metrics,
    }
}

impl Bg {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.handle.await.expect("worker task").expect("worker ran");
    }
}

fn fast(c: &Client, q: &str) -> sluice_client::WorkerBuilder {
    Worker::builder(c.clone(), q)
        .poll_wait(Duration::from_millis(100))
        .max_backoff(Duration::from_millis(100))
}

#[tokio::test]
async fn a_panic_is_retried_and_the_worker_survives() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 10_000).await;
    let w = fast(c, "q")
        .handler("boom", |ctx: TaskContext, explode: bool| async move {
            if explode && ctx.attempt() == 1 {
                panic!("first attempt explodes");
            }
            Ok("ok")
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    let a = c.enqueue("q", "boom", &true).await.unwrap();
    let v = c.wait_for(&a, Duration::from_secs(10)).await.unwrap();
    assert_eq!((v.status, v.receive_count), (TaskStatus::Success, 2));
    let b = c.enqueue("q", "boom", &false).await.unwrap();
    assert_eq!(
        c.wait_for(&b, Duration::from_secs(10))
            .await
            .unwrap()
            .status,
        TaskStatus::Success
    );
    let m = bg.metrics.snapshot();
    assert_eq!((m.panics, m.retries()), (1, 1));
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn retry_after_sets_the_nack_delay() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 10_000).await;
    let times: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let t2 = Arc::clone(&times);
    let w = fast(c, "q")
        .handler("call", move |ctx: TaskContext, ()| {
            let t2 = Arc::clone(&t2);
            async move {
                t2.lock().unwrap().push(Instant::now());
                if ctx.attempt() == 1 {
                    return Err(TaskError::retry_after("429", Duration::from_millis(600)));
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    let id = c.enqueue("q", "call", &()).await.unwrap();
    assert_eq!(
        c.wait_for(&id, Duration::from_secs(10))
            .await
            .unwrap()
            .status,
        TaskStatus::Success
    );
    let t = times.lock().unwrap().clone();
    assert_eq!(t.len(), 2);
    assert!(
        t[1] - t[0] >= Duration::from_millis(550),
        "{:?}",
        t[1] - t[0]
    );
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn permanent_errors_dead_letter_at_once_and_a_panicking_hook_is_harmless() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 10_000).await;
    let calls = Arc::new(AtomicU32::new(0));
    let k = Arc::clone(&calls);
    let w = fast(c, "q")
        .handler("pay", |_ctx: TaskContext, amount: i64| async move {
            if amount < 0 {
                return Err(TaskError::permanent("negative amount"));
            }
            Ok(amount)
        })
        .on_dead_letter(move |_id, _err| {
            k.fetch_add(1, Ordering::SeqCst);
            async move { panic!("the alerting system is broken") }
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    let bad = c.enqueue("q", "pay", &-5).await.unwrap();
    let v = c.wait_for(&bad, Duration::from_secs(10)).await.unwrap();
    assert_eq!(v.status, TaskStatus::Failure);
    assert_eq!(v.receive_count, 1, "no retries for a permanent error");
    assert_eq!(v.error.as_deref(), Some("negative amount"));
    let good = c.enqueue("q", "pay", &5).await.unwrap();
    let sum: i64 = c
        .call("q", "pay", &7, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(sum, 7);
    assert_eq!(
        c.wait_for(&good, Duration::from_secs(10))
            .await
            .unwrap()
            .status,
        TaskStatus::Success
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let e = c
        .call::<_, i64>("q", "pay", &-1, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::TaskFailed { status: TaskStatus::Failure, error: Some(m), .. } if m == "negative amount"),
        "{e:?}"
    );
    // The broker shows FAILURE a moment before the worker has counted it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while bg.metrics.snapshot().completed(Outcome::Failure) < 2 {
        assert!(Instant::now() < deadline, "{:?}", bg.metrics.snapshot());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bg.metrics.snapshot().dead_lettered, 2);
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn a_long_task_keeps_its_lease() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 300).await;
    let runs = Arc::new(AtomicU32::new(0));
    let r = Arc::clone(&runs);
    let w = fast(c, "q")
        .handler("long", move |_ctx: TaskContext, ()| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(1200)).await;
                Ok(())
            }
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    let id = c.enqueue("q", "long", &()).await.unwrap();
    let v = c.wait_for(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!((v.status, v.receive_count), (TaskStatus::Success, 1));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "never handed to a second run"
    );
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_waiting_task_removes_it_and_is_sticky() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 10_000).await;
    let id = c.enqueue("q", "never", &()).await.unwrap();
    assert_eq!(c.cancel(&id).await.unwrap().status, TaskStatus::Cancelled);
    let runs = Arc::new(AtomicU32::new(0));
    let r = Arc::clone(&runs);
    let w = fast(c, "q")
        .handler("never", move |_ctx: TaskContext, ()| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { Ok(()) }
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        c.task_status(&id, None).await.unwrap().status,
        TaskStatus::Cancelled
    );
    let e = c
        .call::<_, ()>("q", "never", &(), Duration::from_millis(1))
        .await;
    assert!(
        matches!(e, Ok(()) | Err(Error::TaskTimeout { .. })),
        "{e:?}"
    );
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn configuration_errors_are_explained() {
    let srv = common::start().await;
    let c = &srv.client;
    let e = Worker::builder(c.clone(), "q").build().unwrap_err();
    assert!(e.to_string().contains("at least one handler"), "{e}");
    let w = fast(c, "missing")
        .handler("t", |_ctx: TaskContext, ()| async move { Ok(()) })
        .build()
        .unwrap();
    let e = w.run_until(std::future::pending()).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::QueueNotFound));
    assert!(e.to_string().contains("create it first"), "{e}");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_custom_unprocessable_queue_is_created_and_used() {
    let srv = common::start().await;
    let c = &srv.client;
    queue(c, "q", 5, 10_000).await;
    c.send_json("q", &serde_json::json!({"not": "an envelope"}))
        .await
        .unwrap();
    let w = fast(c, "q")
        .unprocessable_queue("poison")
        .handler("t", |_ctx: TaskContext, ()| async move { Ok(()) })
        .build()
        .unwrap();
    let bg = spawn(w);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stats("poison").await.map_or(0, |s| s.visible) < 1 {
        assert!(Instant::now() < deadline, "not moved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cfg = c.get_queue("poison").await.unwrap().config;
    assert_eq!(cfg.max_receive_count, 0);
    assert_eq!(cfg.dead_letter_queue, None);
    bg.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn events_of_an_unknown_task_end_after_one_status() {
    let srv = common::start().await;
    let c = &srv.client;
    let mut ev = c.task_events("00000000000000ff").await.unwrap();
    let first = ev.next().await.unwrap().unwrap();
    assert_eq!(first.status, TaskStatus::Unknown);
    assert!(ev.next().await.is_none());
    let v = c
        .wait_for("00000000000000ff", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(v.status, TaskStatus::Unknown);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_worker_started_before_the_broker_waits_for_it() {
    let mut srv = common::RestartableServer::start().await;
    let client = Client::builder(&srv.base)
        .retry(common::fast_retries())
        .build()
        .unwrap();
    queue(&client, "q", 5, 10_000).await;
    srv.stop().await;
    let w = fast(&client, "q")
        .handler("t", |_ctx: TaskContext, x: u32| async move { Ok(x) })
        .build()
        .unwrap();
    let bg = spawn(w);
    tokio::time::sleep(Duration::from_millis(400)).await;
    srv.restart().await;
    let v: u32 = client
        .call("q", "t", &9, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(v, 9);
    assert!(bg.metrics.snapshot().broker_errors > 0);
    bg.stop().await;
    srv.stop().await;
}

#[tokio::test]
async fn shutdown_hands_back_unfinished_work_without_spending_an_attempt() {
    let srv = common::start().await;
    let c = &srv.client;
    // One attempt only: a nack at shutdown would dead-letter the task.
    queue(c, "last", 1, 10_000).await;
    let w = fast(c, "last")
        .shutdown_grace(Duration::from_millis(100))
        .handler("slow", |_ctx: TaskContext, _: ()| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(())
        })
        .build()
        .unwrap();
    let bg = spawn(w);
    let id = c.enqueue("last", "slow", &()).await.unwrap();
    let started = Instant::now();
    loop {
        if c.task_status(&id, None).await.unwrap().status == TaskStatus::Started {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the task never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bg.stop().await;
    let v = c.task_status(&id, None).await.unwrap();
    assert_eq!(
        (v.status, v.receive_count),
        (TaskStatus::Pending, 0),
        "handed back uncounted, not dead-lettered: {v:?}"
    );
    srv.shutdown().await;
}
