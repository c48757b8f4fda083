//! A worker's settlements over the frame protocol (ack with results, reject, release, move,
//! extend, progress) and idempotent sends, each checked against the same operation over HTTP
//! on the same broker: the same outcomes and the same refusals, on the embedded engine and on
//! PostgreSQL. And the Rust worker running over frames.
#![allow(clippy::unwrap_used)] // test helpers: a failure should panic the test

use std::sync::Arc;
use std::time::Duration;

use sluice_client::frames::{
    Body, FrameAck, FrameClientError, FrameConnection, FrameMessage, FramePool, FrameReceipt,
    GroupedFrameMessage,
};
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{
    Client, Error, Outcome, OutgoingMessage, ReceiveOptions, ResultExt, TaskContext, TaskError,
    Worker,
};
use sluice_core::{ErrorCode, Store, TaskStatus};
use sluice_server::{Broker, ServerOptions};

/// A broker over `store` on ephemeral loopback ports: its HTTP client and frame address.
struct Served {
    client: Client,
    frames: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn serve(store: Arc<dyn Store>) -> Served {
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", http.local_addr().unwrap());
    let frames = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frames_addr = frames.local_addr().unwrap();
    let broker = Broker::new(store, ServerOptions::default()).with_frames(frames);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(broker.serve(http, async {
        let _ = stopped.await;
    }));
    Served {
        client: Client::new(&url).unwrap(),
        frames: frames_addr,
        stop: Some(stop),
    }
}

/// Runs `check` on the embedded engine, then on PostgreSQL (skipped loudly when it is not
/// running, except under `CI=true`).
async fn on_both_engines<F, Fut>(check: F)
where
    F: Fn(Served) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = sluice_embedded::EmbeddedStore::open(
        dir.path(),
        sluice_embedded::EmbeddedOptions {
            maintenance_interval: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .unwrap();
    check(serve(Arc::new(store)).await).await;

    if !sluice_testkit::postgres::available().await {
        return;
    }
    let schema = sluice_testkit::postgres::unique_schema("frame_settle");
    let _guard = sluice_testkit::postgres::SchemaGuard::new(schema.clone());
    let store = sluice_postgres::PostgresStore::open(
        &sluice_testkit::postgres::url(),
        sluice_postgres::PostgresOptions {
            schema,
            pool_size: 4,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    check(serve(Arc::new(store)).await).await;
}

/// The error code of a refused frame call.
fn code(e: FrameClientError) -> String {
    match e {
        FrameClientError::Refused(e) => e.code,
        other => panic!("expected a refusal, got {other}"),
    }
}

/// The error code of a refused HTTP call.
fn http_code(e: Error) -> String {
    e.code()
        .unwrap_or_else(|| panic!("expected a refusal, got {e}"))
        .as_str()
        .to_owned()
}

/// Creates queue `name` with the defaults and opens a frame connection.
async fn queue_and_connection(s: &Served, name: &str) -> FrameConnection {
    s.client
        .put_queue(name, &QueueConfigRequest::default())
        .await
        .unwrap();
    FrameConnection::connect(s.frames, None).await.unwrap()
}

/// Sends `n` JSON messages over HTTP and leases them all over frames.
async fn leased(
    s: &Served,
    conn: &mut FrameConnection,
    queue: &str,
    n: usize,
) -> Vec<sluice_client::frames::FrameDelivery> {
    for i in 0..n {
        s.client
            .send(queue, OutgoingMessage::json(&i).unwrap())
            .await
            .unwrap();
    }
    let got = conn.receive(queue, 100, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), n);
    got
}

/// Leases one message over HTTP: its id and receipt string.
async fn leased_http(s: &Served, queue: &str) -> (String, String) {
    s.client
        .send(queue, OutgoingMessage::json(&"h").unwrap())
        .await
        .unwrap();
    let d = s
        .client
        .receive(queue, &ReceiveOptions::default())
        .await
        .unwrap()
        .pop()
        .unwrap();
    (d.id, d.receipt)
}

/// A message id as the HTTP API writes it.
fn hex(id: u64) -> String {
    format!("{id:016x}")
}

fn receipt_string(r: FrameReceipt) -> String {
    sluice_core::Receipt::from(r).to_string()
}

#[tokio::test]
async fn acks_with_results_keep_the_result_and_refuse_a_bad_one_alone() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "q").await;
        let got = leased(&s, &mut conn, "q", 3).await;
        let out = conn
            .ack_with_results(
                "q",
                vec![
                    FrameAck {
                        receipt: got[0].receipt,
                        result: Some(Body::json(r#"{"sum":3}"#)),
                    },
                    FrameAck {
                        receipt: got[1].receipt,
                        result: Some(Body::json("{not json")),
                    },
                    FrameAck {
                        receipt: got[2].receipt,
                        result: None,
                    },
                ],
            )
            .await
            .unwrap();
        let codes: Vec<Option<&str>> = out
            .iter()
            .map(|o| o.as_ref().map(|e| e.code.as_str()))
            .collect();
        assert_eq!(codes, [None, Some("invalid_argument"), None]);

        let t = s.client.task_status(&hex(got[0].id), None).await.unwrap();
        assert_eq!(t.status, TaskStatus::Success);
        let result = t
            .decoded_result()
            .unwrap()
            .unwrap()
            .json::<serde_json::Value>();
        assert_eq!(result.unwrap(), serde_json::json!({"sum": 3}));
        // The refused item is still leased; a repeat of a done ack is stale, as over HTTP.
        let again = conn
            .ack_with_results(
                "q",
                vec![FrameAck {
                    receipt: got[0].receipt,
                    result: None,
                }],
            )
            .await
            .unwrap();
        assert_eq!(again[0].as_ref().unwrap().code, "receipt_stale");
        assert_eq!(
            s.client
                .task_status(&hex(got[1].id), None)
                .await
                .unwrap()
                .status,
            TaskStatus::Started
        );
        // Empty and oversized batches are refused whole, as over HTTP.
        let e = conn.ack_with_results("q", vec![]).await.unwrap_err();
        assert_eq!(code(e), "invalid_argument");
    })
    .await;
}

#[tokio::test]
async fn reject_release_and_move_place_a_message_as_over_http() {
    on_both_engines(|s| async move {
        let with_dlq = QueueConfigRequest {
            dead_letter_queue: Some(Some("work.dlq".into())),
            ..Default::default()
        };
        s.client.put_queue("work", &with_dlq).await.unwrap();
        let no_dlq = QueueConfigRequest {
            max_receive_count: Some(0),
            dead_letter_queue: Some(None),
            ..Default::default()
        };
        s.client.put_queue("plain", &no_dlq).await.unwrap();
        s.client
            .put_queue("aside", &QueueConfigRequest::default())
            .await
            .unwrap();
        let mut conn = FrameConnection::connect(s.frames, None).await.unwrap();

        // Reject: to the DLQ at once; without a DLQ, conflict over both.
        let got = leased(&s, &mut conn, "work", 1).await;
        let dlq = conn
            .reject("work", got[0].receipt, Some("bad input".into()))
            .await
            .unwrap();
        assert_eq!(dlq, "work.dlq");
        let m = s.client.get_message(&hex(got[0].id)).await.unwrap();
        assert_eq!(m.queue, "work.dlq");
        assert_eq!(m.last_error.as_deref(), Some("bad input"));
        let got = leased(&s, &mut conn, "plain", 1).await;
        let e = conn
            .reject("plain", got[0].receipt, None)
            .await
            .unwrap_err();
        let (_, r) = leased_http(&s, "plain").await;
        let h = s.client.reject("plain", &r, None).await.unwrap_err();
        assert_eq!(
            (code(e), http_code(h)),
            ("conflict".into(), "conflict".into())
        );

        // Release: visible again at once with the attempt not counted.
        conn.release("plain", got[0].receipt).await.unwrap();
        let again = conn.receive("plain", 10, Duration::ZERO).await.unwrap();
        let back = again.iter().find(|d| d.id == got[0].id).unwrap();
        assert_eq!(back.receive_count, got[0].receive_count);
        let stale = conn.release("plain", got[0].receipt).await.unwrap_err();
        s.client.release("plain", &r).await.unwrap();
        let h = s.client.release("plain", &r).await.unwrap_err();
        assert_eq!(
            (code(stale), http_code(h)),
            ("receipt_stale".into(), "receipt_stale".into())
        );

        // Move: into the other queue; to itself is a conflict, to nowhere not found.
        conn.move_message("plain", back.receipt, "aside", Some("later".into()))
            .await
            .unwrap();
        let m = s.client.get_message(&hex(back.id)).await.unwrap();
        assert_eq!(m.queue, "aside");
        let got = leased(&s, &mut conn, "work", 1).await;
        let (_, r) = leased_http(&s, "work").await;
        for (to, want) in [("work", "conflict"), ("nowhere", "queue_not_found")] {
            let e = conn
                .move_message("work", got[0].receipt, to, None)
                .await
                .unwrap_err();
            let h = s
                .client
                .move_message("work", &r, to, None)
                .await
                .unwrap_err();
            assert_eq!((code(e), http_code(h)), (want.into(), want.into()), "{to}");
        }
    })
    .await;
}

#[tokio::test]
async fn extend_and_progress_report_the_lease_and_a_cancel() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "q").await;
        let got = leased(&s, &mut conn, "q", 1).await;
        let d = &got[0];
        let (deadline, cancel) = conn
            .extend("q", d.receipt, Duration::from_secs(600))
            .await
            .unwrap();
        assert!(!cancel);
        assert!(
            deadline > d.lease_deadline_ms,
            "{deadline} > {}",
            d.lease_deadline_ms
        );

        conn.progress("q", d.receipt, 40.0, Some("halfway-ish".into()))
            .await
            .unwrap();
        let t = s.client.task_status(&hex(d.id), None).await.unwrap();
        let p = t.progress.unwrap();
        assert_eq!((p.pct, p.detail.as_deref()), (40.0, Some("halfway-ish")));

        s.client.cancel(&hex(d.id)).await.unwrap();
        let (_, cancel) = conn.progress("q", d.receipt, 50.0, None).await.unwrap();
        assert!(cancel, "a cancel is told at the next progress report");
        let (_, cancel) = conn
            .extend("q", d.receipt, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(cancel, "and at the next extension");

        // The same refusals as HTTP: a lease over 12 hours, a percentage outside 0 – 100, a
        // receipt that is no longer the lease's.
        let (_, r) = leased_http(&s, "q").await;
        let e = conn
            .extend("q", d.receipt, Duration::from_secs(13 * 3600))
            .await
            .unwrap_err();
        let h = s
            .client
            .extend("q", &r, Duration::from_secs(13 * 3600))
            .await
            .unwrap_err();
        assert_eq!(
            (code(e), http_code(h)),
            ("invalid_argument".into(), "invalid_argument".into())
        );
        let e = conn
            .progress("q", d.receipt, 150.0, None)
            .await
            .unwrap_err();
        let h = s.client.progress("q", &r, 150.0, None).await.unwrap_err();
        assert_eq!(
            (code(e), http_code(h)),
            ("invalid_argument".into(), "invalid_argument".into())
        );
        let stale = FrameReceipt {
            id: d.receipt.id,
            token: d.receipt.token + 1,
        };
        let e = conn
            .extend("q", stale, Duration::from_secs(60))
            .await
            .unwrap_err();
        let h = s
            .client
            .extend("q", &receipt_string(stale), Duration::from_secs(60))
            .await
            .unwrap_err();
        assert_eq!(
            (code(e), http_code(h)),
            ("receipt_stale".into(), "receipt_stale".into())
        );
    })
    .await;
}

#[tokio::test]
async fn an_idempotent_send_stores_once_and_refuses_a_reused_key() {
    on_both_engines(|s| async move {
        let mut conn = queue_and_connection(&s, "q").await;
        let batch = |text: &str| {
            vec![
                GroupedFrameMessage {
                    message: FrameMessage::new(Body::text(text.to_owned())),
                    group: None,
                },
                GroupedFrameMessage {
                    message: FrameMessage::new(Body::json("[1,2]")),
                    group: Some("g".into()),
                },
            ]
        };
        let first = conn.send_idempotent("k-1", "q", batch("a")).await.unwrap();
        // A retry after a lost answer, on another connection: the first answer, nothing stored.
        let mut other = FrameConnection::connect(s.frames, None).await.unwrap();
        let again = other.send_idempotent("k-1", "q", batch("a")).await.unwrap();
        assert_eq!(first, again);
        let e = conn
            .send_idempotent("k-1", "q", batch("b"))
            .await
            .unwrap_err();
        assert_eq!(code(e), "idempotency_mismatch");
        // The key is the queue's: the same key on another queue is another send.
        s.client
            .put_queue("q2", &QueueConfigRequest::default())
            .await
            .unwrap();
        let elsewhere = conn.send_idempotent("k-1", "q2", batch("a")).await.unwrap();
        assert_ne!(elsewhere[0].id, first[0].id);
        for bad in ["", "has space", &"x".repeat(256)] {
            let e = conn
                .send_idempotent(bad, "q", batch("a"))
                .await
                .unwrap_err();
            assert_eq!(code(e), "invalid_argument", "{bad:?}");
        }
        // A refused send is not remembered: once the queue exists, the same key sends.
        let e = conn
            .send_idempotent("k-2", "later", batch("a"))
            .await
            .unwrap_err();
        assert_eq!(code(e), "queue_not_found");
        s.client
            .put_queue("later", &QueueConfigRequest::default())
            .await
            .unwrap();
        conn.send_idempotent("k-2", "later", batch("a"))
            .await
            .unwrap();

        let got = conn.receive("q", 10, Duration::ZERO).await.unwrap();
        assert_eq!(got.len(), 2, "stored once");
    })
    .await;
}

#[tokio::test]
async fn the_worker_runs_its_tasks_over_frames() {
    on_both_engines(|s| async move {
        let config = QueueConfigRequest {
            max_receive_count: Some(2),
            ..Default::default()
        };
        s.client.put_queue("jobs", &config).await.unwrap();
        let tasks = 200u64;
        let mut msgs = Vec::new();
        for i in 0..tasks {
            // Every tenth fails once, then succeeds; one is permanent; one is unreadable.
            let env = sluice_client::TaskEnvelope::new("inc", &i).unwrap();
            msgs.push(env.to_message().unwrap());
        }
        msgs.push(
            sluice_client::TaskEnvelope::new("doomed", &0u64)
                .unwrap()
                .to_message()
                .unwrap(),
        );
        msgs.push(OutgoingMessage::bytes(vec![0xffu8, 0]));
        s.client.send_batch("jobs", msgs).await.unwrap();

        let worker = Worker::builder(s.client.clone(), "jobs")
            .frames(FramePool::new(s.frames.to_string(), None))
            .concurrency(16)
            .extend_every(Duration::from_millis(20))
            .poll_wait(Duration::from_millis(50))
            .handler("inc", |ctx: TaskContext, x: u64| async move {
                if x.is_multiple_of(10) && ctx.attempt() == 1 {
                    return Err(TaskError::retry_after("first try fails", Duration::ZERO));
                }
                if x == 7 {
                    ctx.progress(50.0, Some("slow one")).await.unwrap();
                    // Long enough for the worker to extend the lease over frames.
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                Ok(x + 1)
            })
            .handler("doomed", |_ctx: TaskContext, _x: u64| async move {
                Err::<u64, _>(TaskError::permanent("never works"))
            })
            .build()
            .unwrap();
        let metrics = worker.metrics();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(worker.run_until(async {
            let _ = stopped.await;
        }));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let m = metrics.snapshot();
            if m.completed(Outcome::Success) == tasks
                && m.completed(Outcome::Failure) == 1
                && m.completed(Outcome::Unprocessable) == 1
            {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{m:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        run.await.unwrap().unwrap();
        let m = metrics.snapshot();
        assert_eq!(m.completed(Outcome::Retry), tasks / 10, "{m:?}");
        let stats = s.client.stats("jobs").await.unwrap();
        assert_eq!(
            stats.visible + stats.in_flight + stats.delayed,
            0,
            "{stats:?}"
        );
        let unp = s.client.stats("jobs.unprocessable").await.unwrap();
        assert_eq!(unp.visible, 1);
        let dlq = s.client.stats("jobs.dlq").await.unwrap();
        assert_eq!(dlq.visible, 1);
    })
    .await;
}

/// The error a frame refusal becomes in the SDK keeps its code and the status HTTP would
/// answer, so callers handle both transports alike.
#[tokio::test]
async fn a_frame_refusal_is_the_sdk_error_http_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = sluice_embedded::EmbeddedStore::open(dir.path(), Default::default()).unwrap();
    let s = serve(Arc::new(store)).await;
    let mut conn = FrameConnection::connect(s.frames, None).await.unwrap();
    let e: Error = conn
        .release("missing", FrameReceipt { id: 1, token: 1 })
        .await
        .unwrap_err()
        .into();
    assert_eq!(e.code(), Some(ErrorCode::QueueNotFound));
    assert_eq!(e.status(), Some(404));
    assert!(!e.is_transient());
}

/// The answer remembered under an idempotency key is kept by the store: a retry after the
/// broker restarted answers the first send and stores nothing more.
#[tokio::test]
async fn an_idempotent_send_is_remembered_across_a_restart() {
    let mut broker = sluice_testkit::InProcessBroker::start().await;
    let client = Client::new(&broker.url).unwrap();
    client
        .put_queue("q", &QueueConfigRequest::default())
        .await
        .unwrap();
    let batch = || {
        vec![GroupedFrameMessage {
            message: FrameMessage::new(Body::text("once")),
            group: None,
        }]
    };
    let mut conn = FrameConnection::connect(broker.frames, None).await.unwrap();
    let first = conn
        .send_idempotent("k-restart", "q", batch())
        .await
        .unwrap();
    drop(conn);
    broker.restart().await;
    let mut conn = FrameConnection::connect(broker.frames, None).await.unwrap();
    let again = conn
        .send_idempotent("k-restart", "q", batch())
        .await
        .unwrap();
    assert_eq!(first, again);
    let got = conn.receive("q", 10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1, "stored once");
    broker.shutdown().await;
}

#[path = "frame_settle/tagged.rs"]
mod tagged;
#[path = "frame_settle/traced.rs"]
mod traced;
