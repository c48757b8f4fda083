//! The write timeout: a client that stops reading its answer (a large page, an event stream
//! once its buffers fill) gets its connection closed once the broker's writes have made no
//! progress for `write_timeout`, and the broker goes on serving everyone else meanwhile.

mod common;

use std::time::Duration;

use serde_json::json;
use sluice_server::{ConnectionLimits, ServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Longest any step below may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(30);

/// The write timeout under test: short, so the test is quick, and far longer than a write
/// to a client that reads takes on loopback.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Messages in the large page, each of [`BODY_CHARS`] characters: a page of about 24 MB,
/// many times what the kernel buffers of one loopback connection hold (a few MiB at most).
const MESSAGES: usize = 24;
const BODY_CHARS: usize = 1_000_000;

fn options() -> ServerOptions {
    ServerOptions {
        connections: ConnectionLimits {
            write_timeout: WRITE_TIMEOUT,
            ..ConnectionLimits::default()
        },
        ..ServerOptions::default()
    }
}

/// A connection to `addr` with a small receive buffer, so that an answer it does not read
/// blocks the broker's writes after a few KiB rather than a few MiB.
async fn stingy_connection(addr: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect")
}

/// A client that opens a new connection for every request and keeps none: only the
/// connections of this test's raw sockets stay counted between requests.
fn unpooled() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// Open connections of the HTTP listener, the one of this very request included.
async fn open_connections(s: &common::TestServer) -> f64 {
    let text = unpooled()
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("parse metrics");
    scrape
        .samples
        .iter()
        .find(|m| m.metric == "sluice_connections_open" && m.labels.get("listener") == Some("http"))
        .and_then(|m| match m.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
        .expect("sluice_connections_open for http")
}

/// Waits until the HTTP listener counts `want` open connections (this request included).
async fn until_open(s: &common::TestServer, want: f64, what: &str) {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let open = open_connections(s).await;
        if open == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {open} connections open, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `tcp` to its end (end of stream or reset), within [`BOUND`]; the bytes read.
async fn read_to_close(tcp: &mut TcpStream) -> Option<usize> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    let read = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_write_timeout_while_others_are_served() {
    let s = common::start_with(options()).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    s.put_queue("big", json!({"max_message_bytes": 1_048_576}))
        .await;
    let body = "x".repeat(BODY_CHARS);
    for _ in 0..MESSAGES {
        s.send("big", json!(body)).await;
    }
    s.put_queue("jobs", json!({})).await;
    let task = s.send("jobs", json!({"n": 1})).await;
    // The set-up's pooled connections stay open (idle): counts below are relative to them.
    let base = open_connections(&s).await;

    // An event stream the client never reads: its events are small, so the broker's writes
    // never block, and it stays open however long it goes unread.
    let mut events = stingy_connection(&addr).await;
    events
        .write_all(
            format!("GET /v1/tasks/{task}/events HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
        )
        .await
        .expect("request the event stream");
    // A large page the client never reads: the broker's writes block within a few MiB.
    let mut stalled = stingy_connection(&addr).await;
    stalled
        .write_all(
            format!(
                "GET /v1/queues/big/messages?limit={MESSAGES} HTTP/1.1\r\nHost: localhost\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("request the large page");
    until_open(&s, base + 2.0, "with the two unread answers").await;

    // While the page's writes are blocked, the broker answers everyone else.
    let client = unpooled();
    let answered = futures::future::join_all((0..100).map(|i| {
        let (s, client, task) = (&s, &client, &task);
        async move {
            let path = match i % 3 {
                0 => "/healthz".to_owned(),
                1 => "/v1/queues/jobs/stats".to_owned(),
                _ => format!("/v1/tasks/{task}"),
            };
            match client.get(s.url(&path)).send().await {
                Ok(resp) => resp.status(),
                Err(e) => panic!("GET {path}: {e}"),
            }
        }
    }))
    .await;
    assert!(
        answered.iter().all(|st| st.is_success()),
        "answers while a client stalls: {answered:?}"
    );

    // The broker closes the stalled connection by itself, while its client still has not
    // read a byte: only the event stream (and the request counting) is left open.
    until_open(&s, base + 1.0, "after the write timeout").await;
    // Its client then finds the answer cut short, and the end of the connection.
    let read = read_to_close(&mut stalled)
        .await
        .expect("the stalled connection ends");
    assert!(
        read < MESSAGES * BODY_CHARS,
        "the whole page ({read} bytes) arrived: the connection was not cut"
    );
    // The unread event stream, whose writes never blocked, is still open.
    let mut probe = [0u8; 1];
    let still_open =
        match tokio::time::timeout(Duration::from_millis(100), events.peek(&mut probe)).await {
            // Nothing to read, and no end of stream either.
            Err(_) => true,
            Ok(r) => r.is_ok_and(|n| n > 0),
        };
    assert!(still_open, "the unread event stream was closed");
    drop(events);
    s.shutdown().await;
}
