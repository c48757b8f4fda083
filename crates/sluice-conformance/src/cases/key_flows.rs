//! Per-key adaptive rates and breakers (`"scope": "key"`): each key learns only from the
//! outcomes of its own deliveries, so one key's outage or congestion leaves every other key's
//! rate and breaker as they were; an operator's order to a key's breaker outlives a restart;
//! and a key idle for `key_idle_ms` starts afresh.

use std::collections::BTreeMap;

use sluice_core::adaptive::{
    AdaptiveRate, BreakerConfig, BreakerForce, BreakerState, FlowScope, KeyFlowStats,
};
use sluice_core::audit::AuditQuery;
use sluice_core::fair::MessageKey;
use sluice_core::key_stats::{KeyOrder, KeysRequest};

use super::*;

fn keyed(s: &str, k: &str) -> NewMessage {
    text(s).with_key(MessageKey::new(k).expect("test key"))
}

/// A per-key breaker: 4 calls, half of them failed, open it; one probe after 10 s.
fn key_breaker() -> BreakerConfig {
    BreakerConfig {
        failure_share_permille: 500,
        window_ms: 60_000,
        min_calls: 4,
        probe_every_ms: 10_000,
        probes: 1,
        scope: FlowScope::Key,
        key_idle_ms: None,
    }
}

/// Each listed key's own flow state, by key name (`""`: the implicit key).
async fn key_flows(e: &Env, q: &QueueName) -> BTreeMap<String, Option<KeyFlowStats>> {
    key_order(e, q).await.into_iter().collect()
}

/// The keys as the `breaker` order lists them, with their flow states.
async fn key_order(e: &Env, q: &QueueName) -> Vec<(String, Option<KeyFlowStats>)> {
    let page = e
        .store
        .keys(
            q,
            KeysRequest {
                order: KeyOrder::Breaker,
                limit: 100,
                after: None,
            },
        )
        .await
        .expect("keys listing");
    page.keys
        .into_iter()
        .map(|k| (k.key.map(String::from).unwrap_or_default(), k.flow))
        .collect()
}

fn breaker_of(flows: &BTreeMap<String, Option<KeyFlowStats>>, key: &str) -> Option<BreakerState> {
    flows.get(key).cloned().flatten().and_then(|f| f.breaker)
}

/// Opens the breaker of key `down` of `q` with four failed deliveries, each put back for
/// `back`; the messages stay in the queue.
async fn open_key(e: &Env, q: &QueueName, down: &str, back: Duration) {
    for i in 0..4 {
        e.send_batch(q, vec![keyed(&format!("{down}-{i}"), down)])
            .await;
        let d = e.recv_one(q).await;
        assert_eq!(d.key.as_ref().map(|k| k.as_str()), Some(down));
        e.nack(q, d.receipt, Some(back), Some("503"))
            .await
            .expect("nack");
    }
}

/// One key's failures open its own breaker: its messages wait, its nacks keep their attempts,
/// a probe after `probe_every_ms` closes it again; every other key is delivered all along, and
/// its breaker stays closed. The transitions are audited as `key.breaker` with the key.
pub async fn key_breakers_open_for_the_failing_key_only(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tenants-brk",
            QueueConfigPatch {
                max_receive_count: Some(2),
                visibility_timeout: Some(secs(3600)),
                breaker: Some(Some(key_breaker())),
                ..Default::default()
            },
        )
        .await;
    open_key(&e, &q, "down", secs(60)).await;
    e.send_batch(
        &q,
        vec![
            keyed("d1", "down"),
            keyed("u1", "up"),
            keyed("u2", "up"),
            text("plain"),
        ],
    )
    .await;
    let got = e.recv(&q, 10).await;
    let mut keys: Vec<Option<String>> = got
        .iter()
        .map(|d| d.key.clone().map(String::from))
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [None, Some("up".into()), Some("up".into())],
        "the open key waits; every other key is delivered"
    );
    let flows = key_flows(&e, &q).await;
    assert_eq!(
        breaker_of(&flows, "down"),
        Some(BreakerState::Open),
        "{flows:?}"
    );
    assert_eq!(
        breaker_of(&flows, "up"),
        Some(BreakerState::Closed),
        "{flows:?}"
    );
    let kf = e
        .stats(&q)
        .await
        .key_flows
        .expect("the stats of a queue with per-key breakers count its keys");
    assert_eq!((kf.open, kf.half_open), (1, 0), "{kf:?}");
    assert!(kf.keys >= 2, "down and up at least have a state: {kf:?}");
    assert!(kf.top_rates.is_empty(), "no per-key rate: {kf:?}");
    let order = key_order(&e, &q).await;
    assert_eq!(
        order.first().map(|(k, _)| k.as_str()),
        Some("down"),
        "the breaker order lists open keys first: {order:?}"
    );
    // The up key fails too, but only once in four: its breaker stays closed.
    let mut ups = got.iter().filter(|d| d.key.is_some());
    let first = ups.next().expect("an up delivery");
    e.nack(&q, first.receipt, Some(secs(60)), Some("503"))
        .await
        .expect("nack up");
    for d in got.iter().filter(|d| d.id != first.id) {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    assert_eq!(
        breaker_of(&key_flows(&e, &q).await, "up"),
        Some(BreakerState::Closed)
    );

    e.advance(secs(10));
    let probe = e.recv(&q, 10).await;
    assert_eq!(
        probe.len(),
        1,
        "half-open: one probe of the down key, got {probe:?}"
    );
    assert_eq!(probe[0].key.as_ref().map(|k| k.as_str()), Some("down"));
    e.ack(&q, probe[0].receipt).await.expect("ack the probe");
    assert_eq!(
        breaker_of(&key_flows(&e, &q).await, "down"),
        Some(BreakerState::Closed),
        "the probe's success closed it"
    );
    let audit = e
        .store
        .audit_query(AuditQuery {
            queues: vec![q.to_string()],
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("audit");
    let mut moves: Vec<_> = audit
        .iter()
        .filter(|a| a.action == "key.breaker")
        .map(|a| {
            (
                a.at,
                a.details.get("key").cloned().unwrap_or_default(),
                a.details.get("to").cloned().unwrap_or_default(),
            )
        })
        .collect();
    // Transitions made at the same time sort in the order a breaker goes through them.
    let step = |to: &str| {
        ["open", "half_open", "closed"]
            .iter()
            .position(|s| *s == to)
    };
    moves.sort_by_key(|(at, _, to)| (*at, step(to)));
    let moves: Vec<(String, String)> = moves.into_iter().map(|(_, k, t)| (k, t)).collect();
    assert_eq!(
        moves,
        [
            ("down".to_owned(), "open".to_owned()),
            ("down".to_owned(), "half_open".to_owned()),
            ("down".to_owned(), "closed".to_owned()),
        ],
        "each transition of the down key, and none of another"
    );
}

/// A nack while a key's breaker is open keeps the message's attempt: a message on its last
/// attempt is not dead-lettered by an outage of its key.
pub async fn a_key_outage_keeps_its_messages_attempts(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tenants-keep",
            QueueConfigPatch {
                max_receive_count: Some(1),
                visibility_timeout: Some(secs(3600)),
                breaker: Some(Some(BreakerConfig {
                    min_calls: 2,
                    ..key_breaker()
                })),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(
        &q,
        vec![keyed("a", "down"), keyed("b", "down"), keyed("c", "down")],
    )
    .await;
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 3);
    // The first two fail while the breaker is closed: each spends its only attempt, and
    // together they open it.
    for d in &ds[..2] {
        let out = e
            .nack(&q, d.receipt, Some(Duration::ZERO), Some("503"))
            .await
            .expect("nack");
        assert_ne!(out.queue, q, "dead-lettered: the breaker was closed");
    }
    let third = e
        .nack(&q, ds[2].receipt, Some(Duration::ZERO), Some("503"))
        .await
        .expect("third nack");
    assert_eq!(third.queue, q, "the nack while open does not dead-letter");
    assert_eq!(
        e.get(ds[2].id).await.receive_count,
        0,
        "its attempt was not spent"
    );
}

/// One key's congestion (a Retry-After) holds that key alone; another key keeps its rate and
/// is delivered meanwhile. The keys listing shows each key's own rate and hold.
pub async fn key_rates_hold_only_the_congested_key(h: &dyn Harness) {
    let e = env(h).await;
    let mut adaptive = AdaptiveRate::new(600, 600);
    adaptive.scope = FlowScope::Key;
    let q = e
        .queue(
            "tenants-rate",
            QueueConfigPatch {
                visibility_timeout: Some(secs(3600)),
                adaptive: Some(Some(adaptive)),
                ..Default::default()
            },
        )
        .await;
    let mut batch = Vec::new();
    for i in 0..6 {
        batch.push(keyed(&format!("h{i}"), "hot"));
        batch.push(keyed(&format!("c{i}"), "cold"));
    }
    e.send_batch(&q, batch).await;
    let ds = e.recv(&q, 10).await;
    let hot: Vec<&Delivery> = ds
        .iter()
        .filter(|d| d.key.as_ref().map(|k| k.as_str()) == Some("hot"))
        .collect();
    assert!(!hot.is_empty(), "both keys are delivered at first: {ds:?}");
    for d in &hot {
        e.store
            .nack(
                &q,
                d.receipt,
                Some(secs(20)),
                Failure {
                    error: Some("429 Too Many Requests".into()),
                    consumer: None,
                    retry_after: true,
                },
            )
            .await
            .expect("nack with Retry-After");
    }
    for d in ds
        .iter()
        .filter(|d| d.key.as_ref().map(|k| k.as_str()) == Some("cold"))
    {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    let flows = key_flows(&e, &q).await;
    let hot_flow = flows.get("hot").cloned().flatten().expect("hot's flow");
    let cold_flow = flows.get("cold").cloned().flatten().expect("cold's flow");
    assert!(hot_flow.hold_until.is_some(), "hot is held: {hot_flow:?}");
    assert_eq!(cold_flow.hold_until, None, "cold is not: {cold_flow:?}");
    assert_eq!(cold_flow.rate_per_min, Some(600));
    let kf = e
        .stats(&q)
        .await
        .key_flows
        .expect("the stats of a queue with per-key rates count its keys");
    assert_eq!((kf.keys, kf.open), (2, 0), "{kf:?}");
    assert_eq!(
        kf.top_rates,
        [
            (Some("cold".to_owned()), 600),
            (Some("hot".to_owned()), 600)
        ],
        "the highest learned rates, ties by key"
    );
    let mut delivered = Vec::new();
    for _ in 0..19 {
        e.advance(secs(1));
        for d in e.recv(&q, 10).await {
            delivered.push(d.key.clone().map(String::from).unwrap_or_default());
            e.ack(&q, d.receipt).await.expect("ack");
        }
    }
    assert!(
        delivered.iter().all(|k| k == "cold"),
        "only cold while hot is held: {delivered:?}"
    );
    assert!(!delivered.is_empty(), "cold goes on meanwhile");
    e.advance(secs(2));
    let after = e.recv(&q, 10).await;
    assert!(
        after
            .iter()
            .any(|d| d.key.as_ref().map(|k| k.as_str()) == Some("hot")),
        "hot again once its Retry-After has passed: {after:?}"
    );
}

/// An operator forces one key's breaker open: that key waits, without probes, across a
/// restart; other keys are delivered; forced closed, it is delivered again. A queue without a
/// per-key breaker refuses the order (`conflict`).
pub async fn a_forced_key_breaker_outlives_a_restart(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tenants-forced",
            QueueConfigPatch {
                breaker: Some(Some(key_breaker())),
                ..Default::default()
            },
        )
        .await;
    let bad = MessageKey::new("bad").expect("key");
    let s = e
        .store
        .force_key_breaker(&q, Some(&bad), BreakerForce::Open)
        .await
        .expect("force open");
    assert_eq!((s.breaker, s.forced), (Some(BreakerState::Open), true));
    e.send_batch(&q, vec![keyed("x", "bad"), keyed("y", "good")])
        .await;
    let e = e.restart(h).await;
    e.advance(secs(120));
    let got = e.recv(&q, 10).await;
    assert_eq!(got.len(), 1, "only the good key: {got:?}");
    assert_eq!(got[0].key.as_ref().map(|k| k.as_str()), Some("good"));
    e.recv_none(&q, "the forced key waits, without probes, after a restart")
        .await;
    let s = e
        .store
        .force_key_breaker(&q, Some(&bad), BreakerForce::Closed)
        .await
        .expect("force closed");
    assert_eq!((s.breaker, s.forced), (Some(BreakerState::Closed), false));
    let again = e.recv_one(&q).await;
    assert_eq!(again.key.as_ref().map(|k| k.as_str()), Some("bad"));

    let queue_wide = e
        .queue(
            "tenants-queue-wide",
            QueueConfigPatch {
                breaker: Some(Some(BreakerConfig::default())),
                ..Default::default()
            },
        )
        .await;
    assert_code(
        e.store
            .force_key_breaker(&queue_wide, Some(&bad), BreakerForce::Open)
            .await,
        ErrorCode::Conflict,
        "a queue-wide breaker has no per-key breakers",
    );
    assert_code(
        e.store.force_breaker(&q, BreakerForce::Open).await,
        ErrorCode::Conflict,
        "a per-key breaker is not the queue's",
    );
    assert_code(
        e.store
            .force_key_breaker(&qn("nowhere"), Some(&bad), BreakerForce::Open)
            .await,
        ErrorCode::QueueNotFound,
        "no queue",
    );
}

/// A key idle for `key_idle_ms` (no delivery, no outcome) forgets its state: an open breaker
/// reads closed again and the key is delivered; a key forced open is never forgotten.
pub async fn an_idle_keys_state_is_forgotten(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "tenants-idle",
            QueueConfigPatch {
                visibility_timeout: Some(secs(3600)),
                breaker: Some(Some(BreakerConfig {
                    probe_every_ms: 3_600_000,
                    key_idle_ms: Some(20_000),
                    ..key_breaker()
                })),
                ..Default::default()
            },
        )
        .await;
    open_key(&e, &q, "gone", secs(1)).await;
    let forced = MessageKey::new("forced").expect("key");
    e.store
        .force_key_breaker(&q, Some(&forced), BreakerForce::Open)
        .await
        .expect("force open");
    e.send_batch(&q, vec![keyed("f", "forced")]).await;
    assert_eq!(
        breaker_of(&key_flows(&e, &q).await, "gone"),
        Some(BreakerState::Open)
    );
    e.advance(secs(19));
    e.recv_none(&q, "open, and not idle long enough yet").await;
    e.advance(secs(42));
    let flows = key_flows(&e, &q).await;
    assert_eq!(
        breaker_of(&flows, "gone"),
        Some(BreakerState::Closed),
        "idle for key_idle_ms: forgotten, {flows:?}"
    );
    assert_eq!(breaker_of(&flows, "forced"), Some(BreakerState::Open));
    let got = e.recv(&q, 10).await;
    assert!(
        !got.is_empty()
            && got
                .iter()
                .all(|d| d.key.as_ref().map(|k| k.as_str()) == Some("gone")),
        "the forgotten key is delivered again, the forced one is not: {got:?}"
    );
}
