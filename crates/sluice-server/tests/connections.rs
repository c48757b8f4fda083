//! Connection hygiene on the HTTP and frame listeners: half-sent request heads and idle
//! connections are closed after their timeouts while other clients are served, long polls
//! and event streams outlive the idle timeout, and the connection cap refuses the next
//! connection and recovers when connections close.
//!
//! Timeouts are scaled down (1 s) so that each test takes a few seconds.

mod common;

use std::time::Duration;

use serde_json::json;
use sluice_server::{ConnectionLimits, ServerOptions};
use sluice_wire::frame::{self, Op, Reply, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any step below may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(10);

fn options(header: Duration, idle: Duration, max: usize) -> ServerOptions {
    ServerOptions {
        connections: ConnectionLimits {
            header_read_timeout: header,
            idle_timeout: idle,
            max_connections: max,
            ..ConnectionLimits::default()
        },
        ..ServerOptions::default()
    }
}

/// Raises this process's soft open-file limit toward `want` (as far as the hard limit
/// allows) and returns the limit in force.
fn open_file_limit(want: u64) -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let current = now.current.unwrap_or(u64::MAX);
    if current >= want {
        return current;
    }
    let raised = now.maximum.map_or(want, |max| want.min(max));
    let new = rustix::process::Rlimit {
        current: Some(raised),
        maximum: now.maximum,
    };
    match setrlimit(Resource::Nofile, new) {
        Ok(()) => raised,
        Err(_) => current,
    }
}

/// Whether the broker closed `tcp`: a read ends (end of stream or reset) within `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // An answer the broker wrote before closing: keep reading to the end.
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

/// A sample of `metric` for `listener` on `/metrics`.
async fn metric(s: &common::TestServer, metric: &str, listener: &str) -> Option<f64> {
    let text = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).ok()?;
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && s.labels.get("listener") == Some(listener))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_are_closed_after_the_header_timeout_while_others_are_served() {
    // Each connection holds two descriptors in this process (client and broker side).
    let limit = open_file_limit(4096);
    let n = 1000.min(usize::try_from(limit.saturating_sub(300) / 2).unwrap_or(1000));
    assert!(n >= 100, "open-file limit {limit} is too low for this test");
    let s = common::start_with(options(
        Duration::from_secs(1),
        Duration::from_secs(30),
        4096,
    ))
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut slow = Vec::with_capacity(n);
    for _ in 0..n {
        let mut tcp = TcpStream::connect(&addr).await.expect("connect");
        tcp.write_all(b"POST /v1/queues/jobs/messages HTTP/1.1\r\nHost: localhost\r\nContent-")
            .await
            .expect("write part of a head");
        slow.push(tcp);
    }
    // Meanwhile ordinary requests are answered, past the moment the slow ones are closed.
    for _ in 0..15 {
        let resp = s
            .client
            .get(s.url("/healthz"))
            .send()
            .await
            .expect("healthz");
        assert_eq!(resp.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (i, tcp) in slow.iter_mut().enumerate() {
        assert!(
            closed_within(tcp, BOUND).await,
            "connection {i} of {n} with half-sent headers is still open"
        );
    }
    // Only the test's own connection is left open (the count drops as the broker's side of
    // each closed connection ends).
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let open = metric(&s, "sluice_connections_open", "http").await;
        if open.is_some_and(|v| v <= 2.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "connections still counted open: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_refuses_the_next_connection_and_recovers() {
    let s = common::start_with(options(
        Duration::from_secs(30),
        Duration::from_secs(30),
        20,
    ))
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    // Accepted after the 20 (the broker takes connections in order), so refused at once.
    let mut next = TcpStream::connect(&addr).await.expect("connect");
    assert!(
        closed_within(&mut next, BOUND).await,
        "the 21st connection was not closed"
    );
    let refused = reqwest::Client::new().get(s.url("/healthz")).send().await;
    assert!(refused.is_err(), "a request past the cap: {refused:?}");
    for tcp in &mut held[..20] {
        assert!(
            !closed_within(tcp, Duration::from_millis(1)).await,
            "an admitted connection was closed"
        );
    }

    held.truncate(15);
    let deadline = tokio::time::Instant::now() + BOUND;
    let refused = loop {
        if let Some(v) = metric(&s, "sluice_connections_refused_total", "http").await {
            break v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker does not accept again after connections closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(refused >= 2.0, "refusals counted: {refused}");
    let open = metric(&s, "sluice_connections_open", "http")
        .await
        .expect("open connections");
    assert!((16.0..=20.0).contains(&open), "open connections: {open}");
    drop(held);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_and_event_streams_outlive_the_idle_timeout_and_idle_connections_close() {
    // A receive waiting 4 s and an event stream open 2.5 s, under an idle timeout of 1 s.
    let s = common::start_with(options(Duration::from_secs(1), Duration::from_secs(1), 100)).await;
    s.put_queue("jobs", json!({})).await;
    let poll = {
        let client = reqwest::Client::new();
        let url = s.url("/v1/queues/jobs/receive");
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"max": 1, "wait_ms": 4000}))
                .send()
                .await
        })
    };
    let id = {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        s.send("jobs", json!("late")).await
    };
    let resp = tokio::time::timeout(BOUND, poll)
        .await
        .expect("the long poll ends")
        .expect("task")
        .expect("the long poll is answered, not cut");
    assert_eq!(resp.status(), 200);
    let got: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(got["messages"][0]["id"], json!(id), "{got}");

    // An event stream quiet for longer than the idle timeout still carries the final status.
    let events = s
        .client
        .get(s.url(&format!("/v1/tasks/{id}/events")))
        .send()
        .await
        .expect("events");
    assert_eq!(events.status(), 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (code, v) = s
        .call(
            reqwest::Method::POST,
            "/v1/queues/jobs/ack",
            Some(json!({"receipt": got["messages"][0]["receipt"]})),
        )
        .await;
    assert!(code.is_success(), "{v}");
    let body = tokio::time::timeout(BOUND, events.text())
        .await
        .expect("the stream ends")
        .expect("the stream is not cut");
    assert!(body.contains("\"SUCCESS\""), "{body}");

    // A keep-alive connection with no request in progress is closed.
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut tcp = TcpStream::connect(&addr).await.expect("connect");
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 512];
    let n = tcp.read(&mut buf).await.expect("answer");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert!(
        closed_within(&mut tcp, BOUND).await,
        "an idle connection stayed open"
    );
    s.shutdown().await;
}

/// Sends one request frame and reads its answer.
async fn call(tcp: &mut TcpStream, id: u64, op: Op) -> Response {
    let mut out = Vec::new();
    frame::encode_frame(&Request { id, op }, &mut out);
    tcp.write_all(&out).await.expect("write a frame");
    let len = tcp.read_u32_le().await.expect("an answer") as usize;
    let mut payload = vec![0; len];
    tcp.read_exact(&mut payload).await.expect("an answer");
    frame::decode_payload(&payload).expect("a response")
}

async fn hello(tcp: &mut TcpStream) {
    let r = call(tcp, 1, Op::Hello { key: None }).await;
    assert!(matches!(r.result, Ok(Reply::Hello { .. })), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_half_sent_and_idle_connections_close_and_long_polls_do_not() {
    let s = common::start_with(options(Duration::from_secs(1), Duration::from_secs(1), 100)).await;
    s.put_queue("jobs", json!({})).await;
    let addr = s.broker_frames();

    // A frame that stops halfway.
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(&100u32.to_le_bytes()).await.expect("write");
    half.write_all(&[0; 10]).await.expect("write");
    // An idle connection after one answer.
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    hello(&mut idle).await;
    // A long poll of 3 s, beyond both timeouts.
    let mut poll = TcpStream::connect(addr).await.expect("connect");
    hello(&mut poll).await;
    let receive = Op::Receive {
        queue: "jobs".into(),
        max: 1,
        wait_ms: 3000,
        visibility_ms: None,
        consumer: None,
    };
    let answer = tokio::time::timeout(BOUND, call(&mut poll, 2, receive))
        .await
        .expect("the long poll is answered");
    assert_eq!(answer.id, 2);
    assert!(
        matches!(answer.result, Ok(Reply::Messages(ref m)) if m.is_empty()),
        "{answer:?}"
    );
    assert!(closed_within(&mut half, BOUND).await, "a half-sent frame");
    assert!(closed_within(&mut idle, BOUND).await, "an idle connection");
    // The listener serves new connections all along.
    let mut fresh = TcpStream::connect(addr).await.expect("connect");
    hello(&mut fresh).await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_connection_cap_refuses_the_next_connection_and_recovers() {
    let s = common::start_with(options(
        Duration::from_secs(30),
        Duration::from_secs(30),
        20,
    ))
    .await;
    let addr = s.broker_frames();
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        hello(&mut tcp).await;
        held.push(tcp);
    }
    let mut next = TcpStream::connect(addr).await.expect("connect");
    assert!(
        closed_within(&mut next, BOUND).await,
        "the 21st connection was not closed"
    );
    held.truncate(10);
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let mut out = Vec::new();
        frame::encode_frame(
            &Request {
                id: 1,
                op: Op::Hello { key: None },
            },
            &mut out,
        );
        let answered = tcp.write_all(&out).await.is_ok() && tcp.read_u32_le().await.is_ok();
        if answered {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the frame listener does not accept again after connections closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = metric(&s, "sluice_connections_refused_total", "frames")
        .await
        .expect("refusals counted");
    assert!(refused >= 1.0, "refusals: {refused}");
    drop(held);
    s.shutdown().await;
}
