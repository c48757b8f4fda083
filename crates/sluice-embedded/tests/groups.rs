//! FIFO groups through compaction and restart: grouped messages whose records sit in the
//! oldest segment are copied forward with their group and their place in its line (including
//! the new place a redrive gave one), and a restart after compaction rebuilds the same lines.

use std::path::Path;
use std::time::Duration;

use sluice_core::store::prelude::*;
use sluice_core::{
    AckRequest, Body, Checked, Failure, GroupName, MessageId, NewMessage, QueueConfigPatch,
    QueueName, ReceiveRequest, RedriveFilter, RedriveSpec,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

fn name(s: &str) -> QueueName {
    QueueName::new(s).expect("valid name")
}

fn open(dir: &Path) -> Checked<EmbeddedStore> {
    EmbeddedStore::open(dir, EmbeddedOptions::default())
        .expect("open")
        .0
}

fn grouped(text: &str, group: &str) -> NewMessage {
    NewMessage::new(Body::text(text)).in_group(GroupName::new(group).expect("valid group"))
}

async fn receive(store: &Checked<EmbeddedStore>, q: &QueueName) -> Vec<sluice_core::Delivery> {
    store
        .receive(
            q,
            ReceiveRequest {
                max: 10,
                visibility: Some(Duration::from_secs(3600)),
                ..Default::default()
            },
        )
        .await
        .expect("receive")
}

async fn ack(store: &Checked<EmbeddedStore>, q: &QueueName, d: &sluice_core::Delivery) {
    let out = store
        .ack(
            q,
            vec![AckRequest {
                receipt: d.receipt,
                result: None,
            }],
        )
        .await
        .expect("ack");
    assert!(out[0].is_ok(), "ack of {}: {:?}", d.id, out[0]);
}

/// The oldest non-empty log segment.
fn oldest_segment(dir: &Path) -> std::path::PathBuf {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
        .collect();
    v.sort();
    v.remove(0)
}

fn ids(ds: &[sluice_core::Delivery]) -> Vec<MessageId> {
    ds.iter().map(|d| d.id).collect()
}

#[tokio::test]
async fn compaction_and_restart_keep_group_lines() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    let jobs = name("jobs");
    let churn = name("churn");
    for q in [&jobs, &churn] {
        store
            .put_queue(q, &QueueConfigPatch::default())
            .await
            .expect("create");
    }
    let sent = store
        .send(
            &jobs,
            vec![
                grouped("g1", "g"),
                grouped("h1", "h"),
                grouped("g2", "g"),
                grouped("h2", "h"),
                grouped("g3", "g"),
            ],
        )
        .await
        .expect("send");
    let [g1, h1, g2, h2, g3] = [0, 1, 2, 3, 4].map(|i| sent[i].id);
    let first = receive(&store, &jobs).await;
    assert_eq!(ids(&first), vec![g1, h1]);
    // h1 goes to the DLQ and comes back behind h2.
    store
        .reject(&jobs, first[1].receipt, Failure::default())
        .await
        .expect("reject");
    let job = store
        .create_redrive(RedriveSpec {
            source: name("jobs.dlq"),
            destination: None,
            limit: None,
            rate: None,
            filter: RedriveFilter::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: None,
        })
        .await
        .expect("redrive");
    assert_eq!(
        store
            .redrive_step(job.id, 10)
            .await
            .expect("step")
            .moved_now,
        1
    );
    let oldest = oldest_segment(dir.path());
    // Enough churn through another queue for the oldest segment to be compacted.
    let body = Body::binary(vec![7u8; 16 * 1024]);
    for round in 0..130 {
        let msgs = (0..100).map(|_| NewMessage::new(body.clone())).collect();
        store.send(&churn, msgs).await.expect("send");
        let got = store
            .receive(
                &churn,
                ReceiveRequest {
                    max: 100,
                    ..Default::default()
                },
            )
            .await
            .expect("receive");
        let acks = got
            .into_iter()
            .map(|d| AckRequest {
                receipt: d.receipt,
                result: None,
            })
            .collect();
        store.ack(&churn, acks).await.expect("ack");
        if round % 10 == 0 {
            store.engine().maintain().await.expect("maintain");
        }
    }
    for _ in 0..5 {
        store.engine().maintain().await.expect("maintain");
    }
    assert_ne!(
        oldest_segment(dir.path()),
        oldest,
        "the segment holding the grouped messages was compacted"
    );
    drop(store);

    let store = open(dir.path());
    let ds = receive(&store, &jobs).await;
    assert_eq!(
        ids(&ds),
        vec![h2],
        "g1 is still leased (g waits) and h2 is ahead of the redriven h1"
    );
    for d in &ds {
        assert_eq!(d.group.as_ref().map(GroupName::as_str), Some("h"));
    }
    ack(&store, &jobs, &ds[0]).await;
    let ds = receive(&store, &jobs).await;
    assert_eq!(ids(&ds), vec![h1], "then the redriven h1");
    ack(&store, &jobs, &ds[0]).await;
    ack(&store, &jobs, &first[0]).await;
    let ds = receive(&store, &jobs).await;
    assert_eq!(
        ids(&ds),
        vec![g2],
        "g1's receipt survived; g goes on in order"
    );
    ack(&store, &jobs, &ds[0]).await;
    let ds = receive(&store, &jobs).await;
    assert_eq!(ids(&ds), vec![g3]);
    assert_eq!(
        store.get_message(g3).await.expect("get").group,
        Some(GroupName::new("g").expect("valid"))
    );
}
