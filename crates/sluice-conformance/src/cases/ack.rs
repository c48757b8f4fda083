//! Ack: single and batch acknowledgements, results and stale receipts.

use super::*;

/// Ack removes the message; `get_message` shows a Completed record with the result (and no
/// body) until `result_ttl` after the ack, then `MessageNotFound`.
pub async fn ack_completes_and_keeps_result_for_result_ttl(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ack",
            QueueConfigPatch {
                result_ttl: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "work").await;
    let d = e.recv_one(&q).await;
    e.advance(secs(1));
    let acked_at = e.now();
    let out = e
        .store
        .ack(
            &q,
            vec![AckRequest {
                receipt: d.receipt,
                result: Some(Body::json(r#"{"ok":true}"#)),
            }],
        )
        .await
        .expect("ack call");
    assert_eq!(out, vec![Ok(())]);
    let m = e.get(id).await;
    assert_eq!(m.state, MessageState::Completed);
    assert_eq!(
        m.result,
        Some(Body::json(r#"{"ok":true}"#)),
        "result kept with the record"
    );
    assert_eq!(m.completed_at, Some(acked_at));
    assert_eq!(m.body, None, "a completed record has no body");
    assert_eq!(m.queue, q);
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight, s.completed, s.totals.acked),
        (0, 0, 1, 1)
    );
    e.advance(secs(30));
    e.recv_none(&q, "acked message is gone from the queue")
        .await;
    assert!(e.browse_ids(&q, BrowseState::Visible).await.is_empty());
    e.advance(ms(29_999));
    assert_eq!(
        e.get(id).await.state,
        MessageState::Completed,
        "kept for result_ttl after the ack"
    );
    e.advance(ms(2));
    e.gone(id, "completed record after result_ttl").await;
    assert_eq!(e.stats(&q).await.completed, 0);
}

/// A completed message keeps the attempts that failed before it succeeded (the newest 20),
/// with its result, across a restart; so does a cancelled task that ended on a failure.
pub async fn completed_message_keeps_its_attempts(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "history",
            QueueConfigPatch {
                result_ttl: Some(secs(600)),
                ..unlimited()
            },
        )
        .await;
    let id = e.send_text(&q, "flaky").await;
    for i in 1..=22u32 {
        let d = e.recv_one(&q).await;
        e.nack(&q, d.receipt, Some(Duration::ZERO), Some(&format!("e{i}")))
            .await
            .expect("nack");
    }
    // Then a lease that runs out: an attempt without an error, which leaves `last_error`.
    assert_eq!(e.recv_with(&q, 1, Some(secs(1))).await.len(), 1);
    e.advance(secs(2));
    let d = e.recv_one(&q).await;
    let out = e
        .store
        .ack(
            &q,
            vec![AckRequest {
                receipt: d.receipt,
                result: Some(Body::json(r#"{"ok":true}"#)),
            }],
        )
        .await
        .expect("ack call");
    assert_eq!(out, vec![Ok(())]);
    // A plain ack of a message that never failed stays without history.
    let clean = e.send_text(&q, "clean").await;
    let d = e.recv_one(&q).await;
    e.ack(&q, d.receipt).await.expect("ack clean");
    // A cancelled task that failed once, then ended on a failure.
    let cancelled = e.send_text(&q, "cancelled").await;
    let d = e.recv_one(&q).await;
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("first"))
        .await
        .expect("nack");
    let d = e.recv_one(&q).await;
    e.store.cancel(cancelled).await.expect("cancel");
    e.nack(&q, d.receipt, None, Some("second"))
        .await
        .expect("nack of the cancelled task");

    let check = |m: Message, c: Message, k: Message| {
        assert_eq!(m.state, MessageState::Completed);
        assert_eq!(m.result, Some(Body::json(r#"{"ok":true}"#)));
        let errors: Vec<_> = m.attempts.iter().map(|a| a.error.clone()).collect();
        let mut want: Vec<_> = (5..=22).map(|i| Some(format!("e{i}"))).collect();
        want.extend([None, None]);
        assert_eq!(
            errors, want,
            "the newest 20 attempts, oldest first, the acknowledged one last"
        );
        let outcomes: Vec<_> = m.attempts.iter().map(|a| a.outcome).collect();
        assert!(outcomes[..18].iter().all(|o| *o == AttemptOutcome::Nacked));
        assert_eq!(outcomes[18], AttemptOutcome::LeaseExpired);
        assert_eq!(outcomes[19], AttemptOutcome::Acked);
        assert_eq!(m.completed_at, Some(m.attempts[19].at));
        assert_eq!(
            m.last_error.as_deref(),
            Some("e22"),
            "the last error reported, kept after it completed"
        );
        assert_eq!(c.state, MessageState::Completed);
        let outcomes: Vec<_> = c.attempts.iter().map(|a| a.outcome).collect();
        assert_eq!(
            outcomes,
            [AttemptOutcome::Acked],
            "a message that never failed has one attempt: the acknowledged one"
        );
        assert!(k.cancelled && k.state == MessageState::Completed);
        assert_eq!(
            k.attempts.first().and_then(|a| a.error.as_deref()),
            Some("first"),
            "a cancelled task keeps the attempts that failed before"
        );
    };
    check(e.get(id).await, e.get(clean).await, e.get(cancelled).await);
    let e = e.restart(h).await;
    check(e.get(id).await, e.get(clean).await, e.get(cancelled).await);
}

/// Every delivery ends as one attempt that says when its lease began and who held it: the
/// name the consumer gave when it settled the delivery, else the one it gave when it received
/// it (a lease that runs out names its receiver). That holds for the acknowledged delivery,
/// for a dead letter's attempts, and for a lease granted before a restart.
///
/// Kept whole: one message is delivered five times, each ending another way, and each step adds the
/// attempt it expects to `want`; the history is then compared whole, before and after a restart.
pub async fn every_attempt_keeps_its_lease_start_and_consumer(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "held",
            QueueConfigPatch {
                result_ttl: Some(secs(600)),
                max_receive_count: Some(10),
                ..Default::default()
            },
        )
        .await;
    let failure = |error: &str, consumer: Option<&str>| Failure {
        error: Some(error.to_owned()),
        consumer: consumer.map(str::to_owned),
        retry_after: false,
    };
    let id = e.send_text(&q, "task").await;
    let mut want = Vec::new();

    // Nacked without a name: the receiver is named.
    let t = e.now();
    let d = e.recv_as(&q, Some("w1"), None).await;
    e.advance(secs(1));
    e.store
        .nack(&q, d.receipt, Some(Duration::ZERO), failure("a", None))
        .await
        .expect("nack");
    want.push((AttemptOutcome::Nacked, Some("w1"), t, e.now()));

    // Nacked by a consumer that names itself: that name.
    let t = e.now();
    let d = e.recv_as(&q, Some("w2"), None).await;
    e.advance(secs(2));
    e.store
        .nack(
            &q,
            d.receipt,
            Some(Duration::ZERO),
            failure("b", Some("w3")),
        )
        .await
        .expect("nack");
    want.push((AttemptOutcome::Nacked, Some("w3"), t, e.now()));

    // A lease that runs out: its receiver, ended at the lease's deadline.
    let t = e.now();
    e.recv_as(&q, Some("w4"), Some(secs(3))).await;
    e.advance(secs(5));
    want.push((AttemptOutcome::LeaseExpired, Some("w4"), t, t.plus(secs(3))));

    // A receive without a name: nobody is named, the start is still kept.
    let t = e.now();
    let d = e.recv_as(&q, None, None).await;
    e.advance(secs(1));
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some("c"))
        .await
        .expect("nack");
    want.push((AttemptOutcome::Nacked, None, t, e.now()));

    // Received, the store restarts, then acknowledged: the lease's start and receiver survive.
    let t = e.now();
    let d = e.recv_as(&q, Some("w5"), Some(secs(60))).await;
    e.advance(secs(1));
    let e = e.restart(h).await;
    e.advance(secs(1));
    e.ack(&q, d.receipt).await.expect("ack after a restart");
    want.push((AttemptOutcome::Acked, Some("w5"), t, e.now()));

    let check = |m: Message| {
        let got: Vec<_> = m
            .attempts
            .iter()
            .map(|a| (a.outcome, a.consumer.as_deref(), a.started_at, a.at))
            .collect();
        let want: Vec<_> = want
            .iter()
            .map(|(o, c, start, end)| (*o, *c, Some(*start), *end))
            .collect();
        assert_eq!(
            got, want,
            "each delivery: outcome, holder, lease start, end"
        );
    };
    check(e.get(id).await);

    // A plain ack (no earlier failure) and a dead letter keep theirs too.
    let plain = e.send_text(&q, "plain").await;
    let t = e.now();
    let d = e.recv_as(&q, Some("w6"), None).await;
    e.advance(secs(1));
    e.ack(&q, d.receipt).await.expect("ack");
    let dlq = e.queue("held.dlq", QueueConfigPatch::default()).await;
    let dead = e.send_text(&q, "dead").await;
    let t2 = e.now();
    let d = e.recv_as(&q, Some("w7"), None).await;
    e.advance(secs(1));
    e.store
        .reject(&q, d.receipt, failure("bad", None))
        .await
        .expect("reject");
    let plain_and_dead = |p: Message, x: Message| {
        let a = &p.attempts;
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].outcome, a[0].consumer.as_deref(), a[0].started_at),
            (AttemptOutcome::Acked, Some("w6"), Some(t))
        );
        let a = &x.attempts;
        assert_eq!(a.len(), 1);
        assert_eq!(x.queue, dlq);
        assert_eq!(
            (a[0].outcome, a[0].consumer.as_deref(), a[0].started_at),
            (AttemptOutcome::Rejected, Some("w7"), Some(t2))
        );
    };
    plain_and_dead(e.get(plain).await, e.get(dead).await);
    let e = e.restart(h).await;
    check(e.get(id).await);
    plain_and_dead(e.get(plain).await, e.get(dead).await);
}

/// A result over `max_message_bytes` fails its own receipt with `PayloadTooLarge` and changes
/// nothing: the lease still holds and can be acked afterwards. The other receipts of the batch
/// are acked.
pub async fn ack_result_over_max_message_bytes_fails_only_its_receipt(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ackbig",
            QueueConfigPatch {
                max_message_bytes: Some(100),
                result_ttl: Some(secs(60)),
                ..Default::default()
            },
        )
        .await;
    let big_id = e.send_text(&q, "big result").await;
    let small_id = e.send_text(&q, "small result").await;
    let first = e.recv_one(&q).await;
    let second = e.recv_one(&q).await;
    let (big, small) = if first.id == big_id {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(small.id, small_id);
    let out = e
        .store
        .ack(
            &q,
            vec![
                AckRequest {
                    receipt: big.receipt,
                    result: Some(Body::text("x".repeat(101))),
                },
                AckRequest {
                    receipt: small.receipt,
                    result: Some(Body::text("ok")),
                },
            ],
        )
        .await
        .expect("ack call");
    assert_eq!(out.len(), 2);
    assert!(
        matches!(out[0], Err(StoreError::PayloadTooLarge(_))),
        "oversized result: {:?}",
        out[0]
    );
    assert_eq!(out[1], Ok(()), "the other receipt is acked");
    assert_eq!(e.get(small_id).await.state, MessageState::Completed);
    assert_eq!(
        e.get(big_id).await.state,
        MessageState::InFlight,
        "the refused ack changed nothing"
    );
    let again = e
        .store
        .ack(
            &q,
            vec![AckRequest {
                receipt: big.receipt,
                result: None,
            }],
        )
        .await
        .expect("ack call");
    assert_eq!(again, vec![Ok(())], "the lease still held");
}

/// With `result_ttl` 0 no completed record is kept.
pub async fn ack_with_zero_result_ttl_keeps_nothing(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "ack0",
            QueueConfigPatch {
                result_ttl: Some(Duration::ZERO),
                ..Default::default()
            },
        )
        .await;
    let id = e.send_text(&q, "work").await;
    let d = e.recv_one(&q).await;
    e.store
        .ack(
            &q,
            vec![AckRequest {
                receipt: d.receipt,
                result: Some(Body::text("r")),
            }],
        )
        .await
        .expect("ack call")[0]
        .clone()
        .expect("ack");
    e.gone(id, "result_ttl 0 keeps no record").await;
    assert_eq!(e.stats(&q).await.totals.acked, 1);
}

/// A batch ack of many receipts (engines may take another path for long ones): each
/// receipt succeeds or fails on its own and each result stays with its own message; with
/// `result_ttl` 0 no record stays at all.
pub async fn long_ack_batch_pairs_each_receipt(h: &dyn Harness) {
    let e = env(h).await;
    for (name, ttl) in [("ackl", None), ("ackl0", Some(Duration::ZERO))] {
        let patch = QueueConfigPatch {
            result_ttl: ttl,
            ..QueueConfigPatch::default()
        };
        let q = e.queue(name, patch).await;
        e.send_batch(&q, (0..40).map(|i| text(&i.to_string())).collect())
            .await;
        let ds = e.recv(&q, 40).await;
        assert_eq!(ds.len(), 40);
        e.ack(&q, ds[7].receipt).await.expect("ack one first");
        let reqs = ds
            .iter()
            .enumerate()
            .map(|(i, d)| AckRequest {
                receipt: d.receipt,
                result: (i % 2 == 0).then(|| Body::text(format!("r{}", d.id.0))),
            })
            .collect();
        let out = e.store.ack(&q, reqs).await.expect("batch ack call");
        assert_eq!(out.len(), 40);
        for (i, (o, d)) in out.iter().zip(&ds).enumerate() {
            if i == 7 {
                assert_code(o.clone(), ErrorCode::ReceiptStale, "receipt acked before");
            } else {
                assert_eq!(*o, Ok(()), "{name}: receipt {i}");
            }
            if ttl.is_some() {
                e.gone(d.id, "result_ttl 0 keeps no record").await;
            } else if i != 7 {
                let want = (i % 2 == 0).then(|| Body::text(format!("r{}", d.id.0)));
                assert_eq!(e.get(d.id).await.result, want, "result of receipt {i}");
            }
        }
        let s = e.stats(&q).await;
        assert_eq!((s.in_flight, s.totals.acked), (0, 40), "{name}");
    }
}

/// A batch ack answers per receipt: good ones succeed, a stale one fails alone.
pub async fn ack_batch_reports_each_receipt(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("ackb", QueueConfigPatch::default()).await;
    e.send_batch(&q, vec![text("1"), text("2"), text("3")])
        .await;
    let ds = e.recv(&q, 3).await;
    assert_eq!(ds.len(), 3);
    e.ack(&q, ds[0].receipt).await.expect("ack first");
    let out = e
        .store
        .ack(
            &q,
            vec![
                AckRequest {
                    receipt: ds[1].receipt,
                    result: Some(Body::text("r1")),
                },
                AckRequest {
                    receipt: ds[0].receipt,
                    result: None,
                },
                AckRequest {
                    receipt: ds[2].receipt,
                    result: Some(Body::text("r2")),
                },
            ],
        )
        .await
        .expect("batch ack call");
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], Ok(()));
    assert_code(
        out[1].clone(),
        ErrorCode::ReceiptStale,
        "already-acked receipt in a batch",
    );
    assert_eq!(out[2], Ok(()));
    assert_eq!(
        e.get(ds[1].id).await.result,
        Some(Body::text("r1")),
        "each ack keeps its own result"
    );
    assert_eq!(e.get(ds[2].id).await.result, Some(Body::text("r2")));
    let s = e.stats(&q).await;
    assert_eq!((s.in_flight, s.totals.acked), (0, 3));
}

/// A completed record keeps the message's times: `enqueued_at` is its send time forever and
/// `entered_at` when it entered the queue it completed in — for a message acked in the queue
/// it was sent to, for one acked after a redrive (plain ack and ack with a result), and for
/// a cancelled waiting task, before and after a restart and a compaction-free reopen.
pub async fn ack_keeps_the_times_of_the_completed_message(h: &dyn Harness) {
    let e = env(h).await;
    let patch = QueueConfigPatch {
        result_ttl: Some(secs(3600)),
        ..Default::default()
    };
    let q = e.queue("times", patch.clone()).await;
    let dlq = e.queue("times.dlq", patch).await;
    let sent_at = e.now();
    let plain = e.send_text(&q, "plain").await;
    let back = e.send_text(&q, "redriven").await;
    let with_result = e.send_text(&q, "redriven with a result").await;
    let cancelled = e.send(&q, delayed("cancel me", secs(600))).await.id;
    e.advance(secs(1));
    for d in e.recv(&q, 3).await {
        if d.id == plain {
            e.ack(&q, d.receipt).await.expect("ack plain");
        } else {
            e.store
                .reject(&q, d.receipt, fail("first"))
                .await
                .expect("reject");
        }
    }
    e.advance(secs(1));
    let job = e
        .store
        .create_redrive(redrive::redrive_spec(&dlq))
        .await
        .expect("redrive");
    e.store.redrive_step(job.id, 10).await.expect("step");
    let redriven_at = e.now();
    e.advance(secs(1));
    for d in e.recv(&q, 2).await {
        let result = (d.id == with_result).then(|| Body::json("1"));
        let out = e
            .store
            .ack(
                &q,
                vec![AckRequest {
                    receipt: d.receipt,
                    result,
                }],
            )
            .await
            .expect("ack");
        assert_eq!(out, vec![Ok(())]);
    }
    e.store.cancel(cancelled).await.expect("cancel");
    let check = async |e: &Env, when: &str| {
        let m = e.get(plain).await;
        assert_eq!(m.state, MessageState::Completed, "{when}");
        assert_eq!((m.enqueued_at, m.entered_at), (sent_at, sent_at), "{when}");
        for id in [back, with_result] {
            let m = e.get(id).await;
            assert_eq!(m.state, MessageState::Completed, "{when}");
            assert_eq!(m.enqueued_at, sent_at, "{when}: the send time, forever");
            assert_eq!(m.entered_at, redriven_at, "{when}: when it came back");
            assert!(m.attempts.iter().all(|a| a.at >= m.enqueued_at), "{when}");
        }
        let m = e.get(cancelled).await;
        assert!(m.cancelled, "{when}");
        assert_eq!((m.enqueued_at, m.entered_at), (sent_at, sent_at), "{when}");
    };
    check(&e, "live").await;
    let e = e.restart(h).await;
    check(&e, "after a restart").await;
}
