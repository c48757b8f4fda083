//! FIFO message groups across two nodes sharing one database: each group is delivered in
//! send order, one message in flight at a time, whichever node sent, received or acked.
//! (The rules on one node are the conformance suite's group cases.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{Body, Checked, Delivery, GroupName, NewMessage, QueueName, ReceiveRequest};
use sluice_postgres::{PostgresOptions, PostgresStore};

mod common;

use common::{acks, created, recv};

/// Message `seq` of group `g`, its body naming both.
fn member(g: usize, seq: usize) -> NewMessage {
    NewMessage::new(Body::text(format!("{g}:{seq}")))
        .in_group(GroupName::new(format!("g{g}")).expect("group name"))
}

/// The group and sequence number a delivery's body names.
fn parse(d: &Delivery) -> (usize, usize) {
    let text = std::str::from_utf8(&d.body.bytes).expect("utf-8");
    let (g, seq) = text.split_once(':').expect("g:seq");
    (g.parse().expect("group"), seq.parse().expect("seq"))
}

/// What the consumers saw: per group, the sequence numbers in the order received, and which
/// group is being processed right now.
#[derive(Default)]
struct Seen {
    order: HashMap<usize, Vec<usize>>,
    busy: HashMap<usize, u64>,
    violations: Vec<String>,
}

/// A consumer on `node`: receives up to 4 at a time until `total` messages were processed by
/// all consumers together; checks that no other consumer holds a message of the same group,
/// then acks.
async fn consume(
    node: Checked<PostgresStore>,
    queue: QueueName,
    me: u64,
    seen: Arc<Mutex<Seen>>,
    done: Arc<std::sync::atomic::AtomicUsize>,
    total: usize,
) {
    use std::sync::atomic::Ordering;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while done.load(Ordering::SeqCst) < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "consumer {me} still waiting after 60 s: {} of {total} processed",
            done.load(Ordering::SeqCst)
        );
        let got = node
            .receive(
                &queue,
                ReceiveRequest {
                    max: 4,
                    wait: Duration::from_millis(200),
                    ..ReceiveRequest::default()
                },
            )
            .await
            .expect("receive");
        for d in &got {
            let (g, seq) = parse(d);
            let mut s = seen.lock().expect("seen");
            if let Some(other) = s.busy.insert(g, me) {
                s.violations.push(format!(
                    "group {g}: consumer {me} got {seq} while consumer {other} held one"
                ));
            }
            s.order.entry(g).or_default().push(seq);
        }
        // Hold them a little, as a handler would.
        tokio::time::sleep(Duration::from_millis(2)).await;
        {
            let mut s = seen.lock().expect("seen");
            for d in &got {
                s.busy.remove(&parse(d).0);
            }
        }
        let n = got.len();
        if n == 0 {
            continue;
        }
        let answers = node
            .ack(&queue, acks(got.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
        assert!(answers.iter().all(Result::is_ok), "acks: {answers:?}");
        done.fetch_add(n, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn groups_keep_their_order_and_one_in_flight_across_two_nodes() {
    let Some(n) = common::nodes("groups", PostgresOptions::default()).await else {
        return;
    };
    let queue = created(&n.a, "fifo").await;
    const GROUPS: usize = 16;
    const PER_GROUP: usize = 40;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for me in 0..4u64 {
        let node = if me % 2 == 0 {
            n.a.clone()
        } else {
            n.b.clone()
        };
        consumers.push(tokio::spawn(consume(
            node,
            queue.clone(),
            me,
            seen.clone(),
            done.clone(),
            GROUPS * PER_GROUP,
        )));
    }
    // One producer per group, alternating nodes message by message: the send order of a
    // group is the order of its producer's sends, spread over both nodes.
    let mut producers = Vec::new();
    for g in 0..GROUPS {
        let (a, b, queue) = (n.a.clone(), n.b.clone(), queue.clone());
        producers.push(tokio::spawn(async move {
            for seq in 0..PER_GROUP {
                let node = if (g + seq) % 2 == 0 { &a } else { &b };
                node.send(&queue, vec![member(g, seq)]).await.expect("send");
            }
        }));
    }
    for p in producers {
        p.await.expect("producer");
    }
    for c in consumers {
        c.await.expect("consumer");
    }
    {
        let seen = seen.lock().expect("seen");
        assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
        for g in 0..GROUPS {
            let want: Vec<usize> = (0..PER_GROUP).collect();
            assert_eq!(seen.order.get(&g), Some(&want), "group {g} in send order");
        }
    }
    let stats = n.b.stats(&queue).await.expect("stats");
    assert_eq!(
        (stats.visible, stats.in_flight),
        (0, 0),
        "everything was acked"
    );
}

#[tokio::test]
async fn sends_racing_into_one_group_from_two_nodes_never_put_two_in_flight() {
    let Some(n) = common::nodes("groups_race", PostgresOptions::default()).await else {
        return;
    };
    let queue = created(&n.a, "race").await;
    // Both nodes send batches into the same two groups at once; each node's own messages
    // carry its own increasing numbers (node a from 0, node b from 1,000).
    const BATCHES: usize = 20;
    let send_all = |node: Checked<PostgresStore>, base: usize| {
        let queue = queue.clone();
        tokio::spawn(async move {
            for batch in 0..BATCHES {
                let msgs = (0..5)
                    .flat_map(|i| {
                        let seq = base + batch * 5 + i;
                        [member(0, seq), member(1, seq)]
                    })
                    .collect();
                node.send(&queue, msgs).await.expect("send");
            }
        })
    };
    let (sa, sb) = (send_all(n.a.clone(), 0), send_all(n.b.clone(), 1000));
    // Receivers on both nodes drain it meanwhile, counting what each group has in flight.
    let mut in_flight: HashMap<usize, usize> = HashMap::new();
    let mut order: HashMap<usize, Vec<usize>> = HashMap::new();
    let total = 2 * 2 * BATCHES * 5;
    let mut received = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "drained {received} of {total}"
        );
        let (ra, rb) = tokio::join!(n.a.receive(&queue, recv(3)), n.b.receive(&queue, recv(3)));
        let got: Vec<Delivery> = ra.expect("a").into_iter().chain(rb.expect("b")).collect();
        for d in &got {
            let (g, seq) = parse(d);
            let held = in_flight.entry(g).or_default();
            *held += 1;
            assert!(*held <= 1, "group {g} has {held} in flight");
            order.entry(g).or_default().push(seq);
        }
        received += got.len();
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        n.a.ack(&queue, acks(got.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
        for d in &got {
            *in_flight.get_mut(&parse(d).0).expect("held") -= 1;
        }
    }
    sa.await.expect("sender a");
    sb.await.expect("sender b");
    for (g, seqs) in &order {
        for base in [0, 1000] {
            let mine: Vec<usize> = seqs
                .iter()
                .copied()
                .filter(|s| (base..base + 1000).contains(s))
                .collect();
            let want: Vec<usize> = (base..base + BATCHES * 5).collect();
            assert_eq!(
                mine, want,
                "group {g}: the sends of one node in their order"
            );
        }
    }
}

/// A send that takes a place in a line while an earlier one into the same line has not yet
/// committed waits for it: places follow commits, so the later message can never be leased
/// ahead of (and beside) the earlier one.
#[tokio::test]
async fn a_send_into_a_line_waits_for_an_earlier_uncommitted_one() {
    let Some(n) = common::nodes("groups_commit", PostgresOptions::default()).await else {
        return;
    };
    let queue = created(&n.a, "line").await;
    let (mut client, conn) =
        tokio_postgres::connect(&sluice_testkit::postgres::url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
    let driver = tokio::spawn(conn);
    // The first member, sent in the caller's transaction, not yet committed.
    let tx = client.transaction().await.expect("begin");
    n.a.engine()
        .send_in(&tx, &queue, vec![member(0, 0)])
        .await
        .expect("send in tx");
    // The second, through the other node, must wait for the first's commit.
    let second = {
        let (b, queue) = (n.b.clone(), queue.clone());
        tokio::spawn(async move { b.send(&queue, vec![member(0, 1)]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second send committed before the first"
    );
    assert!(
        n.b.receive(&queue, recv(10))
            .await
            .expect("receive")
            .is_empty(),
        "nothing of the line is committed yet"
    );
    tx.commit().await.expect("commit");
    second.await.expect("task").expect("second send");
    let first = n.b.receive(&queue, recv(10)).await.expect("receive");
    assert_eq!(
        first.iter().map(parse).collect::<Vec<_>>(),
        vec![(0, 0)],
        "the first member alone"
    );
    assert!(
        n.a.receive(&queue, recv(10))
            .await
            .expect("receive")
            .is_empty(),
        "the second waits while the first is in flight"
    );
    n.a.ack(&queue, acks([first[0].receipt]))
        .await
        .expect("ack");
    let next = n.a.receive(&queue, recv(10)).await.expect("receive");
    assert_eq!(next.iter().map(parse).collect::<Vec<_>>(), vec![(0, 1)]);
    drop(client);
    driver.abort();
}
