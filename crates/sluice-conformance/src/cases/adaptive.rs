//! Governed queues (`adaptive` and `breaker`, `sluice_core::adaptive`): a circuit breaker
//! stops deliveries while the dependency fails and keeps the attempts of the messages that
//! fail meanwhile; an adaptive rate stays within its bounds and under `rate_limit`, and
//! congestion cuts it.

use super::*;
use sluice_core::adaptive::{AdaptiveRate, BreakerConfig, BreakerState, CongestionSignal};
use sluice_core::audit::{AuditEvent, AuditQuery};

/// The queue `name` with `patch` (every engine governs queues).
async fn governed(e: &Env, name: &str, patch: QueueConfigPatch) -> Option<QueueName> {
    let q = qn(name);
    match e.store.put_queue(&q, &patch).await {
        Ok(_) => Some(q),
        Err(err) => panic!("put_queue({name}, {patch:?}) failed: {err:?}"),
    }
}

/// Breaker of the breaker cases: 4 calls, half of them failed, open it; one probe after 10 s.
fn breaker() -> BreakerConfig {
    BreakerConfig {
        failure_share_permille: 500,
        window_ms: 60_000,
        min_calls: 4,
        probe_every_ms: 10_000,
        probes: 1,
        ..Default::default()
    }
}

/// A queue with [`breaker`], two attempts per message, and a message leased on its last
/// attempt when the breaker opens (after four failed deliveries). Returns the queue, its DLQ
/// and the leased delivery.
async fn opened(e: &Env, name: &str) -> Option<(QueueName, QueueName, Delivery)> {
    let q = governed(
        e,
        name,
        QueueConfigPatch {
            max_receive_count: Some(2),
            visibility_timeout: Some(secs(3600)),
            breaker: Some(Some(breaker())),
            ..Default::default()
        },
    )
    .await?;
    let dlq = qn(&format!("{name}.dlq"));
    e.send_text(&q, "x").await;
    let first = e.recv_one(&q).await;
    e.nack(&q, first.receipt, Some(Duration::ZERO), Some("503"))
        .await
        .expect("nack 1");
    let x = e.recv_one(&q).await;
    assert_eq!(x.id, first.id);
    assert_eq!(x.receive_count, 2, "x is on its last attempt");
    for s in ["a", "b", "c"] {
        e.send_text(&q, s).await;
        let d = e.recv_one(&q).await;
        assert_ne!(d.id, x.id);
        // Back in a minute: out of the way of the receives below.
        e.nack(&q, d.receipt, Some(secs(60)), Some("503"))
            .await
            .expect("nack");
    }
    Some((q, dlq, x))
}

/// The breaker transitions audited, oldest first.
fn breaker_events(events: &[AuditEvent]) -> Vec<(String, String)> {
    let mut events: Vec<&AuditEvent> = events
        .iter()
        .filter(|x| x.action == "queue.breaker")
        .collect();
    events.sort_by_key(|x| x.at);
    events
        .into_iter()
        .map(|x| {
            (
                x.details.get("from").cloned().unwrap_or_default(),
                x.details.get("to").cloned().unwrap_or_default(),
            )
        })
        .collect()
}

async fn audit_of(e: &Env, q: &QueueName) -> Vec<AuditEvent> {
    e.store
        .audit_query(AuditQuery {
            queues: vec![q.to_string()],
            since: None,
            until: None,
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("audit query")
}

/// A breaker opens after enough transient failures; while it is open nothing is delivered
/// and a nack does not spend the message's attempt (a message on its last attempt is not
/// dead-lettered); after `probe_every_ms` a probe is delivered, and its success closes it.
pub async fn breaker_opens_keeps_attempts_and_a_probe_closes_it(h: &dyn Harness) {
    let e = env(h).await;
    let Some((q, dlq, x)) = opened(&e, "brk").await else {
        return;
    };
    e.send_text(&q, "d").await;
    e.recv_none(&q, "the breaker is open after 4 failed calls of 4")
        .await;
    let flow = e
        .stats(&q)
        .await
        .flow
        .expect("a governed queue shows its flow in stats");
    let b = flow.breaker.expect("breaker stats");
    assert_eq!(b.state, BreakerState::Open);
    assert_eq!((b.opened_total, b.probes_left), (1, 0));
    assert!(flow.adaptive.is_none(), "no adaptive rate configured");
    let out = e
        .nack(&q, x.receipt, Some(Duration::ZERO), Some("503"))
        .await
        .expect("nack while open");
    assert_eq!(
        out.queue, q,
        "a nack on the last attempt while the breaker is open does not dead-letter"
    );
    assert_eq!(
        e.get(x.id).await.receive_count,
        1,
        "the attempt was not spent"
    );
    assert!(e.browse_ids(&dlq, BrowseState::All).await.is_empty());
    e.recv_none(&q, "still open").await;

    e.advance(ms(9_999));
    e.recv_none(&q, "open until probe_every_ms has passed")
        .await;
    e.advance(ms(1));
    let probe = e.recv(&q, 10).await;
    assert_eq!(probe.len(), 1, "half-open: one probe, got {probe:?}");
    e.recv_none(&q, "half-open: the probe is out").await;
    e.ack(&q, probe[0].receipt).await.expect("ack the probe");
    let after = e.recv(&q, 10).await;
    assert_eq!(
        after.len(),
        1,
        "closed: the other visible message is delivered, got {after:?}"
    );
    assert_eq!(
        breaker_events(&audit_of(&e, &q).await),
        [
            ("closed".to_owned(), "open".to_owned()),
            ("open".to_owned(), "half_open".to_owned()),
            ("half_open".to_owned(), "closed".to_owned()),
        ],
        "every transition is audited"
    );
}

/// While the breaker is open, a reject still dead-letters at once: the message is wrong,
/// not the dependency.
pub async fn breaker_open_still_dead_letters_rejects(h: &dyn Harness) {
    let e = env(h).await;
    let Some((q, dlq, x)) = opened(&e, "brkr").await else {
        return;
    };
    e.recv_none(&q, "the breaker is open").await;
    let to = e
        .store
        .reject(&q, x.receipt, fail("malformed"))
        .await
        .expect("reject");
    assert_eq!(to, dlq);
    let m = e.get(x.id).await;
    assert_eq!(m.queue, dlq);
    assert_eq!(m.source_queue.as_ref(), Some(&q), "dead-lettered from {q}");
}

/// Deliveries at `at` (ms), counted in every window `[t, t + period)` that starts at one of
/// them: the most any window of that length holds.
fn most_in_any_window(at: &[i64], period_ms: i64) -> usize {
    at.iter()
        .enumerate()
        .map(|(i, t)| at[i..].iter().take_while(|u| **u < t + period_ms).count())
        .max()
        .unwrap_or(0)
}

/// Receives from each of `queues` every `step` for `steps` steps, acking each delivery at
/// once; returns the delivery times of each queue.
async fn drive(e: &Env, queues: &[&QueueName], step: Duration, steps: usize) -> Vec<Vec<i64>> {
    let mut at = vec![Vec::new(); queues.len()];
    for _ in 0..steps {
        for (q, at) in queues.iter().zip(&mut at) {
            for d in e.recv(q, 100).await {
                at.push(e.now().as_millis());
                e.ack(q, d.receipt).await.expect("ack");
            }
        }
        e.advance(step);
    }
    at
}

/// An adaptive rate never delivers more than `max_per_min`, nor more than `rate_limit` when
/// that is lower, in any minute; it delivers at least `min_per_min` a minute while messages
/// wait; congestion reported by an `errors` signal cuts it (audited as `queue.rate_adapted`
/// with reason `congestion`).
///
/// Kept whole: the rate is learned over simulated minutes, so the bounds are checked on four driven
/// minutes, then congestion is reported on the same queue and the cut judged against the rate those
/// minutes reached.
pub async fn adaptive_rate_stays_within_bounds_and_congestion_cuts_it(h: &dyn Harness) {
    let e = env(h).await;
    let mut signal = AdaptiveRate::new(30, 60);
    signal.signal = CongestionSignal::Errors(vec!["429".into()]);
    let Some(q) = governed(
        &e,
        "adapt",
        QueueConfigPatch {
            rate_limit: Some(Some(RateLimit {
                limit: 100,
                period: secs(60),
                burst: None,
            })),
            visibility_timeout: Some(secs(3600)),
            adaptive: Some(Some(signal)),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    // A rate_limit below max_per_min is the ceiling.
    let capped = e
        .queue(
            "adapt-capped",
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 40,
                    period: secs(60),
                    burst: None,
                })),
                visibility_timeout: Some(secs(3600)),
                adaptive: Some(Some(AdaptiveRate::new(10, 600))),
                ..Default::default()
            },
        )
        .await;
    let backlog = || (0..100).map(|i| text(&i.to_string())).collect::<Vec<_>>();
    for _ in 0..6 {
        e.send_batch(&q, backlog()).await;
        e.send_batch(&capped, backlog()).await;
    }
    let step = ms(250);
    // Four minutes, a receive of each queue every 250 ms.
    let mut both = drive(&e, &[&q, &capped], step, 4 * 240).await;
    let capped_at = both.pop().expect("two queues");
    let at = both.pop().expect("two queues");
    let most = most_in_any_window(&at, 60_000);
    assert!(
        most <= 60,
        "{most} deliveries in one minute, max_per_min is 60"
    );
    let first_minute = at.iter().take_while(|t| **t < at[0] + 60_000).count();
    assert!(
        first_minute >= 30,
        "{first_minute} deliveries in the first minute, min_per_min is 30"
    );
    let capped_most = most_in_any_window(&capped_at, 60_000);
    assert!(
        capped_most <= 40,
        "{capped_most} deliveries of the capped queue in one minute, rate_limit is 40"
    );
    assert!(
        capped_at.len() >= 40,
        "the capped queue delivered {}",
        capped_at.len()
    );

    // Congestion: 8 of the next deliveries answered "429" (a nack the errors signal
    // matches) cut the rate.
    let mut congested = 0;
    while congested < 8 {
        for d in e.recv(&q, 100).await {
            e.nack(
                &q,
                d.receipt,
                Some(Duration::ZERO),
                Some("upstream said 429"),
            )
            .await
            .expect("nack");
            congested += 1;
        }
        e.advance(step);
    }
    let events = audit_of(&e, &q).await;
    let cut = events
        .iter()
        .find(|x| {
            x.action == "queue.rate_adapted"
                && x.details.get("reason").map(String::as_str) == Some("congestion")
        })
        .unwrap_or_else(|| panic!("no congestion cut audited: {events:?}"));
    let from: u32 = cut.details["from_per_min"].parse().expect("from_per_min");
    let to: u32 = cut.details["to_per_min"].parse().expect("to_per_min");
    assert!(
        to < from && to >= 30,
        "cut from {from} to {to}, bounds 30–60"
    );
    let rate = e
        .stats(&q)
        .await
        .flow
        .and_then(|f| f.adaptive)
        .expect("rate stats");
    assert_eq!(
        (rate.min_per_min, rate.max_per_min, rate.ceiling_per_min),
        (30, 60, Some(100))
    );
    assert!(
        rate.congestion_total >= 4 && rate.decreases_total >= 1,
        "{rate:?}"
    );
    assert!((30..=60).contains(&rate.rate_per_min), "{rate:?}");
    let after = drive(&e, &[&q], step, 240).await;
    let most = most_in_any_window(&after[0], 60_000);
    assert!(most <= 60, "{most} deliveries in one minute after the cut");
}

/// A nack carrying the dependency's Retry-After holds the whole adaptive queue: no message is
/// delivered until the time it named (the longest of several), then deliveries resume; the
/// nacked message itself waits that long.
pub async fn a_retry_after_holds_the_whole_adaptive_queue(h: &dyn Harness) {
    let e = env(h).await;
    let Some(q) = governed(
        &e,
        "held",
        QueueConfigPatch {
            visibility_timeout: Some(secs(3600)),
            adaptive: Some(Some(AdaptiveRate::new(600, 600))),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    e.send_batch(&q, (0..10).map(|i| text(&i.to_string())).collect())
        .await;
    let ds = e.recv(&q, 2).await;
    assert_eq!(ds.len(), 2, "the rate lets the first two through");
    let congested = || Failure {
        error: Some("429 Too Many Requests".into()),
        consumer: None,
        retry_after: true,
    };
    for (d, wait) in ds.iter().zip([secs(20), secs(5)]) {
        e.store
            .nack(&q, d.receipt, Some(wait), congested())
            .await
            .expect("nack with Retry-After");
    }
    e.advance(secs(19));
    assert!(
        e.recv(&q, 10).await.is_empty(),
        "held until the longest Retry-After (20 s)"
    );
    e.advance(secs(2));
    assert!(
        !e.recv(&q, 10).await.is_empty(),
        "deliveries resume once it has passed"
    );
}

/// An operator forces a breaker open: nothing is delivered, without probes, however long it
/// stays open, across a restart too; forced closed, deliveries resume. A queue without a
/// breaker cannot be forced (`conflict`).
pub async fn a_forced_breaker_stays_open_until_forced_closed(h: &dyn Harness) {
    use sluice_core::adaptive::BreakerForce;
    let e = env(h).await;
    let Some(q) = governed(
        &e,
        "forced",
        QueueConfigPatch {
            breaker: Some(Some(breaker())),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    e.send_text(&q, "x").await;
    let s = e
        .store
        .force_breaker(&q, BreakerForce::Open)
        .await
        .expect("force open");
    let b = s.breaker.expect("a breaker");
    assert_eq!((b.state, b.forced), (BreakerState::Open, true));
    e.advance(secs(60));
    e.recv_none(&q, "forced open: no probes").await;
    let e = e.restart(h).await;
    e.advance(secs(60));
    e.recv_none(&q, "still forced open after a restart").await;
    let s = e
        .store
        .force_breaker(&q, BreakerForce::Closed)
        .await
        .expect("force closed");
    assert_eq!(s.breaker.map(|b| b.state), Some(BreakerState::Closed));
    e.recv_one(&q).await;
    let plain = e.queue("unforced", QueueConfigPatch::default()).await;
    assert_code(
        e.store.force_breaker(&plain, BreakerForce::Open).await,
        ErrorCode::Conflict,
        "no breaker",
    );
    assert_code(
        e.store
            .force_breaker(&qn("nowhere"), BreakerForce::Open)
            .await,
        ErrorCode::QueueNotFound,
        "no queue",
    );
}

/// On an adaptive queue a congestion nack does not spend the message's attempt (the pace is
/// the broker's to govern), while a transient failure still does and still dead-letters the
/// message when its attempts are used up.
pub async fn a_congestion_nack_keeps_its_attempt(h: &dyn Harness) {
    let e = env(h).await;
    let mut signal = AdaptiveRate::new(600, 6000);
    signal.signal = CongestionSignal::Errors(vec!["429".into()]);
    let Some(q) = governed(
        &e,
        "congest",
        QueueConfigPatch {
            max_receive_count: Some(1),
            visibility_timeout: Some(secs(3600)),
            adaptive: Some(Some(signal)),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let dlq = qn("congest.dlq");
    e.send_text(&q, "x").await;
    for round in 1..=3 {
        let d = e.recv_one(&q).await;
        assert_eq!(
            d.receive_count, 1,
            "round {round}: the attempt was given back"
        );
        let out = e
            .nack(
                &q,
                d.receipt,
                Some(Duration::ZERO),
                Some("upstream said 429"),
            )
            .await
            .expect("congestion nack");
        assert_eq!(
            out.queue, q,
            "round {round}: a congestion nack on the last attempt does not dead-letter"
        );
        assert_eq!(e.get(d.id).await.receive_count, 0);
    }
    let d = e.recv_one(&q).await;
    let out = e
        .nack(
            &q,
            d.receipt,
            Some(Duration::ZERO),
            Some("upstream said 503"),
        )
        .await
        .expect("failure nack");
    assert_eq!(
        out.queue, dlq,
        "a transient failure still spends the attempt"
    );
    assert_eq!(
        e.browse_ids(&dlq, BrowseState::All).await,
        std::collections::BTreeSet::from([d.id])
    );
}

/// On a queue with a breaker, a transient failure that spends its attempt waits out the
/// breaker's window before its backoff: the message's next attempt comes only once the breaker
/// has judged the failures around it, so it cannot spend its whole budget in the seconds an
/// outage takes to open the breaker. An explicit delay is kept as given.
pub async fn a_failure_under_a_breaker_waits_out_its_window(h: &dyn Harness) {
    let e = env(h).await;
    let Some(q) = governed(
        &e,
        "judged",
        QueueConfigPatch {
            max_receive_count: Some(3),
            visibility_timeout: Some(secs(3600)),
            backoff_base: Some(secs(1)),
            backoff_max: Some(secs(1)),
            breaker: Some(Some(breaker())),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    e.send_batch(&q, (0..3).map(|i| text(&i.to_string())).collect())
        .await;
    let ds = e.recv(&q, 3).await;
    assert_eq!(ds.len(), 3);
    let t = e.now();
    for d in &ds[..2] {
        e.nack(&q, d.receipt, None, Some("upstream unavailable (503)"))
            .await
            .expect("failure nack");
    }
    e.nack(&q, ds[2].receipt, Some(secs(5)), Some("try again in 5 s"))
        .await
        .expect("nack with a delay");
    for m in e.browse(&q, BrowseState::Delayed).await {
        let at = m
            .visible_at
            .expect("a delayed message has visible_at")
            .since(t);
        if m.id == ds[2].id {
            assert_eq!(at, secs(5), "an explicit delay is the worker's word");
        } else {
            assert!(
                at >= ms(60_000) && at <= ms(61_000),
                "the window (60 s), then the backoff (at most 1 s): +{at:?}"
            );
        }
    }
    e.advance(secs(5));
    assert_eq!(e.recv(&q, 3).await.len(), 1, "the delayed one is back");
    e.advance(ms(54_999));
    e.recv_none(&q, "the failed ones wait out the window").await;
    e.advance(ms(1_001));
    assert_eq!(
        e.recv(&q, 3).await.len(),
        2,
        "after the window and the backoff both failed ones are back"
    );
}
