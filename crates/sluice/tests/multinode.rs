//! Three `sluice serve` nodes on one PostgreSQL database (each test in a schema of its own).
//!
//! Producers and consumers are spread over all three nodes; consumers abandon some leases (as a
//! crashed worker would), so those messages come back when their lease ends; the node that
//! owns a running redrive job is killed with SIGKILL mid-run and restarted. Afterwards: every acknowledged
//! send was delivered, no message was leased to two consumers at once, and the redrive finished
//! on another node with every dead letter moved exactly once.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::soak::call;
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

impl common::soak::Nodes for Cluster {
    fn url(&self, i: usize) -> String {
        Cluster::url(self, i)
    }
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

    let shape = common::soak::Shape {
        producers: PRODUCERS,
        consumers: 3,
        batch: BATCH,
        batches: Some(BATCHES),
        pause: Duration::from_millis(20),
        visibility_ms: VISIBILITY_MS,
        dedup: false,
    };
    let mut load = common::soak::Load::start(&c, cluster.clone(), shape);

    // SIGKILL node 0 (the redrive's owner) a third of the way through, then restart it.
    while load.sent_batches() < PRODUCERS * BATCHES / 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.start(0);

    let acked = load.settle(Duration::from_secs(90)).await;
    let tally = load.check_leases(false);

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
    for m in common::soak::browse(&c, &cluster.url(2), "revived").await {
        *ids.entry(m["id"].as_str().expect("id").to_string())
            .or_insert(0) += 1;
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
        tally.abandoned + 3 >= PRODUCERS * BATCHES,
        "most batches' first message was abandoned once ({tally:?})"
    );
    assert!(
        tally.redelivered >= tally.abandoned,
        "abandoned leases were delivered again ({tally:?})"
    );
    eprintln!(
        "{acked} acknowledged sends delivered across a SIGKILL of the redrive owner; \
         {} redeliveries, all after the previous lease ended; redrive moved {} on another node",
        tally.redelivered, job["moved"]
    );
    drop(cluster);
}
