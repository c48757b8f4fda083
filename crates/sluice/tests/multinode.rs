//! Three `sluice serve` nodes on one PostgreSQL database (each test in a schema of its own).
//!
//! Producers and consumers are spread over all three nodes; consumers abandon some leases (as a
//! crashed worker would), so those messages come back when their lease ends; the node that
//! owns a running
//! redrive job is killed with SIGKILL mid-run and restarted. Afterwards: every acknowledged
//! send was delivered, no message was leased to two consumers at once, and the redrive finished
//! on another node with every dead letter moved exactly once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::postgres;

mod common;

const PRODUCERS: usize = 3;
const BATCHES: usize = 40;
const BATCH: usize = 10;
const DEAD: usize = 300;
const VISIBILITY_MS: i64 = 5_000;

/// The nodes: their processes (killed when the cluster drops) and current URLs (a restarted
/// node listens on a new port).
struct Cluster {
    store: String,
    nodes: Mutex<Vec<(common::Served, String)>>,
}

impl Cluster {
    fn start(&self, i: usize) {
        let (child, url) = common::serve_store(&self.store, Stdio::null());
        let mut nodes = self.nodes.lock().expect("nodes");
        if i < nodes.len() {
            nodes[i] = (child, url);
        } else {
            nodes.push((child, url));
        }
    }

    fn url(&self, i: usize) -> String {
        let nodes = self.nodes.lock().expect("nodes");
        nodes[i % nodes.len()].1.clone()
    }

    fn kill(&self, i: usize) {
        let mut nodes = self.nodes.lock().expect("nodes");
        let _ = nodes[i].0.kill(); // SIGKILL
        let _ = nodes[i].0.wait();
    }
}

/// A call that fails when the node is down (connection refused, reset, or 5xx).
async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Value,
) -> Option<Value> {
    let resp = c.request(method, url).json(&body).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let text = resp.text().await.ok()?;
    Some(if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).expect("JSON")
    })
}

fn millis(rfc3339: &str) -> i64 {
    let t = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .expect("RFC 3339 time");
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).expect("ms")
}

/// One delivery as a consumer saw it.
#[derive(Debug, Clone)]
struct Seen {
    body: String,
    receive_count: u64,
    lease_deadline: i64,
    acked: bool,
    /// Its ack was sent but no answer came (the node died meanwhile): it may have been made.
    ack_unanswered: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_survive_losing_one_and_hand_over_its_redrive() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("multinode");
    // Dropped last, also when an assertion fails.
    let _drop = postgres::SchemaGuard::new(schema.clone());
    let cluster = Arc::new(Cluster {
        store: format!("{}?schema={schema}", postgres::url()),
        nodes: Mutex::new(Vec::new()),
    });
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let put = reqwest::Method::PUT;
    let post = reqwest::Method::POST;

    // Node 0 alone first: it creates the queues and takes the redrive job.
    cluster.start(0);
    let n0 = cluster.url(0);
    for (q, cfg) in [
        ("work", json!({"visibility_timeout_ms": VISIBILITY_MS})),
        ("dead", json!({})),
        ("revived", json!({})),
    ] {
        call(&c, put.clone(), format!("{n0}/v1/queues/{q}"), cfg)
            .await
            .expect("create queue");
    }
    for chunk in (0..DEAD).collect::<Vec<_>>().chunks(100) {
        let messages: Vec<Value> = chunk.iter().map(|i| json!({"body": {"dead": i}})).collect();
        call(
            &c,
            post.clone(),
            format!("{n0}/v1/queues/dead.dlq/messages"),
            json!({"messages": messages}),
        )
        .await
        .expect("fill the DLQ");
    }
    let job = call(
        &c,
        post.clone(),
        format!("{n0}/v1/redrives"),
        json!({"source": "dead.dlq", "destination": "revived", "rate_per_second": 40}),
    )
    .await
    .expect("create redrive");
    let job_id = job["id"].as_str().expect("job id").to_string();
    let started = Instant::now();
    loop {
        let j = call(
            &c,
            reqwest::Method::GET,
            format!("{n0}/v1/redrives/{job_id}"),
            Value::Null,
        )
        .await
        .expect("job");
        if j["moved"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the redrive never started: {j}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.start(1);
    cluster.start(2);

    let acked_sends = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let sent_batches = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(HashMap::<String, Vec<Seen>>::new()));

    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (c, cluster, acked, sent) = (
            c.clone(),
            cluster.clone(),
            acked_sends.clone(),
            sent_batches.clone(),
        );
        producers.push(tokio::spawn(async move {
            let mut node = p;
            for b in 0..BATCHES {
                let bodies: Vec<String> = (0..BATCH).map(|i| format!("p{p}-b{b}-m{i}")).collect();
                let messages: Vec<Value> = bodies.iter().map(|s| json!({"body": s})).collect();
                // A batch whose answer was lost may be stored twice (at least once); only
                // answered batches count as acknowledged.
                loop {
                    let url = format!("{}/v1/queues/work/messages", cluster.url(node));
                    if call(
                        &c,
                        reqwest::Method::POST,
                        url,
                        json!({"messages": messages}),
                    )
                    .await
                    .is_some()
                    {
                        acked.lock().expect("acked").extend(bodies.iter().cloned());
                        sent.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    let mut consumers = Vec::new();
    for k in 0..3 {
        let (c, cluster, stop, seen) = (c.clone(), cluster.clone(), stop.clone(), seen.clone());
        consumers.push(tokio::spawn(async move {
            let mut node = k;
            while !stop.load(Ordering::SeqCst) {
                let base = cluster.url(node);
                let Some(got) = call(
                    &c,
                    reqwest::Method::POST,
                    format!("{base}/v1/queues/work/receive"),
                    json!({"max": 10, "wait_ms": 300}),
                )
                .await
                else {
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let deliveries = got["messages"].as_array().cloned().unwrap_or_default();
                if deliveries.is_empty() {
                    continue;
                }
                // A consumer that dies mid-task abandons its lease: the first message of each
                // batch is dropped on its first delivery and comes back when the lease ends.
                let abandoned = |d: &Value| {
                    d["receive_count"] == 1
                        && d["body"].as_str().is_some_and(|b| b.ends_with("-m0"))
                };
                let kept: Vec<&Value> = deliveries.iter().filter(|d| !abandoned(d)).collect();
                let receipts: Vec<Value> = kept.iter().map(|d| d["receipt"].clone()).collect();
                let acks = if receipts.is_empty() {
                    None
                } else {
                    call(
                        &c,
                        reqwest::Method::POST,
                        format!("{base}/v1/queues/work/ack"),
                        json!({"receipts": receipts}),
                    )
                    .await
                };
                let mut seen = seen.lock().expect("seen");
                for d in &deliveries {
                    let acked = kept
                        .iter()
                        .position(|k| k["id"] == d["id"])
                        .and_then(|i| acks.as_ref()?["results"][i]["ok"].as_bool())
                        .unwrap_or(false);
                    seen.entry(d["id"].as_str().expect("id").to_string())
                        .or_default()
                        .push(Seen {
                            body: d["body"].as_str().expect("text body").to_string(),
                            receive_count: d["receive_count"].as_u64().expect("count"),
                            lease_deadline: millis(d["lease_deadline"].as_str().expect("deadline")),
                            acked,
                            ack_unanswered: acks.is_none()
                                && kept.iter().any(|k| k["id"] == d["id"]),
                        });
                }
            }
        }));
    }

    // SIGKILL node 0 (the redrive's owner) a third of the way through, then restart it.
    while sent_batches.load(Ordering::SeqCst) < PRODUCERS * BATCHES / 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.start(0);

    for p in producers {
        p.await.expect("producer");
    }
    let acked: BTreeSet<String> = acked_sends.lock().expect("acked").clone();
    assert_eq!(acked.len(), PRODUCERS * BATCHES * BATCH);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let received: BTreeSet<String> = seen
            .lock()
            .expect("seen")
            .values()
            .flatten()
            .filter(|s| s.acked)
            .map(|s| s.body.clone())
            .collect();
        // A message whose ack went unanswered because its node died may have been acked:
        // then it is done, and its task says SUCCESS.
        let mut missing = Vec::new();
        for body in acked.difference(&received) {
            let unanswered: Vec<String> = seen
                .lock()
                .expect("seen")
                .iter()
                .filter(|(_, ds)| ds.iter().any(|d| &d.body == body && d.ack_unanswered))
                .map(|(id, _)| id.clone())
                .collect();
            let mut done = false;
            for id in unanswered {
                let task = call(
                    &c,
                    reqwest::Method::GET,
                    format!("{}/v1/tasks/{id}", cluster.url(1)),
                    Value::Null,
                )
                .await;
                done |=
                    task.is_some_and(|t| t["status"] == sluice_core::TaskStatus::Success.as_str());
            }
            if !done {
                missing.push(body.clone());
            }
        }
        if missing.is_empty() {
            break;
        }
        missing.truncate(5);
        assert!(
            Instant::now() < deadline,
            "acknowledged sends never delivered and acknowledged, e.g. {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for k in consumers {
        k.await.expect("consumer");
    }

    // No lease held by two consumers at once: a message delivered again was delivered after
    // its previous lease ended (a lease starts VISIBILITY_MS before its deadline), and an
    // acknowledged delivery was its last.
    let seen = seen.lock().expect("seen").clone();
    let mut redelivered = 0;
    // Abandoned on a first delivery this test saw (a first delivery whose answer was lost
    // with its node shows up here as a second one, and is not abandoned).
    let mut abandoned = 0;
    for (id, mut ds) in seen {
        abandoned += usize::from(
            ds.iter()
                .any(|d| d.receive_count == 1 && d.body.ends_with("-m0")),
        );
        ds.sort_by_key(|d| d.receive_count);
        let counts: BTreeSet<u64> = ds.iter().map(|d| d.receive_count).collect();
        assert_eq!(
            counts.len(),
            ds.len(),
            "message {id} delivered twice with one count: {ds:?}"
        );
        for pair in ds.windows(2) {
            redelivered += 1;
            assert!(
                !pair[0].acked,
                "message {id} delivered again after an ack: {ds:?}"
            );
            assert!(
                pair[1].lease_deadline - VISIBILITY_MS >= pair[0].lease_deadline,
                "message {id} leased again before its previous lease ended: {ds:?}"
            );
        }
    }

    // The redrive finished on another node: node 0's successor took it over.
    let deadline = Instant::now() + Duration::from_secs(60);
    let job = loop {
        let j = call(
            &c,
            reqwest::Method::GET,
            format!("{}/v1/redrives/{job_id}", cluster.url(1)),
            Value::Null,
        )
        .await
        .expect("job");
        if j["state"] == "completed" {
            break j;
        }
        assert!(Instant::now() < deadline, "redrive never finished: {j}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(job["moved"].as_u64(), Some(DEAD as u64), "{job}");
    let mut ids = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!(
            "{}/v1/queues/revived/messages?state=all&limit=1000",
            cluster.url(2)
        );
        if let Some(cur) = &cursor {
            url.push_str(&format!("&cursor={cur}"));
        }
        let page = c
            .get(url)
            .send()
            .await
            .expect("browse")
            .json::<Value>()
            .await
            .expect("JSON");
        for m in page["messages"].as_array().expect("messages") {
            *ids.entry(m["id"].as_str().expect("id").to_string())
                .or_insert(0) += 1;
        }
        match page["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => break,
        }
    }
    assert_eq!(ids.len(), DEAD, "every dead letter back in the destination");
    assert!(ids.values().all(|n| *n == 1), "each exactly once");
    let dlq = c
        .get(format!("{}/v1/queues/dead/stats", cluster.url(2)))
        .send()
        .await
        .expect("stats")
        .json::<Value>()
        .await
        .expect("JSON");
    assert_eq!(dlq["dead_letter_depth"], 0, "{dlq}");
    assert!(
        abandoned + 3 >= PRODUCERS * BATCHES,
        "most batches' first message was abandoned once ({abandoned})"
    );
    assert!(
        redelivered >= abandoned,
        "abandoned leases were delivered again ({redelivered} of {abandoned})"
    );
    eprintln!(
        "{} acknowledged sends delivered across a SIGKILL of the redrive owner; \
         {redelivered} redeliveries, all after the previous lease ended; redrive moved {} on another node",
        acked.len(),
        job["moved"]
    );
    drop(cluster);
}
