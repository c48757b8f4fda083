//! Reject, move and extend a delivery.

use super::*;

/// Rule 4: reject dead-letters now (reason `rejected`) on the first attempt of five, into the
/// configured DLQ, which it returns.
pub async fn reject_dead_letters_whatever_the_count(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "rj",
            QueueConfigPatch {
                dead_letter_queue: Some(Some(qn("poison"))),
                ..Default::default()
            },
        )
        .await;
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("a", "b")]),
                ..text("bad")
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 1);
    let to = e
        .store
        .reject(&q, d.receipt, fail("unparseable"))
        .await
        .expect("reject");
    assert_eq!(to, qn("poison"), "reject returns the DLQ");
    let m = e.get(id).await;
    assert_eq!(m.queue, qn("poison"));
    assert_eq!(
        m.dead_letter.as_ref().map(|d| d.reason),
        Some(DeadLetterReason::Rejected)
    );
    assert_eq!(m.last_error.as_deref(), Some("unparseable"));
    assert_eq!(
        m.attempts.last().map(|a| a.outcome),
        Some(AttemptOutcome::Rejected)
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.attributes, attrs(&[("a", "b")]));
    e.recv_none(&q, "rejected message left the source").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.in_flight, s.dead_letter_depth, s.totals.dead_lettered),
        (0, 1, 1)
    );
}

/// Reject on a queue without a DLQ (unlimited attempts, no `dead_letter_queue`) is `Conflict`
/// and leaves the lease as it was.
pub async fn reject_without_dlq_is_conflict(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nodlq", unlimited()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.reject(&q, d.receipt, fail("no")).await,
        ErrorCode::Conflict,
        "reject without DLQ",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue, m.state, m.dead_letter),
        (q.clone(), MessageState::InFlight, None)
    );
    e.ack(&q, d.receipt)
        .await
        .expect("the receipt is still valid after the refused reject");
}

/// Rule 5: move puts the leased message in the target queue as a visible message, same id,
/// body and attributes, `source_queue` set, gone from the source.
pub async fn move_puts_message_in_target_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    let un = e.queue("work.unprocessable", unlimited()).await;
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("x", "1")]),
                ..text("%%garbage")
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    e.store
        .move_message(&q, d.receipt, &un, fail("cannot decode"))
        .await
        .expect("move");
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state),
        (un.clone(), MessageState::Visible),
        "moved and visible"
    );
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body, Some(Body::text("%%garbage")));
    assert_eq!(m.attributes, attrs(&[("x", "1")]));
    assert_eq!(m.last_error.as_deref(), Some("cannot decode"));
    assert_eq!(
        m.attempts.last().map(|a| a.outcome),
        Some(AttemptOutcome::Moved)
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.dead_letter_depth),
        (0, 0, 0),
        "gone from the source, not dead-lettered"
    );
    e.recv_none(&q, "moved message left the source").await;
    assert_eq!(
        e.browse_ids(&un, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt after move",
    );
    let d2 = e.recv_one(&un).await;
    assert_eq!((d2.id, d2.body), (id, Body::text("%%garbage")));
}

/// Move to a queue that does not exist is `QueueNotFound`, and to the message's own queue
/// `Conflict` (it is already there); neither changes anything.
pub async fn move_to_unknown_queue_changes_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("mv", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.move_message(&q, d.receipt, &q, fail("x")).await,
        ErrorCode::Conflict,
        "move to the own queue",
    );
    assert_code(
        e.store
            .move_message(&q, d.receipt, &qn("nowhere"), fail("x"))
            .await,
        ErrorCode::QueueNotFound,
        "move to unknown queue",
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.last_error),
        (q.clone(), MessageState::InFlight, None)
    );
    assert_code(
        e.store.get_queue(&qn("nowhere")).await,
        ErrorCode::QueueNotFound,
        "move does not create queues",
    );
    e.ack(&q, d.receipt)
        .await
        .expect("receipt still valid after the refused move");
}

/// Extend sets the lease to end `visibility` from now; the message is not redelivered before.
pub async fn extend_moves_lease_deadline(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ex",
            QueueConfigPatch {
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "x").await;
    let t0 = e.now();
    let d = e.recv_one(&q).await;
    e.advance(secs(5));
    let deadline = e
        .store
        .extend(&q, d.receipt, secs(20))
        .await
        .expect("extend")
        .deadline;
    assert_eq!(
        deadline,
        t0.plus(secs(25)),
        "extend returns now + visibility"
    );
    assert_eq!(e.get(id).await.visible_at, Some(t0.plus(secs(25))));
    assert_code(
        e.store
            .extend(&q, d.receipt, limits::MAX_VISIBILITY + secs(1))
            .await,
        ErrorCode::InvalidArgument,
        "extend over 12 h",
    );
    assert_eq!(
        e.get(id).await.visible_at,
        Some(t0.plus(secs(25))),
        "a refused extend changes nothing"
    );
    e.advance(ms(19_999)); // t0 + 24.999 s
    e.recv_none(&q, "extended lease not over").await;
    assert_eq!(e.get(id).await.state, MessageState::InFlight);
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!(
        (d2.id, d2.receive_count),
        (id, 2),
        "visible when the extended lease ends"
    );
}
