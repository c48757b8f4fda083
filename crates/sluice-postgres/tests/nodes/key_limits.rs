//! `key_limits` are exact across nodes: 64 consumers on three nodes, each leasing one message at
//! a time and acknowledging it, never hold more of one key than its limit. The check is over
//! the whole run: a delivery is surely held from the moment its receive answered until its
//! ack was called, and at no instant do more of those intervals of one key overlap than the
//! limit allows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_core::fair::{KeyLimit, KeyLimits, MessageKey};

use super::*;

/// The node consumer `c` uses: the three in turn.
fn node_of(n: &Nodes, third: &Arc<Checked<PostgresStore>>, c: usize) -> Arc<dyn Store> {
    match c % 3 {
        0 => Arc::new(n.a.clone()),
        1 => Arc::new(n.b.clone()),
        _ => third.clone(),
    }
}

#[tokio::test]
async fn key_limits_hold_across_nodes_under_64_consumers() {
    let Some(n) = nodes().await else { return };
    let c3 = Arc::new(n.another("c").await);
    let work = q("key-limits");
    let limits = KeyLimits {
        max_in_flight: Some(2),
        rate_limit: None,
        overrides: BTreeMap::from([(
            "wide".to_owned(),
            KeyLimit {
                max_in_flight: Some(5),
                rate_limit: None,
            },
        )]),
    };
    n.a.put_queue(
        &work,
        &QueueConfigPatch {
            key_limits: Some(Some(limits.clone())),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    let keys = ["k0", "k1", "k2", "k3", "wide"];
    let per_key = 30;
    let batch: Vec<NewMessage> = (0..per_key)
        .flat_map(|i| {
            keys.iter()
                .map(move |k| msg(&format!("{k}-{i}")).with_key(MessageKey::new(*k).expect("key")))
        })
        .collect();
    n.a.send(&work, batch).await.expect("send");
    let start = Instant::now();
    // (key, surely held from, surely held until) per delivery, in µs since the start.
    let held: Arc<Mutex<Vec<(String, u128, u128)>>> = Arc::default();
    let mut tasks = Vec::new();
    for c in 0..64 {
        let store = node_of(&n, &c3, c);
        let (work, held) = (work.clone(), held.clone());
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut idle = 0;
            while Instant::now() < deadline && idle < 20 {
                let got = store.receive(&work, poll(50)).await.expect("receive");
                let Some(d) = got.into_iter().next() else {
                    idle += 1;
                    continue;
                };
                idle = 0;
                let from = start.elapsed().as_micros();
                tokio::time::sleep(Duration::from_millis(200 + (d.id.0 % 100))).await;
                let until = start.elapsed().as_micros();
                let key = d.key.as_ref().map(ToString::to_string).unwrap_or_default();
                held.lock().expect("held").push((key, from, until));
                let out = store
                    .ack(&work, common::acks([d.receipt]))
                    .await
                    .expect("ack");
                assert_eq!(out, vec![Ok(())], "a lease held for milliseconds is acked");
            }
        }));
    }
    for t in tasks {
        t.await.expect("consumer");
    }
    let held = held.lock().expect("held").clone();
    assert_eq!(
        held.len(),
        keys.len() * per_key,
        "every message delivered once"
    );
    for key in keys {
        let limit = limits.of(Some(key)).max_in_flight.expect("limited") as i64;
        let mut edges: Vec<(u128, i64)> = held
            .iter()
            .filter(|(k, ..)| k == key)
            .flat_map(|(_, from, until)| [(*from, 1), (*until, -1)])
            .collect();
        // An end before a start at the same instant: touching intervals do not overlap.
        edges.sort_unstable();
        let (mut now, mut most) = (0i64, 0i64);
        for (_, step) in edges {
            now += step;
            most = most.max(now);
        }
        assert!(
            most <= limit,
            "key {key}: {most} deliveries surely held at once, limit {limit}"
        );
        assert!(most >= 1, "key {key} was delivered");
    }
}

/// Per-key rates are exact across nodes: 16 consumers on three nodes deliver no key more than
/// its rate in any sliding second, by the times the broker leased them (a lease's deadline less
/// the visibility timeout), and every key gets its whole rate.
#[tokio::test]
async fn key_rates_hold_across_nodes() {
    let Some(n) = nodes().await else { return };
    let c3 = Arc::new(n.another("c").await);
    let work = q("key-rates");
    let rate = |limit| sluice_core::config::RateLimit {
        limit,
        period: Duration::from_secs(1),
        burst: Some(limit),
    };
    let limits = KeyLimits {
        max_in_flight: None,
        rate_limit: Some(rate(4)),
        overrides: BTreeMap::from([(
            "wide".to_owned(),
            KeyLimit {
                max_in_flight: None,
                rate_limit: Some(rate(10)),
            },
        )]),
    };
    let vis = Duration::from_secs(60);
    n.a.put_queue(
        &work,
        &QueueConfigPatch {
            key_limits: Some(Some(limits.clone())),
            visibility_timeout: Some(vis),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    let keys = ["k0", "k1", "wide"];
    let batch: Vec<NewMessage> = (0..40)
        .flat_map(|i| {
            keys.iter()
                .map(move |k| msg(&format!("{k}-{i}")).with_key(MessageKey::new(*k).expect("key")))
        })
        .collect();
    n.a.send(&work, batch).await.expect("send");
    let leased: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for c in 0..16 {
        let store = node_of(&n, &c3, c);
        let (work, leased) = (work.clone(), leased.clone());
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_millis(3_500);
            while Instant::now() < deadline {
                let got = store.receive(&work, poll(5)).await.expect("receive");
                for d in got {
                    let at = d.lease_deadline.as_millis() - vis.as_millis() as i64;
                    let key = d.key.as_ref().map(ToString::to_string).unwrap_or_default();
                    leased.lock().expect("leased").push((key, at));
                    let out = store
                        .ack(&work, common::acks([d.receipt]))
                        .await
                        .expect("ack");
                    assert_eq!(out, vec![Ok(())]);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("consumer");
    }
    let leased = leased.lock().expect("leased").clone();
    for key in keys {
        let limit = limits.of(Some(key)).rate_limit.expect("rated").limit as usize;
        let times: Vec<i64> = leased
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect();
        let most = times
            .iter()
            .map(|s| {
                times
                    .iter()
                    .filter(|t| **t >= *s && **t < s + 1_000)
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!(
            most <= limit,
            "key {key}: {most} leased in one second, rate {limit}"
        );
        // Three whole windows at least fit in the run.
        assert!(
            times.len() >= 3 * limit,
            "key {key}: {} leased in 3.5 s at {limit} a second",
            times.len()
        );
    }
}
