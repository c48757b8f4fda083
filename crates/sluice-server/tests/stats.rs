//! Backlog monitoring: rates from counters, trends from net flow, drain ETAs, and the
//! history route.

mod common;

use reqwest::Method;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_core::stats::{StatsSample, Totals};
use sluice_core::{Clock, QueueName, SystemClock, Timestamp};

#[tokio::test]
async fn the_history_route_serves_recorded_points_oldest_first() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    let q = QueueName::new("jobs").unwrap();
    let now = StatsSample::slot(SystemClock.now());
    let points: Vec<(QueueName, StatsSample)> = (1..=30)
        .rev()
        .map(|k| {
            let sample = StatsSample {
                at: Timestamp(now.as_millis() - k * 10_000),
                visible: 100 + 20 * k as u64,
                delayed: 0,
                in_flight: 0,
                dead_letter_depth: 0,
                oldest_visible_age_ms: 0,
                totals: Totals::default(),
            };
            (q.clone(), sample)
        })
        .collect();
    s.store.record_stats(points).await.expect("record history");

    let (code, h) = s
        .call(Method::GET, "/v1/queues/jobs/stats/history", None)
        .await;
    assert_eq!(code, 200, "{h}");
    assert_eq!(h["interval_ms"], 10_000);
    let samples = h["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 30);
    assert_eq!(samples[0]["visible"], 700, "oldest first");
    let got = s
        .call(
            Method::GET,
            "/v1/queues/jobs/stats/history?since=yesterday",
            None,
        )
        .await;
    common::assert_error(&got, 400, "invalid_argument");
    let got = s
        .call(Method::GET, "/v1/queues/nope/stats/history", None)
        .await;
    common::assert_error(&got, 404, "queue_not_found");
}

fn rate(v: &Value, window: &str, counter: &str) -> f64 {
    v[window][counter]
        .as_f64()
        .unwrap_or_else(|| panic!("{window}.{counter} in {v}"))
}

#[tokio::test]
async fn a_new_queues_first_sends_and_dead_letters_count_in_its_rates_at_once() {
    let s = common::start().await;
    // The broker's sampler runs at each 10-s boundary, and a queue reads flat once sampled
    // after its last change: start just after a boundary so that none falls in between.
    let now = SystemClock.now().as_millis();
    tokio::time::sleep(Duration::from_millis(
        (10_000 - now.rem_euclid(10_000)) as u64 + 50,
    ))
    .await;
    s.put_queue("payments", json!({"max_receive_count": 1}))
        .await;
    for i in 0..50 {
        s.send("payments", json!(i)).await;
    }
    // No history sample exists yet: the rates count from the queue's creation, over its age
    // (at least a second), the same over every window.
    let st = s.stats("payments").await;
    assert_eq!(st["totals"]["sent"], 50, "{st}");
    let sent = rate(&st, "rates", "sent");
    assert!(sent > 0.0 && sent <= 50.0, "{st}");
    assert_eq!(rate(&st, "rates_5m", "sent"), sent, "{st}");
    assert_eq!(rate(&st, "rates_15m", "sent"), sent, "{st}");
    assert_eq!(st["backlog_trend"]["direction"], "rising", "{st}");
    assert_eq!(st["backlog_trend"]["change_1m"], 50, "{st}");
    assert!(st["drain_eta_ms"].is_null(), "nothing is consumed: {st}");

    // Sampled now, after the burst: the burst still counts.
    sluice_server::jobs::sampler::sample_once(s.store.as_ref())
        .await
        .expect("sample");
    let got = s
        .receive(
            "payments",
            json!({"max": 50, "visibility_timeout_ms": 60_000}),
        )
        .await;
    assert_eq!(got.len(), 50);
    for m in &got {
        let (code, v) = s
            .call(
                Method::POST,
                "/v1/queues/payments/nack",
                Some(json!({"receipt": m["receipt"], "error": "upstream 503"})),
            )
            .await;
        assert_eq!(code, 200, "{v}");
    }
    let st = s.stats("payments").await;
    let sent = rate(&st, "rates", "sent");
    assert_eq!(rate(&st, "rates", "dead_lettered"), sent, "{st}");
    assert_eq!(rate(&st, "rates", "nacked"), sent, "{st}");
    assert_eq!(st["dead_letter_depth"], 50, "{st}");
    assert_eq!(st["dlq_trend"]["direction"], "rising", "{st}");
    let dlq = s.stats("payments.dlq").await;
    assert_eq!(dlq["backlog_trend"]["direction"], "rising", "{dlq}");

    // Nothing moves after the next sample: the jump still reads rising, by its size, for the
    // minute after it; nothing is taken out, so no ETA; and dead letters, which wait for an
    // operator, are never a stalled backlog.
    sample_in_next_slot(&s).await;
    let st = s.stats("payments").await;
    assert_eq!(
        st["backlog_trend"]["direction"], "flat",
        "in 50, out 50: {st}"
    );
    assert_eq!(st["dlq_trend"]["direction"], "rising", "{st}");
    assert_eq!(st["dlq_trend"]["change_1m"], 50, "{st}");
    for trend in ["backlog_trend", "dlq_trend"] {
        assert!(st[trend]["eta_ms"].is_null(), "{trend}: {st}");
        assert!(st[trend]["stalled_for_ms"].is_null(), "{trend}: {st}");
    }
    let dlq = s.stats("payments.dlq").await;
    assert_eq!(dlq["backlog_trend"]["direction"], "rising", "{dlq}");
    assert!(dlq["backlog_trend"]["eta_ms"].is_null(), "{dlq}");
    assert!(dlq["backlog_trend"]["stalled_for_ms"].is_null(), "{dlq}");
}

/// The broker's own sampler, running until the returned sender is dropped.
fn sampler(s: &common::TestServer) -> tokio::sync::watch::Sender<bool> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(sluice_server::jobs::sampler::run(s.store.clone(), stopped));
    stop
}

/// Waits for the next 10-s slot and takes a sample in it, as the broker's sampler does.
async fn sample_in_next_slot(s: &common::TestServer) {
    let now = SystemClock.now().as_millis();
    let next = StatsSample::slot(SystemClock.now()).as_millis() + 10_000;
    tokio::time::sleep(Duration::from_millis((next - now) as u64 + 5)).await;
    sluice_server::jobs::sampler::sample_once(s.store.as_ref())
        .await
        .expect("sample");
}

#[tokio::test]
async fn a_steady_drain_reads_an_eta_close_to_the_time_really_left() {
    let s = common::start().await;
    s.put_queue("drain", json!({})).await;
    let total = 800;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/drain/messages",
            Some(json!({"messages": (0..total).map(|i| json!({"body": i})).collect::<Vec<_>>()})),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let sampler = sampler(&s);

    // One consumer at 20 messages a second: 40 s in all.
    let consumer = {
        let client = s.client.clone();
        let base = s.base.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut done = 0;
            while done < total {
                tick.tick().await;
                let got = common::receive_raw(
                    &client,
                    &format!("{base}/v1/queues/drain"),
                    json!({"max": 1}),
                )
                .await;
                for m in &got {
                    client
                        .post(format!("{base}/v1/queues/drain/ack"))
                        .json(&json!({"receipt": m["receipt"]}))
                        .send()
                        .await
                        .expect("ack");
                    done += 1;
                }
            }
            Instant::now()
        })
    };
    let started = Instant::now();
    let mut readings = Vec::new();
    // From 21 s on, a sample at least 10 s old was taken while the queue drained.
    tokio::time::sleep(Duration::from_secs(21)).await;
    while started.elapsed() < Duration::from_secs(31) {
        // Not in the first moments of a slot: a reading taken after its sample and before the
        // consumer's next ack finds nothing moved since, which reads flat by rule.
        let into_slot =
            SystemClock.now().as_millis() - StatsSample::slot(SystemClock.now()).as_millis();
        if into_slot < 500 {
            tokio::time::sleep(Duration::from_millis((500 - into_slot) as u64)).await;
        }
        let st = s.stats("drain").await;
        readings.push((Instant::now(), st["drain_eta_ms"].as_u64(), st));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let emptied = consumer.await.expect("consumer");
    drop(sampler);
    for (at, eta, st) in &readings {
        let left = emptied.duration_since(*at).as_secs_f64();
        let eta =
            eta.unwrap_or_else(|| panic!("a draining queue has an ETA: {st}")) as f64 / 1000.0;
        assert!(
            (eta - left).abs() <= 0.2 * left,
            "ETA {eta:.1}s against {left:.1}s really left: {st}"
        );
        assert_eq!(st["backlog_trend"]["direction"], "falling", "{st}");
    }
}

#[tokio::test]
async fn the_sampler_records_one_point_per_queue() {
    let s = common::start().await;
    s.put_queue("a", json!({})).await;
    s.send("a", json!(1)).await;
    let n = sluice_server::jobs::sampler::sample_once(s.store.as_ref())
        .await
        .expect("sample");
    assert_eq!(n, 2, "the queue and its DLQ");
    let (_, h) = s
        .call(Method::GET, "/v1/queues/a/stats/history", None)
        .await;
    assert_eq!(h["samples"][0]["visible"], 1, "{h}");
}
