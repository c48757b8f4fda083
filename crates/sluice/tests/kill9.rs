//! `kill -9` over HTTP and the frame protocol (the promise that "a 2xx on any write means the change
//! is on stable storage"; a frame answer promises the same): the real `sluice serve` binary
//! takes concurrent batched sends and acks on both, is SIGKILLed at a random moment, and is
//! restarted on the same data directory. Every message whose send was confirmed must be there
//! with its body, and every message whose ack was confirmed must be `completed` (not visible,
//! not in flight). Five crashes on one data directory, checked cumulatively after every
//! restart. The same again with relaxed durability (`--sync-interval`): answers no longer
//! wait for the disk, but a crash of the broker alone (the writes are in the kernel's page
//! cache) must still lose nothing.
//!
//! The kill moments come from a seed printed at the start; set `SLUICE_KILL9_SEED` to replay
//! a run.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sluice_client::frames::{Body, FrameClientError, FrameConnection, FrameMessage};
use sluice_core::MessageId;

mod common;

const QUEUE: &str = "k9";
const CRASHES: u32 = 5;
const SENDERS: u32 = 4;
const ACKERS: u32 = 2;
/// Bound on the sends of one task in one round, so a fast machine does not balloon the check.
const MAX_SENDS_PER_TASK: u64 = 2_000;
const TIME_LIMIT: Duration = Duration::from_secs(30);

/// Starts `sluice serve` on ephemeral ports over `data` and returns it with its base URL and
/// its frame listener's address.
fn serve(data: &Path, log: &Path, extra: &[&str]) -> (common::Served, String, String) {
    let log = std::fs::File::create(log).expect("create the server log");
    common::serve_with_frames(data, Stdio::from(log), extra)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client")
}

/// What the load of one round got a 2xx for.
#[derive(Default)]
struct Confirmed {
    /// Message id → the body it was sent with.
    sent: HashMap<String, Value>,
    /// Ids whose ack was confirmed.
    acked: HashSet<String>,
    /// Requests that failed (expected around the kill).
    failed: u64,
}

/// The next batch of a sending task: 1 – 5 bodies numbered from `seq`, and how many.
fn next_bodies(round: u32, task: u32, seq: u64) -> (u64, Vec<Value>) {
    let n = (seq % 5) + 1;
    let bodies = (seq..seq + n)
        .map(|s| json!({"round": round, "task": task, "seq": s, "pad": "p".repeat(200)}))
        .collect();
    (n, bodies)
}

/// Sends batches of 1 – 5 messages until `stop`; records each id that got a 2xx.
async fn sender(
    client: reqwest::Client,
    url: String,
    round: u32,
    task: u32,
    stop: Arc<AtomicBool>,
) -> Confirmed {
    let mut out = Confirmed::default();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) && seq < MAX_SENDS_PER_TASK {
        let (n, bodies) = next_bodies(round, task, seq);
        seq += n;
        let req = if n == 1 {
            json!({"body": bodies[0]})
        } else {
            json!({"messages": bodies.iter().map(|b| json!({"body": b})).collect::<Vec<_>>()})
        };
        let resp = client
            .post(format!("{url}/v1/queues/{QUEUE}/messages"))
            .json(&req)
            .send()
            .await;
        let answer = match resp {
            Ok(r) if r.status().is_success() => r.json::<Value>().await,
            Ok(r) => panic!("send answered {} before the kill", r.status()),
            Err(_) => {
                out.failed += 1;
                continue;
            }
        };
        let Ok(answer) = answer else {
            // The connection died between the status line and the body: not confirmed.
            out.failed += 1;
            continue;
        };
        let ids: Vec<String> = if n == 1 {
            vec![answer["id"].as_str().expect("id").to_owned()]
        } else {
            answer["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_str().expect("id").to_owned())
                .collect()
        };
        assert_eq!(ids.len(), bodies.len());
        for (id, body) in ids.into_iter().zip(bodies) {
            assert!(out.sent.insert(id, body).is_none(), "an id was given twice");
        }
    }
    out
}

/// Sends batches like [`sender`], over one frame-protocol connection (JSON bodies, so the
/// check reads them back over HTTP as sent), until `stop` or the connection dies with the
/// broker.
async fn frame_sender(addr: String, round: u32, task: u32, stop: Arc<AtomicBool>) -> Confirmed {
    let mut out = Confirmed::default();
    let Ok(mut conn) = FrameConnection::connect(addr.as_str(), None).await else {
        out.failed += 1;
        return out;
    };
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) && seq < MAX_SENDS_PER_TASK {
        let (n, bodies) = next_bodies(round, task, seq);
        seq += n;
        let messages = bodies
            .iter()
            .map(|b| FrameMessage::new(Body::json(b.to_string())))
            .collect();
        match conn.send(QUEUE, messages).await {
            Ok(ids) => {
                assert_eq!(ids.len(), bodies.len());
                for (s, body) in ids.into_iter().zip(bodies) {
                    let id = MessageId(s.id).to_string();
                    assert!(out.sent.insert(id, body).is_none(), "an id was given twice");
                }
            }
            Err(FrameClientError::Refused(e)) => {
                panic!("a frame send was refused before the kill: {e}")
            }
            Err(_) => {
                out.failed += 1;
                break;
            }
        }
    }
    out
}

/// Receives and acks like [`acker`], over frame-protocol connections.
async fn frame_acker(addr: String, stop: Arc<AtomicBool>) -> Confirmed {
    let mut out = Confirmed::default();
    let Ok(mut conn) = FrameConnection::connect(addr.as_str(), None).await else {
        out.failed += 1;
        return out;
    };
    while !stop.load(Ordering::Relaxed) {
        let got = match conn.receive(QUEUE, 5, Duration::from_millis(50)).await {
            Ok(got) => got,
            Err(FrameClientError::Refused(e)) => panic!("a frame receive was refused: {e}"),
            Err(_) => {
                out.failed += 1;
                break;
            }
        };
        if got.is_empty() {
            continue;
        }
        match conn
            .ack(QUEUE, got.iter().map(|d| d.receipt).collect())
            .await
        {
            Ok(outcomes) => {
                assert_eq!(outcomes.len(), got.len());
                for (d, o) in got.iter().zip(outcomes) {
                    assert!(o.is_none(), "a fresh receipt was refused: {o:?}");
                    out.acked.insert(MessageId(d.id).to_string());
                }
            }
            Err(FrameClientError::Refused(e)) => panic!("a frame ack was refused: {e}"),
            Err(_) => {
                out.failed += 1;
                break;
            }
        }
    }
    out
}

/// Receives up to 5 messages at a time and acks them (batch form, or the single form for
/// one message); records each id whose ack got a 2xx.
async fn acker(client: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> Confirmed {
    let mut out = Confirmed::default();
    while !stop.load(Ordering::Relaxed) {
        let got = client
            .post(format!("{url}/v1/queues/{QUEUE}/receive"))
            .json(&json!({"max": 5, "wait_ms": 50}))
            .send()
            .await;
        let got = match got {
            Ok(r) if r.status().is_success() => match r.json::<Value>().await {
                Ok(v) => v,
                Err(_) => {
                    out.failed += 1;
                    continue;
                }
            },
            Ok(r) => panic!("receive answered {} before the kill", r.status()),
            Err(_) => {
                out.failed += 1;
                continue;
            }
        };
        let leased: Vec<(String, String)> = got["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().expect("id").to_owned(),
                    m["receipt"].as_str().expect("receipt").to_owned(),
                )
            })
            .collect();
        if leased.is_empty() {
            continue;
        }
        let req = if leased.len() == 1 {
            json!({"receipt": leased[0].1})
        } else {
            json!({"receipts": leased.iter().map(|(_, r)| r).collect::<Vec<_>>()})
        };
        let resp = client
            .post(format!("{url}/v1/queues/{QUEUE}/ack"))
            .json(&req)
            .send()
            .await;
        let answer = match resp {
            Ok(r) if r.status().is_success() => r.json::<Value>().await,
            Ok(r) => panic!("ack answered {} before the kill", r.status()),
            Err(_) => {
                out.failed += 1;
                continue;
            }
        };
        let Ok(answer) = answer else {
            out.failed += 1;
            continue;
        };
        if leased.len() == 1 {
            assert_eq!(answer["state"], "completed", "{answer}");
            out.acked.insert(leased[0].0.clone());
        } else {
            let results = answer["results"].as_array().expect("results");
            assert_eq!(results.len(), leased.len());
            for ((id, _), r) in leased.iter().zip(results) {
                assert_eq!(r["ok"], true, "a fresh receipt was refused: {r}");
                out.acked.insert(id.clone());
            }
        }
    }
    out
}

/// Checks every confirmed send and ack against the restarted broker. An acked id may be
/// missing from `sent` (its send was committed but the answer was cut off by the kill); it
/// is checked for its state only.
async fn verify(url: &str, sent: &HashMap<String, Value>, acked: &HashSet<String>) {
    let expected: Vec<(String, Option<Value>, bool)> = sent
        .iter()
        .map(|(id, body)| (id.clone(), Some(body.clone()), acked.contains(id)))
        .chain(
            acked
                .iter()
                .filter(|id| !sent.contains_key(*id))
                .map(|id| (id.clone(), None, true)),
        )
        .collect();
    let per_task = expected.len().div_ceil(8).max(1);
    let mut tasks = Vec::new();
    for chunk in expected.chunks(per_task) {
        let chunk = chunk.to_vec();
        let client = client();
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            for (id, body, done) in chunk {
                let resp = client
                    .get(format!("{url}/v1/messages/{id}"))
                    .send()
                    .await
                    .expect("GET a message");
                assert_eq!(
                    resp.status(),
                    200,
                    "message {id} got a 2xx on send or ack and is gone after kill -9"
                );
                let m: Value = resp.json().await.expect("message JSON");
                assert_eq!(m["queue"], QUEUE, "{m}");
                if done {
                    assert_eq!(
                        m["state"], "completed",
                        "message {id} got a 2xx on ack and is not completed after kill -9: {m}"
                    );
                    continue;
                }
                assert!(
                    matches!(
                        m["state"].as_str(),
                        Some("visible" | "in_flight" | "completed")
                    ),
                    "{m}"
                );
                // A completed record keeps no body; the others must keep it exactly.
                if m["state"] != "completed" {
                    assert_eq!(
                        Some(&m["body"]),
                        body.as_ref(),
                        "message {id} came back with another body"
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("a check failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_sends_and_acks_survive_sigkill() {
    crash_rounds(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_relaxed_durability_confirmed_writes_survive_sigkill_of_the_broker() {
    crash_rounds(&["--sync-interval", "1s"]).await;
}

/// Load, SIGKILL, restart and check, `CRASHES` times, on a broker started with `extra` flags.
async fn crash_rounds(extra: &[&str]) {
    let started = Instant::now();
    let seed = std::env::var("SLUICE_KILL9_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("kill9: seed {seed} (set SLUICE_KILL9_SEED={seed} to replay)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let mut sent: HashMap<String, Value> = HashMap::new();
    let mut acked: HashSet<String> = HashSet::new();

    for round in 0..=CRASHES {
        let log = dir.path().join(format!("serve-{round}.log"));
        let (mut child, url, frames) = serve(&data, &log, extra);
        let check = Instant::now();
        verify(&url, &sent, &acked).await;
        eprintln!(
            "kill9: start {round}: {} sent and {} acked messages checked in {} ms",
            sent.len(),
            acked.len(),
            check.elapsed().as_millis()
        );
        if round == CRASHES {
            child.kill().expect("stop the server");
            child.wait().expect("reap the server");
            break;
        }
        let c = client();
        if round == 0 {
            let resp = c
                .put(format!("{url}/v1/queues/{QUEUE}"))
                .json(&json!({"visibility_timeout_ms": 600_000}))
                .send()
                .await
                .expect("create the queue");
            assert!(resp.status().is_success(), "{}", resp.status());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::new();
        for task in 0..SENDERS {
            senders.push(tokio::spawn(sender(
                c.clone(),
                url.clone(),
                round,
                task,
                stop.clone(),
            )));
        }
        let frame_send = tokio::spawn(frame_sender(frames.clone(), round, SENDERS, stop.clone()));
        let mut ackers = Vec::new();
        for _ in 0..ACKERS {
            ackers.push(tokio::spawn(acker(c.clone(), url.clone(), stop.clone())));
        }
        let frame_ack = tokio::spawn(frame_acker(frames.clone(), stop.clone()));
        let delay = Duration::from_millis(rng.gen_range(200..=800));
        tokio::time::sleep(delay).await;
        child.kill().expect("SIGKILL the server");
        stop.store(true, Ordering::Relaxed);
        let status = child.wait().expect("reap the server");
        assert!(!status.success(), "the server was killed: {status:?}");
        let (mut new_sends, mut new_acks, mut failed) = (0, 0, 0);
        let over_frames = frame_send.await.expect("the frame sender panicked");
        let frame_sends = over_frames.sent.len();
        let mut results = vec![
            over_frames,
            frame_ack.await.expect("the frame acker panicked"),
        ];
        for t in senders.into_iter().chain(ackers) {
            results.push(t.await.expect("a load task panicked"));
        }
        for got in results {
            new_sends += got.sent.len();
            new_acks += got.acked.len();
            failed += got.failed;
            for (id, body) in got.sent {
                assert!(sent.insert(id, body).is_none(), "an id was given twice");
            }
            acked.extend(got.acked);
        }
        eprintln!(
            "kill9: round {round}: killed after {} ms; {new_sends} sends ({frame_sends} over \
             frames) and {new_acks} acks confirmed, {failed} requests cut off",
            delay.as_millis()
        );
        assert!(new_sends > 0, "no send was confirmed in round {round}");
        assert!(
            frame_sends > 0,
            "no send over frames was confirmed in round {round}"
        );
    }
    assert!(!acked.is_empty(), "no ack was confirmed in any round");
    let elapsed = started.elapsed();
    eprintln!("kill9: done in {} ms", elapsed.as_millis());
    assert!(
        elapsed < TIME_LIMIT,
        "the test took {elapsed:?}, over its {TIME_LIMIT:?} bound"
    );
}
