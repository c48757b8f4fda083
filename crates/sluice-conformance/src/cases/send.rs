//! Send: single and batch sends, delays, attributes and limits.

use super::*;

/// A sent message comes back byte-exact, in the form it was sent, with its attributes and
/// system fields.
pub async fn send_single_round_trips_body_and_attributes(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("rt", QueueConfigPatch::default()).await;
    let t0 = e.now();
    let bodies = [
        Body::json(r#"{"n":1,"s":"é"}"#),
        Body::text("plain text"),
        Body::binary(vec![0u8, 255, 1, 2, 0xc3, 0x28]),
    ];
    let mut ids = Vec::new();
    for (i, b) in bodies.iter().enumerate() {
        let m = NewMessage {
            attributes: attrs(&[("k", "v"), ("n", &i.to_string())]),
            ..NewMessage::new(b.clone())
        };
        let o = e.send(&q, m).await;
        assert!(!o.duplicate);
        ids.push(o.id);
    }
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>().len(),
        3,
        "ids are unique"
    );
    e.advance(secs(2));
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 3, "all three are receivable");
    for d in &ds {
        let i = ids
            .iter()
            .position(|x| *x == d.id)
            .expect("delivered id was sent");
        assert_eq!(
            d.body, bodies[i],
            "body of message {i} must round-trip byte-exact with its kind"
        );
        assert_eq!(d.attributes, attrs(&[("k", "v"), ("n", &i.to_string())]));
        assert_eq!(d.receive_count, 1);
        assert_eq!(d.max_receive_count, 5);
        assert_eq!(d.enqueued_at, t0, "enqueued_at is the send time");
        assert_eq!(d.last_error, None);
        assert_eq!(
            d.lease_deadline,
            e.now().plus(secs(30)),
            "default visibility is 30 s"
        );
        let m = e.get(d.id).await;
        assert_eq!(m.queue, q);
        assert_eq!(m.state, MessageState::InFlight);
        assert_eq!(m.body.as_ref(), Some(&bodies[i]));
        assert_eq!(
            m.body.as_ref().map(|b| b.kind),
            Some([BodyKind::Json, BodyKind::Text, BodyKind::Binary][i])
        );
    }
}

/// A batch returns one id per message, in order, all stored.
pub async fn send_batch_returns_ids_in_order(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("batch", QueueConfigPatch::default()).await;
    let out = e
        .send_batch(&q, vec![text("m0"), text("m1"), text("m2")])
        .await;
    let ids: BTreeSet<MessageId> = out.iter().map(|o| o.id).collect();
    assert_eq!(ids.len(), 3, "batch ids are distinct: {out:?}");
    for (i, o) in out.iter().enumerate() {
        assert!(!o.duplicate);
        let m = e.get(o.id).await;
        assert_eq!(
            m.body,
            Some(Body::text(format!("m{i}"))),
            "outcome {i} names message m{i}"
        );
        assert_eq!(m.state, MessageState::Visible);
    }
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.totals.sent), (3, 3));
}

/// A batch holds 1–1000 messages; 0 or 1001 is `InvalidArgument` and stores nothing.
pub async fn send_batch_size_limits(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("limits", QueueConfigPatch::default()).await;
    assert_code(
        e.store.send(&q, vec![]).await,
        ErrorCode::InvalidArgument,
        "empty batch",
    );
    let too_many: Vec<NewMessage> = (0..=limits::MAX_BATCH)
        .map(|i| text(&i.to_string()))
        .collect();
    assert_code(
        e.store.send(&q, too_many).await,
        ErrorCode::InvalidArgument,
        "1001-message batch",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (0, 0),
        "refused batches store nothing"
    );
    let max: Vec<NewMessage> = (0..limits::MAX_BATCH)
        .map(|i| text(&i.to_string()))
        .collect();
    let out = e.send_batch(&q, max).await;
    assert_eq!(out.iter().map(|o| o.id).collect::<HashSet<_>>().len(), 1000);
    assert_eq!(
        e.stats(&q).await.visible,
        1000,
        "a 1000-message batch is accepted"
    );
}

/// A body over `max_message_bytes` is `PayloadTooLarge`; a batch with one such body, or over
/// 16 MiB in all, stores nothing.
pub async fn send_payload_too_large_is_all_or_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "small",
            QueueConfigPatch {
                max_message_bytes: Some(100),
                ..Default::default()
            },
        )
        .await;
    e.send(&q, NewMessage::new(Body::binary(vec![7u8; 100])))
        .await;
    assert_code(
        e.store
            .send(&q, vec![NewMessage::new(Body::binary(vec![7u8; 101]))])
            .await,
        ErrorCode::PayloadTooLarge,
        "101-byte body on a 100-byte queue",
    );
    assert_code(
        e.store
            .send(
                &q,
                vec![
                    text("ok"),
                    text("ok too"),
                    NewMessage::new(Body::binary(vec![1u8; 101])),
                ],
            )
            .await,
        ErrorCode::PayloadTooLarge,
        "batch with one oversized body",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.totals.sent),
        (1, 1),
        "only the 100-byte message is stored"
    );

    let big = e
        .queue(
            "big",
            QueueConfigPatch {
                max_message_bytes: Some(limits::MAX_MESSAGE_BYTES),
                ..Default::default()
            },
        )
        .await;
    let half = limits::MAX_BATCH_BYTES / 2 + 1;
    assert_code(
        e.store
            .send(
                &big,
                vec![
                    NewMessage::new(Body::binary(vec![0u8; half])),
                    NewMessage::new(Body::binary(vec![0u8; half])),
                ],
            )
            .await,
        ErrorCode::PayloadTooLarge,
        "batch over 16 MiB in all",
    );
    assert_eq!(
        e.stats(&big).await.visible,
        0,
        "an oversized batch stores nothing"
    );
}

/// Bad attributes, dedup ids or delays are `InvalidArgument` and the batch stores nothing.
pub async fn send_invalid_message_is_all_or_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("strict", QueueConfigPatch::default()).await;
    let bad_attr = NewMessage {
        attributes: attrs(&[("", "empty key")]),
        ..text("x")
    };
    assert_code(
        e.store.send(&q, vec![text("fine"), bad_attr]).await,
        ErrorCode::InvalidArgument,
        "empty attribute key",
    );
    let bad_delay = delayed("late", limits::MAX_DELAY + secs(1));
    assert_code(
        e.store.send(&q, vec![text("fine"), bad_delay]).await,
        ErrorCode::InvalidArgument,
        "delay over 7 days",
    );
    assert_code(
        e.store.send(&q, vec![dedup("x", "")]).await,
        ErrorCode::InvalidArgument,
        "empty dedup_id",
    );
    let many: Attributes = (0..=limits::MAX_ATTRIBUTES)
        .map(|i| (format!("k{i}"), "v".to_owned()))
        .collect();
    assert_code(
        e.store
            .send(
                &q,
                vec![NewMessage {
                    attributes: many,
                    ..text("x")
                }],
            )
            .await,
        ErrorCode::InvalidArgument,
        "65 attributes",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.totals.sent),
        (0, 0, 0),
        "refused sends store nothing"
    );
    e.send(&q, delayed("max delay", limits::MAX_DELAY)).await;
    assert_eq!(
        e.stats(&q).await.delayed,
        1,
        "a delay of exactly 7 days is allowed"
    );
}

/// A delayed message is not receivable until its delay has passed (visible at `t0 + delay`).
pub async fn send_delay_hides_message_until_due(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("later", QueueConfigPatch::default()).await;
    let t0 = e.now();
    let id = e.send(&q, delayed("soon", secs(5))).await.id;
    e.recv_none(&q, "delay not over").await;
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Delayed);
    assert_eq!(
        m.visible_at,
        Some(t0.plus(secs(5))),
        "visible_at of a delayed message"
    );
    assert_eq!(
        e.browse_ids(&q, BrowseState::Delayed).await,
        BTreeSet::from([id])
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed), (0, 1));
    e.advance(ms(4_999));
    e.recv_none(&q, "1 ms before the delay ends").await;
    e.advance(ms(1));
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, id, "receivable exactly when the delay ends");
}

/// The queue's `delay` applies to messages sent without one; an explicit delay (even zero)
/// overrides it.
pub async fn send_uses_queue_default_delay(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "slow",
            QueueConfigPatch {
                delay: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    let deferred = e.send_text(&q, "default delay").await;
    let now_id = e
        .send(&q, delayed("explicit zero", Duration::ZERO))
        .await
        .id;
    let ds = e.recv(&q, 10).await;
    assert_eq!(
        ids_of(&ds),
        BTreeSet::from([now_id]),
        "only the explicit-zero message is visible"
    );
    e.advance(ms(9_999));
    e.recv_none(&q, "queue default delay not over").await;
    e.advance(ms(1));
    assert_eq!(e.recv_one(&q).await.id, deferred);
}
