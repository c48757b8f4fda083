//! What a client that has not authenticated can make a real broker hold: on every listener,
//! its headers or a small frame, never the size it announces. Memory is read as the broker
//! process's resident set (`VmRSS` in `/proc/<pid>/status`), around a bounded number of
//! connections that announce large requests and send a byte of them.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sluice_wire::frame::{self, Op, Reply, Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const SECRET: &str = "memory-test-secret-0123456789";
/// Connections opened by each part of a test.
const CONNECTIONS: usize = 16;
/// What each of them announces: the broker's default body limit.
const ANNOUNCED: usize = 24 << 20;
/// The most the broker may grow by for all of them together: 2 MiB a connection, where
/// holding what they announce would take 384 MiB.
const BOUND_KIB: u64 = 32 * 1024;

/// Writes a config with one API key (`SECRET`) and one SQS access key, and the queue
/// `jobs`; `None` (skipped loudly, failed on CI) without `/proc`.
fn config(dir: &Path) -> Option<String> {
    if !Path::new("/proc/self/status").exists() {
        common::skip_or_fail("reading a process's memory needs Linux's /proc");
        return None;
    }
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(SECRET.as_bytes()));
    let config = dir.join("sluice.toml");
    let mut f = std::fs::File::create(&config).expect("config file");
    write!(
        f,
        "[[queues]]\nname = \"jobs\"\n\n[[keys]]\nname = \"admin\"\nrole = \"admin\"\n\
         sha256 = \"{hash}\"\n\n[[sqs_keys]]\naccess_key_id = \"AKIAMEMORY000000\"\n\
         secret_access_key = \"{SECRET}\"\nrole = \"admin\"\n"
    )
    .expect("write the config");
    Some(config.to_str().expect("a UTF-8 path").to_owned())
}

/// A broker with [`config`] and the frame protocol: the child, its base URL and its frame
/// listener's address.
fn broker(dir: &Path) -> Option<(common::Served, String, String)> {
    let config = config(dir)?;
    Some(common::serve_with_frames(
        &dir.join("data"),
        Stdio::null(),
        &["--config", &config],
    ))
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// The receive queues of the established TCP connections whose local port is `port` (the
/// broker's side of its connections on that listener).
fn receive_queues(port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let queues = f.get(4)?.split(':').nth(1)?;
            (local == port && *f.get(3)? == "01").then(|| u64::from_str_radix(queues, 16).ok())?
        })
        .collect()
}

/// Waits until the broker has read every byte sent to its `n` open connections on `port`.
/// A condition, not a time: the deadline only turns a broker that never reads into a
/// failure instead of a hang.
fn wait_until_read(port: u16, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let queues = receive_queues(port);
        if queues.len() >= n && queues.iter().all(|&q| q == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not read what its connections sent: {queues:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads one answer frame.
async fn read_answer(tcp: &mut TcpStream) -> Response {
    let len = tcp.read_u32_le().await.expect("an answer's length") as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.expect("an answer");
    frame::decode_payload(&buf).expect("an answer that decodes")
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("host:port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_announcing_large_sizes_hold_only_what_they_send() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((child, _url, frames)) = broker(dir.path()) else {
        return;
    };
    let pid = child.id();
    // Warm up: the runtime's threads and the allocator's arenas exist before the baseline.
    let mut hello = Vec::new();
    let op = Op::Hello {
        key: Some(SECRET.into()),
    };
    frame::encode_frame(&Request { id: 1, op }, &mut hello);
    for _ in 0..4 {
        let mut tcp = TcpStream::connect(&frames).await.expect("connect");
        tcp.write_all(&hello).await.expect("hello");
        assert!(matches!(
            read_answer(&mut tcp).await.result,
            Ok(Reply::Hello { .. })
        ));
    }
    let before = rss_kib(pid);

    // Before Hello: a large announcement is refused at once, with the reason, and closed.
    for _ in 0..CONNECTIONS {
        let mut tcp = TcpStream::connect(&frames).await.expect("connect");
        tcp.write_all(&(ANNOUNCED as u32).to_le_bytes())
            .await
            .expect("prefix");
        tcp.write_all(&[0]).await.expect("a byte");
        let e = read_answer(&mut tcp).await.result.unwrap_err();
        assert_eq!(e.code, "unauthenticated", "{}", e.message);
        assert_eq!(tcp.read(&mut [0u8; 1]).await.expect("read"), 0, "closed");
    }

    // After Hello: a large announcement is read as its bytes come, and holds what came.
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut tcp = TcpStream::connect(&frames).await.expect("connect");
        tcp.write_all(&hello).await.expect("hello");
        assert!(matches!(
            read_answer(&mut tcp).await.result,
            Ok(Reply::Hello { .. })
        ));
        tcp.write_all(&(ANNOUNCED as u32).to_le_bytes())
            .await
            .expect("prefix");
        tcp.write_all(&[0]).await.expect("a byte");
        held.push(tcp);
    }
    let port = port_of(&frames);
    tokio::task::spawn_blocking(move || wait_until_read(port, CONNECTIONS))
        .await
        .expect("wait");
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUND_KIB,
        "{CONNECTIONS} connections announcing {ANNOUNCED} bytes each grew the broker by \
         {grown} KiB; the bound is {BOUND_KIB} KiB"
    );
    drop(held);
}

/// Sends `CONNECTIONS` requests to `path` at `addr` that announce a body of `announced`
/// bytes and send its first 64 KiB, each with one of `auths` (header lines) in turn, and
/// asserts that each is answered with `status` before the rest is sent: the broker read no
/// more than it was sent, and nothing it answered is a replay. Returns the connections, open.
async fn refused_before_the_body(
    addr: &str,
    path: &str,
    auths: &[&str],
    announced: usize,
    status: &str,
) -> Vec<BufReader<TcpStream>> {
    let mut held = Vec::new();
    for (i, auth) in auths.iter().cycle().take(CONNECTIONS).enumerate() {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\
             Content-Type: application/json\r\nIdempotency-Key: key-{}\r\n\
             Content-Length: {announced}\r\n\r\n",
            i / auths.len()
        );
        tcp.write_all(head.as_bytes()).await.expect("head");
        tcp.write_all(&vec![b' '; 64 * 1024]).await.expect("a part");
        let mut rd = BufReader::new(tcp);
        let mut line = String::new();
        // A broker that waits for the body would never answer: fail instead of hanging.
        tokio::time::timeout(Duration::from_secs(30), rd.read_line(&mut line))
            .await
            .expect("an answer before the body was sent")
            .expect("status line");
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line:?}");
        let mut headers = String::new();
        loop {
            let mut line = String::new();
            if rd.read_line(&mut line).await.expect("a header") <= 2 {
                break;
            }
            headers.push_str(&line.to_ascii_lowercase());
        }
        assert!(!headers.contains("idempotent-replayed"), "{headers}");
        held.push(rd);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_request_is_refused_before_its_body_is_read_whatever_its_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((child, url, _frames)) = broker(dir.path()) else {
        return;
    };
    let pid = child.id();
    let addr = url.trim_start_matches("http://").to_owned();
    let c = reqwest::Client::new();
    for _ in 0..4 {
        let resp = c
            .get(format!("{url}/v1/queues"))
            .bearer_auth(SECRET)
            .send()
            .await
            .expect("warm-up");
        assert_eq!(resp.status(), 200);
    }
    let before = rss_kib(pid);
    // The 401 comes back before the body is sent, so the broker read none of it, and it is
    // no replay: nothing was remembered under the idempotency key.
    let auths = ["", "Authorization: Bearer wrong\r\n"];
    let held =
        refused_before_the_body(&addr, "/v1/queues/jobs/messages", &auths, ANNOUNCED, "401").await;
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUND_KIB,
        "{CONNECTIONS} unauthenticated requests grew the broker by {grown} KiB; the bound is \
         {BOUND_KIB} KiB"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_sqs_request_is_refused_before_its_body_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(config) = config(dir.path()) else {
        return;
    };
    let (_child, _url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &["--config", &config],
    );
    let addr = sqs
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    // Unsigned, and signed by a key the broker does not have: refused (403) from the
    // headers, with 1 MiB announced and 64 KiB of it sent.
    let auths = [
        "X-Amz-Target: AmazonSQS.ListQueues\r\n",
        "X-Amz-Target: AmazonSQS.ListQueues\r\nX-Amz-Date: 20260101T000000Z\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=AKIAUNKNOWN00000/20260101/us-east-1/sqs/\
         aws4_request, SignedHeaders=host;x-amz-date, Signature=00\r\n",
    ];
    let held = refused_before_the_body(&addr, "/", &auths, 1 << 20, "403").await;
    drop(held);
}
