//! Unlimited attempts, and the errors every operation reports.

use super::*;
use sluice_core::summary::{GroupBy, SummaryRequest};

/// Rule 9: `max_receive_count` 0 never dead-letters, on nack or lease expiry, with or without
/// a DLQ configured; creating it without a DLQ warns. Attempts keep the newest 20.
pub async fn unlimited_receive_count_never_dead_letters(h: &dyn Harness) {
    let e = env(h).await;
    let q = qn("forever");
    let out = e
        .store
        .put_queue(&q, &unlimited())
        .await
        .expect("put unlimited");
    assert!(
        !out.warnings.is_empty(),
        "unlimited attempts without a DLQ is warned about at creation"
    );
    assert_eq!(out.queue.config.dead_letter_queue, None);
    let id = e.send_text(&q, "x").await;
    for i in 1..=25u32 {
        let d = e.recv_one(&q).await;
        assert_eq!(d.receive_count, i);
        assert_eq!(d.max_receive_count, 0);
        let out = e
            .nack(&q, d.receipt, Some(Duration::ZERO), Some(&format!("e{i}")))
            .await
            .expect("nack");
        assert_eq!(
            out,
            NackOutcome {
                state: Some(MessageState::Visible),
                queue: q.clone()
            },
            "nack {i}"
        );
    }
    for _ in 0..3 {
        e.recv_with(&q, 1, Some(secs(1))).await;
        e.advance(secs(1));
    }
    let m = e.get(id).await;
    assert_eq!(
        (m.queue.clone(), m.state, m.receive_count),
        (q.clone(), MessageState::Visible, 28)
    );
    assert_eq!(
        m.attempts.len(),
        limits::MAX_ATTEMPTS_KEPT,
        "attempts keep the newest 20"
    );
    let nacks: Vec<_> = m
        .attempts
        .iter()
        .filter_map(|a| a.error.as_deref())
        .collect();
    assert_eq!(
        nacks.first().copied(),
        Some("e9"),
        "oldest kept nack after 25 nacks + 3 expiries"
    );
    assert_eq!(nacks.last().copied(), Some("e25"));
    assert_eq!(m.last_error.as_deref(), Some("e25"));
    assert_eq!(e.stats(&q).await.totals.dead_lettered, 0);

    let with_dlq = e
        .queue(
            "forever2",
            QueueConfigPatch {
                max_receive_count: Some(0),
                ..Default::default()
            },
        )
        .await;
    let id2 = e.send_text(&with_dlq, "y").await;
    for i in 1..=12u32 {
        let d = e.recv_one(&with_dlq).await;
        assert_eq!(d.receive_count, i);
        let out = e
            .nack(&with_dlq, d.receipt, Some(Duration::ZERO), None)
            .await
            .expect("nack");
        assert_eq!(
            out.state,
            Some(MessageState::Visible),
            "nack {i} with a DLQ configured but unlimited attempts"
        );
    }
    assert_eq!(e.get(id2).await.queue, with_dlq);
    assert_eq!(e.stats(&with_dlq).await.dead_letter_depth, 0);
}

/// An error longer than the limit is cut with a marker, not refused.
pub async fn long_error_is_clipped_not_refused(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("le2", QueueConfigPatch::default()).await;
    let id = e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let long = "é".repeat(10_000);
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some(&long))
        .await
        .expect("a long error is accepted");
    let m = e.get(id).await;
    let le = m.last_error.expect("last_error kept");
    assert!(
        le.len() <= limits::MAX_ERROR_BYTES,
        "last_error is {} bytes",
        le.len()
    );
    assert!(le.ends_with("[truncated]"), "clipped errors carry a marker");
    let d = e.recv_one(&q).await;
    e.store
        .reject(&q, d.receipt, fail(&long))
        .await
        .expect("reject with a long error is accepted");
    let m = e.get(id).await;
    assert!(
        m.last_error
            .is_some_and(|l| l.len() <= limits::MAX_ERROR_BYTES)
    );
}

/// Every operation naming an unknown queue is `QueueNotFound` and changes nothing.
pub async fn unknown_queue_is_queue_not_found(h: &dyn Harness) {
    let e = env(h).await;
    let real = e.queue("real", QueueConfigPatch::default()).await;
    let ghost = qn("ghost");
    let id = e.send_text(&real, "x").await;
    let d = e.recv_one(&real).await;
    let r = d.receipt;
    let nf = ErrorCode::QueueNotFound;
    assert_code(e.store.get_queue(&ghost).await, nf, "get_queue");
    assert_code(e.store.delete_queue(&ghost).await, nf, "delete_queue");
    assert_code(e.store.send(&ghost, vec![text("x")]).await, nf, "send");
    assert_code(
        e.store.receive(&ghost, ReceiveRequest::default()).await,
        nf,
        "receive",
    );
    assert_code(
        e.store
            .ack(
                &ghost,
                vec![AckRequest {
                    receipt: r,
                    result: None,
                }],
            )
            .await,
        nf,
        "ack",
    );
    assert_code(
        e.store.nack(&ghost, r, None, Failure::default()).await,
        nf,
        "nack",
    );
    assert_code(
        e.store.reject(&ghost, r, Failure::default()).await,
        nf,
        "reject",
    );
    assert_code(
        e.store
            .move_message(&ghost, r, &real, Failure::default())
            .await,
        nf,
        "move from unknown",
    );
    assert_code(e.store.extend(&ghost, r, secs(5)).await, nf, "extend");
    assert_code(
        e.store
            .browse(
                &ghost,
                BrowseRequest {
                    state: BrowseState::All,
                    limit: 10,
                    cursor: None,
                },
            )
            .await,
        nf,
        "browse",
    );
    assert_code(e.store.purge(&ghost).await, nf, "purge");
    assert_code(e.store.stats(&ghost).await, nf, "stats");
    let long_poll = tokio::time::timeout(
        secs(3),
        e.store.receive(
            &ghost,
            ReceiveRequest {
                wait: secs(5),
                ..Default::default()
            },
        ),
    )
    .await
    .expect("a long poll on an unknown queue fails at once");
    assert_code(long_poll, nf, "long-poll receive");
    assert_code(
        e.store.get_queue(&ghost).await,
        nf,
        "no operation created the queue",
    );
    let m = e.get(id).await;
    assert_eq!((m.queue, m.state), (real.clone(), MessageState::InFlight));
    e.ack(&real, r)
        .await
        .expect("receipt untouched by the calls on the unknown queue");
}

/// Out-of-range values are `InvalidArgument` and change nothing.
///
/// Kept whole: each refusal is followed by a check that it changed nothing, on one queue and one
/// lease, and the lease refused by nack and extend is the one acked at the end.
pub async fn bad_input_is_invalid_argument(h: &dyn Harness) {
    let e = env(h).await;
    let inv = ErrorCode::InvalidArgument;
    let bad = QueueConfigPatch {
        visibility_timeout: Some(limits::MAX_VISIBILITY + secs(1)),
        ..Default::default()
    };
    assert_code(
        e.store.put_queue(&qn("nope"), &bad).await,
        inv,
        "create with visibility over 12 h",
    );
    assert_code(
        e.store.get_queue(&qn("nope")).await,
        ErrorCode::QueueNotFound,
        "refused create made nothing",
    );
    assert_code(
        e.store.get_queue(&qn("nope.dlq")).await,
        ErrorCode::QueueNotFound,
        "refused create made no DLQ",
    );
    let q = e.queue("ok", QueueConfigPatch::default()).await;
    let before = e.store.get_queue(&q).await.expect("get");
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    retention: Some(secs(59)),
                    ..Default::default()
                },
            )
            .await,
        inv,
        "update with retention under 1 min",
    );
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    dead_letter_queue: Some(None),
                    max_receive_count: Some(3),
                    ..Default::default()
                },
            )
            .await,
        inv,
        "no DLQ with limited attempts",
    );
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    dead_letter_queue: Some(None),
                    ..Default::default()
                },
            )
            .await,
        ErrorCode::Conflict,
        "no DLQ while the queue's attempts are limited",
    );
    assert_eq!(
        e.store.get_queue(&q).await.expect("get"),
        before,
        "refused updates change nothing"
    );

    let rr = |max, wait, vis| ReceiveRequest {
        max,
        wait,
        visibility: vis,
        consumer: None,
    };
    e.send_text(&q, "x").await;
    assert_code(
        e.store.receive(&q, rr(0, Duration::ZERO, None)).await,
        inv,
        "receive max 0",
    );
    assert_code(
        e.store.receive(&q, rr(1001, Duration::ZERO, None)).await,
        inv,
        "receive max 1001",
    );
    assert_code(
        e.store
            .receive(
                &q,
                rr(1, Duration::ZERO, Some(limits::MAX_VISIBILITY + ms(1))),
            )
            .await,
        inv,
        "visibility over 12 h",
    );
    let start = Instant::now();
    assert_code(
        e.store.receive(&q, rr(1, secs(31), None)).await,
        inv,
        "wait over 30 s",
    );
    assert!(
        start.elapsed() < secs(2),
        "an invalid receive is refused without waiting"
    );
    assert_eq!(
        e.stats(&q).await.in_flight,
        0,
        "refused receives leased nothing"
    );

    let d = e.recv_one(&q).await;
    assert_code(
        e.nack(&q, d.receipt, Some(limits::MAX_DELAY + secs(1)), None)
            .await,
        inv,
        "nack delay over 7 days",
    );
    assert_code(
        e.store
            .extend(&q, d.receipt, limits::MAX_VISIBILITY + secs(1))
            .await,
        inv,
        "extend over 12 h",
    );
    let m = e.get(d.id).await;
    assert_eq!(
        (m.state, m.visible_at),
        (MessageState::InFlight, Some(d.lease_deadline)),
        "refused calls changed nothing"
    );
    assert_code(e.store.ack(&q, vec![]).await, inv, "ack of an empty batch");
    let many: Vec<AckRequest> = (0..=limits::MAX_BATCH)
        .map(|_| AckRequest {
            receipt: d.receipt,
            result: None,
        })
        .collect();
    assert_code(e.store.ack(&q, many).await, inv, "ack of 1001 receipts");
    e.ack(&q, d.receipt)
        .await
        .expect("the lease survived every refused call");
}

/// Invalid queue names and garbage receipts are refused when parsed; a receipt survives a
/// round trip through its string form.
pub async fn invalid_names_and_receipts_fail_to_parse(h: &dyn Harness) {
    for bad in ["", "has space", "slash/y", "ünicode", &"a".repeat(81)] {
        let err = QueueName::new(bad).expect_err("invalid queue name accepted");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}");
    }
    for bad in [
        "",
        "garbage",
        "!!!!!!!!!!!!!!!!!!!!!!",
        "AAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let err = bad.parse::<Receipt>().expect_err("garbage receipt parsed");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}");
    }
    let e = env(h).await;
    let q = e.queue("rcpt", QueueConfigPatch::default()).await;
    e.send_text(&q, "x").await;
    let d = e.recv_one(&q).await;
    let wire = d.receipt.to_string();
    let back: Receipt = wire
        .parse()
        .expect("a receipt parses back from its string form");
    assert_eq!(back, d.receipt);
    e.ack(&q, back).await.expect("ack with the parsed receipt");
}

/// U+0000 in any text a client stores is refused with `invalid_argument` by every engine
/// (PostgreSQL cannot store it), and the refusal changes nothing; every other character,
/// control characters and astral planes included, is stored exactly.
///
/// Kept whole: one queue and one lease are taken through every place text enters (send, receive,
/// nack, reject, summary, redrive, tags); the lease the refusals left alone then stores the odd
/// characters.
pub async fn nul_in_any_text_is_refused_and_other_characters_are_kept(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("texts", QueueConfigPatch::default()).await;
    let bad = "a\u{0}b";
    let with = |f: &dyn Fn(&mut NewMessage)| {
        let mut m = text("x");
        f(&mut m);
        m
    };
    for (what, m) in [
        (
            "attribute value",
            with(&|m| m.attributes = attrs(&[("k", bad)])),
        ),
        (
            "attribute name",
            with(&|m| m.attributes = attrs(&[(bad, "v")])),
        ),
        ("dedup_id", with(&|m| m.dedup_id = Some(bad.into()))),
    ] {
        assert_code(
            e.store.send(&q, vec![m]).await,
            ErrorCode::InvalidArgument,
            what,
        );
    }
    assert_eq!(
        e.stats(&q).await.totals.sent,
        0,
        "refused sends store nothing"
    );
    assert_code(
        e.store
            .receive(
                &q,
                ReceiveRequest {
                    consumer: Some(bad.into()),
                    ..Default::default()
                },
            )
            .await,
        ErrorCode::InvalidArgument,
        "receive consumer",
    );
    let odd = "tab\t\u{1}\u{7f}\u{85}\u{2028}\u{fffd}😀𝄞";
    let kept = e
        .send(&q, with(&|m| m.attributes = attrs(&[(odd, odd)])))
        .await
        .id;
    let d = e.recv_one(&q).await;
    for failure in [
        fail(bad),
        Failure {
            consumer: Some(bad.into()),
            ..Default::default()
        },
    ] {
        assert_code(
            e.store
                .nack(&q, d.receipt, Some(Duration::ZERO), failure.clone())
                .await,
            ErrorCode::InvalidArgument,
            "nack",
        );
        assert_code(
            e.store.reject(&q, d.receipt, failure).await,
            ErrorCode::InvalidArgument,
            "reject",
        );
    }
    e.nack(&q, d.receipt, Some(Duration::ZERO), Some(odd))
        .await
        .expect("the refused settlements left the lease as it was");
    let m = e.get(kept).await;
    assert_eq!(m.attributes, attrs(&[(odd, odd)]), "stored exactly");
    assert_eq!(m.last_error.as_deref(), Some(odd), "stored exactly");
    let filter = sluice_core::redrive::RedriveFilter {
        error_contains: Some(bad.into()),
        ..Default::default()
    };
    assert_code(
        e.store
            .summarize(
                &q,
                SummaryRequest {
                    group_by: GroupBy::Error,
                    filter: filter.clone(),
                    limit: 10,
                },
            )
            .await,
        ErrorCode::InvalidArgument,
        "summary filter",
    );
    let mut spec = redrive::redrive_spec(&q);
    spec.filter = filter;
    assert_code(
        e.store.create_redrive(spec).await,
        ErrorCode::InvalidArgument,
        "redrive filter",
    );
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    tags: Some([("team".to_string(), bad.to_string())].into()),
                    ..Default::default()
                },
            )
            .await,
        ErrorCode::InvalidArgument,
        "tag",
    );
}
