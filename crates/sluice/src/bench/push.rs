//! `sluice bench --push`: how fast the broker pushes a backlog to an endpoint that answers at
//! once, which is the broker's own cost per pushed message (lease, request, ack).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::http::StatusCode;
use serde_json::json;

use super::args::BenchArgs;
use super::prepare::{check, prepare};
use super::producer::padding;

/// Messages per send while the backlog is built.
const SEND_BATCH: u64 = 1000;
/// The default backlog.
const DEFAULT_MESSAGES: u64 = 20_000;

pub(super) async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let base = args.url.trim_end_matches('/').to_owned();
    let client = reqwest::Client::new();
    let auth = |r: reqwest::RequestBuilder| match &args.token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    prepare(&client, &base, &args).await?;
    let queue_url = format!("{base}/v1/queues/{}", args.queue);
    let put = |body: serde_json::Value| {
        let req = auth(client.put(&queue_url)).json(&body);
        async move {
            check(
                req.send().await.context("configuring the queue")?,
                "configuring the queue",
            )
            .await
        }
    };
    put(json!({"paused": true, "push": null})).await?;

    let hits = Arc::new(AtomicU64::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/push",
        axum::routing::post(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            async { StatusCode::NO_CONTENT }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the bench's endpoint on 127.0.0.1")?;
    let endpoint = format!(
        "http://{}/push",
        listener.local_addr().context("the endpoint's address")?
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let total = args.messages.unwrap_or(DEFAULT_MESSAGES);
    let body_bytes = usize::try_from(args.body_bytes).unwrap_or(1024);
    let body = json!({ "pad": padding(body_bytes.saturating_sub(12)) });
    let mut sent = 0;
    while sent < total {
        let n = SEND_BATCH.min(total - sent);
        let msgs: Vec<_> = (0..n).map(|_| json!({ "body": body })).collect();
        let resp = auth(client.post(format!("{queue_url}/messages")))
            .json(&json!({ "messages": msgs }))
            .send()
            .await
            .context("sending the backlog")?;
        check(resp, "sending the backlog").await?;
        sent += n;
    }

    let concurrency = args.consumers.max(1);
    let started = Instant::now();
    put(json!({"paused": false, "push": {"url": endpoint, "concurrency": concurrency}})).await?;
    let limit = args.duration.unwrap_or(Duration::from_secs(300));
    while hits.load(Ordering::Relaxed) < total {
        if started.elapsed() > limit {
            bail!(
                "only {} of {total} messages were pushed within {limit:?}",
                hits.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    put(json!({"push": null})).await?;
    server.abort();
    let rate = total as f64 / took.as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({"mode": "push", "messages": total, "concurrency": concurrency,
                   "body_bytes": args.body_bytes, "seconds": took.as_secs_f64(),
                   "pushed_per_s": rate})
        );
    } else {
        println!(
            "pushed {total} messages of {} B at concurrency {concurrency} in {:.2} s: {rate:.0} pushes/s",
            args.body_bytes,
            took.as_secs_f64()
        );
    }
    Ok(())
}
