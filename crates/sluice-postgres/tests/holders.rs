//! Every delivery's attempt names who received it and when its lease began, on the engine's
//! own paths that the conformance suite does not reach one by one: receives of several
//! consumers combined into one lease statement (rows, and a pack split between them),
//! messages read ahead and sends handed to waiting receives (held for one consumer only),
//! group lines, queues with global limits, and a release, which leaves no holder behind.

use std::collections::HashMap;
use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{
    AttemptOutcome, Body, Checked, Delivery, Failure, GroupName, Message, MessageId, NewMessage,
    QueueConfigPatch, QueueName, ReceiveRequest,
};
use sluice_postgres::{PostgresOptions, PostgresStore};

mod common;

use common::{Nodes, acks, q};

async fn nodes(prefix: &str, pack_min: usize) -> Option<Nodes> {
    let options = PostgresOptions {
        pack_min,
        ..PostgresOptions::default()
    };
    common::nodes(prefix, options).await
}

/// Queue `name`, keeping completed records (so acked attempts can be read back) and allowing
/// many attempts; `patch` for the rest.
async fn queue(node: &Checked<PostgresStore>, name: &str, patch: QueueConfigPatch) -> QueueName {
    let queue = q(name);
    let patch = QueueConfigPatch {
        result_ttl: Some(Duration::from_secs(600)),
        max_receive_count: Some(50),
        ..patch
    };
    node.put_queue(&queue, &patch).await.expect("create");
    queue
}

fn texts(n: usize) -> Vec<NewMessage> {
    (0..n)
        .map(|i| NewMessage::new(Body::text(format!("m{i}"))))
        .collect()
}

/// A receive of up to `max` by `consumer`, waiting up to `wait`, started now.
fn receive_as(
    node: &Checked<PostgresStore>,
    queue: &QueueName,
    consumer: Option<&str>,
    max: u32,
    wait: Duration,
) -> tokio::task::JoinHandle<Vec<Delivery>> {
    let (node, queue) = (node.clone(), queue.clone());
    let consumer = consumer.map(str::to_owned);
    tokio::spawn(async move {
        let req = ReceiveRequest {
            max,
            wait,
            consumer,
            ..ReceiveRequest::default()
        };
        node.receive(&queue, req).await.expect("receive")
    })
}

fn unnamed(error: &str) -> Failure {
    Failure {
        error: Some(error.to_owned()),
        consumer: None,
        retry_after: false,
    }
}

/// Checks that the last attempt of `m` ended as `outcome`, names `consumer` and began no
/// later than it ended.
fn ended_by(m: &Message, outcome: AttemptOutcome, consumer: Option<&str>) {
    let a = m.attempts.last().expect("an attempt");
    assert_eq!(
        (a.outcome, a.consumer.as_deref()),
        (outcome, consumer),
        "message {}: {:?}",
        m.id,
        m.attempts
    );
    let start = a.started_at.expect("a lease start");
    assert!(start <= a.at, "began {start:?}, ended {:?}", a.at);
}

/// Rounds of eight receives of different consumers at once (they share lease statements:
/// one runs while the others gather for the next), with a backlog that has waited (so the
/// node reads ahead); every delivery settled without a name, half nacked and half acked,
/// on either node. Each attempt names the receive's own consumer.
#[tokio::test]
async fn receives_of_several_consumers_combined_each_name_their_own_receiver() {
    let Some(n) = nodes("holders_mix", 0).await else {
        return;
    };
    let work = queue(&n.a, "work", QueueConfigPatch::default()).await;
    n.a.send(&work, texts(120)).await.expect("send");
    // Waited long enough to count as a backlog.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut received: HashMap<MessageId, (String, bool)> = HashMap::new();
    for round in 0..6 {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let name = format!("c{i}");
                let max = 1 + (i + round) % 3;
                let task = receive_as(&n.a, &work, Some(&name), max as u32, Duration::ZERO);
                (name, task)
            })
            .collect();
        for (k, (name, task)) in tasks.into_iter().enumerate() {
            let got = task.await.expect("task");
            for d in got {
                let node = if k % 2 == 0 { &n.a } else { &n.b };
                let nacked = (d.id.0 + round) % 2 == 0;
                if nacked {
                    node.nack(&work, d.receipt, Some(Duration::ZERO), unnamed("again"))
                        .await
                        .expect("nack");
                } else {
                    let out = node.ack(&work, acks([d.receipt])).await.expect("ack");
                    assert_eq!(out, vec![Ok(())]);
                }
                received.insert(d.id, (name.clone(), nacked));
            }
        }
    }
    assert!(received.len() > 40, "delivered {}", received.len());
    for (id, (name, nacked)) in &received {
        let m = n.b.get_message(*id).await.expect("get");
        let outcome = if *nacked {
            AttemptOutcome::Nacked
        } else {
            AttemptOutcome::Acked
        };
        ended_by(&m, outcome, Some(name));
    }
}

/// A pack leased by a statement shared by two receives of different consumers is split
/// between them: each member names the receive it went to, whether acked in the pack,
/// acked after the pack became rows, or nacked.
#[tokio::test]
async fn a_pack_split_between_two_consumers_names_each_members_receiver() {
    let Some(n) = nodes("holders_pack", 10).await else {
        return;
    };
    let work = queue(&n.a, "work", QueueConfigPatch::default()).await;
    n.a.send(&work, texts(10)).await.expect("first pack");
    n.a.send(&work, texts(10)).await.expect("second pack");
    // The first receive runs its lease alone and takes the first pack; the two others
    // gather meanwhile, and their shared lease (for ten) takes the second.
    let first = receive_as(&n.a, &work, Some("p0"), 10, Duration::ZERO);
    let six = receive_as(&n.a, &work, Some("p1"), 6, Duration::ZERO);
    let four = receive_as(&n.a, &work, None, 4, Duration::ZERO);
    let first = first.await.expect("task");
    let (six, four) = (six.await.expect("task"), four.await.expect("task"));
    assert_eq!((first.len(), six.len(), four.len()), (10, 6, 4));
    let token = six[0].receipt.token;
    assert!(
        six.iter().chain(&four).all(|d| d.receipt.token == token) && (token as i64) < 0,
        "one pack lease served both receives"
    );
    // The four acked in the pack; then a nack makes the pack rows, and the rest are acked.
    let out =
        n.b.ack(&work, acks(four.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    n.b.nack(&work, six[0].receipt, Some(Duration::ZERO), unnamed("no"))
        .await
        .expect("nack");
    let out =
        n.a.ack(
            &work,
            acks(six[1..].iter().chain(&first).map(|d| d.receipt)),
        )
        .await
        .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    for d in &four {
        ended_by(
            &n.a.get_message(d.id).await.expect("get"),
            AttemptOutcome::Acked,
            None,
        );
    }
    let m = n.a.get_message(six[0].id).await.expect("get");
    ended_by(&m, AttemptOutcome::Nacked, Some("p1"));
    for d in six[1..].iter() {
        let m = n.a.get_message(d.id).await.expect("get");
        ended_by(&m, AttemptOutcome::Acked, Some("p1"));
    }
    for d in &first {
        let m = n.b.get_message(d.id).await.expect("get");
        ended_by(&m, AttemptOutcome::Acked, Some("p0"));
    }
}

/// Sends handed to receives long-polling on the same node: each receive is handed messages
/// leased in its own consumer's name, and the lease began when the send inserted them.
#[tokio::test]
async fn sends_handed_to_waiting_receives_name_the_consumer_that_takes_them() {
    let Some(n) = nodes("holders_handoff", 10).await else {
        return;
    };
    let work = queue(&n.a, "work", QueueConfigPatch::default()).await;
    let wait = Duration::from_secs(3);
    let h1 = receive_as(&n.a, &work, Some("h1"), 2, wait);
    let h2 = receive_as(&n.a, &work, Some("h2"), 1, wait);
    // Long enough for both to have found the queue empty and to wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    n.a.send(&work, texts(1)).await.expect("send");
    n.a.send(&work, texts(1)).await.expect("send");
    n.a.send(&work, texts(1)).await.expect("send");
    let (h1, h2) = (h1.await.expect("task"), h2.await.expect("task"));
    let mut got: Vec<(&str, &Delivery)> = h1.iter().map(|d| ("h1", d)).collect();
    got.extend(h2.iter().map(|d| ("h2", d)));
    assert!(!got.is_empty());
    for (name, d) in &got {
        let out = n.b.ack(&work, acks([d.receipt])).await.expect("ack");
        assert_eq!(out, vec![Ok(())]);
        let m = n.b.get_message(d.id).await.expect("get");
        ended_by(&m, AttemptOutcome::Acked, Some(name));
        let start = m.attempts[0].started_at.expect("start");
        assert!(start >= m.enqueued_at, "leased when sent or later");
    }
}

/// Group lines and a queue with global limits lease through statements of their own; a
/// release leaves no holder behind, and the next lease names its own receiver (or nobody).
#[tokio::test]
async fn group_fronts_limited_queues_and_releases_keep_the_right_holder() {
    let Some(n) = nodes("holders_paths", 0).await else {
        return;
    };
    let db = n.db().await;
    let lines = queue(&n.a, "lines", QueueConfigPatch::default()).await;
    let mut m = NewMessage::new(Body::text("grouped"));
    m.group = Some(GroupName::new("g").expect("group"));
    let sent = n.a.send(&lines, vec![m]).await.expect("send");
    let d = receive_as(&n.a, &lines, Some("g1"), 1, Duration::ZERO)
        .await
        .expect("task");
    assert_eq!(d.len(), 1);
    n.a.nack(&lines, d[0].receipt, Some(Duration::ZERO), unnamed("g"))
        .await
        .expect("nack");
    ended_by(
        &n.a.get_message(sent[0].id).await.expect("get"),
        AttemptOutcome::Nacked,
        Some("g1"),
    );

    let limited = queue(
        &n.a,
        "limited",
        QueueConfigPatch {
            max_in_flight: Some(Some(5)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let sent = n.a.send(&limited, texts(1)).await.expect("send");
    let d = receive_as(&n.b, &limited, Some("l1"), 1, Duration::ZERO)
        .await
        .expect("task");
    assert_eq!(d.len(), 1);
    let holder = |id: MessageId| {
        let db = &db;
        async move {
            let r = db
                .query_one(
                    "SELECT leased_at IS NOT NULL, leased_by FROM messages WHERE id = $1",
                    &[&(id.0 as i64)],
                )
                .await
                .expect("row");
            (r.get::<_, bool>(0), r.get::<_, Option<String>>(1))
        }
    };
    assert_eq!(holder(sent[0].id).await, (true, Some("l1".to_owned())));
    n.b.release(&limited, d[0].receipt).await.expect("release");
    assert_eq!(
        holder(sent[0].id).await,
        (false, None),
        "released: no holder"
    );
    let d = receive_as(&n.a, &limited, None, 1, Duration::ZERO)
        .await
        .expect("task");
    assert_eq!(d.len(), 1);
    n.a.nack(&limited, d[0].receipt, Some(Duration::ZERO), unnamed("l"))
        .await
        .expect("nack");
    let m = n.a.get_message(sent[0].id).await.expect("get");
    assert_eq!(m.attempts.len(), 1, "a release is no attempt");
    ended_by(&m, AttemptOutcome::Nacked, None);
    assert_eq!(
        holder(sent[0].id).await,
        (false, None),
        "waiting: no holder"
    );
}

/// A database of the version before lease holders were kept, with a message leased then:
/// opening it adds the columns, and that lease still ends normally, its attempt without a
/// start or a receiver, while the next lease keeps both.
#[tokio::test]
async fn leases_granted_before_holders_were_kept_end_without_one() {
    let Some(n) = nodes("holders_old", 0).await else {
        return;
    };
    let db = n.db().await;
    let work = queue(&n.a, "work", QueueConfigPatch::default()).await;
    let sent = n.a.send(&work, texts(2)).await.expect("send");
    let old = receive_as(&n.a, &work, Some("w0"), 1, Duration::ZERO)
        .await
        .expect("task");
    assert_eq!(old.len(), 1);
    // Back to version 9, as if leased by a node of that version (the later versions'
    // columns go too, their indexes with them).
    db.batch_execute(
        "ALTER TABLE messages DROP COLUMN leased_at, DROP COLUMN leased_by;
         ALTER TABLE packs DROP COLUMN leased_at, DROP COLUMN leased_by;
         ALTER TABLE messages DROP COLUMN fkey, DROP COLUMN prio, DROP COLUMN rank;
         DROP TABLE rate_paces;
         DROP TABLE key_tallies;
         DROP TABLE key_rate_events;
         DROP TABLE key_paces;
         DROP TABLE key_flow;
         DROP TABLE readiness;
         ALTER TABLE messages DROP COLUMN traceparent, DROP COLUMN tracestate;
         DELETE FROM migrations WHERE version >= 10;",
    )
    .await
    .expect("downgrade");
    let options = PostgresOptions {
        schema: n.schema.clone(),
        pool_size: 2,
        pack_min: 0,
        ..PostgresOptions::default()
    };
    let c = PostgresStore::open(&sluice_testkit::postgres::url(), options)
        .await
        .expect("open and migrate");
    let out = c.ack(&work, acks([old[0].receipt])).await.expect("ack");
    assert_eq!(
        out,
        vec![Ok(())],
        "a lease of the earlier version still holds"
    );
    let m = c.get_message(old[0].id).await.expect("get");
    let a = m.attempts.last().expect("acked");
    assert_eq!(
        (a.outcome, a.consumer.as_deref(), a.started_at),
        (AttemptOutcome::Acked, None, None)
    );
    let d = receive_as(&c, &work, Some("w1"), 1, Duration::ZERO)
        .await
        .expect("task");
    let other = sent.iter().find(|s| s.id != old[0].id).expect("other");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].id, other.id);
    c.nack(&work, d[0].receipt, Some(Duration::ZERO), unnamed("x"))
        .await
        .expect("nack");
    ended_by(
        &c.get_message(other.id).await.expect("get"),
        AttemptOutcome::Nacked,
        Some("w1"),
    );
}
