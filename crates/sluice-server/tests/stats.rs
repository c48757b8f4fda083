//! Backlog monitoring (SPEC §5): stats with rates, slope and drain ETA from the history, and
//! the history route.

mod common;

use reqwest::Method;
use serde_json::json;
use sluice_core::stats::{StatsSample, Totals};
use sluice_core::{Clock, QueueName, SystemClock, Timestamp};

#[tokio::test]
async fn stats_show_rates_slope_and_drain_eta_from_history() {
    let s = common::start().await;
    s.put_queue("jobs", json!({})).await;
    for i in 0..100 {
        s.send("jobs", json!(i)).await;
    }
    // Five minutes of history in which the backlog fell by 2 a second while 1 a second was
    // sent and 3 a second acked.
    let q = QueueName::new("jobs").unwrap();
    let now = StatsSample::slot(SystemClock.now());
    let points: Vec<(QueueName, StatsSample)> = (1..=30)
        .rev()
        .map(|k| {
            let at = Timestamp(now.as_millis() - k * 10_000);
            let elapsed = 300 - k as u64 * 10;
            let sample = StatsSample {
                at,
                visible: 100 + 2 * k as u64 * 10,
                delayed: 0,
                in_flight: 0,
                dead_letter_depth: 0,
                oldest_visible_age_ms: 0,
                totals: Totals {
                    sent: elapsed,
                    acked: 3 * elapsed,
                    ..Totals::default()
                },
            };
            (q.clone(), sample)
        })
        .collect();
    s.store.record_stats(points).await.expect("record history");

    let st = s.stats("jobs").await;
    assert_eq!(st["visible"], 100);
    let slope = st["backlog_slope_per_sec"].as_f64().expect("slope");
    assert!(slope < -0.5, "a falling backlog has a negative slope: {st}");
    let eta = st["drain_eta_ms"]
        .as_u64()
        .expect("a draining queue has an ETA");
    assert!(eta > 10_000 && eta < 600_000, "{st}");
    assert!(st["rates"]["acked"].as_f64().expect("rate") >= 0.0, "{st}");

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

#[tokio::test]
async fn the_sampler_records_one_point_per_queue() {
    let s = common::start().await;
    s.put_queue("a", json!({})).await;
    s.send("a", json!(1)).await;
    let n = sluice_server::sampler::sample_once(s.store.as_ref())
        .await
        .expect("sample");
    assert_eq!(n, 2, "the queue and its DLQ");
    let (_, h) = s
        .call(Method::GET, "/v1/queues/a/stats/history", None)
        .await;
    assert_eq!(h["samples"][0]["visible"], 1, "{h}");
}
