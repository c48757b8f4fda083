//! Packs (large plain sends kept as one row) against the real server: that large sends are
//! stored, leased and acked as packs, and that everything needing a member on its own unpacks
//! it without changing an answer, on one node or two, with acks racing the unpacking.

use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{
    Body, Checked, Failure, MessageState, NewMessage, QueueConfigPatch, ReceiveRequest, StoreError,
};
use sluice_postgres::PostgresOptions;

mod common;

use common::{Nodes, acks, created, recv};

async fn nodes() -> Option<Nodes> {
    let options = PostgresOptions {
        pack_min: 10,
        ..PostgresOptions::default()
    };
    common::nodes("packs", options).await
}

/// How many packs (by state) and message rows queue `queue` has.
async fn stored(db: &tokio_postgres::Client, queue: &str) -> (i64, i64, i64, i64) {
    let r = db
        .query_one(
            "SELECT (SELECT count(*) FROM packs WHERE queue = $1 AND state = 0),
                    (SELECT count(*) FROM packs WHERE queue = $1 AND state = 1),
                    (SELECT count(*) FROM packs WHERE queue = $1 AND state = 2),
                    (SELECT count(*) FROM messages WHERE queue = $1)",
            &[&queue],
        )
        .await
        .expect("count");
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

fn batch(n: usize) -> Vec<NewMessage> {
    (0..n)
        .map(|i| {
            let mut m = NewMessage::new(Body::text(format!("m{i}")));
            if i % 3 == 0 {
                m.attributes.insert("k".into(), format!("v{i}"));
            }
            m
        })
        .collect()
}

/// Sends `count` messages on `node` (one pack) and leases them all there.
async fn sent_and_leased(
    node: &Checked<sluice_postgres::PostgresStore>,
    queue: &sluice_core::QueueName,
    count: usize,
) -> Vec<sluice_core::Delivery> {
    node.send(queue, batch(count)).await.expect("send");
    let got = node
        .receive(queue, recv(count as u32))
        .await
        .expect("receive");
    assert_eq!(got.len(), count, "every member leased at once");
    got
}

/// One receive of up to `max` on `receiver`, acked on `acker` (every ack must land): the ids
/// it delivered, none when the queue had nothing.
async fn received_and_acked(
    receiver: &Checked<sluice_postgres::PostgresStore>,
    acker: &Checked<sluice_postgres::PostgresStore>,
    queue: &sluice_core::QueueName,
    max: u32,
) -> Vec<sluice_core::MessageId> {
    let got = receiver.receive(queue, recv(max)).await.expect("receive");
    assert!(got.len() <= max as usize);
    if got.is_empty() {
        return Vec::new();
    }
    let out = acker
        .ack(queue, acks(got.iter().map(|d| d.receipt)))
        .await
        .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    got.iter().map(|d| d.id).collect()
}

#[tokio::test]
async fn a_large_send_is_one_pack_leased_and_acked_whole() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let work = created(&n.a, "work").await;
    let sent = n.a.send(&work, batch(100)).await.expect("send");
    assert_eq!(stored(&db, "work").await, (1, 0, 0, 0), "one pack, no rows");
    let stats = n.b.stats(&work).await.expect("stats");
    assert_eq!((stats.visible, stats.in_flight), (100, 0));

    let got = n.b.receive(&work, recv(100)).await.expect("receive on b");
    assert_eq!(got.len(), 100);
    for (i, (d, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(d.id, s.id, "members in the order sent");
        assert_eq!(d.body.bytes.as_ref(), format!("m{i}").as_bytes());
        assert_eq!(
            d.attributes.get("k").cloned(),
            (i % 3 == 0).then(|| format!("v{i}"))
        );
        assert_eq!(d.receive_count, 1);
    }
    assert_eq!(stored(&db, "work").await, (0, 1, 0, 0), "leased as a whole");
    assert!(
        n.a.receive(&work, recv(100))
            .await
            .expect("again")
            .is_empty(),
        "a leased pack is not handed out twice"
    );
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!((stats.visible, stats.in_flight), (0, 100));

    // Acked in two calls on the two nodes; a receipt named twice is acked once.
    let (first, second) = got.split_at(40);
    let out =
        n.a.ack(&work, acks(first.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    let out =
        n.b.ack(&work, acks(first[..1].iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert_eq!(out, vec![Err(StoreError::ReceiptStale)]);
    let out =
        n.b.ack(&work, acks(second.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    assert_eq!(
        stored(&db, "work").await,
        (0, 0, 1, 0),
        "a completed record"
    );
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!(
        (stats.visible, stats.in_flight, stats.completed),
        (0, 0, 100)
    );

    // Looking one up gives the completed record of that message.
    let m = n.a.get_message(sent[7].id).await.expect("get");
    assert_eq!(m.state, MessageState::Completed);

    // The usual case: a whole receive acked in one call, with records, then without.
    for (round, ttl) in [(0, 3_600_000u64), (1, 0)] {
        let patch = QueueConfigPatch {
            result_ttl: Some(Duration::from_millis(ttl)),
            ..QueueConfigPatch::default()
        };
        n.a.put_queue(&work, &patch).await.expect("set result_ttl");
        let got = sent_and_leased(&n.a, &work, 100).await;
        // On the node that changed the queue: the other may use its cached configuration
        // for a moment.
        let out =
            n.a.ack(&work, acks(got.iter().map(|d| d.receipt)))
                .await
                .expect("ack");
        assert!(out.iter().all(Result::is_ok), "round {round}");
        let out =
            n.a.ack(&work, acks([got[99].receipt]))
                .await
                .expect("again");
        assert_eq!(out, vec![Err(StoreError::ReceiptStale)], "round {round}");
        let kept = n.a.get_message(got[50].id).await;
        if ttl == 0 {
            assert!(
                matches!(kept, Err(StoreError::MessageNotFound(_))),
                "{kept:?}"
            );
        } else {
            let kept = kept.expect("kept");
            assert_eq!(kept.state, MessageState::Completed);
            assert!(kept.completed_at <= Some(sluice_core::Clock::now(&sluice_core::SystemClock)));
        }
    }
}

#[tokio::test]
async fn a_receive_smaller_than_a_pack_unpacks_it_and_loses_nothing() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let work = created(&n.a, "work").await;
    let sent = n.a.send(&work, batch(50)).await.expect("send");
    let mut seen = Vec::new();
    loop {
        let got = received_and_acked(&n.b, &n.a, &work, 7).await;
        if got.is_empty() {
            break;
        }
        seen.extend(got);
    }
    seen.sort_unstable();
    let mut want: Vec<_> = sent.iter().map(|s| s.id).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "every member delivered once");
    assert_eq!(stored(&db, "work").await.0, 0, "no pack left waiting");
}

/// A node sizes its pack leases by the packs its last lease took (`pack_sizes.rs`): after
/// packs of 100, smaller packs still go out whole, each once, and the next leases fill up.
#[tokio::test]
async fn packs_smaller_than_the_last_ones_leased_are_all_delivered_once() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let work = created(&n.a, "work").await;
    let first = sent_and_leased(&n.a, &work, 100).await;
    n.a.ack(&work, acks(first.iter().map(|d| d.receipt)))
        .await
        .expect("ack");
    let mut want = Vec::new();
    for size in [10, 10, 10, 10, 10, 40, 10, 10] {
        want.extend(
            n.a.send(&work, batch(size))
                .await
                .expect("send")
                .iter()
                .map(|s| s.id),
        );
    }
    assert_eq!(stored(&db, "work").await.0, 8, "eight packs waiting");
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..4 {
        let got = received_and_acked(&n.a, &n.a, &work, 100).await;
        if got.is_empty() {
            break;
        }
        sizes.push(got.len());
        seen.extend(got);
    }
    // Sized for packs of 100, the first lease locks three and takes those; knowing packs of
    // 10, the next takes the other five whole.
    assert_eq!(sizes, [30, 80], "receives of 100 over packs of 10 and 40");
    seen.sort_unstable();
    want.sort_unstable();
    assert_eq!(seen, want, "every member delivered once");
    assert_eq!(
        stored(&db, "work").await.3,
        0,
        "no pack was unpacked into rows"
    );
}

#[tokio::test]
async fn a_nacked_member_leaves_its_pack_and_the_others_keep_their_receipts() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let work = created(&n.a, "work").await;
    let got = sent_and_leased(&n.a, &work, 20).await;
    let out =
        n.b.nack(
            &work,
            got[5].receipt,
            Some(Duration::from_secs(60)),
            Failure {
                error: Some("flaky upstream".into()),
                consumer: None,
                retry_after: false,
            },
        )
        .await
        .expect("nack a member");
    assert_eq!(out.state, Some(MessageState::Delayed));
    assert_eq!(
        stored(&db, "work").await,
        (0, 0, 0, 20),
        "unpacked into rows"
    );
    let rest = got
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, d)| d.receipt);
    let out = n.a.ack(&work, acks(rest)).await.expect("ack the rest");
    assert_eq!(out.len(), 19);
    assert!(
        out.iter().all(Result::is_ok),
        "receipts survive unpacking: {out:?}"
    );
    let out =
        n.a.ack(&work, acks([got[5].receipt]))
            .await
            .expect("ack nacked");
    assert_eq!(out, vec![Err(StoreError::ReceiptStale)]);
    let m = n.b.get_message(got[5].id).await.expect("get");
    assert_eq!(m.state, MessageState::Delayed);
    assert_eq!(m.last_error.as_deref(), Some("flaky upstream"));
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!(
        (stats.delayed, stats.in_flight, stats.completed),
        (1, 0, 19)
    );
}

/// Acks of a pack's members race a nack that unpacks it: every ack must land, whichever of
/// the pack or its rows it meets.
#[tokio::test]
async fn acks_racing_an_unpack_all_land() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    for round in 0..10 {
        let got = sent_and_leased(&n.a, &work, 30).await;
        let nack = {
            let (b, work, receipt) = (n.b.clone(), work.clone(), got[0].receipt);
            tokio::spawn(async move { b.nack(&work, receipt, None, Failure::default()).await })
        };
        let mut acking = Vec::new();
        for d in &got[1..] {
            let (node, work, receipt) = if d.id.0 % 2 == 0 {
                (n.a.clone(), work.clone(), d.receipt)
            } else {
                (n.b.clone(), work.clone(), d.receipt)
            };
            acking.push(tokio::spawn(async move {
                node.ack(&work, acks([receipt])).await
            }));
        }
        nack.await.expect("join").expect("nack");
        for a in acking {
            let out = a.await.expect("join").expect("ack");
            assert_eq!(out, vec![Ok(())], "round {round}");
        }
        // The nacked member comes back; clear it for the next round.
        n.a.purge(&work).await.expect("purge");
    }
}

#[tokio::test]
async fn a_pack_whose_lease_ran_out_is_delivered_again_and_old_receipts_are_stale() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    n.a.send(&work, batch(20)).await.expect("send");
    let first =
        n.a.receive(
            &work,
            ReceiveRequest {
                max: 20,
                visibility: Some(Duration::from_millis(300)),
                ..ReceiveRequest::default()
            },
        )
        .await
        .expect("receive");
    assert_eq!(first.len(), 20);
    // One member acked while the lease holds; the rest run out.
    let out = n.a.ack(&work, acks([first[3].receipt])).await.expect("ack");
    assert_eq!(out, vec![Ok(())]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Either node's background maintenance may be settling the lapsed pack just as this
    // receive looks (it then skips the locked pack and finds nothing yet), so it long-polls
    // for what that settling makes visible.
    let mut again = Vec::new();
    while again.len() < 19 {
        let got =
            n.b.receive(
                &work,
                ReceiveRequest {
                    max: 100,
                    wait: Duration::from_secs(5),
                    ..ReceiveRequest::default()
                },
            )
            .await
            .expect("receive again");
        if got.is_empty() {
            break;
        }
        again.extend(got);
    }
    assert_eq!(again.len(), 19, "every member not acked");
    let ids: std::collections::HashSet<_> = again.iter().map(|d| d.id).collect();
    assert_eq!(ids.len(), 19, "each once");
    assert!(again.iter().all(|d| d.receive_count == 2));
    assert!(again.iter().all(|d| d.id != first[3].id));
    let out =
        n.a.ack(&work, acks(first.iter().map(|d| d.receipt)))
            .await
            .expect("stale");
    assert!(
        out.iter().all(|r| r == &Err(StoreError::ReceiptStale)),
        "{out:?}"
    );
    let out =
        n.b.ack(&work, acks(again.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert!(out.iter().all(Result::is_ok));
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!(
        (stats.visible, stats.in_flight, stats.completed),
        (0, 0, 20)
    );
}

/// Packs sent before a queue gained `max_in_flight` count against it: the limit holds for
/// their members as for rows, across nodes.
#[tokio::test]
async fn a_limit_set_after_packs_were_sent_holds_for_their_members() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    let first = sent_and_leased(&n.a, &work, 30).await;
    n.a.send(&work, batch(30)).await.expect("send another");
    let patch = QueueConfigPatch {
        max_in_flight: Some(Some(35)),
        ..QueueConfigPatch::default()
    };
    n.b.put_queue(&work, &patch).await.expect("limit");
    let more =
        n.b.receive(&work, recv(100))
            .await
            .expect("receive under the limit");
    assert_eq!(more.len(), 5, "30 members in flight already, 35 allowed");
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!((stats.in_flight, stats.visible), (35, 25));
    // The first pack's receipts still ack, and free room under the limit.
    let out =
        n.a.ack(&work, acks(first.iter().map(|d| d.receipt)))
            .await
            .expect("ack");
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    let rest =
        n.b.receive(&work, recv(100))
            .await
            .expect("receive the rest");
    assert_eq!(rest.len(), 25);
}

/// Acks with results keep each member's result: the pack becomes rows first, once.
#[tokio::test]
async fn acks_with_results_keep_each_members_result() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    let got = sent_and_leased(&n.a, &work, 20).await;
    let with_results = got
        .iter()
        .enumerate()
        .map(|(i, d)| sluice_core::AckRequest {
            receipt: d.receipt,
            result: Some(Body::text(format!("r{i}"))),
        })
        .collect();
    let out = n.b.ack(&work, with_results).await.expect("ack");
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    for (i, d) in got.iter().enumerate() {
        let m = n.a.get_message(d.id).await.expect("get");
        assert_eq!(m.state, MessageState::Completed);
        let result = m.result.expect("result kept");
        assert_eq!(result.bytes.as_ref(), format!("r{i}").as_bytes());
    }
}

/// A pack's bodies are compressed as one value where the server has LZ4, so bodies that
/// share their structure are stored (and logged) a fraction of their size, and come back
/// exactly as sent, also once the pack is unpacked into rows.
#[tokio::test]
async fn pack_bodies_are_stored_compressed_where_the_server_has_lz4() {
    let Some(n) = nodes().await else { return };
    let db = n.db().await;
    let lz4: bool = db
        .query_one(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings
             WHERE name = 'default_toast_compression'",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or(false);
    let work = created(&n.a, "work").await;
    let bodies: Vec<String> = (0..100)
        .map(|i| {
            format!(
                "{{\"order\":{i},\"status\":\"paid\",\"note\":\"{}\"}}",
                "x".repeat(900)
            )
        })
        .collect();
    let messages = bodies
        .iter()
        .map(|b| NewMessage::new(Body::text(b.clone())))
        .collect();
    n.a.send(&work, messages).await.expect("send");
    let (method, stored_bytes): (Option<String>, i32) = {
        let r = db
            .query_one(
                "SELECT pg_column_compression(bodies), pg_column_size(bodies) FROM packs
                 WHERE queue = 'work'",
                &[],
            )
            .await
            .expect("pack");
        (r.get(0), r.get(1))
    };
    if lz4 {
        assert_eq!(method.as_deref(), Some("lz4"));
        assert!(
            stored_bytes < 10_000,
            "about 92 KB of bodies stored in {stored_bytes} bytes"
        );
    } else {
        eprintln!("this PostgreSQL has no LZ4: pack bodies are stored uncompressed");
        assert_eq!(method, None);
    }

    // Half a pack per receive unpacks it into rows; every body comes back as sent.
    let mut got = Vec::new();
    for _ in 0..2 {
        got.extend(n.b.receive(&work, recv(50)).await.expect("receive"));
    }
    assert_eq!(got.len(), 100);
    for (d, b) in got.iter().zip(&bodies) {
        assert_eq!(d.body.bytes.as_ref(), b.as_bytes());
    }
}

/// An ack naming a pack's first and last members only acks those two: the others stay
/// leased under their receipts.
#[tokio::test]
async fn an_ack_of_a_packs_first_and_last_members_acks_only_them() {
    let Some(n) = nodes().await else { return };
    let work = created(&n.a, "work").await;
    let got = sent_and_leased(&n.a, &work, 20).await;
    let ends = [got[0].receipt, got[19].receipt];
    let out = n.b.ack(&work, acks(ends)).await.expect("ack");
    assert_eq!(out, vec![Ok(()), Ok(())]);
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!(stats.in_flight, 18, "the members between are still leased");

    let out =
        n.a.ack(&work, acks(got.iter().map(|d| d.receipt)))
            .await
            .expect("ack the rest");
    let stale = out.iter().filter(|r| r.is_err()).count();
    assert_eq!(stale, 2, "the two acked before are stale: {out:?}");
    let stats = n.a.stats(&work).await.expect("stats");
    assert_eq!((stats.visible, stats.in_flight), (0, 0));
}
