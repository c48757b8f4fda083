//! Stats: gauges and totals, and the stored stats history.

use super::*;

/// Gauges: visible, delayed, in_flight, dead_letter_depth and oldest_visible_age (measured
/// from when the message became visible, not from its send).
pub async fn stats_gauges(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("sg", QueueConfigPatch::default()).await;
    let s = e.stats(&q).await;
    assert_eq!(
        (
            s.visible,
            s.delayed,
            s.in_flight,
            s.dead_letter_depth,
            s.completed
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(s.oldest_visible_age, Duration::ZERO);
    assert_eq!(s.totals, sluice_core::stats::Totals::default());

    e.send(&q, delayed("b", secs(5))).await;
    e.send(&q, delayed("c", secs(60))).await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.oldest_visible_age),
        (0, 2, Duration::ZERO)
    );
    e.advance(secs(8));
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.delayed), (1, 1));
    assert_eq!(
        s.oldest_visible_age,
        secs(3),
        "b has been visible since t0+5s"
    );
    e.send_text(&q, "a").await;
    e.advance(secs(1));
    assert_eq!(
        e.stats(&q).await.oldest_visible_age,
        secs(4),
        "the oldest visible counts"
    );
    let ds = e.recv(&q, 10).await;
    assert_eq!(ds.len(), 2);
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.oldest_visible_age),
        (0, 1, 2, Duration::ZERO)
    );
    e.nack(&q, ds[0].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    e.advance(secs(2));
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.oldest_visible_age),
        (1, 1, secs(2))
    );
    e.store
        .reject(&q, ds[1].receipt, fail("x"))
        .await
        .expect("reject");
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.dead_letter_depth),
        (1, 1, 0, 1)
    );
}

/// Totals: sent (not duplicates), received, acked, nacked (including the dead-lettering one),
/// dead_lettered (reject, exhausted nack, expired last lease).
pub async fn stats_totals(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "stt",
            QueueConfigPatch {
                max_receive_count: Some(2),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, vec![text("1"), text("2"), text("3"), text("4")])
        .await;
    e.send(&q, dedup("5", "d")).await;
    assert!(e.send(&q, dedup("5 again", "d")).await.duplicate);
    let ds = e.recv(&q, 5).await;
    assert_eq!(ds.len(), 5);
    e.ack(&q, ds[0].receipt).await.expect("ack");
    e.nack(&q, ds[1].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    e.store
        .reject(&q, ds[2].receipt, fail("x"))
        .await
        .expect("reject");
    e.advance(secs(10)); // ds[3], ds[4] leases run out (attempt 1 of 2)
    let again = e.recv(&q, 5).await;
    assert_eq!(
        ids_of(&again),
        BTreeSet::from([ds[1].id, ds[3].id, ds[4].id])
    );
    let two = again
        .iter()
        .find(|d| d.id == ds[1].id)
        .expect("nacked one redelivered");
    let out = e
        .nack(&q, two.receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(out.state, None, "second nack of 2 dead-letters");
    e.advance(secs(10)); // ds[3], ds[4] run out on their last attempt
    let s = e.stats(&q).await;
    let t = s.totals;
    assert_eq!(t.sent, 5, "duplicates are not counted as sent");
    assert_eq!(t.received, 8, "5 first deliveries + 3 redeliveries");
    assert_eq!(t.acked, 1);
    assert_eq!(t.nacked, 2, "nacks including the one that dead-lettered");
    assert_eq!(
        t.dead_lettered, 4,
        "reject + exhausted nack + 2 expired last leases"
    );
    assert_eq!((t.expired, t.redriven), (0, 0));
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.dead_letter_depth),
        (0, 0, 0, 4)
    );
}

/// Stats history points are stored once per queue and time, kept 24 h, and survive
/// a restart.
pub async fn stats_history_is_stored_once_and_kept_a_day(h: &dyn Harness) {
    use sluice_core::stats::{HISTORY_KEPT, SAMPLE_INTERVAL, StatsSample};
    let e = env(h).await;
    let q = e.queue("work", QueueConfigPatch::default()).await;
    e.send_text(&q, "a").await;
    let t0 = StatsSample::slot(e.now());
    let s0 = StatsSample::of(&e.stats(&q).await, t0);
    e.store
        .record_stats(vec![(q.clone(), s0)])
        .await
        .expect("record");
    let mut other = s0;
    other.visible = 999;
    e.store
        .record_stats(vec![(q.clone(), other)])
        .await
        .expect("a second node's sample of the same moment");
    e.send_text(&q, "b").await;
    let t1 = t0.plus(SAMPLE_INTERVAL);
    let s1 = StatsSample::of(&e.stats(&q).await, t1);
    e.store
        .record_stats(vec![(q.clone(), s1), (qn("ghost"), s1)])
        .await
        .expect("unknown queues are skipped");
    let h0 = e.store.stats_history(&q, t0).await.expect("history");
    assert_eq!(h0, vec![s0, s1], "one point per time, the first one kept");
    assert_eq!(
        e.store
            .stats_history(&q, t1.plus(secs(1)))
            .await
            .expect("since"),
        vec![s1],
        "from a moment after a point: that point first"
    );
    assert_eq!((h0[0].visible, h0[1].visible, h0[1].totals.sent), (1, 2, 2));

    let e = e.restart(h).await;
    assert_eq!(
        e.store.stats_history(&q, t0).await.expect("history"),
        vec![s0, s1],
        "history survives a restart"
    );
    let late = t0.plus(HISTORY_KEPT).plus(SAMPLE_INTERVAL);
    let s2 = StatsSample { at: late, ..s1 };
    e.store
        .record_stats(vec![(q.clone(), s2)])
        .await
        .expect("record");
    let h = e.store.stats_history(&q, t0).await.expect("history");
    assert_eq!(
        h.first().map(|s| s.at),
        Some(t1),
        "points older than a day are forgotten"
    );
    assert_code(
        e.store.stats_history(&qn("ghost"), t0).await,
        ErrorCode::QueueNotFound,
        "unknown queue",
    );
}

/// Readers of the whole broker ask about a page of queues at once: `stats_many` agrees with
/// each queue's own `stats` (gauges, DLQ depth, totals) and answers `None` for a name no queue
/// has; `stats_history_many` and `dead_letter_queues_among` likewise, in the order asked; more
/// than a page of names is refused.
pub async fn stats_of_many_queues_agree_with_each_queues_own(h: &dyn Harness) {
    use sluice_core::stats::{SAMPLE_INTERVAL, StatsSample};
    let e = env(h).await;
    let (a, a_dlq) = e.queue_and_dlq("many-a").await;
    let b = e
        .queue(
            "many-b",
            QueueConfigPatch {
                max_receive_count: Some(0),
                dead_letter_queue: Some(None),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&a, vec![text("1"), text("2"), text("3")])
        .await;
    e.send(&a, delayed("later", secs(60))).await;
    e.send_text(&b, "x").await;
    let ds = e.recv(&a, 2).await;
    e.store
        .reject(&a, ds[0].receipt, fail("x"))
        .await
        .expect("reject");
    e.advance(secs(3));

    let ghost = qn("many-ghost");
    let asked = vec![a.clone(), ghost.clone(), b.clone(), a_dlq.clone()];
    let many = e.store.stats_many(&asked).await.expect("stats_many");
    assert_eq!(many.len(), asked.len(), "one answer per name asked");
    assert_eq!(many[1], None, "a name no queue has");
    let sa = many[0].clone().expect("many-a");
    assert_eq!(
        (sa.visible, sa.delayed, sa.in_flight, sa.dead_letter_depth),
        (1, 1, 1, 1),
        "{sa:?}"
    );
    assert_eq!(sa.oldest_visible_age, secs(3));
    for (i, q) in [(0, &a), (2, &b), (3, &a_dlq)] {
        assert_eq!(many[i].as_ref(), Some(&e.stats(q).await), "{q}");
    }
    assert!(
        e.store.stats_many(&[]).await.expect("none").is_empty(),
        "no names, no answers"
    );
    let too_many: Vec<QueueName> = (0..=sluice_core::store::MAX_QUEUE_PAGE)
        .map(|i| qn(&format!("q{i}")))
        .collect();
    assert_code(
        e.store.stats_many(&too_many).await,
        ErrorCode::InvalidArgument,
        "more than a page of queues",
    );

    let t0 = StatsSample::slot(e.now());
    let t1 = t0.plus(SAMPLE_INTERVAL);
    let pa = StatsSample::of(&sa, t0);
    let pb = StatsSample::of(&e.stats(&b).await, t1);
    e.store
        .record_stats(vec![(a.clone(), pa), (b.clone(), pb)])
        .await
        .expect("record");
    let histories = e
        .store
        .stats_history_many(&[b.clone(), ghost.clone(), a.clone()], t0)
        .await
        .expect("histories");
    assert_eq!(histories, vec![vec![pb], vec![], vec![pa]]);
    assert_eq!(
        e.store
            .dead_letter_queues_among(&[a.clone(), a_dlq.clone(), ghost, b])
            .await
            .expect("roles"),
        vec![false, true, false, false]
    );
}

/// A history point that repeats the queue's latest numbers is not stored until that one is an
/// hour old, so an idle queue costs a point an hour; a read from any moment starts with the
/// latest point before it, which holds the numbers then.
pub async fn repeated_history_points_are_stored_once_an_hour(h: &dyn Harness) {
    use sluice_core::stats::{HISTORY_HEARTBEAT, SAMPLE_INTERVAL, StatsSample};
    let e = env(h).await;
    let q = e.queue("idle", QueueConfigPatch::default()).await;
    let t0 = StatsSample::slot(e.now());
    let idle = StatsSample::of(&e.stats(&q).await, t0);
    let at = |k: i64| t0.plus(SAMPLE_INTERVAL * u32::try_from(k).unwrap_or(0));
    for k in 0..6 {
        e.store
            .record_stats(vec![(q.clone(), StatsSample { at: at(k), ..idle })])
            .await
            .expect("record");
    }
    assert_eq!(
        e.store.stats_history(&q, t0).await.expect("history"),
        vec![idle],
        "five repeats left out"
    );
    e.send_text(&q, "a").await;
    let busy = StatsSample::of(&e.stats(&q).await, at(6));
    e.store
        .record_stats(vec![(q.clone(), busy)])
        .await
        .expect("a change");
    assert_eq!(
        e.store.stats_history(&q, at(3)).await.expect("history"),
        vec![idle, busy],
        "a read from a moment in between starts with the point that holds it"
    );
    let hour = t0.plus(HISTORY_HEARTBEAT);
    let later = |d: Timestamp| StatsSample { at: d, ..busy };
    e.store
        .record_stats(vec![(q.clone(), later(hour))])
        .await
        .expect("record");
    e.store
        .record_stats(vec![(q.clone(), later(at(6).plus(HISTORY_HEARTBEAT)))])
        .await
        .expect("record");
    assert_eq!(
        e.store.stats_history(&q, t0).await.expect("history"),
        vec![idle, busy, later(at(6).plus(HISTORY_HEARTBEAT))],
        "a repeat is stored once the latest point is an hour old"
    );
    let e = e.restart(h).await;
    assert_eq!(
        e.store.stats_history(&q, hour).await.expect("history"),
        vec![busy, later(at(6).plus(HISTORY_HEARTBEAT))],
        "the same after a restart"
    );
}
