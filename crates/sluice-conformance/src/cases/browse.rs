//! Browse, get, delete and purge.

use super::*;

/// Paging with limit 2 over 5 messages covers each exactly once, full pages first, in
/// delivery order; browsing leases nothing.
pub async fn browse_pages_cover_each_message_once(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("br", QueueConfigPatch::default()).await;
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(e.send_text(&q, &format!("m{i}")).await);
        e.advance(ms(1));
    }
    for state in [BrowseState::Visible, BrowseState::All] {
        let pages = e.browse_pages(&q, state, 2).await;
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        let nonempty: Vec<usize> = sizes.iter().copied().filter(|n| *n > 0).collect();
        assert_eq!(nonempty, [2, 2, 1], "{state:?}: page sizes {sizes:?}");
        assert!(
            sizes[..sizes.len() - 1].iter().all(|n| *n == 2),
            "{state:?}: only the last page may be short: {sizes:?}"
        );
        let ids: Vec<MessageId> = pages.iter().flatten().map(|m| m.id).collect();
        assert_eq!(
            ids, sent,
            "{state:?}: each message once, oldest (first visible) first"
        );
        for m in pages.iter().flatten() {
            assert_eq!((m.state, m.receive_count), (MessageState::Visible, 0));
            assert!(m.body.is_some(), "browse shows bodies");
        }
    }
    let d = e.recv(&q, 5).await;
    assert_eq!(d.len(), 5, "browsing leased nothing");
    assert_eq!(
        d.iter().map(|d| d.id).collect::<Vec<_>>(),
        sent,
        "receive delivers oldest visible first"
    );
}

/// Browse filters by state: Visible, Delayed, InFlight, and All (their union).
pub async fn browse_filters_by_state(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("bf", QueueConfigPatch::default()).await;
    let vis: BTreeSet<MessageId> = e
        .send_batch(&q, (0..4).map(|i| text(&i.to_string())).collect())
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let del = e.send(&q, delayed("later", secs(60))).await.id;
    let leased = ids_of(&e.recv(&q, 2).await);
    let visible: BTreeSet<MessageId> = vis.difference(&leased).copied().collect();
    assert_eq!(e.browse_ids(&q, BrowseState::Visible).await, visible);
    assert_eq!(
        e.browse_ids(&q, BrowseState::Delayed).await,
        BTreeSet::from([del])
    );
    assert_eq!(e.browse_ids(&q, BrowseState::InFlight).await, leased);
    let mut all = vis.clone();
    all.insert(del);
    assert_eq!(e.browse_ids(&q, BrowseState::All).await, all);
    for (state, want) in [
        (BrowseState::Visible, MessageState::Visible),
        (BrowseState::Delayed, MessageState::Delayed),
        (BrowseState::InFlight, MessageState::InFlight),
    ] {
        for m in e.browse(&q, state).await {
            assert_eq!(
                m.state, want,
                "browse {state:?} listed {} as {:?}",
                m.id, m.state
            );
            assert_eq!(m.queue, q);
        }
    }
    e.advance(secs(60));
    assert!(
        e.browse_ids(&q, BrowseState::Delayed).await.is_empty(),
        "delay over"
    );
    assert!(e.browse_ids(&q, BrowseState::Visible).await.contains(&del));
}

/// A garbage cursor or an out-of-range limit is `InvalidArgument`.
pub async fn browse_rejects_bad_cursor_and_limit(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("bc", QueueConfigPatch::default()).await;
    e.send_batch(&q, vec![text("a"), text("b"), text("c")])
        .await;
    let req = |limit, cursor: Option<&str>| BrowseRequest {
        state: BrowseState::All,
        limit,
        cursor: cursor.map(str::to_owned),
    };
    assert_code(
        e.store.browse(&q, req(2, Some("garbage!!"))).await,
        ErrorCode::InvalidArgument,
        "garbage cursor",
    );
    assert_code(
        e.store.browse(&q, req(2, Some(""))).await,
        ErrorCode::InvalidArgument,
        "empty cursor",
    );
    assert_code(
        e.store.browse(&q, req(0, None)).await,
        ErrorCode::InvalidArgument,
        "limit 0",
    );
    assert_code(
        e.store.browse(&q, req(1001, None)).await,
        ErrorCode::InvalidArgument,
        "limit 1001",
    );
    let page = e
        .store
        .browse(&q, req(1000, None))
        .await
        .expect("limit 1000 is allowed");
    assert_eq!(page.messages.len(), 3);
}

/// `get_message` finds a message in any queue, including a DLQ, and reports its fields.
pub async fn get_message_finds_message_anywhere(h: &dyn Harness) {
    let e = env(h).await;
    let a = e.queue("ga", QueueConfigPatch::default()).await;
    let b = e.queue("gb", QueueConfigPatch::default()).await;
    assert_code(
        e.store.get_message(MessageId(0x00de_adbe_efde_adbe)).await,
        ErrorCode::MessageNotFound,
        "unknown id",
    );
    let t0 = e.now();
    let ia = e
        .send(
            &a,
            NewMessage {
                attributes: attrs(&[("k", "v")]),
                ..dedup("in a", "dd-1")
            },
        )
        .await
        .id;
    let ib = e.send_text(&b, "in b").await;
    let m = e.get(ia).await;
    assert_eq!(
        (m.id, m.queue.clone(), m.state),
        (ia, a.clone(), MessageState::Visible)
    );
    assert_eq!(m.body, Some(Body::text("in a")));
    assert_eq!(m.attributes, attrs(&[("k", "v")]));
    assert_eq!((m.enqueued_at, m.receive_count), (t0, 0));
    assert_eq!(m.dedup_id.as_deref(), Some("dd-1"));
    assert_eq!(
        (m.source_queue, m.dead_letter, m.last_error),
        (None, None, None)
    );
    assert_eq!(e.get(ib).await.queue, b);
    let d = e.recv_one(&b).await;
    e.store
        .reject(&b, d.receipt, fail("no"))
        .await
        .expect("reject");
    let m = e.get(ib).await;
    assert_eq!(m.queue, qn("gb.dlq"), "found in the DLQ");
    assert!(m.dead_letter.is_some());
}

/// `delete_message` removes a message in any state; its receipt goes stale.
pub async fn delete_message_removes_it(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("del", QueueConfigPatch::default()).await;
    let a = e.send_text(&q, "a").await;
    e.store.delete_message(a).await.expect("delete visible");
    e.gone(a, "deleted").await;
    assert_code(
        e.store.delete_message(a).await,
        ErrorCode::MessageNotFound,
        "second delete",
    );
    assert_code(
        e.store
            .delete_message(MessageId(0x0bad_0bad_0bad_0bad))
            .await,
        ErrorCode::MessageNotFound,
        "unknown",
    );
    let b = e.send_text(&q, "b").await;
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, b);
    e.store.delete_message(b).await.expect("delete in flight");
    assert_code(
        e.ack(&q, d.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of a deleted message",
    );
    let c = e.send(&q, delayed("c", secs(30))).await.id;
    e.store.delete_message(c).await.expect("delete delayed");
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    e.advance(secs(30));
    e.recv_none(&q, "deleted messages do not come back").await;

    let x = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("r"))
        .await
        .expect("reject");
    e.store
        .delete_message(x)
        .await
        .expect("delete from the DLQ");
    e.gone(x, "deleted from DLQ").await;
    assert_eq!(e.stats(&q).await.dead_letter_depth, 0);

    let y = e.send_text(&q, "y").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.store
        .delete_message(y)
        .await
        .expect("delete a completed record");
    e.gone(y, "completed record deleted").await;
}

/// Purge removes every message (visible, delayed, in flight), returns how many, keeps
/// completed records and leaves the DLQ alone.
pub async fn purge_empties_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("pg", QueueConfigPatch::default()).await;
    let done = e.send_text(&q, "done").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.send_text(&q, "poison").await;
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail("x"))
        .await
        .expect("reject");
    e.send_batch(&q, (0..4).map(|i| text(&i.to_string())).collect())
        .await;
    e.send(&q, delayed("later", secs(60))).await;
    let leased = e.recv_one(&q).await;
    assert_eq!(
        e.store.purge(&q).await.expect("purge"),
        5,
        "3 visible + 1 delayed + 1 in flight"
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed, s.in_flight), (0, 0, 0));
    assert_eq!(s.dead_letter_depth, 1, "purge leaves the DLQ alone");
    assert_code(
        e.ack(&q, leased.receipt).await,
        ErrorCode::ReceiptStale,
        "receipt of a purged message",
    );
    assert_eq!(
        e.get(done).await.state,
        MessageState::Completed,
        "purge keeps completed records"
    );
    e.advance(secs(120));
    e.recv_none(&q, "purged delayed message does not come back")
        .await;
    assert_eq!(
        e.store.purge(&q).await.expect("purge"),
        0,
        "purging an empty queue removes nothing"
    );
}
