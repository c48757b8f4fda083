//! An adaptive queue finds an upstream's quota by itself: a real `sluice serve`, a worker of the
//! Rust SDK with no rate limiter, and an upstream simulator (a real HTTP server here) whose
//! quota the worker is never told. The upstream allows `quota` calls in any sliding minute and
//! answers 429 with Retry-After beyond; the worker nacks those as congestion. Within 5
//! minutes the calls the upstream accepts reach 80% of its quota while the calls it is sent stay
//! within 120% of it; after the quota is doubled, the same holds again within 5 minutes.
//!
//! Time is compressed: a minute lasts [`MINUTE`] of real time, and the queue's rates and quota
//! window are scaled with it, as `sluice drill` does. Runs on the embedded engine and on
//! PostgreSQL.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, TaskContext, TaskEnvelope, Worker};
use sluice_core::adaptive::AdaptiveRate;

/// A scenario minute in real time.
const MINUTE: Duration = Duration::from_secs(3);
/// Scenario minutes per real minute.
const SCALE: u32 = 20;
/// The upstream's first quota, calls per scenario minute.
const QUOTA: usize = 120;
/// The scenario minute the quota doubles.
const RAISED_AT: usize = 8;
/// Scenario minutes in all.
const MINUTES: usize = 15;

/// The upstream's books: calls by arrival, and the accepted ones of the last minute.
#[derive(Default)]
struct Books {
    /// (arrival, accepted).
    calls: Vec<(Instant, bool)>,
    window: VecDeque<Instant>,
    quota: usize,
}

async fn call(
    axum::extract::State(books): axum::extract::State<Arc<Mutex<Books>>>,
) -> axum::response::Response {
    let now = Instant::now();
    let mut b = books.lock().unwrap_or_else(|p| p.into_inner());
    while b.window.front().is_some_and(|t| now - *t >= MINUTE) {
        b.window.pop_front();
    }
    if b.window.len() >= b.quota {
        let wait = b.window.front().map_or(MINUTE, |t| MINUTE - (now - *t));
        b.calls.push((now, false));
        let ms = wait.as_millis().max(1).to_string();
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after-ms", ms)],
            "slow down",
        )
            .into_response();
    }
    b.window.push_back(now);
    b.calls.push((now, true));
    (StatusCode::OK, "done").into_response()
}

/// Calls sent and accepted in each scenario minute from `start`.
fn per_minute(books: &Books, start: Instant) -> Vec<(usize, usize)> {
    let mut out = vec![(0, 0); MINUTES + 1];
    for (at, ok) in &books.calls {
        let m = ((*at - start).as_secs_f64() / MINUTE.as_secs_f64()) as usize;
        if let Some(slot) = out.get_mut(m) {
            slot.0 += 1;
            slot.1 += usize::from(*ok);
        }
    }
    out
}

async fn converges(url: &str) {
    let books = Arc::new(Mutex::new(Books {
        quota: QUOTA,
        ..Books::default()
    }));
    let app = axum::Router::new()
        .route("/call", axum::routing::post(call))
        .with_state(Arc::clone(&books));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = format!("http://{}/call", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = Client::builder(url).build().expect("client");
    let queue = "calls";
    let per_min = |scenario: u32| scenario * SCALE;
    let mut rate = AdaptiveRate::new(per_min(10), per_min(2000));
    rate.window_ms = Some(MINUTE.as_millis() as u64);
    client
        .put_queue(
            queue,
            &QueueConfigRequest {
                visibility_timeout_ms: Some(30_000),
                adaptive: Some(Some(rate)),
                ..QueueConfigRequest::default()
            },
        )
        .await
        .expect("create the adaptive queue");
    // More work than the upstream can take over the whole run, so the queue never runs dry.
    let total = QUOTA * RAISED_AT + 2 * QUOTA * (MINUTES - RAISED_AT) + 500;
    let msgs: Vec<_> = (0..total)
        .map(|i| {
            TaskEnvelope::new("call", &i)
                .and_then(|t| t.to_message())
                .expect("task")
        })
        .collect();
    for chunk in msgs.chunks(500) {
        client
            .send_batch(queue, chunk.to_vec())
            .await
            .expect("send");
    }

    let http = reqwest::Client::new();
    let worker = Worker::builder(client.clone(), queue)
        .concurrency(16)
        .batch(16)
        .poll_wait(Duration::from_millis(200))
        .handler("call", move |_ctx: TaskContext, _n: usize| {
            let (http, upstream) = (http.clone(), upstream.clone());
            async move { common::upstream::call(&http, &upstream).await }
        })
        .build()
        .expect("worker");
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.wait_for(|v| *v).await;
    }));
    tokio::time::sleep(MINUTE * RAISED_AT as u32).await;
    books.lock().expect("books").quota = 2 * QUOTA;
    tokio::time::sleep(MINUTE * (MINUTES - RAISED_AT) as u32).await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;

    let minutes = per_minute(&books.lock().expect("books"), start);
    let table: String = minutes
        .iter()
        .enumerate()
        .map(|(m, (sent, ok))| format!("minute {m:>2}: sent {sent:>4}, accepted {ok:>4}\n"))
        .collect();
    eprintln!("{table}");
    let judge = |from: usize, to: usize, quota: usize| {
        for (m, (sent, ok)) in minutes.iter().enumerate().take(to).skip(from) {
            assert!(
                *ok * 10 >= quota * 8,
                "minute {m}: {ok} accepted, below 80% of the quota {quota}\n{table}"
            );
            assert!(
                *sent * 10 <= quota * 12,
                "minute {m}: {sent} calls sent, above 120% of the quota {quota}\n{table}"
            );
        }
    };
    // Converged by minute 5 and held there until the raise.
    judge(5, RAISED_AT, QUOTA);
    // Found the raised quota within 5 minutes of the raise.
    judge(RAISED_AT + 5, MINUTES, 2 * QUOTA);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_queue_finds_an_unknown_quota_and_follows_its_raise() {
    let broker = common::broker();
    converges(&broker.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_adaptive_queue_finds_an_unknown_quota_and_follows_its_raise() {
    if !sluice_testkit::postgres::available().await {
        return;
    }
    let schema = sluice_testkit::postgres::unique_schema("adaptive_upstream");
    let _schema = sluice_testkit::postgres::SchemaGuard::new(schema.clone());
    let store = format!("{}?schema={schema}", sluice_testkit::postgres::url());
    let (_child, url) = common::serve_store(&store, std::process::Stdio::null());
    converges(&url).await;
}
