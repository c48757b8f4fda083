//! `/metrics`: parses as Prometheus text; gauges, counters and histograms agree with
//! what the test did.

mod common;

use reqwest::Method;
use serde_json::json;

fn value(scrape: &prometheus_parse::Scrape, metric: &str, queue: &str) -> Option<f64> {
    sample(scrape, metric, Some(queue))
}

/// Scrapes `/metrics`: its text, parsed.
async fn scrape(s: &common::TestServer) -> (String, prometheus_parse::Scrape) {
    let resp = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("text");
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text parses");
    (text, parsed)
}

/// The value of `metric` with label `queue`, or of the unlabelled one.
fn sample(scrape: &prometheus_parse::Scrape, metric: &str, queue: Option<&str>) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && s.labels.get("queue") == queue)
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[tokio::test]
async fn metrics_parse_and_agree_with_the_operations() {
    let s = common::start().await;
    s.put_queue("jobs", json!({ "max_receive_count": 1 })).await;
    for i in 0..5 {
        s.send("jobs", json!(i)).await;
    }
    let got = s.receive("jobs", json!({ "max": 3 })).await;
    s.call(
        Method::POST,
        "/v1/queues/jobs/ack",
        Some(json!({ "receipt": got[0]["receipt"] })),
    )
    .await;
    s.call(
        Method::POST,
        "/v1/queues/jobs/reject",
        Some(json!({ "receipt": got[1]["receipt"], "error": "bad" })),
    )
    .await;

    let (text, scrape) = scrape(&s).await;

    assert_eq!(
        value(&scrape, "sluice_queue_visible", "jobs"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(value(&scrape, "sluice_queue_in_flight", "jobs"), Some(1.0));
    assert_eq!(
        value(&scrape, "sluice_queue_dead_letter_depth", "jobs"),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "sluice_queue_visible", "jobs.dlq"),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "sluice_messages_sent_total", "jobs"),
        Some(5.0)
    );
    assert_eq!(
        value(&scrape, "sluice_messages_received_total", "jobs"),
        Some(3.0)
    );
    assert_eq!(
        value(&scrape, "sluice_messages_acked_total", "jobs"),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "sluice_messages_dead_lettered_total", "jobs"),
        Some(1.0)
    );
    let has = |name: &str| {
        scrape
            .samples
            .iter()
            .any(|x| x.metric == name && x.labels.get("queue") == Some("jobs"))
    };
    assert!(
        has("sluice_queue_wait_seconds_count") || has("sluice_queue_wait_seconds"),
        "queue-wait histogram missing:\n{text}"
    );
    assert!(
        text.contains("sluice_processing_seconds_count{queue=\"jobs\"} 1"),
        "processing histogram counts the one ack:\n{text}"
    );
    assert!(
        text.contains("sluice_queue_wait_seconds_count{queue=\"jobs\"} 3"),
        "three first deliveries:\n{text}"
    );
}

/// With `metrics_queues` and `metrics_max_queues`, only the selected queues (at most that
/// many, in name order) get series of their own; the totals count every queue.
#[tokio::test]
async fn only_selected_queues_get_series_and_totals_count_them_all() {
    let s = common::start_with(sluice_server::ServerOptions {
        metrics: sluice_server::metrics::MetricsScope {
            queues: vec!["orders*".to_owned()],
            max_queues: 2,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let plain = json!({ "max_receive_count": 0, "dead_letter_queue": null });
    for q in ["orders.a", "orders.b", "orders.c", "billing"] {
        s.put_queue(q, plain.clone()).await;
        s.send(q, json!(1)).await;
    }
    s.send("billing", json!(2)).await;
    let got = s.receive("billing", json!({ "max": 1 })).await;
    assert_eq!(got.len(), 1);
    let got = s.receive("orders.c", json!({ "max": 1 })).await;
    assert_eq!(got.len(), 1);

    let (text, scrape) = scrape(&s).await;
    let with_series = |metric: &str| {
        scrape
            .samples
            .iter()
            .filter(|x| x.metric.starts_with(metric))
            .filter_map(|x| x.labels.get("queue"))
            .collect::<std::collections::BTreeSet<&str>>()
            .into_iter()
            .collect::<Vec<_>>()
    };
    // Gauges and counters: the first two selected queues by name.
    assert_eq!(
        with_series("sluice_queue_visible"),
        ["orders.a", "orders.b"],
        "{text}"
    );
    assert_eq!(
        with_series("sluice_messages_sent"),
        ["orders.a", "orders.b"]
    );
    // Histograms: selected queues with traffic on this node, at most two; never billing.
    assert_eq!(
        with_series("sluice_queue_wait_seconds"),
        ["orders.c"],
        "{text}"
    );
    let total = |name: &str| {
        sample(&scrape, name, None).unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    assert_eq!(total("sluice_queues"), 4.0);
    assert_eq!(total("sluice_queues_without_series"), 2.0);
    assert_eq!(total("sluice_all_queues_visible"), 3.0);
    assert_eq!(total("sluice_all_queues_in_flight"), 2.0);
    assert_eq!(total("sluice_all_queues_messages_sent_total"), 5.0);
}

/// A governed queue exports its adaptive rate, congestion and decreases, and its breaker as a
/// state set with its opened count and time open; a queue that is not governed exports none.
#[tokio::test]
async fn governed_queues_export_their_rate_and_breaker() {
    let s = common::start().await;
    s.put_queue(
        "calls",
        json!({
            "adaptive": {"min_per_min": 60, "max_per_min": 6000},
            "breaker": {"min_calls": 10},
        }),
    )
    .await;
    s.put_queue("plain", json!({})).await;
    s.send("calls", json!(1)).await;
    let got = s.receive("calls", json!({ "max": 1 })).await;
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/nack",
            Some(json!({ "receipt": got[0]["receipt"], "retry_after_ms": 100 })),
        )
        .await;
    assert!(st.is_success(), "{v}");
    let (st, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/breaker",
            Some(json!({ "state": "open" })),
        )
        .await;
    assert!(st.is_success(), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;

    let (text, scrape) = scrape(&s).await;
    let get = |metric: &str| {
        value(&scrape, metric, "calls").unwrap_or_else(|| panic!("{metric} missing:\n{text}"))
    };
    assert_eq!(get("sluice_queue_adaptive_rate_per_min"), 60.0, "{text}");
    assert_eq!(get("sluice_queue_adaptive_congestion_total"), 1.0, "{text}");
    assert_eq!(get("sluice_queue_adaptive_decreases_total"), 0.0, "{text}");
    assert_eq!(get("sluice_queue_breaker_opened_total"), 1.0, "{text}");
    assert!(
        get("sluice_queue_breaker_open_seconds_total") > 0.0,
        "{text}"
    );
    let states: std::collections::BTreeMap<&str, f64> = scrape
        .samples
        .iter()
        .filter(|x| x.metric == "sluice_queue_breaker_state")
        .filter(|x| x.labels.get("queue") == Some("calls"))
        .map(|x| match x.value {
            prometheus_parse::Value::Gauge(v) => (x.labels.get("state").unwrap_or("?"), v),
            _ => panic!("sluice_queue_breaker_state is not a gauge:\n{text}"),
        })
        .collect();
    assert_eq!(
        states,
        [("closed", 0.0), ("half_open", 0.0), ("open", 1.0)].into(),
        "{text}"
    );
    for (name, kind) in [
        ("sluice_queue_adaptive_rate_per_min", "gauge"),
        ("sluice_queue_adaptive_congestion", "counter"),
        ("sluice_queue_adaptive_decreases", "counter"),
        ("sluice_queue_breaker_state", "gauge"),
        ("sluice_queue_breaker_opened", "counter"),
        ("sluice_queue_breaker_open_seconds", "counter"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name}:\n{text}"
        );
        assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
    }
    let plain = scrape
        .samples
        .iter()
        .filter(|x| x.labels.get("queue") == Some("plain"))
        .filter(|x| x.metric.contains("adaptive") || x.metric.contains("breaker"))
        .count();
    assert_eq!(
        plain, 0,
        "a queue that is not governed has no such series:\n{text}"
    );
}

/// A queue with keys exports how many are active and, for the `top_keys` with the most waiting,
/// each one's backlog, in flight and age; the implicit key is `key=""`.
#[tokio::test]
async fn the_keys_with_the_most_waiting_get_series_of_their_own() {
    let s = common::start_with(sluice_server::ServerOptions {
        metrics: sluice_server::metrics::MetricsScope {
            top_keys: 2,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    s.put_queue("tenants", json!({})).await;
    s.put_queue("plain", json!({})).await;
    s.send("plain", json!(0)).await;
    for (key, n) in [("acme", 3), ("globex", 1)] {
        for i in 0..n {
            let (st, v) = s
                .call(
                    Method::POST,
                    "/v1/queues/tenants/messages",
                    Some(json!({ "body": i, "key": key })),
                )
                .await;
            assert_eq!(st, reqwest::StatusCode::CREATED, "{v}");
        }
    }
    for _ in 0..2 {
        s.send("tenants", json!("no key")).await;
    }
    assert_eq!(s.receive("tenants", json!({ "max": 1 })).await.len(), 1);
    let (text, scrape) = scrape(&s).await;
    assert_eq!(
        value(&scrape, "sluice_queue_active_keys", "tenants"),
        Some(2.0)
    );
    assert_eq!(
        value(&scrape, "sluice_queue_active_keys", "plain"),
        Some(0.0)
    );
    let keyed: Vec<(&str, &str, f64)> = scrape
        .samples
        .iter()
        .filter(|x| x.metric == "sluice_key_backlog")
        .map(|x| {
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            (
                x.labels.get("queue").unwrap_or_default(),
                x.labels.get("key").unwrap_or_default(),
                v,
            )
        })
        .collect();
    // Two keys, the most waiting: acme (3, or 2 and one in flight) and the implicit key (2, or
    // 1); globex (1) is left out, and so is the queue without keys.
    assert_eq!(keyed.len(), 2, "{text}");
    assert!(keyed.iter().all(|(q, _, _)| *q == "tenants"), "{text}");
    let total: f64 = keyed.iter().map(|(_, _, v)| v).sum();
    assert_eq!(
        total, 4.0,
        "five waiting of which globex's one is not shown:\n{text}"
    );
    assert!(keyed.iter().any(|(_, k, _)| *k == "acme"), "{text}");
    assert!(text.contains("sluice_key_in_flight{"), "{text}");
    assert!(
        text.contains("sluice_key_oldest_visible_age_seconds{"),
        "{text}"
    );
}
