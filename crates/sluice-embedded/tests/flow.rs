//! Governed queues in the embedded engine: what the maintenance round does for them (moves
//! an open breaker on while nobody receives, keeps the learned state in the catalog), and
//! that a restart keeps it.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::adaptive::BreakerConfig;
use sluice_core::audit::AuditQuery;
use sluice_core::store::prelude::*;
use sluice_core::{
    Body, Checked, Failure, ManualClock, NewMessage, QueueConfigPatch, QueueName, ReceiveRequest,
    Timestamp,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

/// Opens the store in `dir`, waiting while the previous store's background task still holds
/// the directory (it lets go a moment after the store is dropped).
async fn open(dir: &std::path::Path, clock: &ManualClock) -> Checked<EmbeddedStore> {
    let options = || EmbeddedOptions {
        clock: Arc::new(clock.clone()),
        maintenance_interval: Duration::from_secs(3600),
        ..EmbeddedOptions::default()
    };
    for _ in 0..100 {
        match EmbeddedStore::open(dir, options()) {
            Ok((store, _)) => return store,
            Err(sluice_embedded::OpenError::Locked(_)) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("open: {e}"),
        }
    }
    panic!("data directory still locked after 2 s");
}

fn receive(max: u32) -> ReceiveRequest {
    ReceiveRequest {
        max,
        ..ReceiveRequest::default()
    }
}

async fn transitions(store: &Checked<EmbeddedStore>, q: &QueueName) -> Vec<String> {
    let mut events = store
        .audit_query(AuditQuery {
            queues: vec![q.to_string()],
            since: None,
            until: None,
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("audit");
    events.retain(|e| e.action == "queue.breaker");
    events.sort_by_key(|e| e.at);
    events
        .iter()
        .map(|e| format!("{}>{}", e.details["from"], e.details["to"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_survives_a_restart_and_turns_half_open_in_the_maintenance_round() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(Timestamp(1_000_000_000));
    let q = QueueName::new("calls").expect("name");
    {
        let store = open(dir.path(), &clock).await;
        store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    breaker: Some(Some(BreakerConfig {
                        min_calls: 3,
                        probe_every_ms: 10_000,
                        probes: 1,
                        ..BreakerConfig::default()
                    })),
                    ..Default::default()
                },
            )
            .await
            .expect("create");
        let batch = (0..5).map(|i| NewMessage::new(Body::text(i.to_string())));
        store.send(&q, batch.collect()).await.expect("send");
        for _ in 0..3 {
            let d = store.receive(&q, receive(1)).await.expect("receive");
            store
                .nack(
                    &q,
                    d[0].receipt,
                    Some(Duration::from_secs(600)),
                    Failure::default(),
                )
                .await
                .expect("nack");
        }
        assert!(
            store
                .receive(&q, receive(10))
                .await
                .expect("receive")
                .is_empty()
        );
        // The round writes the state that changed to the catalog.
        store.engine().maintain().await.expect("maintain");
    }
    let store = open(dir.path(), &clock).await;
    assert!(
        store
            .receive(&q, receive(10))
            .await
            .expect("receive")
            .is_empty(),
        "still open after the restart"
    );
    clock.advance(Duration::from_secs(10));
    // Nobody receives: the round turns it half-open (and audits it).
    store.engine().maintain().await.expect("maintain");
    assert_eq!(
        transitions(&store, &q).await,
        ["closed>open", "open>half_open"]
    );
    let probe = store.receive(&q, receive(10)).await.expect("receive");
    assert_eq!(probe.len(), 1, "one probe");
    store
        .ack(
            &q,
            vec![sluice_core::AckRequest {
                receipt: probe[0].receipt,
                result: None,
            }],
        )
        .await
        .expect("ack");
    assert_eq!(
        store.receive(&q, receive(10)).await.expect("receive").len(),
        1,
        "closed again: the last visible message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_bounds_move_the_learned_rate_and_removing_the_setting_drops_it() {
    use sluice_core::adaptive::AdaptiveRate;
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(Timestamp(1_000_000_000));
    let q = QueueName::new("paced").expect("name");
    let store = open(dir.path(), &clock).await;
    let put = |a: Option<AdaptiveRate>| QueueConfigPatch {
        adaptive: Some(a),
        ..Default::default()
    };
    store
        .put_queue(&q, &put(Some(AdaptiveRate::new(10, 600))))
        .await
        .expect("create");
    store
        .send(&q, vec![NewMessage::new(Body::text("m"))])
        .await
        .expect("send");
    assert_eq!(
        store.receive(&q, receive(10)).await.expect("receive").len(),
        1
    );
    let rate = |s: sluice_core::QueueStats| s.flow.and_then(|f| f.adaptive).map(|a| a.rate_per_min);
    assert_eq!(rate(store.stats(&q).await.expect("stats")), Some(10));
    store
        .put_queue(&q, &put(Some(AdaptiveRate::new(100, 600))))
        .await
        .expect("new bounds");
    assert_eq!(rate(store.stats(&q).await.expect("stats")), Some(100));
    let events = store
        .audit_query(AuditQuery {
            queues: vec![q.to_string()],
            since: None,
            until: None,
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("audit");
    let step = events
        .iter()
        .find(|e| e.action == "queue.rate_adapted")
        .expect("the step is audited");
    assert_eq!(step.details["reason"], "config");
    assert_eq!(step.details["to_per_min"], "100");
    store.put_queue(&q, &put(None)).await.expect("remove");
    assert_eq!(store.stats(&q).await.expect("stats").flow, None);
}

/// The resident memory of this process, in bytes (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A key whose own breaker opened is kept by the maintenance round and is still open after a
/// restart; another key's learned state is not kept (it starts afresh), and a queue governing
/// 100,000 keys delivers each of them and keeps one state per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_states_worth_keeping_survive_a_restart_and_100_000_keys_are_governed() {
    use sluice_core::adaptive::{AdaptiveRate, BreakerState, FlowScope};
    use sluice_core::fair::MessageKey;
    use sluice_core::key_stats::{KeyOrder, KeysRequest};

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let q = QueueName::new("tenants").expect("name");
    let keyed = |i: usize, key: &str| {
        NewMessage::new(Body::text(i.to_string())).with_key(MessageKey::new(key).expect("key"))
    };
    let mut adaptive = AdaptiveRate::new(600_000, 600_000);
    adaptive.scope = FlowScope::Key;
    {
        let store = open(dir.path(), &clock).await;
        store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    visibility_timeout: Some(Duration::from_secs(3600)),
                    breaker: Some(Some(BreakerConfig {
                        min_calls: 3,
                        probe_every_ms: 3_600_000,
                        probes: 1,
                        scope: FlowScope::Key,
                        ..BreakerConfig::default()
                    })),
                    adaptive: Some(Some(adaptive)),
                    ..Default::default()
                },
            )
            .await
            .expect("queue");
        store
            .send(&q, (0..3).map(|i| keyed(i, "down")).collect())
            .await
            .expect("send");
        for d in store.receive(&q, receive(10)).await.expect("receive") {
            let failure = Failure {
                error: Some("503".into()),
                consumer: None,
                retry_after: false,
            };
            store
                .nack(&q, d.receipt, Some(Duration::from_secs(1)), failure)
                .await
                .expect("nack");
        }
        let before = resident_bytes();
        const KEYS: usize = 100_000;
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
            let batch = chunk.iter().map(|i| keyed(*i, &format!("t{i}"))).collect();
            store.send(&q, batch).await.expect("send");
        }
        let mut delivered = 0;
        loop {
            let got = store.receive(&q, receive(1000)).await.expect("receive");
            if got.is_empty() {
                break;
            }
            delivered += got.len();
            let acks = got
                .into_iter()
                .map(|d| sluice_core::AckRequest {
                    receipt: d.receipt,
                    result: None,
                })
                .collect();
            store.ack(&q, acks).await.expect("ack");
        }
        assert_eq!(
            delivered, KEYS,
            "every key delivered once, the open one not at all"
        );
        if let (Some(b), Some(a)) = (before, resident_bytes()) {
            // A reading for docs/adaptive.md, not a limit.
            eprintln!(
                "resident memory grew by {} bytes for {KEYS} keys ({} per key, their messages' \
                 records included)",
                a.saturating_sub(b),
                a.saturating_sub(b) / KEYS as u64
            );
        }
        store.engine().maintain().await.expect("maintain");
    }
    clock.advance(Duration::from_secs(2));
    let store = open(dir.path(), &clock).await;
    let page = store
        .keys(
            &q,
            KeysRequest {
                order: KeyOrder::Breaker,
                limit: 10,
                after: None,
            },
        )
        .await
        .expect("keys");
    let first = &page.keys[0];
    assert_eq!(first.key.as_ref().map(|k| k.as_str()), Some("down"));
    let flow = first.flow.clone().expect("a key's flow");
    assert_eq!(
        flow.breaker,
        Some(BreakerState::Open),
        "kept across the restart"
    );
    assert!(
        store
            .receive(&q, receive(10))
            .await
            .expect("receive")
            .is_empty(),
        "the open key's messages still wait"
    );
}
