//! One queue, three tenants, one partner API that gives each tenant its own quota: a queue whose
//! adaptive rate and breaker are per key (`"scope": "key"`) learns each tenant's quota on its
//! own and rides out one tenant's outage without slowing the others or dead-lettering the
//! tenant's messages. A real `sluice serve`, a worker of the Rust SDK with no rate limiter, and
//! an upstream simulator (a real HTTP server here) whose quotas the worker is never told: it
//! allows each tenant `quota` calls in any sliding minute and answers 429 with Retry-After
//! beyond; one tenant's upstream answers 503 for a few minutes mid-run. Each tenant gets most
//! of its quota and never much more, through the other's outage.
//!
//! Time is compressed: a minute lasts [`MINUTE`] of real time, and the queue's rates and
//! windows are scaled with it, as `sluice drill` does. Runs on the embedded engine and on
//! PostgreSQL.

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, OutgoingMessage, TaskContext, TaskEnvelope, Worker};
use sluice_core::adaptive::{AdaptiveRate, BreakerConfig, FlowScope};

/// A scenario minute in real time.
const MINUTE: Duration = Duration::from_secs(3);
/// Scenario minutes per real minute.
const SCALE: u32 = 20;
/// Each tenant's quota, calls per scenario minute.
const QUOTAS: [(&str, usize); 3] = [("small", 40), ("large", 160), ("flaky", 80)];
/// The tenant whose upstream goes down.
const DOWN: &str = "flaky";
/// The scenario minutes its upstream answers 503 to every call.
const OUTAGE: std::ops::Range<usize> = 4..7;
/// Scenario minutes in all.
const MINUTES: usize = 14;

/// One tenant's books: calls by arrival (and how each was answered), and the accepted ones of
/// the last minute.
#[derive(Default)]
struct Tenant {
    calls: Vec<(Instant, StatusCode)>,
    window: VecDeque<Instant>,
    quota: usize,
    down: bool,
}

type Books = Arc<Mutex<HashMap<String, Tenant>>>;

async fn call(State(books): State<Books>, Path(tenant): Path<String>) -> axum::response::Response {
    let now = Instant::now();
    let mut all = books.lock().unwrap_or_else(|p| p.into_inner());
    let Some(t) = all.get_mut(&tenant) else {
        return (StatusCode::NOT_FOUND, "no such tenant").into_response();
    };
    if t.down {
        t.calls.push((now, StatusCode::SERVICE_UNAVAILABLE));
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    while t.window.front().is_some_and(|at| now - *at >= MINUTE) {
        t.window.pop_front();
    }
    if t.window.len() >= t.quota {
        let wait = t.window.front().map_or(MINUTE, |at| MINUTE - (now - *at));
        t.calls.push((now, StatusCode::TOO_MANY_REQUESTS));
        let ms = wait.as_millis().max(1).to_string();
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after-ms", ms)],
            "slow down",
        )
            .into_response();
    }
    t.window.push_back(now);
    t.calls.push((now, StatusCode::OK));
    (StatusCode::OK, "done").into_response()
}

/// Per scenario minute from `start`: calls sent (503s left out: the tenant's upstream was not
/// counting) and accepted.
fn per_minute(t: &Tenant, start: Instant) -> Vec<(usize, usize)> {
    let mut out = vec![(0, 0); MINUTES + 1];
    for (at, status) in &t.calls {
        let m = ((*at - start).as_secs_f64() / MINUTE.as_secs_f64()) as usize;
        if let Some(slot) = out.get_mut(m) {
            slot.0 += usize::from(*status != StatusCode::SERVICE_UNAVAILABLE);
            slot.1 += usize::from(*status == StatusCode::OK);
        }
    }
    out
}

async fn each_tenant_learns_its_own_quota(url: &str) {
    let books: Books = Arc::new(Mutex::new(
        QUOTAS
            .iter()
            .map(|(name, quota)| {
                let t = Tenant {
                    quota: *quota,
                    ..Tenant::default()
                };
                ((*name).to_owned(), t)
            })
            .collect(),
    ));
    let app = axum::Router::new()
        .route("/call/{tenant}", axum::routing::post(call))
        .with_state(Arc::clone(&books));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = format!("http://{}/call", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = Client::builder(url).build().expect("client");
    let queue = "partner";
    let per_min = |scenario: u32| scenario * SCALE;
    let mut rate = AdaptiveRate::new(per_min(5), per_min(1000));
    rate.window_ms = Some(MINUTE.as_millis() as u64);
    rate.scope = FlowScope::Key;
    let breaker = BreakerConfig {
        window_ms: MINUTE.as_millis() as u64 / 2,
        min_calls: 5,
        probe_every_ms: MINUTE.as_millis() as u64 / 2,
        probes: 1,
        scope: FlowScope::Key,
        ..BreakerConfig::default()
    };
    client
        .put_queue(
            queue,
            &QueueConfigRequest {
                visibility_timeout_ms: Some(30_000),
                max_receive_count: Some(3),
                backoff_base_ms: Some(100),
                backoff_max_ms: Some(1000),
                adaptive: Some(Some(rate)),
                breaker: Some(Some(breaker)),
                ..QueueConfigRequest::default()
            },
        )
        .await
        .expect("create the queue");
    // More work than each tenant's quota takes over the whole run, so no tenant runs dry.
    let mut msgs: Vec<OutgoingMessage> = Vec::new();
    for (tenant, quota) in QUOTAS {
        for i in 0..quota * MINUTES + 200 {
            let task = TaskEnvelope::new("call", &(tenant, i)).expect("task");
            msgs.push(task.to_message().expect("message").key(tenant));
        }
    }
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
        .handler(
            "call",
            move |_ctx: TaskContext, (tenant, _): (String, usize)| {
                let (http, url) = (http.clone(), format!("{upstream}/{tenant}"));
                async move { common::upstream::call(&http, &url).await }
            },
        )
        .build()
        .expect("worker");
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.wait_for(|v| *v).await;
    }));
    let set_down = |down: bool| {
        if let Some(t) = books.lock().expect("books").get_mut(DOWN) {
            t.down = down;
        }
    };
    tokio::time::sleep(MINUTE * OUTAGE.start as u32).await;
    set_down(true);
    tokio::time::sleep(MINUTE * (OUTAGE.end - OUTAGE.start) as u32).await;
    set_down(false);
    tokio::time::sleep(MINUTE * (MINUTES - OUTAGE.end) as u32).await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;

    // Read off the books at once: the lock is not held across the awaits below.
    let (minutes, down_calls) = {
        let all = books.lock().expect("books");
        let minutes: BTreeMap<&str, Vec<(usize, usize)>> = QUOTAS
            .iter()
            .map(|(name, _)| (*name, per_minute(&all[*name], start)))
            .collect();
        let down_calls = all[DOWN]
            .calls
            .iter()
            .filter(|(_, s)| *s == StatusCode::SERVICE_UNAVAILABLE)
            .count();
        (minutes, down_calls)
    };
    let table: String = (0..MINUTES)
        .map(|m| {
            let row: Vec<String> = minutes
                .iter()
                .map(|(name, v)| format!("{name} {:>4}/{:<4}", v[m].1, v[m].0))
                .collect();
            format!("minute {m:>2}: {} (accepted/sent)\n", row.join("  "))
        })
        .collect();
    eprintln!("{table}");
    // From minute 4 on (the outage tenant's outage and the three minutes after it left out for
    // it), each tenant gets at least 80 % of its quota on average and 60 % in every minute (one
    // tenant's outage slows no other), and no minute sends it more than 130 % (429s included).
    // Averages and a lower floor per minute keep a machine busy with other tests from failing
    // a minute that a scheduler hiccup cut short.
    for (name, quota) in QUOTAS {
        let v = &minutes[name];
        let steady: Vec<usize> = (4..MINUTES)
            .filter(|m| !(name == DOWN && (OUTAGE.start..OUTAGE.end + 3).contains(m)))
            .collect();
        let accepted: usize = steady.iter().map(|m| v[*m].1).sum();
        assert!(
            accepted * 10 >= quota * 8 * steady.len(),
            "{name}: {accepted} accepted over {} minutes, below 80% of its quota {quota}\n{table}",
            steady.len()
        );
        for m in &steady {
            let ok = v[*m].1;
            assert!(
                ok * 10 >= quota * 6,
                "{name}, minute {m}: {ok} accepted, below 60% of its quota {quota}\n{table}"
            );
        }
        for (m, (sent, _)) in v.iter().enumerate().take(MINUTES).skip(4) {
            assert!(
                *sent * 10 <= quota * 13,
                "{name}, minute {m}: {sent} calls counted, above 130% of its quota {quota}\n{table}"
            );
        }
    }
    // While its upstream was down the tenant's breaker held its calls to probes.
    let quota_down = QUOTAS.iter().find(|(n, _)| *n == DOWN).expect("down").1;
    assert!(
        down_calls * 4 <= quota_down * (OUTAGE.end - OUTAGE.start),
        "{down_calls} calls reached the tenant's upstream while it was down: its breaker should \
         have held them to probes\n{table}"
    );
    let dlq = client
        .stats("partner.dlq")
        .await
        .expect("the dead-letter queue's stats");
    assert_eq!(
        dlq.visible + dlq.delayed,
        0,
        "the outage dead-lettered none of the tenant's messages"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_rates_and_breakers_learn_each_tenants_upstream_on_its_own() {
    let broker = common::broker();
    each_tenant_learns_its_own_quota(&broker.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_per_key_rates_and_breakers_learn_each_tenants_upstream_on_its_own() {
    if !sluice_testkit::postgres::available().await {
        return;
    }
    let schema = sluice_testkit::postgres::unique_schema("tenant_upstream");
    let _schema = sluice_testkit::postgres::SchemaGuard::new(schema.clone());
    let store = format!("{}?schema={schema}", sluice_testkit::postgres::url());
    let (_child, url) = common::serve_store(&store, std::process::Stdio::null());
    each_tenant_learns_its_own_quota(&url).await;
}
