//! Lease expiry: a delivery whose lease runs out.

use super::*;

/// Rule 3: an expired lease below the limit makes the message visible again at once.
pub async fn lease_expiry_makes_message_visible_again(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "le",
            QueueConfigPatch {
                max_receive_count: Some(3),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.advance(secs(10));
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.delayed),
        (1, 0, 0),
        "visible at once when the lease ends"
    );
    assert_eq!(e.get(id).await.state, MessageState::Visible);
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
    assert_ne!(d2.receipt, d.receipt);
    let m = e.get(id).await;
    assert!(
        m.attempts
            .iter()
            .any(|a| a.outcome == AttemptOutcome::LeaseExpired),
        "the expired lease is recorded in attempts: {:?}",
        m.attempts
    );
}

/// Rule 3: an expired lease on the last attempt dead-letters (reason `lease_expired`), seen by
/// any call (here `get_message` first).
pub async fn lease_expiry_on_last_attempt_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "lx",
            QueueConfigPatch {
                max_receive_count: Some(2),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let dlq = qn("lx.dlq");
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("e1"))
        .await
        .expect("nack");
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 2);
    e.advance(secs(10));
    let m = e.get(id).await;
    assert_eq!(
        m.queue, dlq,
        "lease ran out on the last attempt: message belongs to the DLQ"
    );
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::LeaseExpired)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.last_error.as_deref(), Some("e1"), "last_error is kept");
    assert_eq!(m.body, Some(Body::text("x")));
    e.recv_none(&q, "not redelivered from the source").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.visible,
            s.in_flight,
            s.dead_letter_depth,
            s.totals.dead_lettered
        ),
        (0, 0, 1, 1)
    );
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::All).await,
        BTreeSet::from([id])
    );
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of the expired last lease",
    );
}
