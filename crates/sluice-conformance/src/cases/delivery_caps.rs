//! Delivery caps: pause, rate limits, in-flight caps and depth limits.

use sluice_core::store::AckOverlap;

use super::*;

/// A paused queue accepts sends and delivers nothing; leases already out can still be acked;
/// resume delivers.
pub async fn pause_holds_deliveries(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("pz", QueueConfigPatch::default()).await;
    e.send_text(&q, "before").await;
    let d = e.recv_one(&q).await;
    let out = e
        .store
        .put_queue(
            &q,
            &QueueConfigPatch {
                paused: Some(true),
                ..Default::default()
            },
        )
        .await
        .expect("pause");
    assert!(out.queue.config.paused);
    let id = e.send_text(&q, "during").await;
    e.recv_none(&q, "paused").await;
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight),
        (1, 1),
        "a paused queue still holds its messages"
    );
    assert_eq!(
        e.browse_ids(&q, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    e.ack(&q, d.receipt).await.expect("ack on a paused queue");
    e.advance(secs(60));
    e.recv_none(&q, "still paused later").await;
    e.queue(
        "pz",
        QueueConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(e.recv_one(&q).await.id, id, "resume delivers");
}

/// Queue `name` with `rate_limit` 3 per 10 s (a burst of all 3: the window alone decides),
/// hour-long leases and 12 messages waiting.
async fn three_per_ten_seconds(e: &Env, name: &str) -> QueueName {
    let q = e
        .queue(
            name,
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 3,
                    period: secs(10),
                    burst: Some(3),
                })),
                visibility_timeout: Some(secs(3600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..12).map(|i| text(&i.to_string())).collect())
        .await;
    q
}

/// A restart forgets no delivery that still counts against `rate_limit`: 3 per 10 s, 2 taken
/// before the restart, 1 after it, then none until the first two leave the window.
pub async fn rate_limit_holds_across_a_restart(h: &dyn Harness) {
    let e = env(h).await;
    let q = three_per_ten_seconds(&e, "rlr").await;
    assert_eq!(e.recv(&q, 2).await.len(), 2);
    e.advance(secs(4));
    let e = e.restart(h).await;
    assert_eq!(
        e.recv(&q, 10).await.len(),
        1,
        "one slot left after the restart"
    );
    e.recv_none(&q, "the two from before the restart still count")
        .await;
    let e = e.restart(h).await;
    e.recv_none(
        &q,
        "nor does a second restart forget the one after the first",
    )
    .await;
    e.advance(ms(6_001));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        2,
        "the first two left the window"
    );
}

/// `rate_limit` 3 per 10 s: never more than 3 deliveries in any 10 s window (a sliding
/// window), and deliveries resume as the window slides.
pub async fn rate_limit_bounds_deliveries_per_window(h: &dyn Harness) {
    let e = env(h).await;
    let q = three_per_ten_seconds(&e, "rl").await;
    assert_eq!(e.recv(&q, 2).await.len(), 2, "t=0: 2 of 3 allowed");
    e.advance(secs(5));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        1,
        "t=5s: only 1 left in the window"
    );
    e.recv_none(&q, "t=5s: limit of 3 per 10 s reached").await;
    e.advance(ms(4_999));
    e.recv_none(&q, "t=9.999s: still 3 in the last 10 s").await;
    e.advance(ms(2)); // t = 10.001 s: the 2 from t=0 left the window, the 1 from t=5 s did not
    let n = e.recv(&q, 10).await.len();
    assert!(
        n <= 2,
        "t=10.001s: {n} deliveries, but one from t=5s is still in the window (limit 3)"
    );
    assert_eq!(n, 2, "t=10.001s: two slots freed by the t=0 deliveries");
    e.recv_none(&q, "t=10.001s: window full again").await;
    e.advance(secs(5)); // t = 15.001 s
    assert_eq!(
        e.recv(&q, 10).await.len(),
        1,
        "t=15.001s: the t=5s slot is free"
    );
    e.advance(secs(30));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        3,
        "after a quiet window the full limit is available"
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.in_flight, s.visible),
        (9, 3),
        "rate-limited receives lease only what they return"
    );
}

/// `rate_limit` 10 per 10 s with a burst of 2: after a quiet spell 2 go at once, then one a
/// second (the even spacing), never more than 2 at once nor 10 in any 10 s, at the full rate;
/// the spacing holds across a restart.
pub async fn rate_limit_spreads_deliveries_after_a_burst(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "spread",
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 10,
                    period: secs(10),
                    burst: Some(2),
                })),
                visibility_timeout: Some(secs(3600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..40).map(|i| text(&i.to_string())).collect())
        .await;
    assert_eq!(e.recv(&q, 10).await.len(), 2, "t=0: the burst");
    e.recv_none(&q, "t=0: the rest waits for the spacing").await;
    e.advance(ms(999));
    e.recv_none(&q, "t=0.999s: not yet").await;
    e.advance(ms(1));
    assert_eq!(e.recv(&q, 10).await.len(), 1, "t=1s: one");
    e.advance(ms(500));
    let e = e.restart(h).await;
    e.recv_none(&q, "t=1.5s, after a restart: the spacing holds")
        .await;
    e.advance(ms(500));
    assert_eq!(e.recv(&q, 10).await.len(), 1, "t=2s: one");
    // Steady demand for 20 s: one a second, never more than 10 in any 10 s.
    let mut taken = vec![(0i64, 2usize), (1_000, 1), (2_000, 1)];
    for t in (2_100..22_000).step_by(100) {
        e.advance(ms(100));
        let n = e.recv(&q, 10).await.len();
        if n > 0 {
            taken.push((t, n));
        }
    }
    for (start, _) in &taken {
        let inside: usize = taken
            .iter()
            .filter(|(t, _)| t >= start && *t < start + 10_000)
            .map(|(_, n)| n)
            .sum();
        assert!(
            inside <= 10,
            "{inside} deliveries in the 10 s from t={start} ms"
        );
    }
    assert!(
        taken.iter().all(|(_, n)| *n <= 2),
        "never more than the burst at once: {taken:?}"
    );
    let moments = taken
        .iter()
        .filter(|(t, _)| (2_000..22_000).contains(t))
        .count();
    let total: usize = taken
        .iter()
        .filter(|(t, _)| (2_000..22_000).contains(t))
        .map(|(_, n)| n)
        .sum();
    assert!(
        total >= 19 && moments >= 17,
        "the full rate, spread: {total} deliveries at {moments} moments in 20 s: {taken:?}"
    );
    // A quiet spell gives back the burst, not the whole limit.
    e.advance(secs(30));
    assert_eq!(
        e.recv(&q, 10).await.len(),
        2,
        "after a quiet spell: the burst"
    );
    let bad = QueueConfigPatch {
        rate_limit: Some(Some(RateLimit {
            limit: 10,
            period: secs(10),
            burst: Some(11),
        })),
        ..Default::default()
    };
    assert_code(
        e.store.put_queue(&q, &bad).await,
        ErrorCode::InvalidArgument,
        "a burst above the limit",
    );
}

/// `max_in_flight` 2: never more than 2 leased; ack, nack and lease expiry free slots.
pub async fn max_in_flight_bounds_leases(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "mif",
            QueueConfigPatch {
                max_in_flight: Some(Some(2)),
                visibility_timeout: Some(secs(10)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..5).map(|i| text(&i.to_string())).collect())
        .await;
    let ds = e.recv(&q, 5).await;
    assert_eq!(ds.len(), 2, "max_in_flight 2 with 5 visible");
    e.recv_none(&q, "2 in flight already").await;
    assert_eq!(e.stats(&q).await.in_flight, 2);
    e.ack(&q, ds[0].receipt).await.expect("ack");
    let more = e.recv(&q, 5).await;
    assert_eq!(more.len(), 1, "ack frees one slot");
    assert_eq!(e.stats(&q).await.in_flight, 2);
    e.nack(&q, ds[1].receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(e.recv(&q, 5).await.len(), 1, "nack frees one slot");
    e.recv_none(&q, "full again").await;
    e.advance(secs(10));
    assert_eq!(
        e.recv(&q, 5).await.len(),
        2,
        "expired leases free their slots"
    );
    let s = e.stats(&q).await;
    assert_eq!((s.in_flight, s.visible), (2, 2));
}

/// A lease the engine lets overlap an ack (`lease_may_overlap_ack`) still sees that ack
/// where it matters: with `max_in_flight` 1, the slot the ack frees is leased at once. Without
/// `max_in_flight` the overlap is allowed or not, and either way both succeed. The per-queue
/// answer agrees with the engine's hints wherever they decide it.
pub async fn lease_overlapping_an_ack_sees_it(h: &dyn Harness) {
    let e = env(h).await;
    for limit in [Some(1), None] {
        let name = if limit.is_some() { "ovl1" } else { "ovl" };
        let q = e
            .queue(
                name,
                QueueConfigPatch {
                    max_in_flight: Some(limit),
                    ..Default::default()
                },
            )
            .await;
        e.send_batch(&q, vec![text("a"), text("b")]).await;
        let first = e.recv(&q, 1).await;
        assert_eq!(first.len(), 1);
        let ack = vec![AckRequest {
            receipt: first[0].receipt,
            result: None,
        }];
        let overlap = e.store.lease_may_overlap_ack(&q).await;
        match e.store.hints().ack_overlap {
            AckOverlap::Never => assert!(!overlap, "hints say never, {q} says it may"),
            AckOverlap::Always => assert!(overlap, "hints say always, {q} says it may not"),
            AckOverlap::PerQueue => {}
        }
        let next = if overlap {
            // As the broker does: the ack is polled once, then the lease runs beside it.
            let mut acking = e.store.ack(&q, ack);
            let early = futures::poll!(acking.as_mut());
            let next = e.recv(&q, 5).await;
            let outcome = match early {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => acking.await,
            };
            assert!(
                matches!(outcome.as_deref(), Ok([Ok(())])),
                "overlapped ack on {q}: {outcome:?}"
            );
            next
        } else {
            let outcome = e.store.ack(&q, ack).await;
            assert!(matches!(outcome.as_deref(), Ok([Ok(())])), "{outcome:?}");
            e.recv(&q, 5).await
        };
        assert_eq!(
            next.len(),
            1,
            "{q} (max_in_flight {limit:?}): the lease after the ack takes the other message"
        );
        assert_ne!(next[0].id, first[0].id);
    }
}

/// `max_depth` 3 counts visible + delayed + in flight; sends beyond it are refused with
/// `QueueFull` (with a retry hint), all or nothing; dead letters and acks free room.
pub async fn max_depth_refuses_sends(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "md",
            QueueConfigPatch {
                max_depth: Some(Some(3)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, vec![text("1"), text("2")]).await;
    let err = e
        .store
        .send(&q, vec![text("3"), text("4")])
        .await
        .expect_err("2 + 2 > 3 must be refused");
    assert_eq!(err.code(), ErrorCode::QueueFull, "got {err:?}");
    assert!(
        err.retry_after().is_some(),
        "QueueFull carries a retry hint"
    );
    assert_eq!(
        e.stats(&q).await.visible,
        2,
        "a refused batch stores nothing"
    );
    e.send(&q, delayed("3", secs(60))).await;
    assert_code(
        e.store.send(&q, vec![text("4")]).await,
        ErrorCode::QueueFull,
        "delayed messages count toward depth",
    );
    let d = e.recv_one(&q).await;
    assert_code(
        e.store.send(&q, vec![text("4")]).await,
        ErrorCode::QueueFull,
        "in-flight messages count toward depth",
    );
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.delayed, s.in_flight, s.totals.sent),
        (1, 1, 1, 3)
    );
    e.store
        .reject(&q, d.receipt, fail("x"))
        .await
        .expect("reject");
    e.send_text(&q, "4").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack");
    e.send_text(&q, "5").await;
    assert_code(
        e.store.send(&q, vec![text("6")]).await,
        ErrorCode::QueueFull,
        "full again",
    );

    // A send of duplicates alone stores nothing, so it is answered with the first id, even
    // by a queue whose depth is over a max_depth lowered below it.
    let q = e
        .queue(
            "md2",
            QueueConfigPatch {
                max_depth: Some(Some(2)),
                dedup_window: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let first = e.send(&q, dedup("A", "order-1")).await;
    e.send_text(&q, "B").await;
    e.store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_depth: Some(Some(1)),
                ..Default::default()
            },
        )
        .await
        .expect("lower max_depth");
    let again = e.send(&q, dedup("A", "order-1")).await;
    assert_eq!((again.id, again.duplicate), (first.id, true));
    assert_code(
        e.store.send(&q, vec![text("C")]).await,
        ErrorCode::QueueFull,
        "a new message does not fit",
    );
}
