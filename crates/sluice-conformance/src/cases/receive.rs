//! Receive: leasing visible messages.

use super::*;

/// Rule 1: receive increments `receive_count` and leases until `now + visibility`; a leased
/// message is not delivered again while the lease lasts.
pub async fn receive_increments_count_and_leases(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("r", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    assert_eq!(e.get(id).await.receive_count, 0);
    let t0 = e.now();
    let d = e.recv_one(&q).await;
    assert_eq!((d.id, d.receive_count), (id, 1));
    assert_eq!(d.lease_deadline, t0.plus(secs(30)));
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.receive_count, m.visible_at),
        (MessageState::InFlight, 1, Some(t0.plus(secs(30))))
    );
    e.advance(ms(29_999));
    e.recv_none(&q, "leased until t0+30s").await;
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!(
        (d2.id, d2.receive_count),
        (id, 2),
        "second delivery counts 2"
    );
    assert_ne!(d2.receipt, d.receipt, "each delivery gets its own receipt");
    assert_eq!(d2.lease_deadline, e.now().plus(secs(30)));
}

/// A receive's `visibility` overrides the queue's `visibility_timeout`.
pub async fn receive_visibility_override(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rv", QueueConfigPatch::default()).await;
    e.send_text(&q, "x").await;
    let t0 = e.now();
    let ds = e.recv_with(&q, 1, Some(secs(5))).await;
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].lease_deadline, t0.plus(secs(5)), "override of 5 s");
    e.advance(ms(4_999));
    e.recv_none(&q, "override lease not over").await;
    e.advance(ms(1));
    let d = e.recv_with(&q, 1, Some(secs(12 * 3600))).await;
    assert_eq!(d.len(), 1, "visible again when the 5 s lease ends");
    assert_eq!(
        d[0].lease_deadline,
        e.now().plus(secs(12 * 3600)),
        "12 h is allowed"
    );
}

/// A receive returns up to `max` distinct messages: all it can when fewer are visible.
pub async fn receive_respects_max(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rm", QueueConfigPatch::default()).await;
    let sent: BTreeSet<MessageId> = e
        .send_batch(&q, (0..5).map(|i| text(&i.to_string())).collect())
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let a = e.recv(&q, 3).await;
    assert_eq!(a.len(), 3, "max 3 of 5 visible");
    let b = e.recv(&q, 3).await;
    assert_eq!(b.len(), 2, "the remaining 2");
    e.recv_none(&q, "all leased").await;
    let all: BTreeSet<MessageId> = ids_of(&a).union(&ids_of(&b)).copied().collect();
    assert_eq!(all, sent, "each message delivered once");
    assert_eq!(e.stats(&q).await.in_flight, 5);
}
