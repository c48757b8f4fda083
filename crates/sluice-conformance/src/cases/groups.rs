//! FIFO message groups: send order within a group, at most `max_in_flight_per_group` of a
//! group in flight, a failing front member holding its group, and ungrouped messages flowing
//! as before.
//!
//! An engine whose hints say it keeps no groups (`Hints::groups` false) skips these cases, with
//! a line on stderr, except [`group_names_are_checked_and_unsupported_engines_refuse`], which
//! checks that such an engine refuses a group instead of ignoring it.

use sluice_core::group::GroupName;

use super::*;

fn gn(name: &str) -> GroupName {
    GroupName::new(name).unwrap_or_else(|e| panic!("test group {name:?} invalid: {e}"))
}

/// A text message in group `g`.
fn grouped(s: &str, g: &str) -> NewMessage {
    text(s).in_group(gn(g))
}

/// True when the engine keeps groups; otherwise says on stderr that `case` is skipped.
fn supported(e: &Env, case: &str) -> bool {
    if e.store.hints().groups {
        return true;
    }
    eprintln!(
        "skipping {case}: this engine does not keep FIFO message groups (Hints::groups is false)"
    );
    false
}

/// The ids of `ds`, in the order delivered.
fn order_of(ds: &[Delivery]) -> Vec<MessageId> {
    ds.iter().map(|d| d.id).collect()
}

/// Receives one message, which must be `want`.
#[track_caller]
fn only(ds: Vec<Delivery>, want: MessageId, why: &str) -> Delivery {
    assert_eq!(order_of(&ds), vec![want], "{why}");
    ds.into_iter().next().expect("one delivery")
}

/// Messages of one group come in send order, one at a time, while other groups and
/// ungrouped messages flow; deliveries and views carry the group.
pub async fn group_delivers_in_send_order_one_at_a_time(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_delivers_in_send_order_one_at_a_time") {
        return;
    }
    let q = e.queue("fifo", QueueConfigPatch::default()).await;
    let sent = e
        .send_batch(
            &q,
            vec![
                grouped("a1", "a"),
                grouped("b1", "b"),
                grouped("a2", "a"),
                text("u1"),
                grouped("b2", "b"),
                grouped("a3", "a"),
                text("u2"),
            ],
        )
        .await;
    let [a1, b1, a2, u1, b2, a3, u2] = [0, 1, 2, 3, 4, 5, 6].map(|i| sent[i].id);
    let first = e.recv(&q, 10).await;
    assert_eq!(
        ids_of(&first),
        BTreeSet::from([a1, b1, u1, u2]),
        "the front of each group and every ungrouped message"
    );
    let by_id = |id| first.iter().find(|d| d.id == id).expect("delivered");
    assert_eq!(
        by_id(a1).group,
        Some(gn("a")),
        "a delivery carries its group"
    );
    assert_eq!(by_id(u1).group, None, "an ungrouped delivery has none");
    let s = e.stats(&q).await;
    assert_eq!(
        (s.visible, s.in_flight),
        (3, 4),
        "members waiting for their group count as visible"
    );
    let waiting = e.browse(&q, BrowseState::Visible).await;
    assert_eq!(
        waiting.iter().map(|m| m.id).collect::<BTreeSet<_>>(),
        BTreeSet::from([a2, b2, a3])
    );
    assert!(waiting.iter().all(|m| m.state == MessageState::Visible));
    assert_eq!(
        e.get(a3).await.group,
        Some(gn("a")),
        "a view shows the group"
    );
    e.recv_none(&q, "both groups have a message in flight")
        .await;
    e.ack(&q, by_id(b1).receipt).await.expect("ack b1");
    let d = only(e.recv(&q, 10).await, b2, "b moves on to b2");
    e.ack(&q, d.receipt).await.expect("ack b2");
    e.recv_none(&q, "group b is done, a1 still in flight").await;
    e.ack(&q, by_id(a1).receipt).await.expect("ack a1");
    let d = only(e.recv(&q, 10).await, a2, "a moves on to a2");
    e.ack(&q, d.receipt).await.expect("ack a2");
    let d = only(e.recv(&q, 10).await, a3, "then a3");
    e.ack(&q, d.receipt).await.expect("ack a3");
    // Ungrouped messages are not held by groups: u3 goes while group c is busy.
    let c1 = e.send(&q, grouped("c1", "c")).await.id;
    let c2 = e.send(&q, grouped("c2", "c")).await.id;
    let u3 = e.send_text(&q, "u3").await;
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), BTreeSet::from([c1, u3]));
    assert!(!ids_of(&ds).contains(&c2));
}

/// With `max_in_flight_per_group` N, the first N waiting members of a group, in send order,
/// may be in flight; a live change of N takes effect at once; N is checked (1–1000).
pub async fn group_max_in_flight_per_group_allows_n(h: &dyn Harness) {
    let e = env(h).await;
    for bad in [0, limits::MAX_IN_FLIGHT_PER_GROUP + 1] {
        let p = QueueConfigPatch {
            max_in_flight_per_group: Some(bad),
            ..Default::default()
        };
        assert_code(
            e.store.put_queue(&qn("bad"), &p).await,
            ErrorCode::InvalidArgument,
            &format!("max_in_flight_per_group {bad}"),
        );
    }
    if !supported(&e, "group_max_in_flight_per_group_allows_n") {
        return;
    }
    let two = QueueConfigPatch {
        max_in_flight_per_group: Some(2),
        ..Default::default()
    };
    let q = e.queue("fifo2", two).await;
    let info = e.store.get_queue(&q).await.expect("get");
    assert_eq!(info.config.max_in_flight_per_group, 2);
    let sent = e
        .send_batch(
            &q,
            (1..=5).map(|i| grouped(&format!("a{i}"), "a")).collect(),
        )
        .await;
    let ids: Vec<MessageId> = sent.iter().map(|o| o.id).collect();
    let ds = e.recv(&q, 10).await;
    assert_eq!(order_of(&ds), ids[..2].to_vec(), "the first two, in order");
    e.recv_none(&q, "two of the group are in flight").await;
    e.ack(&q, ds[1].receipt).await.expect("ack a2");
    let d3 = only(e.recv(&q, 10).await, ids[2], "a3 takes a2's place");
    // Down to one: nothing more goes until only one is in flight.
    e.queue(
        "fifo2",
        QueueConfigPatch {
            max_in_flight_per_group: Some(1),
            ..Default::default()
        },
    )
    .await;
    e.ack(&q, ds[0].receipt).await.expect("ack a1");
    e.recv_none(&q, "a3 is in flight and the window is one")
        .await;
    e.queue(
        "fifo2",
        QueueConfigPatch {
            max_in_flight_per_group: Some(3),
            ..Default::default()
        },
    )
    .await;
    let ds = e.recv(&q, 10).await;
    assert_eq!(
        order_of(&ds),
        ids[3..5].to_vec(),
        "the window grew to three"
    );
    e.ack(&q, d3.receipt).await.expect("ack a3");
}

/// A nacked front member is retried before its group moves on: the group waits through the
/// backoff while other groups flow, then the same message comes first.
pub async fn group_nack_blocks_group_through_backoff(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_nack_blocks_group_through_backoff") {
        return;
    }
    let q = e.queue("fifo-nack", QueueConfigPatch::default()).await;
    let a1 = e.send(&q, grouped("a1", "a")).await.id;
    let a2 = e.send(&q, grouped("a2", "a")).await.id;
    let d = e.recv_one(&q).await;
    assert_eq!(d.id, a1);
    e.nack(&q, d.receipt, Some(secs(5)), Some("try later"))
        .await
        .expect("nack");
    let b1 = e.send(&q, grouped("b1", "b")).await.id;
    let d = only(e.recv(&q, 10).await, b1, "group b flows while a waits");
    e.ack(&q, d.receipt).await.expect("ack b1");
    e.advance(ms(4_999));
    e.recv_none(&q, "a1 is in backoff: a2 must not overtake it")
        .await;
    assert_eq!(e.get(a2).await.state, MessageState::Visible);
    e.advance(ms(1));
    let d = only(e.recv(&q, 10).await, a1, "the retry comes first");
    assert_eq!(d.receive_count, 2);
    assert_eq!(d.last_error.as_deref(), Some("try later"));
    e.recv_none(&q, "a1 in flight again").await;
    e.ack(&q, d.receipt).await.expect("ack a1");
    only(e.recv(&q, 10).await, a2, "then a2");
}

/// A front member whose lease runs out is delivered again before its group moves on.
pub async fn group_lease_expiry_redelivers_the_front_first(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_lease_expiry_redelivers_the_front_first") {
        return;
    }
    let q = e.queue("fifo-lease", QueueConfigPatch::default()).await;
    let a1 = e.send(&q, grouped("a1", "a")).await.id;
    let a2 = e.send(&q, grouped("a2", "a")).await.id;
    let first = e.recv_with(&q, 10, Some(secs(10))).await;
    assert_eq!(order_of(&first), vec![a1]);
    e.advance(ms(9_999));
    e.recv_none(&q, "a1's lease is running").await;
    e.advance(ms(1));
    let d = only(
        e.recv(&q, 10).await,
        a1,
        "the lease ran out: a1 again, not a2",
    );
    assert_eq!(d.receive_count, 2);
    assert_code(
        e.ack(&q, first[0].receipt).await,
        ErrorCode::ReceiptStale,
        "the expired lease's receipt",
    );
    e.ack(&q, d.receipt).await.expect("ack a1");
    only(e.recv(&q, 10).await, a2, "then a2");
}

/// A poison front member dead-letters after its attempts and its group goes on; the dead
/// letter keeps its group.
pub async fn group_poison_head_dead_letters_and_group_continues(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_poison_head_dead_letters_and_group_continues") {
        return;
    }
    let p = QueueConfigPatch {
        max_receive_count: Some(3),
        backoff_base: Some(Duration::ZERO),
        ..Default::default()
    };
    let q = e.queue("fifo-poison", p).await;
    let dlq = qn("fifo-poison.dlq");
    let poison = e.send(&q, grouped("poison", "a")).await.id;
    let a2 = e.send(&q, grouped("a2", "a")).await.id;
    for attempt in 1..=3 {
        let d = only(
            e.recv(&q, 10).await,
            poison,
            &format!("attempt {attempt}: the poison message, never a2"),
        );
        let out = e
            .nack(&q, d.receipt, None, Some("boom"))
            .await
            .expect("nack");
        assert_eq!(
            out.queue,
            if attempt == 3 { dlq.clone() } else { q.clone() }
        );
    }
    let d = only(
        e.recv(&q, 10).await,
        a2,
        "the group goes on after the dead letter",
    );
    e.ack(&q, d.receipt).await.expect("ack a2");
    let m = e.get(poison).await;
    assert_eq!(m.queue, dlq);
    assert_eq!(m.group, Some(gn("a")), "the dead letter keeps its group");
    let listed = e.browse(&dlq, BrowseState::All).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group, Some(gn("a")));
}

/// Rejecting or moving the front member lets its group go on; a moved message keeps its group
/// in its new queue.
pub async fn group_reject_or_move_of_head_lets_group_continue(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_reject_or_move_of_head_lets_group_continue") {
        return;
    }
    let (q, dlq) = e.queue_and_dlq("fifo-reject").await;
    let other = e.queue("fifo-reject.other", unlimited()).await;
    let ids: Vec<MessageId> = e
        .send_batch(
            &q,
            (1..=3).map(|i| grouped(&format!("a{i}"), "a")).collect(),
        )
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let d = only(e.recv(&q, 10).await, ids[0], "a1 first");
    e.store
        .reject(&q, d.receipt, fail("bad"))
        .await
        .expect("reject");
    let d = only(e.recv(&q, 10).await, ids[1], "a2 after the reject");
    e.store
        .move_message(&q, d.receipt, &other, fail("elsewhere"))
        .await
        .expect("move");
    let d = only(e.recv(&q, 10).await, ids[2], "a3 after the move");
    e.ack(&q, d.receipt).await.expect("ack a3");
    assert_eq!(e.get(ids[0]).await.queue, dlq);
    let moved = only(e.recv(&other, 10).await, ids[1], "the moved message");
    assert_eq!(
        moved.group,
        Some(gn("a")),
        "a moved message keeps its group"
    );
}

/// A front member delayed at send holds its group until it is visible and delivered.
pub async fn group_delayed_head_blocks_group(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_delayed_head_blocks_group") {
        return;
    }
    let q = e.queue("fifo-delay", QueueConfigPatch::default()).await;
    let a1 = e
        .send(&q, delayed("a1", secs(10)).in_group(gn("a")))
        .await
        .id;
    let a2 = e.send(&q, grouped("a2", "a")).await.id;
    let b1 = e.send(&q, grouped("b1", "b")).await.id;
    let d = only(e.recv(&q, 10).await, b1, "only b: a's front is delayed");
    e.ack(&q, d.receipt).await.expect("ack b1");
    e.advance(ms(9_999));
    e.recv_none(&q, "a1 is not due; a2 waits behind it").await;
    e.advance(ms(1));
    let d = only(e.recv(&q, 10).await, a1, "a1 when due");
    e.recv_none(&q, "a1 in flight").await;
    e.ack(&q, d.receipt).await.expect("ack a1");
    only(e.recv(&q, 10).await, a2, "then a2");
}

/// A restart keeps each group's order and which member is in flight.
pub async fn group_order_and_leases_survive_restart(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_order_and_leases_survive_restart") {
        return;
    }
    let q = e.queue("fifo-restart", QueueConfigPatch::default()).await;
    let sent = e
        .send_batch(
            &q,
            vec![
                grouped("a1", "a"),
                grouped("b1", "b"),
                grouped("a2", "a"),
                grouped("b2", "b"),
                grouped("a3", "a"),
            ],
        )
        .await;
    let [a1, b1, a2, b2, a3] = [0, 1, 2, 3, 4].map(|i| sent[i].id);
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), BTreeSet::from([a1, b1]));
    let ra1 = ds.iter().find(|d| d.id == a1).expect("a1").receipt;
    let rb1 = ds.iter().find(|d| d.id == b1).expect("b1").receipt;
    e.nack(&q, rb1, Some(secs(5)), None).await.expect("nack b1");
    let e = e.restart(h).await;
    e.recv_none(
        &q,
        "after the restart a1 is still in flight and b1 in backoff",
    )
    .await;
    assert_eq!(e.get(a2).await.group, Some(gn("a")));
    e.ack(&q, ra1).await.expect("a1's receipt survives");
    let d = only(e.recv(&q, 10).await, a2, "a2 follows a1");
    e.ack(&q, d.receipt).await.expect("ack a2");
    e.advance(secs(5));
    let ds = e.recv(&q, 10).await;
    assert_eq!(ids_of(&ds), BTreeSet::from([a3, b1]), "b1's retry, a3");
    for d in ds {
        e.ack(&q, d.receipt).await.expect("ack");
    }
    let e = e.restart(h).await;
    only(e.recv(&q, 10).await, b2, "b2 last");
}

/// A redriven dead letter rejoins its group at the end of the line: after the members that
/// were already waiting.
pub async fn group_redrive_rejoins_at_the_end(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_redrive_rejoins_at_the_end") {
        return;
    }
    let (q, dlq) = e.queue_and_dlq("fifo-redrive").await;
    let ids: Vec<MessageId> = e
        .send_batch(
            &q,
            (1..=3).map(|i| grouped(&format!("a{i}"), "a")).collect(),
        )
        .await
        .iter()
        .map(|o| o.id)
        .collect();
    let d = only(e.recv(&q, 10).await, ids[0], "a1");
    e.store
        .reject(&q, d.receipt, fail("later"))
        .await
        .expect("reject");
    let d2 = only(e.recv(&q, 10).await, ids[1], "a2");
    let job = e
        .store
        .create_redrive(super::redrive::redrive_spec(&dlq))
        .await
        .expect("create");
    let step = e.store.redrive_step(job.id, 100).await.expect("step");
    assert_eq!(step.moved_now, 1);
    assert_eq!(e.get(ids[0]).await.group, Some(gn("a")));
    e.recv_none(&q, "a2 is still in flight").await;
    e.ack(&q, d2.receipt).await.expect("ack a2");
    let d = only(
        e.recv(&q, 10).await,
        ids[2],
        "a3 was waiting before a1 came back",
    );
    e.ack(&q, d.receipt).await.expect("ack a3");
    only(e.recv(&q, 10).await, ids[0], "a1 last");
}

/// A long-polling receive waiting on a group that is busy wakes when the group moves on (here
/// an ack of its front), not only at its next periodic look.
pub async fn group_long_poll_wakes_when_the_group_moves_on(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_long_poll_wakes_when_the_group_moves_on") {
        return;
    }
    let q = e.queue("fifo-poll", QueueConfigPatch::default()).await;
    e.send(&q, grouped("a1", "a")).await;
    let a2 = e.send(&q, grouped("a2", "a")).await.id;
    let front = e.recv_one(&q).await;
    let store = Arc::clone(&e.store);
    let q2 = q.clone();
    let waiter = tokio::spawn(async move {
        store
            .receive(
                &q2,
                ReceiveRequest {
                    max: 1,
                    wait: secs(10),
                    ..Default::default()
                },
            )
            .await
    });
    // Soon after the receive started waiting: its next periodic look is most of a second away.
    tokio::time::sleep(ms(100)).await;
    let acked = Instant::now();
    e.ack(&q, front.receipt).await.expect("ack a1");
    let ds = tokio::time::timeout(secs(8), waiter)
        .await
        .expect("the long poll did not return after its group moved on")
        .expect("receive task")
        .expect("receive");
    let took = acked.elapsed();
    assert_eq!(order_of(&ds), vec![a2]);
    // Engines re-check a waiting receive about once a second; a wake comes well before.
    assert!(
        took < ms(500),
        "the long poll woke {took:?} after the ack; the group moving on must wake it"
    );
}

/// Group names are 1–128 characters without control characters; an engine that keeps no
/// groups refuses a grouped send and a `max_in_flight_per_group` other than 1 rather than
/// ignore them.
pub async fn group_names_are_checked_and_unsupported_engines_refuse(h: &dyn Harness) {
    for bad in [
        String::new(),
        "g".repeat(129),
        "a\tb".into(),
        "x\u{0}".into(),
    ] {
        assert_code(
            GroupName::new(bad.clone()),
            ErrorCode::InvalidArgument,
            &format!("group {bad:?}"),
        );
    }
    assert!(GroupName::new("ü".repeat(128)).is_ok(), "128 characters");
    let e = env(h).await;
    let q = e.queue("fifo-check", QueueConfigPatch::default()).await;
    if e.store.hints().groups {
        let o = e.send(&q, grouped("x", &"ü".repeat(128))).await;
        assert_eq!(e.get(o.id).await.group, Some(gn(&"ü".repeat(128))));
        return;
    }
    assert_code(
        e.store.send(&q, vec![grouped("x", "a")]).await,
        ErrorCode::InvalidArgument,
        "a grouped send to an engine without groups",
    );
    assert_eq!(e.stats(&q).await.visible, 0, "nothing was stored");
    assert_code(
        e.store
            .put_queue(
                &q,
                &QueueConfigPatch {
                    max_in_flight_per_group: Some(2),
                    ..Default::default()
                },
            )
            .await,
        ErrorCode::InvalidArgument,
        "max_in_flight_per_group on an engine without groups",
    );
}

mod model;
pub use model::group_model_random_sequences;

/// A message of a FIFO group that also has a key is delivered after a restart, as before one:
/// a broker just started knows the queue's groups by what it holds, not by what it saw sent.
pub async fn group_keyed_message_is_delivered_after_a_restart(h: &dyn Harness) {
    let e = env(h).await;
    if !supported(&e, "group_keyed_message_is_delivered_after_a_restart") {
        return;
    }
    let q = e.queue("keyed-groups", QueueConfigPatch::default()).await;
    let key = sluice_core::fair::MessageKey::new("acme").expect("key");
    e.send_batch(
        &q,
        vec![
            grouped("first", "g1").with_key(key.clone()),
            grouped("second", "g1").with_key(key),
        ],
    )
    .await;
    let e = e.restart(h).await;
    let d = e.recv_one(&q).await;
    assert_eq!(d.body.bytes.as_ref(), b"first", "the group's front");
    e.recv_none(&q, "the second waits for the first").await;
    e.ack(&q, d.receipt).await.expect("ack");
    assert_eq!(e.recv_one(&q).await.body.bytes.as_ref(), b"second");
}
