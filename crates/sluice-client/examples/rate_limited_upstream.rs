//! Handlers share a rate limiter to stay under an upstream's quota, and honour its
//! `Retry-After` when it answers 429 anyway.
//!
//! A fake upstream runs on a local port: it allows 10 requests in any 1-second window and
//! answers 429 with `Retry-After: 1` beyond that; it also answers its 5th request with a 429
//! (its quota is shared with someone we cannot see). 20 `notify` tasks run on a worker of
//! concurrency 8 whose handlers share a `sluice_client::RateLimiter` of 8 per second. On the
//! 429 the handler pauses the whole limiter (`hold_off`) and returns
//! `TaskError::retry_after`, so the worker nacks the task with a 1-second delay; its retry
//! then waits its turn at the limiter behind the tasks already queued there. Run against a broker
//! (`sluice serve`):
//!
//! ```text
//! cargo run -p sluice-client --example rate_limited_upstream
//! ```
//!
//! It prints (in about 4 seconds; ids and times vary, the retry always comes 1 s or more
//! after the 429):
//!
//! ```text
//! fake upstream on http://127.0.0.1:41234 (quota 10 per second)
//! queue upstream-a1b2c3: 20 tasks enqueued
//! upstream said 429, retry after 1s (task 0000000000000074)
//! all 20 tasks SUCCESS
//! upstream: 21 requests, at most 8 in any 1 s window (quota 10), 0 refused over quota
//! task 0000000000000074 retried 2.01s after its 429
//! ```

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_client::{RateLimiter, TaskContext, TaskError, TaskStatus, Worker};

/// The fake upstream's quota per second.
pub const QUOTA: usize = 10;

#[derive(Default)]
struct Upstream {
    /// (time, task id, status) of every request.
    log: Vec<(Instant, String, u16)>,
    accepted: VecDeque<Instant>,
}

async fn upstream(State(st): State<Arc<Mutex<Upstream>>>, headers: HeaderMap) -> Response {
    let task = headers
        .get("x-task-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let now = Instant::now();
    let Ok(mut u) = st.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    while u
        .accepted
        .front()
        .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
    {
        u.accepted.pop_front();
    }
    let shared_quota_hit = u.log.len() == 4;
    let status = if shared_quota_hit || u.accepted.len() >= QUOTA {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        u.accepted.push_back(now);
        StatusCode::OK
    };
    u.log.push((now, task, status.as_u16()));
    if status == StatusCode::TOO_MANY_REQUESTS {
        return (status, [("retry-after", "1")], "slow down").into_response();
    }
    (status, "sent").into_response()
}

/// What the run saw.
#[derive(Debug)]
pub struct Report {
    /// Final statuses.
    pub statuses: Vec<TaskStatus>,
    /// Requests the upstream saw.
    pub requests: usize,
    /// Most accepted requests in any 1-second window.
    pub max_in_window: usize,
    /// 429s for going over the quota (the deliberate one not counted).
    pub over_quota: usize,
    /// Time between the deliberate 429 and that task's next request.
    pub retry_gap: Option<Duration>,
}

/// Runs the scenario against the broker at `url`.
pub async fn run(url: &str) -> anyhow::Result<Report> {
    let state: Arc<Mutex<Upstream>> = Arc::default();
    let app = axum::Router::new()
        .route("/notify", axum::routing::post(upstream))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let upstream_url = format!("http://{}/notify", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    println!(
        "fake upstream on {} (quota {QUOTA} per second)",
        upstream_url.trim_end_matches("/notify")
    );

    let client = common::client(url)?;
    let queue = common::fresh_queue(&client, "upstream", 5, Duration::from_secs(30)).await?;
    let limiter = RateLimiter::new(8, Duration::from_secs(1))?;
    let http = reqwest::Client::new();
    let worker = Worker::builder(client.clone(), &queue)
        .concurrency(8)
        .poll_wait(Duration::from_millis(200))
        .handler("notify", move |ctx: TaskContext, _user: u32| {
            let (limiter, http, upstream_url) =
                (limiter.clone(), http.clone(), upstream_url.clone());
            async move {
                limiter.acquire().await;
                let resp = http
                    .post(&upstream_url)
                    .header("x-task-id", ctx.id())
                    .header("idempotency-key", ctx.idempotency_key("notify"))
                    .send()
                    .await?;
                if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                    let wait = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .map_or(Duration::from_secs(1), Duration::from_secs);
                    println!(
                        "upstream said 429, retry after {wait:?} (task {})",
                        ctx.id()
                    );
                    limiter.hold_off(wait);
                    return Err(TaskError::retry_after("upstream answered 429", wait));
                }
                resp.error_for_status()?;
                Ok(())
            }
        })
        .build()?;
    let mut ids = Vec::new();
    for user in 0..20u32 {
        ids.push(client.enqueue(&queue, "notify", &user).await?);
    }
    println!("queue {queue}: {} tasks enqueued", ids.len());
    let running = common::spawn(worker);
    let views = common::wait_all(&client, &ids, Duration::from_secs(30)).await?;
    running.stop().await?;
    server.abort();
    let statuses: Vec<TaskStatus> = views.iter().map(|v| v.status).collect();
    if statuses.iter().all(|s| *s == TaskStatus::Success) {
        println!("all {} tasks SUCCESS", ids.len());
    }
    let log = std::mem::take(&mut state.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.log);
    let ok: Vec<Instant> = log.iter().filter(|e| e.2 == 200).map(|e| e.0).collect();
    let max_in_window = ok
        .iter()
        .map(|t| {
            ok.iter()
                .filter(|u| **u >= *t && u.duration_since(*t) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let over_quota = log.iter().filter(|e| e.2 == 429).count().saturating_sub(1);
    let retry_gap = log.get(4).and_then(|(t429, task, _)| {
        log.iter()
            .skip(5)
            .find(|e| &e.1 == task)
            .map(|e| e.0.duration_since(*t429))
    });
    println!(
        "upstream: {} requests, at most {max_in_window} in any 1 s window (quota {QUOTA}), {over_quota} refused over quota",
        log.len()
    );
    if let (Some(gap), Some((_, task, _))) = (retry_gap, log.get(4)) {
        println!(
            "task {task} retried {:.2}s after its 429",
            gap.as_secs_f64()
        );
    }
    Ok(Report {
        statuses,
        requests: log.len(),
        max_in_window,
        over_quota,
        retry_gap,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    run(&common::broker_url()).await.map(drop)
}
