//! Sends handed straight to receives long-polling on the same node: delivered without a
//! lease statement of their own, and delivered all the same when the receive they were
//! handed to does not take them.

use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{Body, Checked, Delivery, NewMessage, QueueName, ReceiveRequest};
use sluice_postgres::{PostgresOptions, PostgresStore};

mod common;

use common::{Nodes, acks, created, recv};

async fn nodes() -> Option<Nodes> {
    common::nodes("handoff", PostgresOptions::default()).await
}

const LEASE: Duration = Duration::from_secs(30);

fn msg(text: &str) -> NewMessage {
    NewMessage::new(Body::text(text))
}

/// A receive of up to `max` messages leased for `lease`, long-polling on `node` for up to
/// `wait`, started now.
fn polling(
    node: &Checked<PostgresStore>,
    queue: &QueueName,
    max: u32,
    lease: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<Vec<Delivery>> {
    let (node, queue) = (node.clone(), queue.clone());
    tokio::spawn(async move {
        let req = ReceiveRequest {
            max,
            wait,
            visibility: Some(lease),
            ..ReceiveRequest::default()
        };
        node.receive(&queue, req).await.expect("long poll")
    })
}

/// As [`polling`], for up to two seconds.
fn waiting(
    node: &Checked<PostgresStore>,
    queue: &QueueName,
    max: u32,
    lease: Duration,
) -> tokio::task::JoinHandle<Vec<Delivery>> {
    polling(node, queue, max, lease, Duration::from_secs(2))
}

#[tokio::test]
async fn a_send_hands_its_message_to_a_receive_waiting_on_the_same_node() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let work = created(&n.a, "work").await;
    let receive = waiting(&n.a, &work, 1, LEASE);
    // Long enough for the receive to have found the queue empty and to wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent =
        n.a.send(&work, vec![msg("handed"), msg("left")])
            .await
            .expect("send");
    let got = receive.await.expect("task");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent[0].id, "the oldest message of the send");
    assert_eq!(got[0].receive_count, 1);
    assert_eq!(got[0].body, Body::text("handed"));

    // Inserted leased by the send's own statement, and never touched by a lease statement:
    // both rows still carry the insert's transaction id.
    let rows = db
        .query(
            "SELECT state, receive_count, xmin::text FROM messages WHERE queue = 'work' ORDER BY id",
            &[],
        )
        .await
        .expect("rows");
    let rows: Vec<(i16, i32, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].0, rows[0].1),
        (1, 1),
        "handed over: leased, received once"
    );
    assert_eq!((rows[1].0, rows[1].1), (0, 0), "the other waits");
    assert_eq!(rows[0].2, rows[1].2, "one insert, no lease statement since");

    let stats = n.b.stats(&work).await.expect("stats");
    assert_eq!((stats.visible, stats.in_flight), (1, 1));
    let out = n.b.ack(&work, acks([got[0].receipt])).await.expect("ack");
    assert_eq!(out, vec![Ok(())], "its receipt holds on any node");
    let rest = n.b.receive(&work, recv(10)).await.expect("receive");
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, sent[1].id);
}

#[tokio::test]
async fn a_message_handed_to_receives_that_do_not_take_it_is_delivered_once_all_the_same() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    // Two receives wait with different lease lengths. The send hands its message to the
    // lease length most waited for (the second), and wakes one receive, which may be the
    // first: that one does not take it, and it goes back to waiting after a short hold.
    let short = waiting(&n.a, &work, 1, LEASE);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let long = waiting(&n.a, &work, 2, Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = n.a.send(&work, vec![msg("one")]).await.expect("send");
    let (short, long) = (short.await.expect("task"), long.await.expect("task"));
    let got: Vec<_> = short.iter().chain(&long).collect();
    assert_eq!(got.len(), 1, "delivered once: {short:?} {long:?}");
    assert_eq!(got[0].id, sent[0].id);
    assert_eq!(
        got[0].receive_count, 1,
        "a hold nobody took is not a receive"
    );
    let out = n.a.ack(&work, acks([got[0].receipt])).await.expect("ack");
    assert_eq!(out, vec![Ok(())]);
    let stats = n.b.stats(&work).await.expect("stats");
    assert_eq!((stats.visible, stats.in_flight), (0, 0));
}

#[tokio::test]
async fn a_handed_message_whose_lease_runs_out_follows_the_queues_rules() {
    let Some(n) = nodes().await else { return };
    let dlq = created(&n.a, "work-dlq").await;
    let work = created(&n.a, "work").await;
    let patch = sluice_core::QueueConfigPatch {
        max_receive_count: Some(1),
        dead_letter_queue: Some(Some(dlq.clone())),
        ..sluice_core::QueueConfigPatch::default()
    };
    n.a.put_queue(&work, &patch).await.expect("configure");
    let receive = waiting(&n.a, &work, 1, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = n.a.send(&work, vec![msg("slow")]).await.expect("send");
    let got = receive.await.expect("task");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent[0].id);
    assert_eq!(got[0].max_receive_count, 1);

    // Its one allowed lease runs out: dead-lettered as `lease_expired` by whichever node
    // expires what is due in the queue first, which wakes the DLQ's long poll.
    let moved = polling(&n.b, &dlq, 10, LEASE, Duration::from_secs(10))
        .await
        .expect("task");
    assert_eq!(moved.len(), 1, "in the DLQ");
    assert_eq!(moved[0].id, sent[0].id);
    let m = n.b.get_message(sent[0].id).await.expect("get");
    assert_eq!(
        m.dead_letter.map(|d| d.reason),
        Some(sluice_core::DeadLetterReason::LeaseExpired)
    );
    let out = n.a.ack(&work, acks([got[0].receipt])).await.expect("ack");
    assert_eq!(
        out,
        vec![Err(sluice_core::StoreError::ReceiptStale)],
        "the handed receipt is stale once its lease ran out"
    );
}
