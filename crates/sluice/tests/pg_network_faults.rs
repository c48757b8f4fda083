//! The network between one broker node and its PostgreSQL database goes silent, and comes back.
//!
//! Two nodes share one schema: node A reaches the database through the test kit's fault
//! proxy, node B directly. A holds leases when its network blackholes (nothing passes either
//! way, as when a cable is pulled or a firewall drops packets) or goes half-open (its
//! statements reach the database and run, their answers never come back). Meanwhile A answers
//! 503 with `Retry-After` by its request deadline instead of hanging, and `/readyz` says it is
//! not ready; B takes over A's messages once their leases expire; when the network returns, A
//! serves again by itself, its late acks are refused as stale, and a write A answered 503 —
//! whose outcome was unknown, and under half-open did land — is sent once in all by its retry
//! with the same idempotency key.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::faults::Fault;
use sluice_testkit::postgres;

mod common;

/// Node A's request deadline: short, so the test is quick.
const REQUEST_TIMEOUT: &str = "2s";
/// The queue's lease: A's leases run out while it is cut off.
const VISIBILITY_MS: u64 = 3000;
/// Messages B sends before the fault.
const SENT: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_a_blackholed_network_answers_503_and_rejoins() {
    cut_off_and_back(Fault::Blackhole, "blackhole").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_a_half_open_network_answers_503_and_rejoins() {
    cut_off_and_back(Fault::HalfOpen, "halfopen").await;
}

async fn cut_off_and_back(fault: Fault, name: &str) {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema(name);
    let _schema = postgres::SchemaGuard::new(schema.clone());
    let (proxy, proxied) = common::pg::proxied_store(&schema).await;
    let (_b, b) = common::serve_store(&common::pg::direct_store(&schema), Stdio::null());
    let (_a, a) = common::serve_store_and(
        &proxied,
        Stdio::null(),
        &["--request-timeout", REQUEST_TIMEOUT],
    );
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let created = c
        .put(format!("{b}/v1/queues/work"))
        .json(&json!({"visibility_timeout_ms": VISIBILITY_MS, "max_receive_count": 100}))
        .send()
        .await
        .expect("create");
    assert!(created.status().is_success(), "{created:?}");
    for n in 0..SENT {
        let (st, v) = post(
            &c,
            &format!("{b}/v1/queues/work/messages"),
            json!({"body": {"n": n}}),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = post(
        &c,
        &format!("{a}/v1/queues/work/receive"),
        json!({"max": 5}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let held: Vec<Value> = v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["receipt"].clone())
        .collect();
    assert!(!held.is_empty(), "node A leased before the fault: {v}");

    // A send with an idempotency key, made during the fault and retried after it.
    let keyed_send = || {
        c.post(format!("{a}/v1/queues/work/messages"))
            .header("idempotency-key", "during-the-fault")
            .json(&json!({"body": {"n": "during"}}))
            .send()
    };
    proxy.set(fault);
    // A write through A: answered 503 by the deadline, with Retry-After, not left hanging.
    let started = Instant::now();
    let resp = keyed_send().await.expect("node A answers");
    let took = started.elapsed();
    assert_eq!(resp.status(), 503, "a send through the cut-off node");
    assert!(resp.headers().contains_key("retry-after"), "{resp:?}");
    let body: Value = resp.json().await.expect("error JSON");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        took < Duration::from_secs(8),
        "answered after {took:?}: the deadline is {REQUEST_TIMEOUT}"
    );
    let ready = c.get(format!("{a}/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 503, "node A is not ready while cut off");

    // B delivers everything, A's leased messages once their leases run out.
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < SENT as usize {
        assert!(Instant::now() < deadline, "node B took over only {seen:?}");
        let (st, v) = post(
            &c,
            &format!("{b}/v1/queues/work/receive"),
            json!({"max": 10, "wait_ms": 500}),
        )
        .await;
        assert_eq!(st, 200, "node B serves while A is cut off: {v}");
        for m in v["messages"].as_array().expect("messages") {
            *seen.entry(m["body"]["n"].to_string()).or_default() += 1;
            let (st, v) = post(
                &c,
                &format!("{b}/v1/queues/work/ack"),
                json!({"receipt": m["receipt"]}),
            )
            .await;
            assert_eq!(st, 200, "{v}");
        }
    }
    let cut_for = started.elapsed();

    // The network returns: A is ready again by itself.
    proxy.set(Fault::None);
    let healed = Instant::now();
    loop {
        let ready = c.get(format!("{a}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "node A did not rejoin"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rejoined = healed.elapsed();
    // A's acks of leases that ran out while it was cut off are stale: changed nothing.
    for r in &held {
        let (st, v) = post(
            &c,
            &format!("{a}/v1/queues/work/ack"),
            json!({"receipt": r}),
        )
        .await;
        assert_eq!(st, 409, "a late ack from node A: {v}");
        assert_eq!(v["error"]["code"], "receipt_stale", "{v}");
    }
    // The send answered 503 is retried with its key: there is exactly one such message.
    let resp = keyed_send().await.expect("retry");
    assert_eq!(resp.status(), 201, "the retry of the unknown-outcome send");
    let (st, v) = post(
        &c,
        &format!("{a}/v1/queues/work/receive"),
        json!({"max": 10, "wait_ms": 1000}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let rest: Vec<&Value> = v["messages"].as_array().expect("messages").iter().collect();
    assert_eq!(rest.len(), 1, "exactly the retried send is left: {v}");
    assert_eq!(rest[0]["body"]["n"], "during");
    assert!(
        seen.values().all(|&k| k == 1),
        "each message delivered by B once after A's leases ran out: {seen:?}"
    );
    eprintln!(
        "{fault:?}: send answered 503 after {took:?}; node B took over all {SENT} messages \
         {cut_for:?} after the fault; node A ready again {rejoined:?} after the network returned"
    );
}

/// One JSON POST: its status and body.
async fn post(c: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let resp = c.post(url).json(&body).send().await.expect("answer");
    let st = resp.status().as_u16();
    (st, resp.json().await.unwrap_or(Value::Null))
}

/// A multi-host connection string whose first host answers nothing — the machine of a former
/// primary, dead: its SYNs dropped — reaches the next host: each host gets its share of the
/// connect timeout rather than the first one taking all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_host_is_passed_over() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("deadfirst");
    let _schema = postgres::SchemaGuard::new(schema.clone());
    let (_listener, _filling, dead) = common::pg::dead_address().await;
    let store = common::pg::dead_first_store(dead, &schema).await;
    serves_through_the_second_host(&store, "dead").await;
}

/// As above, with a first host that accepts connections and then answers nothing (a frozen
/// server): each host's whole start-up has its deadline, not only its TCP connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_first_host_is_passed_over() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("frozenfirst");
    let _schema = postgres::SchemaGuard::new(schema.clone());
    let (proxy, store) = common::pg::proxy_first_store(&schema).await;
    proxy.set(Fault::Blackhole);
    serves_through_the_second_host(&store, "frozen").await;
}

async fn serves_through_the_second_host(store: &str, first: &str) {
    let started = Instant::now();
    let (_node, url) = common::serve_store(store, Stdio::null());
    let c = reqwest::Client::new();
    let created = c
        .put(format!("{url}/v1/queues/work"))
        .json(&json!({}))
        .send()
        .await
        .expect("create");
    assert!(created.status().is_success(), "{created:?}");
    for n in 0..3 {
        let (st, v) = post(
            &c,
            &format!("{url}/v1/queues/work/messages"),
            json!({"body": n}),
        )
        .await;
        assert_eq!(st, 201, "a send through the second host: {v}");
    }
    eprintln!(
        "serving through the second host {:?} after start, the first {first}",
        started.elapsed()
    );
}
