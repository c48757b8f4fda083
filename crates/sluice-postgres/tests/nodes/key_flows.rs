//! Per-key breakers (`"scope": "key"`) are shared by every node: failures of one key settled
//! through one node open that key's breaker for receives on the others, and an operator's
//! order given through a third node holds on all of them, while every other key goes on.

use sluice_core::Failure;
use sluice_core::adaptive::{BreakerConfig, BreakerForce, BreakerState, FlowScope};
use sluice_core::fair::MessageKey;
use sluice_core::key_stats::{KeyOrder, KeysRequest};

use super::*;

fn keyed(text: &str, key: &str) -> NewMessage {
    msg(text).with_key(MessageKey::new(key).expect("key"))
}

/// The keys of `got`, sorted.
fn keys_of(got: &[Delivery]) -> Vec<String> {
    let mut keys: Vec<String> = got
        .iter()
        .map(|d| d.key.as_ref().map_or(String::new(), |k| k.to_string()))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_key_breaker_opened_through_one_node_holds_on_the_others() {
    let Some(n) = nodes().await else { return };
    let c3 = n.another("c").await;
    let work = q("key-breakers");
    n.a.put_queue(
        &work,
        &QueueConfigPatch {
            visibility_timeout: Some(Duration::from_secs(3600)),
            breaker: Some(Some(BreakerConfig {
                min_calls: 3,
                probe_every_ms: 3_600_000,
                scope: FlowScope::Key,
                ..BreakerConfig::default()
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.a.send(
        &work,
        (0..3).map(|i| keyed(&format!("d{i}"), "down")).collect(),
    )
    .await
    .expect("send");
    let leased = n.a.receive(&work, recv(10)).await.expect("receive on a");
    assert_eq!(leased.len(), 3);
    // Three failures of the key, settled through node b: its breaker opens for every node.
    for d in &leased {
        let failure = Failure {
            error: Some("503".into()),
            ..Failure::default()
        };
        n.b.nack(&work, d.receipt, Some(Duration::from_secs(3600)), failure)
            .await
            .expect("nack on b");
    }
    n.a.send(
        &work,
        vec![keyed("d3", "down"), keyed("u0", "up"), keyed("u1", "up")],
    )
    .await
    .expect("send");
    // Node b hands its outcomes over within its flush period; node c sees them then.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = c3.receive(&work, recv(10)).await.expect("receive on c");
    assert_eq!(keys_of(&got), ["up", "up"], "the open key waits on node c");
    let page = c3
        .keys(
            &work,
            KeysRequest {
                order: KeyOrder::Breaker,
                limit: 10,
                after: None,
            },
        )
        .await
        .expect("keys on c");
    let first = &page.keys[0];
    assert_eq!(first.key.as_ref().map(|k| k.as_str()), Some("down"));
    assert_eq!(
        first.flow.as_ref().and_then(|f| f.breaker),
        Some(BreakerState::Open)
    );

    // An operator forces the other key open through node c: it waits on node a too.
    let up = MessageKey::new("up").expect("key");
    c3.force_key_breaker(&work, Some(&up), BreakerForce::Open)
        .await
        .expect("force open on c");
    n.a.send(&work, vec![keyed("u2", "up"), keyed("p", "plain")])
        .await
        .expect("send");
    let got = n.a.receive(&work, recv(10)).await.expect("receive on a");
    assert_eq!(keys_of(&got), ["plain"], "both keys wait on node a");
    // Forced closed through node b, the key is delivered on node a again.
    n.b.force_key_breaker(&work, Some(&up), BreakerForce::Closed)
        .await
        .expect("force closed on b");
    let got = n.a.receive(&work, recv(10)).await.expect("receive on a");
    assert_eq!(keys_of(&got), ["up"]);
    let stats = n.b.stats(&work).await.expect("stats on b");
    let kf = stats.key_flows.expect("key counts");
    assert_eq!((kf.open, kf.half_open), (1, 0), "{kf:?}");
    drop(c3);
}
