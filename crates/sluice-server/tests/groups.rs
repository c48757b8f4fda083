//! FIFO message groups over HTTP, under concurrent consumers: 50 groups of 200 messages, eight
//! consumers receiving up to 10 at a time; each group must be received strictly in send order
//! and never with two of its messages in flight at once. A second run adds a poison message
//! (nacked every time) to one group: it dead-letters after its attempts and its group goes on.
//! Both runs print how long the groups other than the poisoned one took (no timing asserts).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use common::{TestServer, receive_raw, start};

const GROUPS: usize = 50;
const PER_GROUP: usize = 200;
const CONSUMERS: usize = 8;
/// Attempts before the poison message is dead-lettered.
const MAX_RECEIVE_COUNT: u64 = 3;
/// The poisoned group and the place of its poison message.
const POISON: (usize, usize) = (7, 50);

/// What the consumers saw of each group: the next index expected and whether one is in flight.
#[derive(Default)]
struct Seen {
    next: HashMap<usize, usize>,
    in_flight: HashMap<usize, bool>,
    poison_deliveries: u64,
    errors: Vec<String>,
    /// When the last message of a group other than the poisoned one was settled.
    others_done: Option<Instant>,
    others_left: usize,
}

/// One run: sends every group's messages, consumes them with `CONSUMERS` tasks and returns
/// how long the unpoisoned groups took to drain, after checking order and exclusivity.
async fn run(s: &TestServer, queue: &str, poison: bool) -> Duration {
    s.put_queue(
        queue,
        json!({"max_receive_count": MAX_RECEIVE_COUNT, "backoff_base_ms": 0}),
    )
    .await;
    // Interleaved: index i of every group, then i + 1; sent 1000 per request.
    let mut all = Vec::with_capacity(GROUPS * PER_GROUP);
    for i in 0..PER_GROUP {
        for g in 0..GROUPS {
            let poisoned = poison && (g, i) == POISON;
            all.push(json!({
                "body": {"g": g, "i": i, "poison": poisoned},
                "group": format!("group-{g}"),
            }));
        }
    }
    for chunk in all.chunks(1000) {
        let (st, v) = s
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/messages"),
                Some(json!({ "messages": chunk })),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "batch send: {v}");
    }
    let expected = GROUPS * PER_GROUP - usize::from(poison);
    let seen = Arc::new(Mutex::new(Seen {
        others_left: (GROUPS - 1) * PER_GROUP,
        ..Seen::default()
    }));
    let acked = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let client = s.client.clone();
        let base = format!("{}/v1/queues/{queue}", s.base);
        let seen = seen.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let batch = receive_raw(&client, &base, json!({"max": 10, "wait_ms": 200})).await;
                let mut acks = Vec::new();
                for m in batch {
                    let g = m["body"]["g"].as_u64().expect("g") as usize;
                    let i = m["body"]["i"].as_u64().expect("i") as usize;
                    let receipt = m["receipt"].as_str().expect("receipt").to_owned();
                    let poisoned = m["body"]["poison"].as_bool().unwrap_or(false);
                    {
                        let mut seen = seen.lock().expect("lock");
                        if m["group"] != json!(format!("group-{g}")) {
                            seen.errors
                                .push(format!("delivery of {g}/{i} carries {}", m["group"]));
                        }
                        if seen.in_flight.insert(g, true) == Some(true) {
                            seen.errors.push(format!(
                                "group {g}: {i} delivered while another is in flight"
                            ));
                        }
                        let next = *seen.next.get(&g).unwrap_or(&0);
                        let after_dead_letter = poison && (g, next) == POISON && i == next + 1;
                        if i != next && !after_dead_letter {
                            seen.errors
                                .push(format!("group {g}: got {i}, expected {next}"));
                        }
                        if poisoned {
                            seen.poison_deliveries += 1;
                        } else {
                            seen.next.insert(g, i + 1);
                        }
                        // Out of flight before the settle is sent: the broker must not hand
                        // out the next one before it has the settle.
                        seen.in_flight.insert(g, false);
                    }
                    if poisoned {
                        let r = client
                            .post(format!("{base}/nack"))
                            .json(&json!({"receipt": receipt, "error": "poison"}))
                            .send()
                            .await
                            .expect("nack");
                        assert!(r.status().is_success(), "nack: {}", r.status());
                    } else {
                        acks.push((g, receipt));
                    }
                }
                if acks.is_empty() {
                    continue;
                }
                let receipts: Vec<&str> = acks.iter().map(|(_, r)| r.as_str()).collect();
                let r = client
                    .post(format!("{base}/ack"))
                    .json(&json!({ "receipts": receipts }))
                    .send()
                    .await
                    .expect("ack");
                assert!(r.status().is_success(), "ack: {}", r.status());
                acked.fetch_add(acks.len(), Ordering::SeqCst);
                let mut seen = seen.lock().expect("lock");
                let others = acks.iter().filter(|(g, _)| *g != POISON.0).count();
                seen.others_left -= others;
                if seen.others_left == 0 && seen.others_done.is_none() {
                    seen.others_done = Some(Instant::now());
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while acked.load(Ordering::SeqCst) < expected {
        assert!(
            Instant::now() < deadline,
            "only {} of {expected} acknowledged in time",
            acked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    let (poison_deliveries, took) = {
        let seen = seen.lock().expect("lock");
        assert!(seen.errors.is_empty(), "{:#?}", seen.errors);
        for g in 0..GROUPS {
            assert_eq!(seen.next.get(&g), Some(&PER_GROUP), "group {g} completed");
        }
        (
            seen.poison_deliveries,
            seen.others_done.expect("other groups done") - started,
        )
    };
    let stats = s.stats(queue).await;
    assert_eq!(stats["visible"], 0, "{stats}");
    assert_eq!(stats["in_flight"], 0, "{stats}");
    if poison {
        assert_eq!(poison_deliveries, MAX_RECEIVE_COUNT);
        assert_eq!(stats["dead_letter_depth"], 1, "{stats}");
        let dlq = s
            .call(
                Method::GET,
                &format!("/v1/queues/{queue}.dlq/messages?state=all"),
                None,
            )
            .await;
        let listed: &Value = &dlq.1["messages"][0];
        assert_eq!(listed["group"], format!("group-{}", POISON.0), "{}", dlq.1);
        assert_eq!(listed["body"]["i"], POISON.1);
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_stay_in_order_under_concurrent_consumers_and_a_poison_message_moves_aside() {
    let s = start().await;
    let clean = run(&s, "fifo-clean", false).await;
    let poisoned = run(&s, "fifo-poison", true).await;
    println!(
        "{GROUPS} groups x {PER_GROUP} messages, {CONSUMERS} consumers: the other groups drained in \
         {clean:?} without a poison message and {poisoned:?} with one \
         (dead-lettered after {MAX_RECEIVE_COUNT} attempts)"
    );
    s.shutdown().await;
}

/// The group over HTTP: on a JSON send, a batch and a raw send (`?group=`), on deliveries and
/// message views, refused when invalid; `max_in_flight_per_group` on the queue config; both
/// documented with their limits in the OpenAPI document.
#[tokio::test]
async fn group_fields_on_the_http_api() {
    let s = start().await;
    let v = s
        .put_queue("fifo-http", json!({"max_in_flight_per_group": 2}))
        .await;
    assert_eq!(v["config"]["max_in_flight_per_group"], 2);
    common::assert_error(
        &s.call(
            Method::PUT,
            "/v1/queues/fifo-http",
            Some(json!({"max_in_flight_per_group": 0})),
        )
        .await,
        400,
        "invalid_argument",
    );
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/fifo-http/messages",
            Some(json!({"body": 1, "group": "g"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    let raw = s
        .client
        .post(s.url("/v1/queues/fifo-http/messages?group=g"))
        .header("content-type", "text/plain")
        .body("two")
        .send()
        .await
        .expect("raw send");
    assert_eq!(raw.status(), StatusCode::CREATED);
    for bad in [json!(""), json!("x".repeat(129)), json!("a\u{1}b")] {
        common::assert_error(
            &s.call(
                Method::POST,
                "/v1/queues/fifo-http/messages",
                Some(json!({"messages": [{"body": 1}, {"body": 2, "group": bad}]})),
            )
            .await,
            400,
            "invalid_argument",
        );
    }
    let (_, m) = s
        .call(Method::GET, &format!("/v1/messages/{id}"), None)
        .await;
    assert_eq!(m["group"], "g", "{m}");
    let ds = s.receive("fifo-http", json!({"max": 10})).await;
    assert_eq!(ds.len(), 2, "two of the group may be in flight");
    assert!(ds.iter().all(|d| d["group"] == "g"), "{ds:?}");
    assert_eq!(ds[0]["id"], id.as_str(), "in send order");

    let doc = s.call(Method::GET, "/openapi.json", None).await.1;
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        ("SendMessage", "group"),
        ("SendRequest", "group"),
        ("DeliveryView", "group"),
        ("MessageView", "group"),
    ] {
        let p = &schemas[schema]["properties"][field];
        assert_eq!(p["maxLength"], 128, "{schema}.{field}: {p}");
        assert_eq!(p["minLength"], 1, "{schema}.{field}: {p}");
    }
    let p = &schemas["QueueConfigRequest"]["properties"]["max_in_flight_per_group"];
    assert_eq!(
        (p["minimum"].clone(), p["maximum"].clone()),
        (json!(1), json!(1000)),
        "{p}"
    );
    s.shutdown().await;
}
