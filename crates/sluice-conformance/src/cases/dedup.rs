//! Dedup: sends with a `dedup_id` inside and after the window.

use super::*;

/// Inside `dedup_window` (counted from the first send) a repeated `dedup_id` returns the first
/// id with `duplicate = true` and stores nothing, even after the first was acked; after the
/// window a new message is stored.
pub async fn dedup_within_window_returns_first_id(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "dd",
            QueueConfigPatch {
                dedup_window: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let first = e.send(&q, dedup("A", "order-1")).await;
    assert!(!first.duplicate);
    let second = e.send(&q, dedup("B", "order-1")).await;
    assert_eq!(
        second,
        sluice_core::store::SendOutcome {
            id: first.id,
            duplicate: true
        },
        "same dedup_id"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (1, 1),
        "a duplicate stores nothing"
    );
    let d = e.recv_one(&q).await;
    assert_eq!(d.body, Body::text("A"), "the first body is kept");
    e.ack(&q, d.receipt).await.expect("ack");
    e.advance(secs(30));
    let third = e.send(&q, dedup("C", "order-1")).await;
    assert_eq!(
        (third.id, third.duplicate),
        (first.id, true),
        "still inside the window after ack"
    );
    assert_eq!(e.stats(&q).await.visible, 0);
    e.advance(ms(30_001));
    let fourth = e.send(&q, dedup("D", "order-1")).await;
    assert!(
        !fourth.duplicate,
        "after the window the dedup_id is forgotten"
    );
    assert_ne!(fourth.id, first.id);
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.sent), (1, 2));
}

/// Dedup inside one batch, per queue, and off with a zero window.
pub async fn dedup_within_batch_per_queue_and_disabled(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("dd1", QueueConfigPatch::default()).await;
    let out = e
        .send_batch(
            &q,
            vec![dedup("1", "y"), dedup("2", "y"), dedup("3", "z"), text("4")],
        )
        .await;
    assert!(
        !out[0].duplicate && !out[2].duplicate && !out[3].duplicate,
        "{out:?}"
    );
    assert_eq!(
        (out[1].id, out[1].duplicate),
        (out[0].id, true),
        "repeat within one batch: {out:?}"
    );
    assert_ne!(out[2].id, out[0].id);
    assert_eq!(
        e.stats(&q).await.visible,
        3,
        "three distinct messages stored"
    );
    assert_eq!(e.get(out[0].id).await.dedup_id.as_deref(), Some("y"));

    let other = e.queue("dd2", QueueConfigPatch::default()).await;
    let o = e.send(&other, dedup("1", "y")).await;
    assert!(!o.duplicate, "dedup ids are per queue");
    assert_ne!(o.id, out[0].id);

    let off = e
        .queue(
            "dd3",
            QueueConfigPatch {
                dedup_window: Some(Duration::ZERO),
                ..Default::default()
            },
        )
        .await;
    let a = e.send(&off, dedup("1", "k")).await;
    let b = e.send(&off, dedup("2", "k")).await;
    assert!(
        !a.duplicate && !b.duplicate && a.id != b.id,
        "a zero dedup_window disables dedup"
    );
    assert_eq!(e.stats(&off).await.visible, 2);
}
