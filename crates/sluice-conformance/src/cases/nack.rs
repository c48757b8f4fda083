//! Nack: retries, backoff and dead-lettering on the last attempt.

use super::*;

/// Rule 2: a nack with a delay makes the message visible after exactly that delay, and stores
/// the error as `last_error` and in `attempts`.
pub async fn nack_with_explicit_delay(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nd", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let t = e.now();
    let out = e
        .store
        .nack(
            &q,
            d.receipt,
            Some(secs(7)),
            Failure {
                error: Some("boom".into()),
                consumer: Some("w1".into()),
                retry_after: false,
            },
        )
        .await
        .expect("nack");
    assert_eq!(
        out,
        NackOutcome {
            state: Some(MessageState::Delayed),
            queue: q.clone()
        }
    );
    let m = e.get(id).await;
    assert_eq!(
        (m.state, m.visible_at),
        (MessageState::Delayed, Some(t.plus(secs(7))))
    );
    assert_eq!(m.last_error.as_deref(), Some("boom"));
    let last = m.attempts.last().expect("the nack is recorded in attempts");
    assert_eq!(last.outcome, AttemptOutcome::Nacked);
    assert_eq!(last.error.as_deref(), Some("boom"));
    assert_eq!(last.consumer.as_deref(), Some("w1"));
    assert_eq!(last.at, t);
    let s = e.stats(&q).await;
    assert_eq!((s.delayed, s.in_flight, s.totals.nacked), (1, 0, 1));
    e.advance(ms(6_999));
    e.recv_none(&q, "nack delay not over").await;
    e.advance(ms(1));
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
    assert_eq!(
        d2.last_error.as_deref(),
        Some("boom"),
        "the delivery carries last_error"
    );
}

/// A nack with a zero delay makes the message visible at once.
pub async fn nack_with_zero_delay_is_visible_at_once(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("nz", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), None)
        .await
        .expect("nack");
    assert_eq!(
        out,
        NackOutcome {
            state: Some(MessageState::Visible),
            queue: q.clone()
        }
    );
    let d2 = e.recv_one(&q).await;
    assert_eq!((d2.id, d2.receive_count), (id, 2));
}

/// Rule 2: without a delay the retry waits a jittered backoff of at most
/// `min(backoff_max, backoff_base * 2^(receive_count-1))`, and the jitter spreads retries.
pub async fn nack_backoff_stays_under_capped_ceiling(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "nb",
            QueueConfigPatch {
                backoff_base: Some(secs(10)),
                backoff_max: Some(secs(25)),
                max_receive_count: Some(10),
                visibility_timeout: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..20).map(|i| text(&i.to_string())).collect())
        .await;
    // Ceilings after the 1st, 2nd and 3rd delivery: 10 s, 20 s, min(25 s, 40 s).
    for (round, ceiling) in [(1u32, secs(10)), (2, secs(20)), (3, secs(25))] {
        let ds = e.recv(&q, 20).await;
        assert_eq!(
            ds.len(),
            20,
            "round {round}: all 20 are visible again after the ceiling"
        );
        let t = e.now();
        for d in &ds {
            assert_eq!(d.receive_count, round);
            let out = e
                .nack(&q, d.receipt, None, Some("transient"))
                .await
                .expect("nack");
            assert!(
                matches!(
                    out.state,
                    Some(MessageState::Visible | MessageState::Delayed)
                ) && out.queue == q,
                "round {round}: nack below max_receive_count retries in the same queue, got {out:?}"
            );
        }
        for m in e.browse(&q, BrowseState::Delayed).await {
            let at = m.visible_at.expect("a delayed message has visible_at");
            assert!(
                at <= t.plus(ceiling),
                "round {round}: retry of {} at +{:?}, beyond the ceiling {ceiling:?}",
                m.id,
                at.since(t)
            );
        }
        if round == 1 {
            e.advance(ceiling / 2);
            assert!(
                e.stats(&q).await.visible >= 1,
                "full jitter: of 20 retries at least one is due within half the ceiling"
            );
            e.advance(ceiling / 2);
        } else {
            e.advance(ceiling);
        }
        let s = e.stats(&q).await;
        assert_eq!(
            (s.visible, s.delayed),
            (20, 0),
            "round {round}: all due by the ceiling {ceiling:?}"
        );
    }
}

/// Rules 2 and 10: a nack on the last attempt dead-letters (reason `exhausted`) keeping id,
/// body, attributes, `last_error`, `attempts` and `source_queue`.
pub async fn nack_on_last_attempt_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "nl",
            QueueConfigPatch {
                max_receive_count: Some(2),
                ..Default::default()
            },
        )
        .await;
    let dlq = qn("nl.dlq");
    let body = Body::json(r#"{"task":"t"}"#);
    let id = e
        .send(
            &q,
            NewMessage {
                attributes: attrs(&[("tenant", "7")]),
                ..NewMessage::new(body.clone())
            },
        )
        .await
        .id;
    let d = e.recv_one(&q).await;
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), Some("e1"))
        .await
        .expect("nack 1");
    assert_eq!(
        out.state,
        Some(MessageState::Visible),
        "first nack of 2 retries"
    );
    let d = e.recv_one(&q).await;
    assert_eq!(d.receive_count, 2);
    let out = e
        .nack(&q, d.receipt, Some(Duration::ZERO), Some("e2"))
        .await
        .expect("nack 2");
    assert_eq!(
        out,
        NackOutcome {
            state: None,
            queue: dlq.clone()
        },
        "nack on the last attempt dead-letters"
    );
    let t = e.now();

    let m = e.get(id).await;
    assert_eq!(m.queue, dlq, "the message is in the DLQ");
    assert_eq!(
        m.state,
        MessageState::Visible,
        "a dead letter is an ordinary visible message of the DLQ"
    );
    let dl = m.dead_letter.clone().expect("dead_letter set in the DLQ");
    assert_eq!((dl.reason, dl.at), (DeadLetterReason::Exhausted, t));
    assert_eq!(m.source_queue.as_ref(), Some(&q));
    assert_eq!(m.body.as_ref(), Some(&body));
    assert_eq!(m.attributes, attrs(&[("tenant", "7")]));
    assert_eq!(m.last_error.as_deref(), Some("e2"));
    let errs: Vec<_> = m
        .attempts
        .iter()
        .map(|a| (a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        errs,
        [
            (AttemptOutcome::Nacked, Some("e1")),
            (AttemptOutcome::Nacked, Some("e2"))
        ]
    );

    e.recv_none(&q, "dead-lettered message is not in the source")
        .await;
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::Visible).await,
        BTreeSet::from([id])
    );
    let s = e.stats(&q).await;
    assert_eq!((s.visible, s.in_flight, s.dead_letter_depth), (0, 0, 1));
    assert_eq!((s.totals.nacked, s.totals.dead_lettered), (2, 1));
    let dd = e.recv_one(&dlq).await;
    assert_eq!(
        (dd.id, &dd.body),
        (id, &body),
        "the DLQ delivers it like any queue"
    );
}
