//! Restart: what survives reopening the store.

use super::*;

/// After a restart: queue configs, messages (visible, delayed, leased, dead-lettered), leases
/// with their deadlines and receipts, the dedup window and the counters are all still there,
/// and new ids do not collide with old ones.
pub async fn restart_keeps_messages_leases_dedup_counters_and_config(h: &dyn Harness) {
    let e = env(h).await;
    let patch = QueueConfigPatch {
        visibility_timeout: Some(secs(60)),
        max_receive_count: Some(7),
        rate_limit: Some(Some(RateLimit {
            limit: 1000,
            period: secs(1),
            burst: None,
        })),
        max_in_flight: Some(Some(100)),
        dedup_window: Some(secs(300)),
        ..Default::default()
    };
    let q = e.queue("durable", patch).await;
    let t0 = e.now();
    let a = e.send_text(&q, "A").await;
    let b = e.send(&q, delayed("B", secs(30))).await.id;
    let c = e.send(&q, dedup("C", "d1")).await.id;
    let d = e.send_text(&q, "D").await;
    let x = e.send_text(&q, "X").await;
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), BTreeSet::from([a, c, d, x]));
    let rec = |id| ds.iter().find(|dl| dl.id == id).expect("delivered").receipt;
    let (ra, rc) = (rec(a), rec(c));
    e.nack(&q, rec(d), Some(Duration::ZERO), Some("retry me"))
        .await
        .expect("nack d");
    e.store
        .reject(&q, rec(x), fail("poison"))
        .await
        .expect("reject x");
    let configs_before = e.store.list_queues().await.expect("list");
    let stats_before = e.stats(&q).await;
    let x_before = e.get(x).await;

    let e = e.restart(h).await;
    assert_eq!(
        e.store.list_queues().await.expect("list"),
        configs_before,
        "queues and configs survive"
    );
    assert_eq!(e.stats(&q).await, stats_before, "gauges and totals survive");
    assert_eq!(
        e.get(x).await,
        x_before,
        "the dead letter survives unchanged"
    );
    let dup = e.send(&q, dedup("C again", "d1")).await;
    assert_eq!(
        (dup.id, dup.duplicate),
        (c, true),
        "the dedup window survives"
    );
    let fresh = e.send_text(&q, "after restart").await;
    assert!(
        ![a, b, c, d, x].contains(&fresh),
        "new id {fresh} collides with an id from before the restart"
    );
    e.ack(&q, ra)
        .await
        .expect("a receipt from before the restart is still valid");

    e.advance(ms(29_999));
    assert_eq!(
        ids_of(&e.recv(&q, 10).await),
        BTreeSet::from([d, fresh]),
        "t0+29.999s: B still delayed, C leased"
    );
    e.advance(ms(1));
    assert_eq!(
        ids_of(&e.recv(&q, 10).await),
        BTreeSet::from([b]),
        "t0+30s: B's delay over"
    );
    e.advance(secs(29));
    e.recv_none(&q, "t0+59s: C's lease (to t0+60s) still honoured")
        .await;
    assert_eq!(e.get(c).await.visible_at, Some(t0.plus(secs(60))));
    e.advance(secs(1));
    let again = e.recv(&q, 10).await;
    assert_eq!(
        ids_of(&again),
        BTreeSet::from([c]),
        "t0+60s: C's lease ran out"
    );
    assert_eq!(again[0].receive_count, 2);
    assert_code(
        e.ack(&q, rc).await,
        ErrorCode::ReceiptStale,
        "C's old receipt after redelivery",
    );
    let dd = e.get(d).await;
    assert_eq!(
        (dd.receive_count, dd.last_error.as_deref()),
        (2, Some("retry me"))
    );
}

/// Deleting a queue never deletes a message of another queue: dead letters and moved
/// messages of a deleted source stay in their DLQ and in the queue they moved to, with their
/// attempts, through a restart — also when the source's name is used again. The delete
/// answers how many messages the source itself held.
pub async fn restart_keeps_dead_letters_of_a_deleted_source(h: &dyn Harness) {
    let e = env(h).await;
    let src = e
        .queue(
            "rq",
            QueueConfigPatch {
                max_receive_count: Some(1),
                ..Default::default()
            },
        )
        .await;
    let dlq = qn("rq.dlq");
    let side = e
        .queue("rq.unprocessable", QueueConfigPatch::default())
        .await;
    let mut dead = Vec::new();
    for i in 0..5 {
        dead.push(e.send_text(&src, &format!("dead {i}")).await);
    }
    let moved = e.send_text(&src, "moved").await;
    let left = e.send_text(&src, "left behind").await;
    for d in e.recv(&src, 6).await {
        if d.id == moved {
            e.store
                .move_message(&src, d.receipt, &side, fail("not an envelope"))
                .await
                .expect("move");
        } else if d.id == left {
            e.store.release(&src, d.receipt).await.expect("release");
        } else {
            e.store
                .reject(&src, d.receipt, fail("poison"))
                .await
                .expect("reject");
        }
    }
    assert_eq!(
        e.store.delete_queue(&src).await.expect("delete the source"),
        1,
        "the delete counts the one message still in the source"
    );
    let check = async |e: &Env, when: &str| {
        for id in &dead {
            let m = e.get(*id).await;
            assert_eq!(m.queue, dlq, "{when}: dead letter {id} is in the DLQ");
            assert_eq!(m.source_queue.as_ref(), Some(&src), "{when}");
            assert_eq!(m.attempts.len(), 1, "{when}: its attempt is kept");
            assert_eq!(m.attempts[0].outcome, AttemptOutcome::Rejected, "{when}");
            assert_eq!(m.attempts[0].error.as_deref(), Some("poison"), "{when}");
        }
        assert_eq!(e.get(moved).await.queue, side, "{when}: the moved message");
        e.gone(left, "a message in the deleted queue goes with it")
            .await;
        assert_eq!(e.stats(&dlq).await.visible, 5, "{when}: DLQ depth");
        assert_eq!(e.stats(&side).await.visible, 1, "{when}: side queue depth");
    };
    check(&e, "before a restart").await;
    let e = e.restart(h).await;
    check(&e, "after a restart").await;
    // The source's name used again, and the store opened once more.
    let again = e.queue("rq", QueueConfigPatch::default()).await;
    e.send_text(&again, "new").await;
    let e = e.restart(h).await;
    check(&e, "after the name was used again and another restart").await;
    assert_eq!(
        e.stats(&again).await.visible,
        1,
        "the new queue's own message"
    );
}
