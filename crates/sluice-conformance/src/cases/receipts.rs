//! Receipts: what a receipt names and when it stops working.

use super::*;

/// Rule 6: after the lease expired and the message was delivered again, the old receipt fails
/// with `ReceiptStale` for every operation and changes nothing.
pub async fn stale_receipt_after_redelivery_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "st",
            QueueConfigPatch {
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let other = e.queue("st-other", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let r1 = e.recv_one(&q).await.receipt;
    e.advance(secs(10));
    let d2 = e.recv_one(&q).await;
    let deadline = d2.lease_deadline;
    assert_eq!(d2.receive_count, 2);

    assert_code(
        e.ack(&q, r1).await,
        ErrorCode::ReceiptStale,
        "ack with old receipt",
    );
    assert_code(
        e.nack(&q, r1, Some(Duration::ZERO), Some("x")).await,
        ErrorCode::ReceiptStale,
        "nack with old receipt",
    );
    assert_code(
        e.store.reject(&q, r1, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject with old receipt",
    );
    assert_code(
        e.store.move_message(&q, r1, &other, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move with old receipt",
    );
    assert_code(
        e.store.extend(&q, r1, secs(100)).await,
        ErrorCode::ReceiptStale,
        "extend with old receipt",
    );

    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.receive_count),
        (q.clone(), MessageState::InFlight, 2)
    );
    assert_eq!(
        m.visible_at,
        Some(deadline),
        "stale extend did not move the lease"
    );
    assert_eq!(m.last_error, None, "stale nack/reject/move stored no error");
    assert!(
        m.attempts
            .iter()
            .all(|a| a.outcome == AttemptOutcome::LeaseExpired),
        "stale calls record no attempts: {:?}",
        m.attempts
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.in_flight,
            s.dead_letter_depth,
            s.totals.acked,
            s.totals.nacked,
            s.totals.dead_lettered
        ),
        (1, 0, 0, 0, 0)
    );
    assert_eq!(e.stats(&other).await.visible, 0, "stale move moved nothing");
    e.ack(&q, d2.receipt)
        .await
        .expect("the current receipt still works");
}

/// Rule 6: after an ack (message gone) or a nack (delivery over) the receipt is stale.
pub async fn stale_receipt_after_ack_or_nack_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("sa", QueueConfigPatch::default()).await;
    let other = e.queue("sa-other", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let r = e.recv_one(&q).await.receipt;
    e.ack(&q, r).await.expect("ack");
    assert_code(e.ack(&q, r).await, ErrorCode::ReceiptStale, "second ack");
    assert_code(
        e.nack(&q, r, None, Some("x")).await,
        ErrorCode::ReceiptStale,
        "nack after ack",
    );
    assert_code(
        e.store.reject(&q, r, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject after ack",
    );
    assert_code(
        e.store.move_message(&q, r, &other, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move after ack",
    );
    assert_code(
        e.store.extend(&q, r, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend after ack",
    );
    assert_eq!(e.get(id).await.state, MessageState::Completed);
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.totals.acked,
            s.totals.nacked,
            s.totals.dead_lettered,
            s.dead_letter_depth
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(e.stats(&other).await.visible, 0);

    let id2 = e.send_text(&q, "y").await;
    let r2 = e.recv_one(&q).await.receipt;
    e.nack(&q, r2, Some(secs(5)), None).await.expect("nack");
    assert_code(
        e.ack(&q, r2).await,
        ErrorCode::ReceiptStale,
        "ack after nack",
    );
    assert_code(
        e.store.extend(&q, r2, secs(60)).await,
        ErrorCode::ReceiptStale,
        "extend after nack",
    );
    assert_code(
        e.nack(&q, r2, None, None).await,
        ErrorCode::ReceiptStale,
        "second nack",
    );
    let m = e.get(id2).await;
    assert_eq!(
        (m.state, m.receive_count),
        (MessageState::Delayed, 1),
        "stale calls left it delayed"
    );
    assert_eq!(e.stats(&q).await.totals.nacked, 1);
}

/// A receipt used on another queue, or with an altered token or id, is `ReceiptStale`.
pub async fn foreign_and_forged_receipts_are_stale(h: &dyn Harness) {
    let e = env(h).await;
    let a = e.queue("qa", QueueConfigPatch::default()).await;
    let b = e.queue("qb", QueueConfigPatch::default()).await;
    let id = e.send_text(&a, "x").await;
    let d = e.recv_one(&a).await;
    let r = d.receipt;
    assert_code(
        e.ack(&b, r).await,
        ErrorCode::ReceiptStale,
        "ack on the wrong queue",
    );
    assert_code(
        e.nack(&b, r, None, None).await,
        ErrorCode::ReceiptStale,
        "nack on the wrong queue",
    );
    assert_code(
        e.store.reject(&b, r, fail("x")).await,
        ErrorCode::ReceiptStale,
        "reject on the wrong queue",
    );
    assert_code(
        e.store.extend(&b, r, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend on the wrong queue",
    );
    assert_code(
        e.store.move_message(&b, r, &a, fail("x")).await,
        ErrorCode::ReceiptStale,
        "move from the wrong queue",
    );
    let forged = Receipt {
        id: r.id,
        token: r.token ^ (1 << 63) ^ 1,
    };
    assert_code(
        e.ack(&a, forged).await,
        ErrorCode::ReceiptStale,
        "altered token",
    );
    assert_code(
        e.store.extend(&a, forged, secs(5)).await,
        ErrorCode::ReceiptStale,
        "extend with altered token",
    );
    let unknown = Receipt {
        id: MessageId(r.id.0 ^ 0xffff_0000_0000),
        token: r.token,
    };
    assert_code(
        e.ack(&a, unknown).await,
        ErrorCode::ReceiptStale,
        "receipt of a message that never existed",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue, m.state, m.visible_at),
        (a.clone(), MessageState::InFlight, Some(d.lease_deadline))
    );
    assert_eq!(e.stats(&b).await.visible, 0);
    e.ack(&a, r)
        .await
        .expect("the real receipt on its own queue works");
}
