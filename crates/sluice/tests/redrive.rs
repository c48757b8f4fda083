//! A redrive over HTTP on the real `sluice serve` binary: 10,000 dead letters moved
//! back at 500 per second. The broker is SIGKILLed halfway and restarted; the job resumes.
//! Checked from the destination's side (each message's `entered_at`, the moment it arrived
//! back): never more than 500 arrivals in any one-second window, and every dead letter back
//! exactly once.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

const MESSAGES: usize = 10_000;
const RATE: usize = 500;

fn serve(data: &Path) -> (common::Served, String) {
    common::serve(data, Stdio::null())
}

async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = c.request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).expect("JSON")
        },
    )
}

async fn job(c: &reqwest::Client, url: &str, id: &str) -> Value {
    let (s, v) = call(
        c,
        reqwest::Method::GET,
        format!("{url}/v1/redrives/{id}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_at_a_rate_survives_kill_9_and_moves_each_message_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let (mut server, url) = serve(dir.path());
    use reqwest::Method as M;

    // 10,000 dead letters: one attempt each, a lease of 1 ms that runs out.
    let (s, v) = call(
        &c,
        M::PUT,
        format!("{url}/v1/queues/work"),
        Some(json!({ "max_receive_count": 1 })),
    )
    .await;
    assert!(s < 300, "{v}");
    for chunk in 0..MESSAGES / 1000 {
        let msgs: Vec<Value> = (0..1000)
            .map(|i| json!({ "body": chunk * 1000 + i }))
            .collect();
        let (s, v) = call(
            &c,
            M::POST,
            format!("{url}/v1/queues/work/messages"),
            Some(json!({ "messages": msgs })),
        )
        .await;
        assert_eq!(s, 201, "{v}");
    }
    for _ in 0..MESSAGES / 1000 {
        let (s, v) = call(
            &c,
            M::POST,
            format!("{url}/v1/queues/work/receive"),
            Some(json!({ "max": 1000, "visibility_timeout_ms": 1 })),
        )
        .await;
        assert_eq!(
            (s, v["messages"].as_array().map(Vec::len)),
            (200, Some(1000))
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, st) = call(&c, M::GET, format!("{url}/v1/queues/work/stats"), None).await;
        if st["dead_letter_depth"] == MESSAGES {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leases did not run out into the DLQ: {st}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A consumer role would be refused, but auth is off here; the auth tests cover roles.
    let (s, v) = call(
        &c,
        M::POST,
        format!("{url}/v1/redrives"),
        Some(json!({ "source": "work.dlq", "rate_per_second": RATE })),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    let id = v["id"].as_str().expect("job id").to_owned();
    let (s, v) = call(
        &c,
        M::POST,
        format!("{url}/v1/redrives"),
        Some(json!({ "source": "work.dlq" })),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "a second job on the same source: {v}"
    );

    // Halfway, kill -9 and restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if job(&c, &url, &id).await["moved"].as_u64().unwrap_or(0) >= (MESSAGES / 2) as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job is too slow: {}",
            job(&c, &url, &id).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.kill().expect("SIGKILL");
    server.wait().expect("reap");
    let (_server, url) = serve(dir.path());
    let before = job(&c, &url, &id).await;
    assert_eq!(
        before["state"], "running",
        "the job resumes after a restart: {before}"
    );

    let deadline = Instant::now() + Duration::from_secs(40);
    let done = loop {
        let j = job(&c, &url, &id).await;
        if j["state"] == "completed" {
            break j;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {j}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["moved"], MESSAGES, "{done}");

    // Every message is back exactly once, and the arrivals never beat the rate.
    let (_, st) = call(&c, M::GET, format!("{url}/v1/queues/work/stats"), None).await;
    assert_eq!(
        (st["visible"].as_u64(), st["dead_letter_depth"].as_u64()),
        (Some(MESSAGES as u64), Some(0)),
        "{st}"
    );
    assert_eq!(
        st["totals"]["redriven"], MESSAGES,
        "each message moved exactly once: {st}"
    );
    let mut arrivals = Vec::with_capacity(MESSAGES);
    let mut bodies = std::collections::HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{url}/v1/queues/work/messages?state=visible&limit=1000");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (s, page) = call(&c, M::GET, path, None).await;
        assert_eq!(s, 200, "{page}");
        for m in page["messages"].as_array().expect("messages") {
            assert!(
                bodies.insert(m["body"].to_string()),
                "{} came back twice",
                m["body"]
            );
            let at = time::OffsetDateTime::parse(
                m["entered_at"].as_str().expect("entered_at"),
                &time::format_description::well_known::Rfc3339,
            )
            .expect("RFC 3339");
            arrivals.push((at.unix_timestamp_nanos() / 1_000_000) as i64);
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(bodies.len(), MESSAGES);
    arrivals.sort_unstable();
    let mut worst = 0;
    let mut lo = 0;
    for hi in 0..arrivals.len() {
        while arrivals[hi] - arrivals[lo] >= 1000 {
            lo += 1;
        }
        worst = worst.max(hi - lo + 1);
    }
    assert!(
        worst <= RATE,
        "{worst} messages arrived within one second; the rate is {RATE}/s"
    );
    eprintln!("10,000 redriven across a kill -9; busiest one-second window held {worst}");
}
