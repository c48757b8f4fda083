//! Recovery from damaged logs: a torn tail is cut with a warning; damage elsewhere stops
//! start-up with an error naming the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_core::schedule::{CatchUp, ScheduleName, ScheduleSpec, TriggerSpec};
use sluice_core::store::prelude::*;
use sluice_core::store::{ScheduleStep, StepOutcome};
use sluice_core::{Body, Checked, NewMessage, QueueConfigPatch, QueueName, ReceiveRequest};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore, OpenError};

fn q() -> QueueName {
    QueueName::new("jobs").expect("valid name")
}

fn open(dir: &Path) -> Result<Checked<EmbeddedStore>, OpenError> {
    EmbeddedStore::open(dir, EmbeddedOptions::default()).map(|(s, _)| s)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
        .collect();
    v.sort();
    v
}

async fn send_n(store: &Checked<EmbeddedStore>, n: usize) {
    for i in 0..n {
        store
            .send(&q(), vec![NewMessage::new(Body::text(format!("m{i}")))])
            .await
            .expect("send");
    }
}

async fn visible(store: &Checked<EmbeddedStore>) -> u64 {
    store.stats(&q()).await.expect("stats").visible
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_everything_before_it_survives() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open(dir.path()).expect("open");
        store
            .put_queue(&q(), &QueueConfigPatch::default())
            .await
            .expect("create");
        send_n(&store, 10).await;
    }
    // Tear the last record: drop its final 3 bytes, as a crash mid-write would.
    let last = segments(dir.path()).pop().expect("a segment");
    let len = std::fs::metadata(&last).expect("meta").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open")
        .set_len(len - 3)
        .expect("truncate");

    let (store, report) =
        EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("recovers");
    assert!(report.torn_bytes > 0, "the torn tail was not noticed");
    assert_eq!(visible(&store).await, 9, "exactly the torn message is gone");
    // The store keeps working and a second restart is clean.
    send_n(&store, 1).await;
    drop(store);
    let (store, report) =
        EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("recovers again");
    assert_eq!(report.torn_bytes, 0);
    assert_eq!(visible(&store).await, 10);
}

#[tokio::test]
async fn garbage_appended_after_the_last_record_is_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open(dir.path()).expect("open");
        store
            .put_queue(&q(), &QueueConfigPatch::default())
            .await
            .expect("create");
        send_n(&store, 5).await;
    }
    let last = segments(dir.path()).pop().expect("a segment");
    let mut bytes = std::fs::read(&last).expect("read");
    bytes.extend_from_slice(&[0xAB; 100]);
    std::fs::write(&last, bytes).expect("write");
    let (store, report) =
        EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).expect("recovers");
    assert_eq!(report.torn_bytes, 100);
    assert_eq!(visible(&store).await, 5);
}

#[tokio::test]
async fn corruption_in_an_older_segment_stops_startup_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open(dir.path()).expect("open");
        store
            .put_queue(&q(), &QueueConfigPatch::default())
            .await
            .expect("create");
        send_n(&store, 10).await;
    }
    {
        // A second run starts a new segment, making the first one "older".
        let store = open(dir.path()).expect("reopen");
        send_n(&store, 10).await;
    }
    let first = segments(dir.path()).into_iter().next().expect("a segment");
    let mut bytes = std::fs::read(&first).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&first, bytes).expect("write");
    match open(dir.path()) {
        Err(OpenError::Corrupt { file, .. }) => assert_eq!(file, first),
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a damaged segment was accepted silently"),
    }
    let msg = open(dir.path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains(&first.display().to_string()),
        "error does not name the file: {msg}"
    );
}

#[tokio::test]
async fn a_second_process_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let _store = open(dir.path()).expect("open");
    match open(dir.path()) {
        Err(OpenError::Locked(_)) => {}
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn compaction_reclaims_space_and_keeps_live_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path()).expect("open");
    store
        .put_queue(&q(), &QueueConfigPatch::default())
        .await
        .expect("create");
    // A paused, guarded redrive job, written to the oldest segment: compaction copies it.
    let job = store
        .create_redrive(sluice_core::RedriveSpec {
            source: QueueName::new("jobs.dlq").expect("valid name"),
            destination: None,
            limit: Some(10),
            rate: Some(sluice_core::RateLimit {
                limit: 50,
                period: Duration::from_secs(60),
                burst: None,
            }),
            filter: sluice_core::RedriveFilter::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: Some(sluice_core::RedriveGuard {
                percent: 10,
                window: 20,
                error_contains: Some("429".into()),
            }),
        })
        .await
        .expect("redrive");
    let job = store
        .control_redrive(
            job.id,
            sluice_core::RedriveControl::Pause {
                reason: "by hand".into(),
            },
        )
        .await
        .expect("pause");
    // A schedule that fired once and one deleted, in the oldest segment too: compaction
    // copies the schedule, and the firing's message as any other.
    let ticks = QueueName::new("ticks").expect("valid name");
    store
        .put_queue(&ticks, &QueueConfigPatch::default())
        .await
        .expect("create");
    let every = |queue: &QueueName| ScheduleSpec {
        trigger: TriggerSpec::Every { every_ms: 60_000 },
        queue: queue.clone(),
        body: Body::text("tick"),
        attributes: Default::default(),
        key: None,
        priority: None,
        catch_up: CatchUp::All,
        paused: false,
    };
    let tick = ScheduleName::new("tick").expect("valid name");
    let gone = ScheduleName::new("gone").expect("valid name");
    store.put_schedule(&gone, every(&ticks)).await.expect("put");
    store.put_schedule(&tick, every(&ticks)).await.expect("put");
    store.delete_schedule(&gone).await.expect("delete");
    let step = ScheduleStep {
        expected: None,
        through: sluice_core::Timestamp(
            store.get_schedule(&tick).await.expect("get").anchor.0 + 60_000,
        ),
        fire: true,
        missed: 3,
    };
    let StepOutcome::Fired { id: fired } = store.step_schedule(&tick, step).await.expect("step")
    else {
        panic!("the step fires");
    };
    let schedule = store.get_schedule(&tick).await.expect("get");
    let body = Body::binary(vec![7u8; 16 * 1024]);
    // ~200 MiB through the log; only the last 100 messages stay live.
    let mut kept = Vec::new();
    let mut with_result = Vec::new();
    let mut plain = Vec::new();
    for round in 0..130 {
        let msgs = (0..100).map(|_| NewMessage::new(body.clone())).collect();
        let sent = store.send(&q(), msgs).await.expect("send");
        let lease = || ReceiveRequest {
            max: 100,
            visibility: Some(Duration::from_secs(600)),
            consumer: Some(format!("worker-{}", round % 3)),
            ..Default::default()
        };
        let mut got = store.receive(&q(), lease()).await.expect("receive");
        if round == 0 {
            // These fail once first: compaction must carry their attempts forward as well.
            for d in got {
                let failure = sluice_core::Failure {
                    error: Some("flaky".into()),
                    consumer: None,
                    retry_after: false,
                };
                store
                    .nack(&q(), d.receipt, Some(Duration::ZERO), failure)
                    .await
                    .expect("nack");
            }
            got = store.receive(&q(), lease()).await.expect("receive again");
        }
        if round == 129 {
            kept = sent.iter().map(|s| s.id).collect();
            continue;
        }
        if round == 0 {
            with_result = got.iter().map(|d| d.id).collect();
        } else if round % 16 == 1 {
            plain.extend(got.iter().map(|d| (d.id, format!("worker-{}", round % 3))));
        }
        let acks = got
            .into_iter()
            .map(|d| sluice_core::AckRequest {
                receipt: d.receipt,
                // The first round keeps results, which compaction must carry forward.
                result: (round == 0).then(|| Body::json("42")),
            })
            .collect();
        store.ack(&q(), acks).await.expect("ack");
        if round % 10 == 0 {
            store.engine().maintain().await.expect("maintain");
        }
    }
    let mut sent_at = std::collections::HashMap::new();
    for id in &with_result {
        let m = store.get_message(*id).await.expect("completed");
        sent_at.insert(*id, m.enqueued_at);
    }
    for _ in 0..5 {
        store.engine().maintain().await.expect("maintain");
    }
    let on_disk: u64 = segments(dir.path())
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    eprintln!("log bytes after compaction: {on_disk}");
    assert!(
        on_disk < 80 * 1024 * 1024,
        "log holds {on_disk} bytes for ~1.6 MiB of live data"
    );
    let stats = store.stats(&q()).await.expect("stats");
    assert_eq!(stats.in_flight, 100);
    assert_eq!(stats.totals.sent, 13_000);
    assert_eq!(stats.totals.acked, 12_900);
    drop(store);
    let store = open(dir.path()).expect("reopen after compaction");
    let stats = store.stats(&q()).await.expect("stats");
    assert_eq!(
        (stats.in_flight, stats.totals.sent, stats.totals.acked),
        (100, 13_000, 12_900)
    );
    for id in with_result {
        let m = store
            .get_message(id)
            .await
            .expect("completed record survives compaction");
        assert_eq!(m.result, Some(Body::json("42")), "its result too");
        let errors: Vec<_> = m.attempts.iter().map(|a| a.error.as_deref()).collect();
        assert_eq!(
            errors,
            [Some("flaky"), None],
            "and the attempt that failed before, then the acknowledged one"
        );
        assert_eq!(
            m.enqueued_at, sent_at[&id],
            "its send time survives compaction too"
        );
    }
    // A plain ack keeps the delivery that completed it: who held the lease, and from when.
    for (id, consumer) in plain {
        let m = store.get_message(id).await.expect("completed");
        let [done] = &m.attempts[..] else {
            panic!("one attempt for {id}: {:?}", m.attempts);
        };
        assert_eq!(done.consumer.as_deref(), Some(consumer.as_str()));
        assert!(done.started_at.is_some_and(|s| s <= done.at), "{done:?}");
    }
    for id in kept {
        let m = store
            .get_message(id)
            .await
            .expect("kept message survives compaction");
        assert_eq!(m.body.expect("body").bytes.len(), 16 * 1024);
    }
    assert_eq!(
        store
            .get_redrive(job.id)
            .await
            .expect("job survives compaction"),
        job,
        "with its rate, guard and pause"
    );
    assert_eq!(
        store.list_schedules().await.expect("list"),
        vec![schedule],
        "the schedule survives compaction with its progress; the deleted one stays deleted"
    );
    let m = store.get_message(fired).await.expect("the firing survives");
    assert_eq!(m.body, Some(Body::text("tick")));
}

/// Leases are not waited for, so a crash of the machine can lose the newest lease records.
/// Such a message is delivered again after recovery, and the receipt of the lost lease must
/// not work for the new delivery: tokens are never handed out twice.
#[tokio::test]
async fn a_lost_lease_redelivers_and_its_receipt_stays_stale() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lease = ReceiveRequest {
        max: 1,
        visibility: Some(Duration::from_secs(600)),
        ..Default::default()
    };
    let (kept, lost, cut_at) = {
        let store = open(dir.path()).expect("open");
        store
            .put_queue(&q(), &QueueConfigPatch::default())
            .await
            .expect("create");
        send_n(&store, 2).await;
        let kept = store.receive(&q(), lease.clone()).await.expect("receive");
        // The log is small, so its one segment has not been preallocated: its length is
        // where the records end.
        let seg = segments(dir.path()).pop().expect("a segment");
        let cut_at = std::fs::metadata(&seg).expect("meta").len();
        let lost = store.receive(&q(), lease.clone()).await.expect("receive");
        (kept[0].clone(), lost[0].clone(), (seg, cut_at))
    };
    // The machine crashed before the second lease record reached the disk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut_at.0)
        .expect("open segment")
        .set_len(cut_at.1)
        .expect("truncate");

    let store = open(dir.path()).expect("recovers");
    let stats = store.stats(&q()).await.expect("stats");
    assert_eq!((stats.in_flight, stats.visible), (1, 1));
    let again = store.receive(&q(), lease).await.expect("receive");
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].id, lost.id,
        "the message of the lost lease is delivered again"
    );
    assert_ne!(again[0].receipt, lost.receipt);
    let acks = |r: sluice_core::Receipt| {
        vec![sluice_core::AckRequest {
            receipt: r,
            result: None,
        }]
    };
    let stale = store.ack(&q(), acks(lost.receipt)).await.expect("ack call");
    assert!(
        matches!(stale[0], Err(sluice_core::StoreError::ReceiptStale)),
        "the receipt of a lost lease acted on a new delivery: {:?}",
        stale[0]
    );
    for r in [again[0].receipt, kept.receipt] {
        let ok = store.ack(&q(), acks(r)).await.expect("ack call");
        assert!(ok[0].is_ok(), "{:?}", ok[0]);
    }
}

/// Empty segments (a start without writes leaves one) are removed by compaction rather
/// than blocking it: only the oldest segment is ever compacted.
#[tokio::test]
async fn empty_segments_do_not_block_compaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    for _ in 0..3 {
        drop(open(dir.path()).expect("open"));
    }
    let store = open(dir.path()).expect("open");
    store
        .put_queue(&q(), &QueueConfigPatch::default())
        .await
        .expect("create");
    send_n(&store, 3).await;
    for _ in 0..4 {
        store.engine().maintain().await.expect("maintain");
    }
    let files = std::fs::read_dir(dir.path().join("log"))
        .expect("log dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
        .count();
    assert_eq!(
        files, 1,
        "the empty segments of earlier starts are still there"
    );
    assert_eq!(visible(&store).await, 3);
}

/// The queue catalog is a snapshot plus a journal of changes: thousands of creates, updates
/// and deletes (enough for several snapshots) come back exactly after a restart.
#[tokio::test]
async fn the_queue_catalog_survives_restarts_across_snapshots() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path()).expect("open");
    let n = 3_000;
    for i in 0..n {
        let name = QueueName::new(format!("tenant-{i:05}")).expect("name");
        let patch = QueueConfigPatch {
            max_receive_count: Some(i % 7 + 1),
            dead_letter_queue: Some(Some(QueueName::new("shared.dlq").expect("name"))),
            ..Default::default()
        };
        store.put_queue(&name, &patch).await.expect("create");
    }
    for i in (0..n).step_by(3) {
        let name = QueueName::new(format!("tenant-{i:05}")).expect("name");
        store.delete_queue(&name).await.expect("delete");
    }
    drop(store);
    let snapshot = std::fs::read_to_string(dir.path().join("queues.json")).expect("snapshot");
    assert!(snapshot.contains("tenant-01000"), "a snapshot was taken");
    let journal = std::fs::read_to_string(dir.path().join("queues.journal")).expect("journal");
    assert!(
        journal.lines().count() < 2_000,
        "the journal was emptied by the snapshots ({} lines)",
        journal.lines().count()
    );
    let store = open(dir.path()).expect("reopen");
    let queues = store.list_queues().await.expect("list");
    let tenants: Vec<_> = queues
        .iter()
        .filter(|q| q.name.as_str().starts_with("tenant-"))
        .collect();
    assert_eq!(tenants.len(), n as usize - (n as usize).div_ceil(3));
    for q in tenants {
        let i: u32 = q.name.as_str()[7..12].parse().expect("number");
        assert_ne!(i % 3, 0, "{} was deleted", q.name);
        assert_eq!(q.config.max_receive_count, i % 7 + 1, "{}", q.name);
    }
}

/// A queue created before the rule that a new name may not hold empty dot-separated parts
/// (`a..b`) stays usable: it is read, sent to, received from and deleted as before.
#[tokio::test]
async fn a_queue_named_under_the_old_rule_stays_usable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path()).expect("open");
    let patch = QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..Default::default()
    };
    store
        .put_queue(&QueueName::new("old.xname").expect("name"), &patch)
        .await
        .expect("create");
    assert!(
        store
            .put_queue(&QueueName::new("old..name").expect("name"), &patch)
            .await
            .is_err(),
        "the rule refuses such a name for a new queue"
    );
    drop(store);
    // Rename it on disk to what an older broker accepted, keeping each journal line's checksum
    // right, as that broker would have written it.
    let path = dir.path().join("queues.journal");
    let journal = std::fs::read_to_string(&path).expect("journal");
    let mut rewritten = String::new();
    for line in journal.lines() {
        let json = line[9..].replace("old.xname", "old..name");
        rewritten.push_str(&format!("{:08x} {json}\n", crc32c::crc32c(json.as_bytes())));
    }
    std::fs::write(&path, rewritten).expect("write journal");

    let store = open(dir.path()).expect("reopen");
    let old = QueueName::new("old..name").expect("an existing name still parses");
    store.get_queue(&old).await.expect("read");
    store
        .put_queue(
            &old,
            &QueueConfigPatch {
                visibility_timeout: Some(Duration::from_secs(5)),
                ..Default::default()
            },
        )
        .await
        .expect("reconfigure");
    store
        .send(&old, vec![NewMessage::new(Body::text("still here"))])
        .await
        .expect("send");
    let got = store
        .receive(
            &old,
            ReceiveRequest {
                max: 1,
                ..Default::default()
            },
        )
        .await
        .expect("receive");
    assert_eq!(got.len(), 1);
    store.delete_queue(&old).await.expect("delete");
    assert!(store.get_queue(&old).await.is_err());
}

/// A rate-limited queue's deliveries of the current period survive both a restart and the
/// compaction of the segment their leases were written in: 3 an hour, 2 taken, then 1 more
/// after both, not 3; and a queue paced at one per 20 minutes keeps its pace.
#[tokio::test]
async fn compaction_keeps_what_a_rate_limited_queue_delivered_this_period() {
    let dir = tempfile::tempdir().expect("temp dir");
    let limited = QueueName::new("limited").expect("valid name");
    let paced = QueueName::new("paced").expect("valid name");
    let first = {
        let store = open(dir.path()).expect("open");
        // A burst of the whole limit: the window alone.
        let patch = |burst| QueueConfigPatch {
            rate_limit: Some(Some(sluice_core::RateLimit {
                limit: 3,
                period: Duration::from_secs(3600),
                burst: Some(burst),
            })),
            visibility_timeout: Some(Duration::from_secs(3600)),
            ..QueueConfigPatch::default()
        };
        store.put_queue(&limited, &patch(3)).await.expect("create");
        // A burst of 1: one every 20 minutes.
        store.put_queue(&paced, &patch(1)).await.expect("create");
        for queue in [&limited, &paced] {
            let msgs = (0..5).map(|i| NewMessage::new(Body::text(format!("r{i}"))));
            store.send(queue, msgs.collect()).await.expect("send");
        }
        let req = ReceiveRequest {
            max: 2,
            ..ReceiveRequest::default()
        };
        assert_eq!(
            store
                .receive(&limited, req.clone())
                .await
                .expect("receive")
                .len(),
            2
        );
        assert_eq!(
            store.receive(&paced, req).await.expect("receive").len(),
            1,
            "one, then the spacing"
        );
        // Enough sent and acked elsewhere that the segment is mostly dead, worth compacting.
        store
            .put_queue(&q(), &QueueConfigPatch::default())
            .await
            .expect("create");
        send_n(&store, 300).await;
        let req = ReceiveRequest {
            max: 100,
            ..ReceiveRequest::default()
        };
        loop {
            let ds = store.receive(&q(), req.clone()).await.expect("receive");
            if ds.is_empty() {
                break;
            }
            let acks = ds
                .iter()
                .map(|d| sluice_core::AckRequest {
                    receipt: d.receipt,
                    result: None,
                })
                .collect();
            store.ack(&q(), acks).await.expect("ack");
        }
        segments(dir.path())[0].clone()
    };
    {
        // Opening starts a new segment, so maintenance may compact the old one.
        let store = open(dir.path()).expect("reopen");
        store.engine().maintain().await.expect("maintenance");
        assert!(
            !segments(dir.path()).contains(&first),
            "the segment of the leases was compacted away"
        );
    }
    let store = open(dir.path()).expect("reopen");
    let req = ReceiveRequest {
        max: 10,
        ..ReceiveRequest::default()
    };
    assert_eq!(
        store
            .receive(&limited, req.clone())
            .await
            .expect("receive")
            .len(),
        1,
        "2 of the hour's 3 were delivered before the compaction"
    );
    assert!(
        store
            .receive(&paced, req)
            .await
            .expect("receive")
            .is_empty(),
        "the pace was kept through the compaction: the next is 20 minutes away"
    );
}
