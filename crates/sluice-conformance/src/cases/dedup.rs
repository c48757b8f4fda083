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

/// With `content_dedup` a message sent without a `dedup_id` is deduplicated by its body
/// (alone and within a batch); a given `dedup_id` still wins; without it, equal bodies are
/// distinct messages. Tags and `receive_wait` are kept with the rest of the config.
pub async fn content_dedup_uses_the_body_and_config_keeps_tags(h: &dyn Harness) {
    let e = env(h).await;
    let tags: std::collections::BTreeMap<String, String> =
        [("team".to_owned(), "core".to_owned())].into();
    let q = e
        .queue(
            "cd",
            QueueConfigPatch {
                content_dedup: Some(true),
                receive_wait: Some(secs(7)),
                tags: Some(tags.clone()),
                ..Default::default()
            },
        )
        .await;
    let first = e.send(&q, text("same")).await;
    let again = e.send(&q, text("same")).await;
    assert_eq!((again.id, again.duplicate), (first.id, true), "same body");
    let out = e
        .send_batch(&q, vec![text("x"), text("x"), dedup("same", "explicit")])
        .await;
    assert_eq!((out[1].id, out[1].duplicate), (out[0].id, true), "{out:?}");
    assert!(!out[2].duplicate, "a given dedup_id wins over the body");
    assert_eq!(e.stats(&q).await.visible, 3);
    let info = e.store.get_queue(&q).await.expect("get_queue");
    assert!(info.config.content_dedup);
    assert_eq!(info.config.receive_wait, secs(7));
    assert_eq!(info.config.tags, tags);

    let plain = e.queue("cd-off", QueueConfigPatch::default()).await;
    let a = e.send(&plain, text("same")).await;
    let b = e.send(&plain, text("same")).await;
    assert!(!b.duplicate && a.id != b.id, "off by default");
}
