//! Rules that must hold across broker nodes sharing one database, with two stores (two nodes)
//! on one schema; and transactional enqueue inside the caller's own transaction.
//!
//! Over 1,000 lines: every rule here needs the same two-node set-up, and one file keeps the
//! set-up and the rules it serves together; per-feature files (groups, hand-off, packs) hold
//! the rest.

use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::store::{ClaimOutcome, IdempotencyClaim, IdempotentResponse};
use sluice_core::{
    AckRequest, Body, Checked, Clock, Delivery, MessageId, NewMessage, QueueConfigPatch, QueueName,
    RateLimit, ReceiveRequest, StoreError, SystemClock,
};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_testkit::postgres;

mod common;
#[path = "nodes/key_flows.rs"]
mod key_flows;
#[path = "nodes/key_limits.rs"]
mod key_limits;
#[path = "nodes/totals.rs"]
mod totals;

use common::{Nodes, created, q, recv};

async fn nodes() -> Option<Nodes> {
    common::nodes("nodes", PostgresOptions::default()).await
}

fn msg(text: &str) -> NewMessage {
    NewMessage::new(Body::text(text))
}

/// A receive of one message that waits up to `wait_ms` for it.
fn poll(wait_ms: u64) -> ReceiveRequest {
    ReceiveRequest {
        max: 1,
        wait: Duration::from_millis(wait_ms),
        ..ReceiveRequest::default()
    }
}

#[tokio::test]
async fn receipts_dedup_and_idempotency_keys_hold_on_every_node() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    // The queue created on one node is there on the other.
    n.b.get_queue(&work).await.expect("visible on b");

    let mut d = msg("once");
    d.dedup_id = Some("order-1".into());
    let first = n.a.send(&work, vec![d.clone()]).await.expect("send on a");
    let second = n.b.send(&work, vec![d]).await.expect("send on b");
    assert!(second[0].duplicate, "dedup ids are shared");
    assert_eq!(first[0].id, second[0].id);

    let got = n.a.receive(&work, recv(10)).await.expect("receive on a");
    assert_eq!(got.len(), 1);
    assert!(
        n.b.receive(&work, recv(10))
            .await
            .expect("receive on b")
            .is_empty(),
        "a leased message is not handed to a second consumer on another node"
    );
    let acked =
        n.b.ack(
            &work,
            vec![AckRequest {
                receipt: got[0].receipt,
                result: None,
            }],
        )
        .await
        .expect("ack on b");
    assert_eq!(
        acked,
        vec![Ok(())],
        "a receipt from node a is valid on node b"
    );
    assert_eq!(
        n.a.ack(
            &work,
            vec![AckRequest {
                receipt: got[0].receipt,
                result: None
            }]
        )
        .await
        .expect("ack again"),
        vec![Err(StoreError::ReceiptStale)]
    );

    let response = |status| IdempotentResponse {
        fingerprint: [7; 32],
        status,
        body: bytes::Bytes::from_static(b"{}"),
        created_at: SystemClock.now(),
    };
    assert_eq!(
        n.a.idempotency_put("k", response(201)).await.expect("put"),
        None
    );
    assert_eq!(
        n.b.idempotency_put("k", response(500))
            .await
            .expect("put again")
            .map(|r| r.status),
        Some(201),
        "the first writer wins across nodes"
    );

    // A claim made on one node holds the key on the other, until answered there.
    let claim = |token| IdempotencyClaim {
        fingerprint: [7; 32],
        token,
        lease: Duration::from_secs(60),
    };
    assert_eq!(
        n.a.idempotency_claim("c", claim(1))
            .await
            .expect("claim on a"),
        ClaimOutcome::Claimed
    );
    assert!(matches!(
        n.b.idempotency_claim("c", claim(2)).await.expect("claim on b"),
        ClaimOutcome::Pending { fingerprint, .. } if fingerprint == [7; 32]
    ));
    assert_eq!(
        n.a.idempotency_put("c", response(201))
            .await
            .expect("answer on a"),
        None
    );
    assert!(matches!(
        n.b.idempotency_claim("c", claim(2)).await.expect("claim on b"),
        ClaimOutcome::Answered(r) if r.status == 201
    ));
}

#[tokio::test]
async fn rate_limit_and_max_in_flight_are_global() {
    let Some(n) = nodes().await else { return };
    let limited = q("limited");
    n.a.put_queue(
        &limited,
        &QueueConfigPatch {
            // A burst of the whole limit: the window alone decides (the pace is a
            // conformance case).
            rate_limit: Some(Some(RateLimit {
                limit: 7,
                period: Duration::from_secs(600),
                burst: Some(7),
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.a.send(&limited, (0..20).map(|i| msg(&i.to_string())).collect())
        .await
        .expect("send");
    // Both nodes receive concurrently, many times; together they get the quota, no more.
    let mut tasks = Vec::new();
    for store in [n.a.clone(), n.b.clone()] {
        let limited = limited.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            for _ in 0..10 {
                got += store
                    .receive(&limited, recv(2))
                    .await
                    .expect("receive")
                    .len();
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert_eq!(total, 7, "rate_limit counts deliveries of every node");

    // The pace is shared too: 10 per 10 s with a burst of 2, one node takes the burst and the
    // other finds the spacing.
    let paced = q("paced");
    n.a.put_queue(
        &paced,
        &QueueConfigPatch {
            rate_limit: Some(Some(RateLimit {
                limit: 10,
                period: Duration::from_secs(10),
                burst: Some(2),
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.a.send(&paced, (0..5).map(|i| msg(&i.to_string())).collect())
        .await
        .expect("send");
    let first = n.a.receive(&paced, recv(10)).await.expect("receive");
    let second = n.b.receive(&paced, recv(10)).await.expect("receive");
    assert_eq!(
        (first.len(), second.len()),
        (2, 0),
        "the other node sees the pace the first moved on"
    );

    let capped = q("capped");
    n.b.put_queue(
        &capped,
        &QueueConfigPatch {
            max_in_flight: Some(Some(5)),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.b.send(&capped, (0..20).map(|i| msg(&i.to_string())).collect())
        .await
        .expect("send");
    let (x, y) = tokio::join!(n.a.receive(&capped, recv(4)), n.b.receive(&capped, recv(4)));
    let leased = x.expect("a").len() + y.expect("b").len();
    assert_eq!(leased, 5, "max_in_flight counts leases of every node");
}

#[tokio::test]
async fn a_long_poll_on_one_node_wakes_for_a_send_on_another() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "wake").await;
    let waiter = {
        let a = n.a.clone();
        let work = work.clone();
        tokio::spawn(async move { a.receive(&work, poll(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    n.b.send(&work, vec![msg("hello")])
        .await
        .expect("send on b");
    let got = waiter.await.expect("task").expect("receive");
    assert_eq!(
        got.len(),
        1,
        "the waiting receive on node a got the message"
    );
    assert_eq!(got[0].body.bytes.as_ref(), b"hello");
}

/// A node remembers that a queue was empty, to spare long polls a statement. That memory
/// must never hide a committed message: from a receive that does not wait, even before
/// the other node's wake-up arrives, nor from a long poll after this node's own send.
#[tokio::test]
async fn a_queue_seen_empty_hides_no_committed_message() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "seen-empty").await;
    for round in 0..20 {
        assert!(
            n.a.receive(&work, poll(0))
                .await
                .expect("receive")
                .is_empty(),
            "round {round}: the queue starts empty"
        );
        n.b.send(&work, vec![msg("from b")])
            .await
            .expect("send on b");
        let got = n.a.receive(&work, poll(0)).await.expect("receive on a");
        assert_eq!(
            got.len(),
            1,
            "round {round}: a receive that does not wait sees a send committed on another node"
        );
        let ack = AckRequest {
            receipt: got[0].receipt,
            result: None,
        };
        let acked = n.a.ack(&work, vec![ack]).await.expect("ack");
        assert!(acked.iter().all(Result::is_ok), "round {round}: acked");
    }
    assert!(
        n.a.receive(&work, poll(0))
            .await
            .expect("receive")
            .is_empty()
    );
    n.a.send(&work, vec![msg("from a")])
        .await
        .expect("send on a");
    // Shorter than the fallback poll: only the send's own wake-up lets it look again.
    let got = n.a.receive(&work, poll(300)).await.expect("long poll on a");
    assert_eq!(got.len(), 1, "a long poll sees this node's own send");
}

/// While a node's LISTEN connection is down, other nodes' wake-ups are lost: its memory that
/// a queue was empty must not make a long poll wait for a message committed meanwhile.
#[tokio::test]
async fn a_lost_listen_connection_makes_no_long_poll_miss_a_message() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "listen-lost").await;
    for round in 0..3 {
        // Node a learns that the queue is empty...
        assert!(
            n.a.receive(&work, poll(10))
                .await
                .expect("receive")
                .is_empty(),
            "round {round}: the queue starts empty"
        );
        // ...then loses its wake-ups, and node b sends before a can listen again.
        let cut = postgres::cut_listeners(&format!("sluice_wake_{}", n.schema)).await;
        assert!(cut >= 1, "round {round}: a listening connection was cut");
        n.b.send(&work, vec![msg("while a was deaf")])
            .await
            .expect("send on b");
        // Trusting the stale memory, the long poll would sleep until that memory runs out
        // (the fallback poll, a second) before it looked; a correct one asks at once.
        let asked = std::time::Instant::now();
        let got =
            n.a.receive(&work, poll(5_000))
                .await
                .expect("long poll on a");
        let took = asked.elapsed();
        assert_eq!(
            got.len(),
            1,
            "round {round}: a long poll on a sees the message b committed while a was not listening"
        );
        assert!(
            took < Duration::from_millis(500),
            "round {round}: the long poll waited {took:?} for a message committed before it began"
        );
        let ack = AckRequest {
            receipt: got[0].receipt,
            result: None,
        };
        let acked = n.a.ack(&work, vec![ack]).await.expect("ack");
        assert!(acked.iter().all(Result::is_ok), "round {round}: acked");
        // Let both nodes listen again before the next round.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

/// The payloads heard on `channel` by a connection that listens and never speaks.
async fn overhear(
    channel: &str,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use futures::StreamExt as _;
    let (client, mut conn) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .expect("LISTEN");
    (client, rx)
}

/// Wake-ups (`origin queue`) and presences (`origin`) heard so far.
fn heard(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> (Vec<String>, usize) {
    let (mut wakes, mut presences) = (Vec::new(), 0);
    while let Ok(p) = rx.try_recv() {
        match p.split_once(' ') {
            Some((_, q)) => wakes.push(q.to_string()),
            None => presences += 1,
        }
    }
    (wakes, presences)
}

/// A node alone spends no statement on NOTIFYs nobody hears; once another node is there,
/// its writes are announced again.
#[tokio::test]
async fn a_node_alone_announces_nothing_until_another_joins() {
    if !postgres::available().await {
        return;
    }
    let schema = postgres::unique_schema("alone");
    let url = postgres::url();
    let open = |node: &str| {
        PostgresStore::open(
            &url,
            PostgresOptions {
                schema: schema.clone(),
                pool_size: 2,
                node_id: Some(node.to_string()),
                ..PostgresOptions::default()
            },
        )
    };
    let _drop = postgres::SchemaGuard::new(schema.clone());
    let a = open("a").await.expect("open node a");
    let work = created(&a, "alone").await;
    // Past the time a newly listening node announces everything, as it cannot yet tell.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    let (_ear, mut rx) = overhear(&format!("sluice_wake_{schema}")).await;
    for i in 0..3 {
        a.send(&work, vec![msg(&format!("alone {i}"))])
            .await
            .expect("send");
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (wakes, presences) = heard(&mut rx);
    assert!(wakes.is_empty(), "a node alone announced {wakes:?}");
    assert!(presences >= 1, "a listening node says it is there");

    let _b = open("b").await.expect("open node b");
    tokio::time::sleep(Duration::from_millis(700)).await;
    a.send(&work, vec![msg("now b listens")])
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (wakes, _) = heard(&mut rx);
    assert_eq!(
        wakes,
        vec!["alone".to_string()],
        "a announces once b is there"
    );
}

/// A send made in the caller's transaction wakes waiting receives on every node when that
/// transaction commits, the node it was made through included.
#[tokio::test]
async fn a_send_in_the_callers_transaction_wakes_long_polls_when_it_commits() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "outbox-wake").await;
    let (mut client, conn) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(conn);
    let long_poll = |s: &Checked<PostgresStore>| {
        let (s, work) = (s.clone(), work.clone());
        tokio::spawn(async move {
            let got = s.receive(&work, poll(5_000)).await.expect("long poll");
            (got.len(), std::time::Instant::now())
        })
    };
    let (on_a, on_b) = (long_poll(&n.a), long_poll(&n.b));
    // Both have asked once and now sleep until a wake-up or their fallback poll.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tx = client.transaction().await.expect("begin");
    n.a.engine()
        .send_in(&tx, &work, vec![msg("one"), msg("two")])
        .await
        .expect("send in tx");
    tx.commit().await.expect("commit");
    let committed = std::time::Instant::now();
    for (node, poll) in [("a", on_a), ("b", on_b)] {
        let (got, at) = poll.await.expect("task");
        assert_eq!(got, 1, "the long poll on {node} got a message");
        let after = at.saturating_duration_since(committed);
        assert!(
            after < Duration::from_millis(500),
            "the long poll on {node} woke {after:?} after the commit, not at once"
        );
    }
    drop(client);
    driver.abort();
}

#[tokio::test]
async fn send_in_commits_and_rolls_back_with_the_callers_transaction() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "outbox").await;
    let (mut client, conn) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(conn);
    let table = format!("orders_{}", n.schema);
    client
        .batch_execute(&format!("CREATE TABLE public.{table} (id int PRIMARY KEY)"))
        .await
        .expect("business table");

    // Rolled back: neither the order nor its task exists.
    let tx = client.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO public.{table} VALUES (1)"), &[])
        .await
        .expect("business write");
    n.a.engine()
        .send_in(&tx, &work, vec![msg("ship order 1")])
        .await
        .expect("send in tx");
    let path: String = tx
        .query_one("SELECT current_setting('search_path')", &[])
        .await
        .expect("search_path")
        .get(0);
    assert!(
        !path.contains(&n.schema),
        "send_in leaves the caller's search_path as it was, got {path:?}"
    );
    assert!(
        n.b.receive(&work, recv(10))
            .await
            .expect("receive")
            .is_empty(),
        "nothing is visible before the commit"
    );
    tx.rollback().await.expect("rollback");
    assert!(
        n.b.receive(&work, recv(10))
            .await
            .expect("receive")
            .is_empty()
    );

    // Committed: both exist.
    let tx = client.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO public.{table} VALUES (2)"), &[])
        .await
        .expect("business write");
    let sent =
        n.a.engine()
            .send_in(&tx, &work, vec![msg("ship order 2")])
            .await
            .expect("send in tx");
    tx.commit().await.expect("commit");
    let got = n.b.receive(&work, recv(10)).await.expect("receive");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent[0].id);
    assert_eq!(got[0].body.bytes.as_ref(), b"ship order 2");

    // An unknown queue fails the send (and so the caller's transaction).
    let tx = client.transaction().await.expect("begin");
    let err =
        n.a.engine()
            .send_in(&tx, &q("nope"), vec![msg("x")])
            .await
            .expect_err("unknown queue");
    assert!(matches!(err, StoreError::QueueNotFound(_)), "{err:?}");
    tx.rollback().await.expect("rollback");

    client
        .batch_execute(&format!("DROP TABLE public.{table}"))
        .await
        .expect("drop business table");
    drop(client);
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_and_receives_on_one_node_each_get_their_own() {
    // Sends and receives of one queue arriving together share statements: every caller must
    // still get its own ids and its own messages, none twice and none lost.
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "shared").await;
    let mut senders = Vec::new();
    for s in 0..8 {
        let store = n.a.clone();
        let work = work.clone();
        senders.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..25 {
                let out = store
                    .send(
                        &work,
                        vec![msg(&format!("{s}-{i}")), msg(&format!("{s}-{i}b"))],
                    )
                    .await
                    .expect("send");
                assert_eq!(out.len(), 2);
                ids.extend(out.into_iter().map(|o| o.id));
            }
            ids
        }));
    }
    let mut sent = std::collections::HashSet::new();
    for s in senders {
        for id in s.await.expect("sender") {
            assert!(sent.insert(id), "an id was handed to two sends");
        }
    }
    assert_eq!(sent.len(), 400);

    let mut receivers = Vec::new();
    for _ in 0..8 {
        let store = n.a.clone();
        let work = work.clone();
        receivers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.receive(&work, recv(7)).await.expect("receive");
                if batch.is_empty() {
                    return got;
                }
                assert!(batch.len() <= 7, "a receive got more than its max");
                got.extend(batch);
            }
        }));
    }
    let mut received = std::collections::HashSet::new();
    for r in receivers {
        for d in r.await.expect("receiver") {
            assert!(
                received.insert(d.id),
                "a message was leased to two receives"
            );
        }
    }
    assert_eq!(received, sent, "every message was received once");

    // A long poll that goes away does not keep a message: it is there for the next receive.
    let waiting = {
        let store = n.a.clone();
        let work = work.clone();
        tokio::spawn(async move {
            let req = ReceiveRequest {
                max: 1,
                wait: Duration::from_secs(10),
                ..ReceiveRequest::default()
            };
            store.receive(&work, req).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.abort();
    let _ = waiting.await;
    n.a.send(&work, vec![msg("after")]).await.expect("send");
    let got = n.b.receive(&work, recv(1)).await.expect("receive");
    assert_eq!(
        got.len(),
        1,
        "the message is not held by the receive that went away"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_on_one_node_are_each_answered_for_their_own_receipts() {
    // Acks of one queue arriving together share statements: every call must still be answered
    // receipt by receipt, and a receipt named by two calls at once must be acked only once.
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "acks").await;
    let bodies = (0..120).map(|i| msg(&format!("m{i}"))).collect();
    n.a.send(&work, bodies).await.expect("send");
    let got = n.a.receive(&work, recv(120)).await.expect("receive");
    assert_eq!(got.len(), 120);
    let ack = |r: sluice_core::Receipt| AckRequest {
        receipt: r,
        result: None,
    };
    // Call k acks receipts 2k and 2k + 1 and one that never existed; calls 60 – 79 each
    // name again a receipt of calls 0 – 19.
    let mut calls = Vec::new();
    for k in 0..80usize {
        let receipts = if k < 60 {
            let unknown = sluice_core::Receipt {
                id: sluice_core::MessageId(1 << 60 | k as u64),
                token: 7,
            };
            vec![got[2 * k].receipt, got[2 * k + 1].receipt, unknown]
        } else {
            vec![got[2 * (k - 60)].receipt]
        };
        let store = n.a.clone();
        let work = work.clone();
        calls.push(tokio::spawn(async move {
            let out = store
                .ack(&work, receipts.iter().copied().map(ack).collect())
                .await
                .expect("ack");
            (receipts, out)
        }));
    }
    let mut acked = std::collections::HashMap::new();
    for c in calls {
        let (receipts, out) = c.await.expect("ack call");
        assert_eq!(out.len(), receipts.len(), "one answer per receipt");
        for (r, o) in receipts.iter().zip(out) {
            match o {
                Ok(()) => *acked.entry(r.id).or_insert(0) += 1,
                Err(StoreError::ReceiptStale) => {}
                Err(e) => panic!("ack of {r:?}: {e}"),
            }
        }
    }
    assert_eq!(acked.len(), 120, "every leased message was acked");
    assert!(
        acked.values().all(|n| *n == 1),
        "a receipt named by two calls was acked by both: {acked:?}"
    );
    assert!(
        n.b.receive(&work, recv(10))
            .await
            .expect("receive")
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_served_one_message_at_a_time_miss_none() {
    // Long polls skip the database while their node counts every message made visible since
    // an empty lease as leased again. A miscount would leave a message unseen until the
    // fallback poll; these polls end sooner, so a miscount loses the message here.
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "one-by-one").await;
    // A node trusts that memory once it has listened for half a second.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let sent_all = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut receivers = Vec::new();
    for _ in 0..4 {
        let (store, work, sent_all) = (n.a.clone(), work.clone(), sent_all.clone());
        receivers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.receive(&work, poll(600)).await.expect("receive");
                if batch.is_empty() {
                    if sent_all.load(std::sync::atomic::Ordering::Acquire) {
                        return got;
                    }
                    continue;
                }
                let acks = batch
                    .iter()
                    .map(|d| AckRequest {
                        receipt: d.receipt,
                        result: None,
                    })
                    .collect();
                store.ack(&work, acks).await.expect("ack");
                got.extend(batch.into_iter().map(|d| d.id));
            }
        }));
    }
    let mut sent = std::collections::HashSet::new();
    for i in 0..60 {
        let out =
            n.a.send(&work, vec![msg(&format!("m{i}"))])
                .await
                .expect("send");
        sent.insert(out[0].id);
        if i % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    sent_all.store(true, std::sync::atomic::Ordering::Release);
    let mut received = std::collections::HashSet::new();
    for r in receivers {
        for id in r.await.expect("receiver") {
            assert!(received.insert(id), "a message was delivered twice");
        }
    }
    assert_eq!(received, sent, "every message was received by a long poll");
}

#[tokio::test]
async fn a_queue_known_empty_still_delivers_what_is_sent_next() {
    // The node remembers that the queue was found empty; each message sent after that must
    // still reach a long poll at once, not at the fallback poll (the waits here are shorter).
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "known-empty").await;
    // A node trusts that memory once it has listened for half a second.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for round in 0..3 {
        assert!(
            n.a.receive(&work, poll(20))
                .await
                .expect("receive")
                .is_empty(),
            "round {round}: found empty"
        );
        // A long poll already waiting is woken by the send. (Were the send not counted, the
        // poll would look again only when its wait ran out: it still gets the message then,
        // so the time tells.)
        let waiting = {
            let (store, work) = (n.a.clone(), work.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let got = store.receive(&work, poll(900)).await;
                (got, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        n.a.send(&work, vec![msg("woken")]).await.expect("send");
        let (got, took) = waiting.await.expect("task");
        assert_eq!(got.expect("long poll").len(), 1, "round {round}");
        assert!(
            took < Duration::from_millis(600),
            "round {round}: the waiting poll was not woken by the send ({took:?})"
        );
        // A long poll that arrives after a send asks the database at once.
        n.a.send(&work, vec![msg("arrives")]).await.expect("send");
        let started = std::time::Instant::now();
        let got = n.a.receive(&work, poll(900)).await.expect("long poll");
        assert_eq!(got.len(), 1, "round {round}");
        assert!(
            started.elapsed() < Duration::from_millis(550),
            "round {round}: a new poll waited although a message was there"
        );
    }
}

/// Every connection works in the schema exactly as named: capitals are not folded away (a
/// schema named `Billing` is not `billing`), whichever pool a statement runs on.
#[tokio::test]
async fn a_schema_named_with_capitals_is_the_one_used() {
    let Some(n) = common::nodes("Mixed_Case", PostgresOptions::default()).await else {
        return;
    };
    let work = created(&n.a, "work").await;
    n.a.send(&work, vec![msg("one"), msg("two")])
        .await
        .expect("send");
    let got = n.b.receive(&work, recv(10)).await.expect("receive");
    assert_eq!(got.len(), 2);
    let acked =
        n.a.ack(&work, common::acks(got.iter().map(|m| m.receipt)))
            .await
            .expect("ack");
    assert!(acked.iter().all(|a| a.is_ok()), "{acked:?}");
    // So does a send inside the caller's own transaction.
    let (mut client, conn) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(conn);
    let tx = client.transaction().await.expect("begin");
    n.a.engine()
        .send_in(&tx, &work, vec![msg("in tx")])
        .await
        .expect("send in tx");
    tx.commit().await.expect("commit");
    driver.abort();
    assert_eq!(
        n.b.receive(&work, recv(10)).await.expect("receive").len(),
        1
    );

    let db = n.db().await;
    let schemas: Vec<String> = db
        .query(
            "SELECT nspname::text FROM pg_namespace WHERE lower(nspname) = lower($1)",
            &[&n.schema],
        )
        .await
        .expect("schemas")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        schemas,
        vec![n.schema.clone()],
        "one schema, named as given"
    );
}

/// Nodes reach the database through PgBouncer in session mode, the pooler operators put in
/// front of it: every connection's settings survive it (PgBouncer refuses startup
/// `options`), and wake-ups still cross nodes.
#[tokio::test]
async fn nodes_work_through_pgbouncer_in_session_mode() {
    if !postgres::available().await {
        return;
    }
    let Some(bouncer) = sluice_testkit::pgbouncer::PgBouncer::start() else {
        return;
    };
    // Opened through PgBouncer: a node whose settings it refused would not open at all.
    let n = common::nodes_at(&bouncer.url(), "Bounced", PostgresOptions::default()).await;
    let (a, b) = (&n.a, &n.b);
    let work = created(a, "work").await;
    // A node trusts what it hears once it has listened for half a second.
    tokio::time::sleep(Duration::from_millis(700)).await;

    let waiting = {
        let (b, work) = (b.clone(), work.clone());
        tokio::spawn(async move { b.receive(&work, poll(5_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    a.send(&work, vec![msg("woken")]).await.expect("send");
    let got = waiting.await.expect("task").expect("long poll on b");
    assert_eq!(got.len(), 1);
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "the long poll on b was woken by the send on a, not by its fallback poll"
    );

    // A large send is a pack; its lease and ack run on the lease and ack pools.
    let sent = a
        .send(&work, (0..20).map(|i| msg(&format!("m{i}"))).collect())
        .await
        .expect("large send");
    let mut receipts = vec![got[0].receipt];
    let batch = b.receive(&work, recv(50)).await.expect("receive");
    assert_eq!(batch.len(), sent.len());
    receipts.extend(batch.iter().map(|d| d.receipt));
    let acked = a.ack(&work, common::acks(receipts)).await.expect("ack");
    assert!(acked.iter().all(|r| r.is_ok()), "{acked:?}");
    assert!(
        b.receive(&work, recv(50))
            .await
            .expect("receive")
            .is_empty()
    );
}

/// A node behind on a queue starts each lease after the last row it leased, not at the head
/// of the index (see `backlog.rs`). A row that turns up before that point, as with nodes'
/// clocks apart, is still delivered, within a few leases, and every message exactly once.
#[tokio::test]
async fn a_lease_after_the_cursor_still_finds_a_row_that_turns_up_before_it() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "behind").await;
    let sent = backlog(&n.a, &work, 60).await;
    let mut got = Vec::new();
    for _ in 0..10 {
        let d = n.a.receive(&work, recv(1)).await.expect("receive");
        got.extend(d.into_iter().map(|d| d.id));
    }
    assert_eq!(got, sent[..10], "oldest first");
    // The newest waiting message moves before every leased one.
    let late = *sent.last().expect("sent");
    n.db()
        .await
        .execute(
            "UPDATE messages SET visible_at = visible_at - 3600000 WHERE id = $1",
            &[&(late.0 as i64)],
        )
        .await
        .expect("move");
    let mut found_after = None;
    for i in 0..50 {
        let d = n.a.receive(&work, recv(1)).await.expect("receive");
        for m in d {
            if m.id == late {
                found_after = Some(i);
            }
            got.push(m.id);
        }
    }
    let found_after = found_after.expect("the moved message was delivered");
    // Not at once (the leases after the cursor do not see it), but by the next scan from
    // the head.
    assert!(
        (1..=16).contains(&found_after),
        "delivered after {found_after} leases"
    );
    let mut all = got.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), got.len(), "each message once");
    let mut expected = sent.clone();
    expected.sort();
    assert_eq!(all, expected, "every message");
}

/// Sends `n` messages to `queue` through `node` and lets them wait long enough for a queue
/// whose receives take them to count as behind.
async fn backlog(node: &Checked<PostgresStore>, queue: &QueueName, n: usize) -> Vec<MessageId> {
    let mut sent = Vec::new();
    for i in 0..n {
        let out = node.send(queue, vec![msg(&format!("m{i}"))]).await;
        sent.push(out.expect("send")[0].id);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    sent
}

/// How many messages of `queue` are leased, as `node`'s stats count them.
async fn in_flight(node: &Checked<PostgresStore>, queue: &QueueName) -> u64 {
    node.stats(queue).await.expect("stats").in_flight
}

/// Receives of one message, four at a time on `node`, until a lease has read ahead (more
/// in flight than delivered); what they got.
async fn until_read_ahead(node: &Checked<PostgresStore>, queue: &QueueName) -> Vec<Delivery> {
    let mut got = Vec::new();
    for _ in 0..20 {
        let four = futures::future::join_all((0..4).map(|_| node.receive(queue, recv(1)))).await;
        for r in four {
            got.extend(r.expect("receive"));
        }
        if in_flight(node, queue).await > got.len() as u64 {
            return got;
        }
    }
    panic!("no lease read ahead in 20 rounds of four receives");
}

#[tokio::test]
async fn a_node_behind_reads_ahead_and_releases_what_its_receives_did_not_take() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "ahead").await;
    let sent = backlog(&n.a, &work, 40).await;
    let got_a = until_read_ahead(&n.a, &work).await;
    // Held by node a: node b cannot take them now, and gets them once a lets them go.
    assert!(in_flight(&n.a, &work).await > got_a.len() as u64);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after = in_flight(&n.b, &work).await;
    assert_eq!(after, got_a.len() as u64, "released after the hold");
    let got_b = n.b.receive(&work, recv(100)).await.expect("receive");
    assert!(
        got_b.iter().all(|d| d.receive_count == 1),
        "a release gives back the receive it counted"
    );
    let mut all: Vec<MessageId> = got_a.iter().chain(&got_b).map(|d| d.id).collect();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(all.len(), before, "each message delivered once");
    assert_eq!(all, sent, "every message delivered");
    // Each node's stats write its own pending counts first.
    n.b.stats(&work).await.expect("stats");
    let totals = n.a.stats(&work).await.expect("stats").totals;
    assert_eq!(
        totals.received,
        sent.len() as u64,
        "held messages are not received"
    );
}

#[tokio::test]
async fn messages_read_ahead_are_not_handed_out_once_paused_or_purged() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "ahead_stop").await;
    let sent = backlog(&n.a, &work, 40).await;
    let got = until_read_ahead(&n.a, &work).await;
    let pause = |paused| QueueConfigPatch {
        paused: Some(paused),
        ..QueueConfigPatch::default()
    };
    n.a.put_queue(&work, &pause(true)).await.expect("pause");
    let none = n.a.receive(&work, recv(1)).await.expect("receive");
    assert!(
        none.is_empty(),
        "a paused queue delivers nothing, held or not"
    );
    n.a.put_queue(&work, &pause(false)).await.expect("resume");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let rest = n.b.receive(&work, recv(100)).await.expect("receive");
    assert_eq!(rest.len() + got.len(), sent.len(), "held ones released");
    // Read ahead again, then purge: nothing held is handed out.
    let more = backlog(&n.a, &work, 40).await;
    until_read_ahead(&n.a, &work).await;
    n.a.purge(&work).await.expect("purge");
    let none = n.a.receive(&work, recv(1)).await.expect("receive");
    assert!(
        none.is_empty(),
        "purged, held ones too ({} sent)",
        more.len()
    );
}

#[tokio::test]
async fn a_node_that_closes_releases_what_it_read_ahead_at_once() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "ahead_close").await;
    let sent = backlog(&n.a, &work, 40).await;
    let got = until_read_ahead(&n.a, &work).await;
    n.a.close().await;
    let after = in_flight(&n.b, &work).await;
    assert_eq!(after, got.len() as u64, "nothing held after close");
    let rest = n.b.receive(&work, recv(100)).await.expect("receive");
    assert_eq!(rest.len() + got.len(), sent.len());
}

/// A breaker's state is shared: failures reported through node a open it for node b's
/// receives too (once a's flush has handed them over), and an operator forcing it closed
/// through b lets a deliver again.
#[tokio::test]
async fn a_breaker_opened_through_one_node_stops_the_other() {
    use sluice_core::adaptive::{BreakerConfig, BreakerForce, BreakerState};
    let Some(n) = nodes().await else { return };
    let work = q("guarded");
    n.a.put_queue(
        &work,
        &QueueConfigPatch {
            visibility_timeout: Some(Duration::from_secs(3600)),
            breaker: Some(Some(BreakerConfig {
                failure_share_permille: 500,
                window_ms: 60_000,
                min_calls: 4,
                // Long enough not to turn half-open during the test.
                probe_every_ms: 600_000,
                probes: 1,
                ..Default::default()
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.a.send(&work, (0..8).map(|i| msg(&i.to_string())).collect())
        .await
        .expect("send");
    let got = n.a.receive(&work, recv(4)).await.expect("receive on a");
    assert_eq!(got.len(), 4);
    for d in got {
        n.a.nack(
            &work,
            d.receipt,
            Some(Duration::from_secs(600)),
            sluice_core::Failure {
                error: Some("503".into()),
                consumer: None,
                retry_after: false,
            },
        )
        .await
        .expect("nack on a");
    }
    // a hands its outcomes to the shared state within its flush period.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let flow = n.b.stats(&work).await.expect("stats on b").flow;
        let state = flow.and_then(|f| f.breaker).map(|b| b.state);
        if state == Some(BreakerState::Open) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the breaker did not open for node b: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        n.b.receive(&work, recv(10))
            .await
            .expect("receive on b")
            .is_empty(),
        "the breaker opened through node a holds node b's receives"
    );
    let s =
        n.b.force_breaker(&work, BreakerForce::Closed)
            .await
            .expect("force closed on b");
    assert_eq!(s.breaker.map(|b| b.state), Some(BreakerState::Closed));
    let again = n.a.receive(&work, recv(10)).await.expect("receive on a");
    assert_eq!(again.len(), 4, "forced closed through b, a delivers again");
}

/// An adaptive rate is one rate for the queue, not one per node: deliveries through both
/// nodes together stay within it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_rate_holds_for_both_nodes_together() {
    use sluice_core::adaptive::AdaptiveRate;
    let Some(n) = nodes().await else { return };
    let work = q("paced");
    // 600 a minute: paced at 4 deliveries per 400 ms.
    n.a.put_queue(
        &work,
        &QueueConfigPatch {
            visibility_timeout: Some(Duration::from_secs(3600)),
            adaptive: Some(Some(AdaptiveRate::new(600, 600))),
            ..QueueConfigPatch::default()
        },
    )
    .await
    .expect("create");
    n.a.send(&work, (0..200).map(|i| msg(&i.to_string())).collect())
        .await
        .expect("send");
    let start = tokio::time::Instant::now();
    let run = Duration::from_millis(2_000);
    let mut tasks = Vec::new();
    for store in [n.a.clone(), n.b.clone()] {
        let work = work.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            while start.elapsed() < run {
                let ds = store.receive(&work, recv(10)).await.expect("receive");
                got += ds.len();
                if !ds.is_empty() {
                    let receipts = ds.iter().map(|d| d.receipt);
                    store.ack(&work, common::acks(receipts)).await.expect("ack");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    let elapsed = start.elapsed();
    // Every 400 ms slice of the run holds at most 4 deliveries of the two nodes together.
    let slices = elapsed.as_millis().div_ceil(400) as usize;
    assert!(
        total <= 4 * slices,
        "{total} deliveries in {elapsed:?} through two nodes; 600 a minute allows {}",
        4 * slices
    );
    assert!(total >= 4, "only {total} deliveries in {elapsed:?}");
}

/// Two nodes on one manual clock whose maintenance runs only when a test calls it.
async fn ticking_nodes(
    prefix: &str,
    pool_size: usize,
) -> Option<(sluice_core::ManualClock, Nodes)> {
    let clock = sluice_core::ManualClock::new(sluice_core::Timestamp(1_700_000_000_000));
    let options = PostgresOptions {
        clock: std::sync::Arc::new(clock.clone()),
        maintenance_interval: Duration::from_secs(3600),
        pool_size,
        ..PostgresOptions::default()
    };
    Some((clock, common::nodes(prefix, options).await?))
}

/// A queue whose breaker opens when both of two calls fail, probing once after 10 s.
fn breaker_queue() -> QueueConfigPatch {
    QueueConfigPatch {
        visibility_timeout: Some(Duration::from_secs(3600)),
        breaker: Some(Some(sluice_core::adaptive::BreakerConfig {
            failure_share_permille: 500,
            window_ms: 60_000,
            min_calls: 2,
            probe_every_ms: 10_000,
            probes: 1,
            ..Default::default()
        })),
        ..QueueConfigPatch::default()
    }
}

/// Creates `queue` as [`breaker_queue`] through `node` and fails two deliveries there (nacked
/// with a 503, back in ten minutes): its breaker opens once the outcomes are handed over.
async fn opened_breaker(node: &Checked<PostgresStore>, queue: &QueueName) {
    node.put_queue(queue, &breaker_queue())
        .await
        .expect("create");
    node.send(queue, vec![msg("x"), msg("y")])
        .await
        .expect("send");
    for d in node.receive(queue, recv(2)).await.expect("receive") {
        let failure = sluice_core::Failure {
            error: Some("503".into()),
            consumer: None,
            retry_after: false,
        };
        node.nack(queue, d.receipt, Some(Duration::from_secs(600)), failure)
            .await
            .expect("nack");
    }
}

/// Time moves a shared breaker on while nobody receives: either node's maintenance turns it
/// half-open once its pause is over, audited once; deleting the queue deletes its state.
#[tokio::test]
async fn maintenance_turns_an_open_breaker_half_open_and_a_deleted_queue_keeps_no_state() {
    use sluice_core::AuditQuery;
    use sluice_core::adaptive::BreakerState;
    let Some((clock, n)) = ticking_nodes("flowtick", 16).await else {
        return;
    };
    let work = q("ticked");
    opened_breaker(&n.a, &work).await;
    let state = |s: sluice_core::QueueStats| s.flow.and_then(|f| f.breaker).map(|b| b.state);
    // Its stats hand a's outcomes over: open.
    assert_eq!(
        state(n.a.stats(&work).await.expect("stats")),
        Some(BreakerState::Open)
    );
    clock.advance(Duration::from_secs(10));
    n.b.engine().maintain().await.expect("maintain b");
    n.a.engine().maintain().await.expect("maintain a");
    assert_eq!(
        state(n.b.stats(&work).await.expect("stats")),
        Some(BreakerState::HalfOpen),
        "maintenance turned it half-open without a receive"
    );
    let audit =
        n.a.audit_query(AuditQuery {
            queues: vec![work.to_string()],
            since: None,
            until: None,
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("audit");
    let moves: Vec<(&str, &str)> = audit
        .iter()
        .filter(|e| e.action == "queue.breaker")
        .map(|e| (e.details["from"].as_str(), e.details["to"].as_str()))
        .collect();
    assert_eq!(moves, [("closed", "open"), ("open", "half_open")]);
    n.b.delete_queue(&work).await.expect("delete");
    let left: i64 = n
        .db()
        .await
        .query_one("SELECT count(*) FROM queue_flow", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0, "the queue's state went with it");
}

/// Maintenance ticks breakers on a pool of one connection (it gives its own back before a
/// tick locks a queue), and one governed queue whose stored state cannot be read spoils only
/// that queue: the other's breaker still turns half-open, and stats of many queues still
/// answer for the rest.
#[tokio::test]
async fn a_damaged_flow_row_spoils_only_its_queue_on_a_pool_of_one() {
    use sluice_core::adaptive::BreakerState;
    let Some((clock, n)) = ticking_nodes("flowbad", 1).await else {
        return;
    };
    let (bad, good) = (q("damaged"), q("sound"));
    n.a.put_queue(&bad, &breaker_queue()).await.expect("create");
    opened_breaker(&n.a, &good).await;
    let state = |s: &sluice_core::QueueStats| {
        s.flow
            .as_ref()
            .and_then(|f| f.breaker.as_ref())
            .map(|b| b.state)
    };
    assert_eq!(
        state(&n.a.stats(&good).await.expect("stats")),
        Some(BreakerState::Open)
    );
    n.db()
        .await
        .execute(
            "UPDATE queue_flow SET state = '42' WHERE queue = $1",
            &[&bad.as_str()],
        )
        .await
        .expect("damage the row");
    clock.advance(Duration::from_secs(10));
    tokio::time::timeout(Duration::from_secs(30), n.a.engine().maintain())
        .await
        .expect("maintenance on a pool of one does not wait on itself")
        .expect("maintain");
    let many =
        n.a.stats_many(&[bad.clone(), good.clone()])
            .await
            .expect("stats of many queues answer despite one damaged row");
    let good_stats = many[1].as_ref().expect("the sound queue's stats");
    assert_eq!(
        state(good_stats),
        Some(BreakerState::HalfOpen),
        "maintenance turned the sound queue's breaker half-open"
    );
    assert!(
        many[0].as_ref().is_some_and(|s| s.flow.is_none()),
        "the damaged queue answers without its flow: {:?}",
        many[0]
    );
}
