//! Summaries (`Inspection::summarize`): every message of a queue counted by one key.

use super::*;
use sluice_core::summary::{GroupBy, Summary, SummaryRequest};

fn by(group_by: GroupBy) -> SummaryRequest {
    SummaryRequest {
        group_by,
        filter: sluice_core::redrive::RedriveFilter::default(),
        limit: 100,
    }
}

async fn summary(e: &Env, q: &QueueName, req: SummaryRequest) -> Summary {
    e.store
        .summarize(q, req.clone())
        .await
        .unwrap_or_else(|err| panic!("summarize({q}, {req:?}) failed: {err:?}"))
}

/// `(key, count)` of each group, in order.
fn counts(s: &Summary) -> Vec<(Option<&str>, u64)> {
    s.groups
        .iter()
        .map(|g| (g.key.as_deref(), g.count))
        .collect()
}

/// Sends `n` messages to `q` and rejects each with the error `err` into its DLQ. Returns
/// their ids.
async fn reject_many(e: &Env, q: &QueueName, n: usize, err: &str) -> Vec<MessageId> {
    let mut ids = Vec::new();
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        e.send_batch(q, (0..batch).map(|i| text(&format!("m{i}"))).collect())
            .await;
        for d in e.recv(q, batch as u32).await {
            e.store
                .reject(q, d.receipt, fail(err))
                .await
                .expect("reject");
            ids.push(d.id);
        }
        left -= batch;
    }
    assert_eq!(ids.len(), n, "every message sent was received once");
    ids
}

/// A summary counts every message, not a first page: 1,500 dead letters in two error groups
/// are counted exactly, with each group's first and last dead-lettering time and its
/// smallest id; the counts follow deletes and survive a restart.
pub async fn summary_counts_every_dead_letter(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    let t0 = e.now();
    let timeouts = reject_many(&e, &q, 1000, "timeout").await;
    e.advance(secs(10));
    let t1 = e.now();
    let limited = reject_many(&e, &q, 500, "HTTP 429").await;
    let s = summary(&e, &dlq, by(GroupBy::Error)).await;
    assert_eq!(
        counts(&s),
        [(Some("timeout"), 1000), (Some("HTTP 429"), 500)]
    );
    assert_eq!((s.total, s.group_count), (1500, 2));
    let g = &s.groups[0];
    assert_eq!((g.first_at, g.last_at), (t0, t0));
    assert_eq!(g.sample_id, *timeouts.iter().min().expect("ids"));
    let g = &s.groups[1];
    assert_eq!((g.first_at, g.last_at), (t1, t1));
    assert_eq!(g.sample_id, *limited.iter().min().expect("ids"));

    let s = summary(&e, &dlq, by(GroupBy::Reason)).await;
    assert_eq!(counts(&s), [(Some("rejected"), 1500)]);
    let s = summary(&e, &dlq, by(GroupBy::Source)).await;
    assert_eq!(counts(&s), [(Some("work"), 1500)]);

    // A removal, including of a group's smallest id, is counted at once.
    let first = *limited.iter().min().expect("ids");
    e.store.delete_message(first).await.expect("delete");
    let s = summary(&e, &dlq, by(GroupBy::Error)).await;
    assert_eq!(
        counts(&s),
        [(Some("timeout"), 1000), (Some("HTTP 429"), 499)]
    );
    assert_ne!(
        s.groups[1].sample_id, first,
        "a deleted message is no sample"
    );
    assert_eq!(s.groups[1].first_at, t1);

    let e = e.restart(h).await;
    let again = summary(&e, &dlq, by(GroupBy::Error)).await;
    assert_eq!(again, s, "a restart rebuilds the same summary");

    // Purged: nothing left to count.
    e.store.purge(&dlq).await.expect("purge");
    let s = summary(&e, &dlq, by(GroupBy::Error)).await;
    assert_eq!((s.total, s.group_count, s.groups.len()), (0, 0, 0));
}

/// Grouping by reason, source and attribute; messages without a value are the `null` group,
/// timed at their send; filters on error text, attributes and dead-lettering time; the group
/// limit; an empty queue; a missing queue.
///
/// Kept whole: one dead-letter queue is filled once at known times, then summarized every way (by
/// reason, source, error, attribute, filtered, limited), so those checks all count the same six
/// dead letters.
pub async fn summary_groups_filters_and_limits(h: &dyn Harness) {
    let e = env(h).await;
    let (a, dlq) = e.queue_and_dlq("a").await;
    let b = e
        .queue(
            "b",
            QueueConfigPatch {
                max_receive_count: Some(1),
                dead_letter_queue: Some(Some(dlq.clone())),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    // A message sent straight to the DLQ: no error, reason or source; timed at its send.
    let t_plain = e.now();
    let plain = e
        .send(
            &dlq,
            NewMessage {
                attributes: attrs(&[("tenant", "x")]),
                ..text("by hand")
            },
        )
        .await
        .id;
    e.advance(secs(5));
    let t_a = e.now();
    for i in 0..3 {
        e.send(
            &a,
            NewMessage {
                attributes: attrs(&[("tenant", "x"), ("n", &i.to_string())]),
                ..text("a")
            },
        )
        .await;
    }
    dead_letter_all(&e, &a, &["bad input", "bad input", "bad input"]).await;
    e.advance(secs(5));
    let t_b = e.now();
    for _ in 0..2 {
        e.send(
            &b,
            NewMessage {
                attributes: attrs(&[("tenant", "y")]),
                ..text("b")
            },
        )
        .await;
    }
    for _ in 0..2 {
        let d = e.recv_one(&b).await;
        e.store
            .nack(&b, d.receipt, None, fail("upstream 503"))
            .await
            .expect("nack on the last attempt");
    }

    let s = summary(&e, &dlq, by(GroupBy::Reason)).await;
    assert_eq!(
        counts(&s),
        [(Some("rejected"), 3), (Some("exhausted"), 2), (None, 1)]
    );
    assert_eq!((s.total, s.group_count), (6, 3));
    let null = &s.groups[2];
    assert_eq!(
        (null.first_at, null.last_at, null.sample_id),
        (t_plain, t_plain, plain)
    );
    assert_eq!((s.groups[0].first_at, s.groups[1].first_at), (t_a, t_b));
    let s = summary(&e, &dlq, by(GroupBy::Source)).await;
    assert_eq!(counts(&s), [(Some("a"), 3), (Some("b"), 2), (None, 1)]);
    let s = summary(&e, &dlq, by(GroupBy::Error)).await;
    assert_eq!(
        counts(&s),
        [(Some("bad input"), 3), (Some("upstream 503"), 2), (None, 1)]
    );
    let s = summary(&e, &dlq, by(GroupBy::Attribute("tenant".into()))).await;
    assert_eq!(counts(&s), [(Some("x"), 4), (Some("y"), 2)]);
    let s = summary(&e, &dlq, by(GroupBy::Attribute("n".into()))).await;
    assert_eq!(
        counts(&s),
        [(None, 3), (Some("0"), 1), (Some("1"), 1), (Some("2"), 1)],
        "ties by key, null last only among equal counts"
    );

    // Filters.
    let mut req = by(GroupBy::Reason);
    req.filter.error_contains = Some("50".into());
    assert_eq!(
        counts(&summary(&e, &dlq, req).await),
        [(Some("exhausted"), 2)]
    );
    let mut req = by(GroupBy::Reason);
    req.filter.attributes = attrs(&[("tenant", "x")]);
    assert_eq!(
        counts(&summary(&e, &dlq, req).await),
        [(Some("rejected"), 3), (None, 1)]
    );
    let mut req = by(GroupBy::Source);
    req.filter.dead_lettered_after = Some(t_b);
    assert_eq!(counts(&summary(&e, &dlq, req).await), [(Some("b"), 2)]);
    let mut req = by(GroupBy::Source);
    req.filter.dead_lettered_before = Some(t_b);
    assert_eq!(counts(&summary(&e, &dlq, req).await), [(Some("a"), 3)]);
    let mut req = by(GroupBy::Error);
    req.filter.error_contains = Some("nothing like it".into());
    let s = summary(&e, &dlq, req).await;
    assert_eq!((s.total, s.group_count, s.groups.len()), (0, 0, 0));

    // The limit cuts the groups answered, not the counts.
    let mut req = by(GroupBy::Source);
    req.limit = 1;
    let s = summary(&e, &dlq, req).await;
    assert_eq!(counts(&s), [(Some("a"), 3)]);
    assert_eq!((s.total, s.group_count), (6, 3));
    let mut req = by(GroupBy::Source);
    req.limit = 0;
    assert_code(
        e.store.summarize(&dlq, req).await,
        ErrorCode::InvalidArgument,
        "limit 0",
    );

    // Any queue: a working queue's messages, with and without errors.
    let id = e.send_text(&b, "fresh").await;
    let s = summary(&e, &b, by(GroupBy::Error)).await;
    assert_eq!(counts(&s), [(None, 1)]);
    assert_eq!(s.groups[0].sample_id, id);

    // Empty and missing queues.
    let empty = e.queue("empty", QueueConfigPatch::default()).await;
    let s = summary(&e, &empty, by(GroupBy::Error)).await;
    assert_eq!((s.total, s.group_count, s.groups.len()), (0, 0, 0));
    assert_code(
        e.store.summarize(&qn("nope"), by(GroupBy::Error)).await,
        ErrorCode::QueueNotFound,
        "a missing queue",
    );

    // Redriven out of the DLQ: no longer counted there.
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("redrive");
    e.store.redrive_step(job.id, 1000).await.expect("step");
    let s = summary(&e, &dlq, by(GroupBy::Reason)).await;
    assert_eq!(
        counts(&s),
        [(None, 1)],
        "only the message without a source stays"
    );
    let s = summary(&e, &a, by(GroupBy::Error)).await;
    assert_eq!(
        counts(&s),
        [(Some("bad input"), 3)],
        "redriven messages keep their error"
    );
}

/// The three attribute summaries of `summary_by_attribute_through_restart_and_redrive`.
async fn check_attribute_summaries(e: &Env, dlq: &QueueName, big: &str, what: &str) {
    let owned = |s: Summary| -> Vec<(Option<String>, u64)> {
        counts(&s)
            .into_iter()
            .map(|(k, n)| (k.map(str::to_owned), n))
            .collect()
    };
    let key = |k: &str| Some(k.to_owned());
    let s = summary(e, dlq, by(GroupBy::Attribute("tenant".into()))).await;
    assert_eq!(
        owned(s),
        [(key("x"), 2), (key("y"), 1), (None, 1)],
        "{what}: by tenant"
    );
    let mut req = by(GroupBy::Error);
    req.filter.attributes = attrs(&[("x", "x")]);
    assert_eq!(
        owned(summary(e, dlq, req).await),
        [(key("boom"), 1)],
        "{what}: a key equal to its value"
    );
    let mut req = by(GroupBy::Attribute("tenant".into()));
    req.filter.attributes = attrs(&[("blob", big)]);
    assert_eq!(
        owned(summary(e, dlq, req).await),
        [(key("y"), 1)],
        "{what}: a large attribute"
    );
}

/// Summaries by attribute count the same however each dead letter got there and whatever the
/// engine keeps in memory: through a restart, a redrive and a second dead-lettering, with
/// attributes too large to keep in memory, and a key equal to its value.
pub async fn summary_by_attribute_through_restart_and_redrive(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    let big = "z".repeat(3000);
    let sent = [
        attrs(&[("tenant", "x"), ("x", "x")]),
        attrs(&[("tenant", "x")]),
        attrs(&[("tenant", "y"), ("blob", &big)]),
        attrs(&[]),
    ];
    for a in &sent {
        e.send(
            &q,
            NewMessage {
                attributes: a.clone(),
                ..text("job")
            },
        )
        .await;
    }
    dead_letter_all(&e, &q, &["boom"; 4]).await;
    check_attribute_summaries(&e, &dlq, &big, "dead-lettered").await;

    let e = e.restart(h).await;
    check_attribute_summaries(&e, &dlq, &big, "right after a restart").await;
    check_attribute_summaries(&e, &dlq, &big, "asked again after a restart").await;

    // Back to the source, failed again: the attributes travel with each message.
    let job = e
        .store
        .create_redrive(redrive_spec(&dlq))
        .await
        .expect("redrive");
    e.store.redrive_step(job.id, 1000).await.expect("step");
    let s = summary(&e, &q, by(GroupBy::Attribute("tenant".into()))).await;
    assert_eq!(s.total, 4, "redriven to the source: {s:?}");
    dead_letter_all(&e, &q, &["boom"; 4]).await;
    check_attribute_summaries(&e, &dlq, &big, "dead-lettered again").await;

    // Deleting a message takes it out of its group.
    let mut req = by(GroupBy::Error);
    req.filter.attributes = attrs(&[("blob", &big)]);
    let s = summary(&e, &dlq, req).await;
    e.store
        .delete_message(s.groups[0].sample_id)
        .await
        .expect("delete");
    let s = summary(&e, &dlq, by(GroupBy::Attribute("tenant".into()))).await;
    assert_eq!(
        counts(&s),
        [(Some("x"), 2), (None, 1)],
        "after deleting the message with large attributes"
    );
}

/// One summary group selected exactly, as a console's drill-down does: the exact error text
/// (not every error containing it), the dead-letter reason and the source queue; combined
/// with each other; messages without the value never match; a redrive takes the same filter.
pub async fn summary_group_filters_select_exactly_one_group(h: &dyn Harness) {
    let e = env(h).await;
    let a = e.queue("a", QueueConfigPatch::default()).await;
    let dlq = qn("a.dlq");
    let b = e
        .queue(
            "b",
            QueueConfigPatch {
                max_receive_count: Some(1),
                dead_letter_queue: Some(Some(dlq.clone())),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    e.send_text(&dlq, "by hand").await;
    for _ in 0..3 {
        e.send_text(&a, "a").await;
    }
    dead_letter_all(&e, &a, &["bad input", "bad input", "bad input, again"]).await;
    for _ in 0..2 {
        e.send_text(&b, "b").await;
    }
    for _ in 0..2 {
        let d = e.recv_one(&b).await;
        e.store
            .nack(&b, d.receipt, None, fail("bad input"))
            .await
            .expect("nack on the last attempt");
    }
    let filtered = |f: sluice_core::redrive::RedriveFilter| SummaryRequest {
        group_by: GroupBy::Error,
        filter: f,
        limit: 100,
    };
    let none = sluice_core::redrive::RedriveFilter::default;
    let error_is = |t: &str| sluice_core::redrive::RedriveFilter {
        error_is: Some(t.into()),
        ..none()
    };
    let reason = |r| sluice_core::redrive::RedriveFilter {
        reason: Some(r),
        ..none()
    };
    use sluice_core::message::DeadLetterReason::{Exhausted, Rejected};

    let s = summary(&e, &dlq, filtered(error_is("bad input"))).await;
    assert_eq!(
        counts(&s),
        [(Some("bad input"), 4)],
        "not \"bad input, again\""
    );
    let s = summary(&e, &dlq, filtered(error_is("bad"))).await;
    assert_eq!(s.total, 0, "a part of an error is no group");
    let s = summary(&e, &dlq, filtered(reason(Rejected))).await;
    assert_eq!(
        counts(&s),
        [(Some("bad input"), 2), (Some("bad input, again"), 1)]
    );
    let s = summary(&e, &dlq, filtered(reason(Exhausted))).await;
    assert_eq!(counts(&s), [(Some("bad input"), 2)]);
    let from_b = sluice_core::redrive::RedriveFilter {
        source_queue: Some(b.clone()),
        ..none()
    };
    let s = summary(&e, &dlq, filtered(from_b.clone())).await;
    assert_eq!(counts(&s), [(Some("bad input"), 2)]);
    let both = sluice_core::redrive::RedriveFilter {
        reason: Some(Rejected),
        ..error_is("bad input")
    };
    let s = summary(&e, &dlq, filtered(both)).await;
    assert_eq!(counts(&s), [(Some("bad input"), 2)], "conditions combine");
    let mut req = filtered(from_b.clone());
    req.group_by = GroupBy::Attribute("tenant".into());
    assert_eq!(
        summary(&e, &dlq, req).await.total,
        2,
        "also with attributes read"
    );

    // A redrive of the exhausted group moves exactly its two messages back to b.
    let mut spec = redrive_spec(&dlq);
    spec.filter = reason(Exhausted);
    spec.dry_run = true;
    let job = e.store.create_redrive(spec.clone()).await.expect("dry run");
    let job = e.store.redrive_step(job.id, 1000).await.expect("step").job;
    assert_eq!(job.matched, 2, "the dry run counts the group");
    spec.dry_run = false;
    let job = e.store.create_redrive(spec).await.expect("redrive");
    let step = e.store.redrive_step(job.id, 1000).await.expect("step");
    assert_eq!(step.job.moved, 2);
    let s = summary(&e, &dlq, by(GroupBy::Reason)).await;
    assert_eq!(counts(&s), [(Some("rejected"), 3), (None, 1)]);
    assert_eq!(e.store.stats(&b).await.expect("stats").visible, 2);
}

/// A message with body `body` sent with key `k`.
fn keyed(body: &str, k: &str) -> NewMessage {
    text(body).with_key(sluice_core::MessageKey::new(k).expect("a valid key"))
}

/// The key summaries of `summary_and_redrive_by_key`.
async fn check_key_summaries(e: &Env, dlq: &QueueName, what: &str) {
    let only = |group_by: GroupBy, k: &str| {
        let mut req = by(group_by);
        req.filter.key = Some(sluice_core::MessageKey::new(k).expect("a valid key"));
        req
    };
    let s = summary(e, dlq, by(GroupBy::Key)).await;
    assert_eq!(
        counts(&s),
        [(Some("acme"), 4), (None, 2), (Some("globex"), 1)],
        "{what}: by key"
    );
    let s = summary(e, dlq, only(GroupBy::Reason, "acme")).await;
    assert_eq!(
        counts(&s),
        [(Some("rejected"), 3), (None, 1)],
        "{what}: one key's dead letters and the one sent by hand, by reason"
    );
    let s = summary(e, dlq, only(GroupBy::Key, "globex")).await;
    assert_eq!(counts(&s), [(Some("globex"), 1)], "{what}: one key");
    let s = summary(e, dlq, only(GroupBy::Error, "nobody")).await;
    assert_eq!(
        (s.total, s.group_count),
        (0, 0),
        "{what}: a key no message has"
    );
}

/// Dead letters counted by the key each was sent with (messages without one are the `null`
/// group), a key filter narrowing another grouping, over dead letters and messages sent to the
/// DLQ by hand alike; the same after a restart; a redrive by key moves only that key's
/// messages, which keep their key.
pub async fn summary_and_redrive_by_key(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("work").await;
    for m in [
        keyed("a1", "acme"),
        keyed("a2", "acme"),
        keyed("a3", "acme"),
        keyed("g1", "globex"),
        text("plain"),
    ] {
        e.send(&q, m).await;
    }
    dead_letter_all(&e, &q, &["boom"; 5]).await;
    e.send(&dlq, keyed("h1", "acme")).await;
    e.send_text(&dlq, "by hand").await;
    check_key_summaries(&e, &dlq, "dead-lettered").await;
    let e = e.restart(h).await;
    check_key_summaries(&e, &dlq, "after a restart").await;

    let mut spec = redrive_spec(&dlq);
    spec.destination = Some(q.clone());
    spec.filter.key = Some(sluice_core::MessageKey::new("acme").expect("a valid key"));
    let job = e.store.create_redrive(spec).await.expect("redrive");
    e.store.redrive_step(job.id, 1000).await.expect("step");
    let s = summary(&e, &q, by(GroupBy::Key)).await;
    assert_eq!(counts(&s), [(Some("acme"), 4)], "moved by key");
    let s = summary(&e, &dlq, by(GroupBy::Key)).await;
    assert_eq!(
        counts(&s),
        [(None, 2), (Some("globex"), 1)],
        "left behind by a redrive of another key"
    );
}
