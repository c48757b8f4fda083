//! Concurrency and long polling: competing consumers and waiting receives.

use super::*;

/// Rule 7: 8 consumers receiving, nacking and acking 500 messages concurrently never hold the
/// same message at once, and every message is acked exactly once.
///
/// Kept whole: the ledger the eight workers share (live, nacked, acked) is declared in the test, so
/// the invariant checked at the end is the one every worker records as it goes.
pub async fn never_leased_to_two_consumers_at_once(h: &dyn Harness) {
    const N: usize = 500;
    let e = env(h).await;
    let q = e
        .queue(
            "conc",
            QueueConfigPatch {
                visibility_timeout: Some(secs(600)),
                ..Default::default()
            },
        )
        .await;
    e.send_batch(&q, (0..N).map(|i| text(&i.to_string())).collect())
        .await;

    #[derive(Default)]
    struct Shared {
        live: HashSet<MessageId>,
        nacked: HashSet<MessageId>,
        acked: HashSet<MessageId>,
        deliveries: u64,
        violations: Vec<String>,
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = Arc::clone(&e.store);
        let q = q.clone();
        let shared = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            loop {
                if shared.lock().expect("lock").acked.len() >= N {
                    return;
                }
                let req = ReceiveRequest {
                    max: 7,
                    consumer: Some(format!("w{w}")),
                    ..Default::default()
                };
                let ds = store.receive(&q, req).await.expect("concurrent receive");
                if ds.is_empty() {
                    // The rest are leased by other workers; the outer timeout catches a stall.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for d in ds {
                    let first_time = {
                        let mut s = shared.lock().expect("lock");
                        s.deliveries += 1;
                        if !s.live.insert(d.id) {
                            s.violations.push(format!(
                                "{} leased to worker {w} while another lease was live",
                                d.id
                            ));
                        }
                        !s.nacked.contains(&d.id)
                    };
                    // Every third message is nacked once, so messages come back while others are leased.
                    let nack = first_time && d.id.0 % 3 == 0;
                    {
                        let mut s = shared.lock().expect("lock");
                        s.live.remove(&d.id);
                        if nack {
                            s.nacked.insert(d.id);
                        }
                    }
                    if nack {
                        store
                            .nack(&q, d.receipt, Some(Duration::ZERO), Failure::default())
                            .await
                            .expect("nack of a live lease");
                    } else {
                        let out = store
                            .ack(
                                &q,
                                vec![AckRequest {
                                    receipt: d.receipt,
                                    result: None,
                                }],
                            )
                            .await
                            .expect("ack call");
                        assert_eq!(out, vec![Ok(())], "worker {w}: ack of live lease {}", d.id);
                        let mut s = shared.lock().expect("lock");
                        if !s.acked.insert(d.id) {
                            s.violations.push(format!("{} acked twice", d.id));
                        }
                    }
                }
            }
        }));
    }
    let all = futures::future::join_all(tasks);
    let results = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("500 messages should be consumed by 8 workers within 20 s");
    for r in results {
        r.expect("worker task panicked");
    }
    let (deliveries, nacked) = {
        let s = shared.lock().expect("lock");
        assert!(
            s.violations.is_empty(),
            "rule 7 violated: {:?}",
            &s.violations[..s.violations.len().min(10)]
        );
        assert_eq!(s.acked.len(), N, "every message acked");
        (s.deliveries, s.nacked.len() as u64)
    };
    let stats = e.stats(&q).await;
    assert_eq!((stats.visible, stats.in_flight, stats.delayed), (0, 0, 0));
    assert_eq!(stats.totals.acked, N as u64);
    assert_eq!(
        stats.totals.received, deliveries,
        "received counts every delivery"
    );
    assert_eq!(stats.totals.nacked, nacked);
}

/// A long poll returns soon after a concurrent send (real time, well under the 5 s wait).
pub async fn long_poll_wakes_on_send(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("lp", QueueConfigPatch::default()).await;
    let store = Arc::clone(&e.store);
    let q2 = q.clone();
    let start = Instant::now();
    let waiter = tokio::spawn(async move {
        store
            .receive(
                &q2,
                ReceiveRequest {
                    max: 1,
                    wait: secs(5),
                    ..Default::default()
                },
            )
            .await
    });
    tokio::time::sleep(ms(150)).await;
    let id = e.send_text(&q, "wake up").await;
    let ds = tokio::time::timeout(secs(4), waiter)
        .await
        .expect("long poll did not return within 4 s of a send")
        .expect("receive task")
        .expect("receive");
    let took = start.elapsed();
    assert_eq!(
        ids_of(&ds),
        BTreeSet::from([id]),
        "the long poll delivers the new message"
    );
    assert!(
        took < secs(2),
        "long poll woke {took:?} after start; a send must wake it promptly"
    );
}

/// A long poll on an empty queue returns empty after its wait (real time), and does not return
/// a message that is delayed or in a paused queue.
pub async fn long_poll_times_out_empty(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("lpe", QueueConfigPatch::default()).await;
    let req = || ReceiveRequest {
        max: 1,
        wait: ms(200),
        ..Default::default()
    };
    let start = Instant::now();
    let ds = tokio::time::timeout(secs(3), e.store.receive(&q, req()))
        .await
        .expect("a 200 ms long poll must return (does the engine wait on the virtual clock?)")
        .expect("receive");
    let took = start.elapsed();
    assert!(ds.is_empty());
    assert!(
        took >= ms(150),
        "long poll returned after {took:?}, before its 200 ms wait"
    );
    assert!(took < secs(2), "long poll of 200 ms took {took:?}");

    e.send(&q, delayed("not yet", secs(60))).await;
    let ds = tokio::time::timeout(secs(3), e.store.receive(&q, req()))
        .await
        .expect("returns")
        .expect("receive");
    assert!(
        ds.is_empty(),
        "a delayed message is not delivered by a long poll"
    );

    let p = e
        .queue(
            "lpp",
            QueueConfigPatch {
                paused: Some(true),
                ..Default::default()
            },
        )
        .await;
    e.send_text(&p, "held").await;
    let ds = tokio::time::timeout(secs(3), e.store.receive(&p, req()))
        .await
        .expect("returns")
        .expect("receive");
    assert!(
        ds.is_empty(),
        "a paused queue delivers nothing, even to a long poll"
    );
}
