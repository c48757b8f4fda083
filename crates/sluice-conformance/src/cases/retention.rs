//! Retention: messages and dead letters that outlive their retention.

use super::*;

/// Rule 8: a message older than `retention` is dead-lettered with reason `expired`; in the DLQ
/// it is dropped when it outlives the DLQ's retention.
pub async fn retention_dead_letters_expired_messages(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ret",
            QueueConfigPatch {
                retention: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let dlq = e
        .queue(
            "ret.dlq",
            QueueConfigPatch {
                retention: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    let old = e.send_text(&q, "old").await;
    e.advance(secs(30));
    let young = e.send_text(&q, "young").await;
    e.advance(secs(31)); // old is 61 s old, young 31 s
    let m = e.get(old).await;
    assert_eq!(m.queue, dlq, "a message past retention moves to the DLQ");
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::Expired)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body, Some(Body::text("old")));
    let y = e.get(young).await;
    assert_eq!(
        (y.queue, y.state),
        (q.clone(), MessageState::Visible),
        "a younger message stays"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.dead_letter_depth, s.totals.expired),
        (1, 1, 1)
    );
    assert_eq!(ids_of(&e.recv(&q, 10).await), BTreeSet::from([young]));
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::Visible).await,
        BTreeSet::from([old])
    );
    e.advance(secs(601));
    e.gone(old, "a DLQ drops its own expired messages").await;
    assert!(!e.browse_ids(&dlq, BrowseState::All).await.contains(&old));
}

/// Rule 8: a queue without a DLQ drops messages that outlive retention.
pub async fn retention_drops_expired_messages_without_dlq(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ret0",
            QueueConfigPatch {
                retention: Some(secs(60)),
                ..unlimited()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    e.advance(secs(59));
    assert_eq!(e.get(id).await.state, MessageState::Visible);
    e.advance(secs(2));
    e.gone(id, "expired message of a queue without DLQ is dropped")
        .await;
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.expired), (0, 1));
    e.recv_none(&q, "expired").await;
}
