//! Per-key rate limits (`key_limits.rate_limit`): each key at most `limit` deliveries in any
//! sliding window of the period, spread by its burst; a key whose rate is spent waits
//! without holding any other key back, and a restart forgets none of its deliveries.

use std::collections::BTreeMap;

use sluice_core::fair::{KeyLimit, KeyLimits, MessageKey};

use super::*;

fn keyed(s: &str, k: &str) -> NewMessage {
    text(s).with_key(MessageKey::new(k).expect("test key"))
}

/// Receives every 500 ms from `from` to `until` (ms after the clock's start), acking what it
/// gets, and returns `(when, key)` of each delivery; restarts the store once at `restart_at`.
async fn poll(
    h: &dyn Harness,
    mut e: Env,
    q: &QueueName,
    (from, until): (u64, u64),
    restart_at: Option<u64>,
) -> (Env, Vec<(i64, Option<String>)>) {
    let mut got = Vec::new();
    let mut t = from;
    while t < until {
        if restart_at == Some(t) {
            e = e.restart(h).await;
        }
        for d in e.recv(q, 50).await {
            got.push((e.now().as_millis(), d.key.map(String::from)));
            e.ack(q, d.receipt).await.expect("ack");
        }
        e.advance(ms(500));
        t += 500;
    }
    (e, got)
}

/// The most deliveries of `key` in any window of `period_ms` among `got`.
fn most_in_a_window(got: &[(i64, Option<String>)], key: Option<&str>, period_ms: i64) -> usize {
    let times: Vec<i64> = got
        .iter()
        .filter(|(_, k)| k.as_deref() == key)
        .map(|(t, _)| *t)
        .collect();
    times
        .iter()
        .map(|start| {
            times
                .iter()
                .filter(|t| **t >= *start && **t < start + period_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn count(got: &[(i64, Option<String>)], key: Option<&str>) -> usize {
    got.iter().filter(|(_, k)| k.as_deref() == key).count()
}

/// Each key gets at most its rate (an override's for the keys it matches, the default's for
/// the rest and for messages without a key) in every sliding window, through a restart; a key
/// whose rate is spent holds no other key back, and each key gets its whole rate.
pub async fn key_rates_hold_each_key_in_every_window(h: &dyn Harness) {
    let e = env(h).await;
    let window_only = |limit| RateLimit {
        limit,
        period: secs(10),
        burst: Some(limit),
    };
    let q = e
        .queue(
            "tenants",
            QueueConfigPatch {
                key_limits: Some(Some(KeyLimits {
                    max_in_flight: None,
                    rate_limit: Some(window_only(3)),
                    overrides: BTreeMap::from([(
                        "vip-*".to_owned(),
                        KeyLimit {
                            max_in_flight: None,
                            rate_limit: Some(window_only(6)),
                        },
                    )]),
                })),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    let mut batch = Vec::new();
    for i in 0..20 {
        batch.push(keyed(&format!("a{i}"), "acme"));
        batch.push(keyed(&format!("v{i}"), "vip-1"));
    }
    for i in 0..5 {
        batch.push(text(&format!("p{i}")));
    }
    e.send_batch(&q, batch).await;
    let first = e.recv(&q, 50).await;
    let in_first = |k: Option<&str>| {
        first
            .iter()
            .filter(|d| d.key.as_ref().map(MessageKey::as_str) == k)
            .count()
    };
    assert_eq!(
        (
            in_first(Some("acme")),
            in_first(Some("vip-1")),
            in_first(None)
        ),
        (3, 6, 3),
        "each key its rate at once, none held back by another's"
    );
    let start = e.now().as_millis();
    let mut got: Vec<(i64, Option<String>)> = first
        .iter()
        .map(|d| (start, d.key.clone().map(String::from)))
        .collect();
    for d in first {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    e.advance(ms(500));
    let (e, more) = poll(h, e, &q, (500, 40_000), Some(5_000)).await;
    got.extend(more);
    for (key, limit) in [(Some("acme"), 3), (Some("vip-1"), 6), (None, 3)] {
        let most = most_in_a_window(&got, key, 10_000);
        assert!(
            most <= limit,
            "key {key:?} had {most} deliveries in one 10 s window, its rate is {limit}: {got:?}"
        );
    }
    assert_eq!(
        (
            count(&got, Some("acme")),
            count(&got, Some("vip-1")),
            count(&got, None)
        ),
        (12, 20, 5),
        "each key its whole rate in each of the four windows (as long as it has messages)"
    );
    let next = e.recv(&q, 50).await;
    assert!(
        next.len() == 3
            && next
                .iter()
                .all(|d| d.key.as_ref().map(MessageKey::as_str) == Some("acme")),
        "at 40 s only acme has messages left, three of them go: {next:?}"
    );
}

/// A key's rate spreads its deliveries: with the default burst (a tenth of the limit, at
/// least 1), 10 per 10 s go one a second, not ten at once; another key goes meanwhile.
pub async fn key_rates_spread_a_keys_deliveries(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "spread",
            QueueConfigPatch {
                key_limits: Some(Some(KeyLimits {
                    max_in_flight: None,
                    rate_limit: Some(RateLimit::new(10, secs(10))),
                    overrides: BTreeMap::new(),
                })),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    let mut batch: Vec<NewMessage> = (0..10).map(|i| keyed(&format!("s{i}"), "steady")).collect();
    batch.extend((0..10).map(|i| keyed(&format!("o{i}"), "other")));
    e.send_batch(&q, batch).await;
    let (_e, got) = poll(h, e, &q, (0, 12_000), None).await;
    let times: Vec<i64> = got
        .iter()
        .filter(|(_, k)| k.as_deref() == Some("steady"))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(
        times.len(),
        10,
        "all ten within the period and a bit: {got:?}"
    );
    assert!(
        times.windows(2).all(|w| w[1] - w[0] >= 1_000),
        "one a second, not in a burst: {times:?}"
    );
    assert_eq!(
        count(&got, Some("other")),
        10,
        "the other key goes at its own pace meanwhile"
    );
}

/// Deliveries made before a key had a rate do not count against it, through a restart; the
/// ones made under it do.
pub async fn key_rates_count_from_when_they_are_set(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("later", QueueConfigPatch::default()).await;
    let batch: Vec<NewMessage> = (0..10).map(|i| keyed(&format!("m{i}"), "acme")).collect();
    e.send_batch(&q, batch).await;
    for d in e.recv(&q, 4).await {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    e.store
        .put_queue(
            &q,
            &QueueConfigPatch {
                key_limits: Some(Some(KeyLimits {
                    max_in_flight: None,
                    rate_limit: Some(RateLimit {
                        limit: 3,
                        period: secs(10),
                        burst: Some(3),
                    }),
                    overrides: BTreeMap::new(),
                })),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .expect("set a key rate");
    let e = e.restart(h).await;
    let got = e.recv(&q, 10).await;
    assert_eq!(got.len(), 3, "the four earlier deliveries do not count");
    let e = e.restart(h).await;
    e.recv_none(&q, "the three under the rate do, after a restart")
        .await;
    e.advance(secs(10));
    assert_eq!(e.recv(&q, 10).await.len(), 3, "a new window");
}
