//! Readings an operator acts on: drain ETA, stall, trends, rates and redrive progress, as
//! `sluice_core::reading` gathers them from the store, in the situations of an incident.
//!
//! Each case plays its situation out second by second on the case's clock, recording a stats
//! point of every queue at each 10-s boundary as the broker's sampler does, and reads the
//! queue as the stats answer would. The numbers are the ones `docs/readings.md` promises.

use super::*;
use sluice_core::reading::{Reading, read, still_to_move};
use sluice_core::stats::{SAMPLE_INTERVAL, StatsSample};
use sluice_core::trend::Direction;

/// The sampler and the reader of a case.
struct Watch<'a> {
    e: &'a Env,
    queues: Vec<QueueName>,
}

impl<'a> Watch<'a> {
    /// Watches `queues` from now, recording their first point at once.
    async fn new(e: &'a Env, queues: &[&QueueName]) -> Watch<'a> {
        let w = Watch {
            e,
            queues: queues.iter().map(|q| (*q).clone()).collect(),
        };
        w.sample().await;
        w
    }

    /// Records a point of every watched queue at the current slot.
    async fn sample(&self) {
        let at = StatsSample::slot(self.e.now());
        let mut points = Vec::new();
        for q in &self.queues {
            points.push((q.clone(), StatsSample::of(&self.e.stats(q).await, at)));
        }
        self.e.store.record_stats(points).await.expect("record");
    }

    /// Moves the clock on by `d`, a second at a time, sampling at every boundary crossed (the
    /// sampler's points come just after one, before anything else happens).
    async fn pass(&self, d: Duration) {
        let step = SAMPLE_INTERVAL.as_millis() as i64;
        for _ in 0..d.as_secs() {
            let before = self.e.now().as_millis().div_euclid(step);
            self.e.advance(secs(1));
            if self.e.now().as_millis().div_euclid(step) != before {
                self.sample().await;
            }
        }
    }

    /// `q` as the stats answer reads it now.
    async fn read(&self, q: &QueueName) -> Reading {
        read(self.e.store.as_ref(), q, self.e.now())
            .await
            .unwrap_or_else(|e| panic!("reading of {q}: {e:?}"))
    }
}

/// Sends `n` messages to `q`, in batches a store takes.
async fn fill(e: &Env, q: &QueueName, n: usize, prefix: &str) {
    let mut left = n;
    while left > 0 {
        let k = left.min(50);
        let batch = (0..k).map(|i| text(&format!("{prefix}{i}"))).collect();
        e.send_batch(q, batch).await;
        left -= k;
    }
}

/// Takes up to `n` messages of `q` and acks them; how many it took.
async fn consume(e: &Env, q: &QueueName, n: u32) -> u32 {
    let mut took = 0;
    while took < n {
        let ds = e.recv(q, (n - took).min(10)).await;
        if ds.is_empty() {
            break;
        }
        for d in &ds {
            e.ack(q, d.receipt).await.expect("ack");
        }
        took += ds.len() as u32;
    }
    took
}

#[track_caller]
fn assert_near(got: Option<Duration>, want_secs: f64, share: f64, what: &str) {
    let got_secs = got.map(|d| d.as_secs_f64());
    assert!(
        got_secs.is_some_and(|g| (g - want_secs).abs() <= want_secs * share),
        "{what}: read {got_secs:?}, want {want_secs:.1} s ± {:.0} %",
        share * 100.0
    );
}

/// A steady drain of 3 a second out of 300 waiting reads an ETA within 20 % of the time
/// really left from 15 s after the drain starts, and at every reading after; falling, not
/// stalled.
pub async fn reading_of_a_steady_drain(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("drain", QueueConfigPatch::default()).await;
    fill(&e, &q, 300, "m").await;
    let w = Watch::new(&e, &[&q]).await;
    w.pass(secs(30)).await;
    for second in 1..=95u32 {
        assert_eq!(consume(&e, &q, 3).await, 3);
        w.pass(secs(1)).await;
        let left = 300 - 3 * second;
        if second < 15 || left < 15 {
            continue;
        }
        let r = w.read(&q).await;
        let what = format!("{second} s into the drain, {left} left");
        assert_near(r.trend.backlog.eta, f64::from(left) / 3.0, 0.2, &what);
        assert_eq!(r.trend.backlog.direction, Direction::Falling, "{what}");
        assert_eq!(r.trend.backlog.stalled_for, None, "{what}");
    }
}

/// A backlog held by a rate limit of 100 a minute, its consumers otherwise idle, reads the
/// ETA of the rate the queue can deliver at, also in the seconds when the limit lets nothing
/// through; a held backlog is not a stall.
pub async fn reading_of_a_backlog_held_by_a_rate_limit(h: &dyn Harness) {
    let e = env(h).await;
    let q = e
        .queue(
            "capped",
            QueueConfigPatch {
                rate_limit: Some(Some(RateLimit {
                    limit: 100,
                    period: secs(60),
                    burst: None,
                })),
                ..QueueConfigPatch::default()
            },
        )
        .await;
    fill(&e, &q, 500, "m").await;
    let w = Watch::new(&e, &[&q]).await;
    let mut left = 500;
    for second in 1..=170u32 {
        left -= consume(&e, &q, 500).await;
        w.pass(secs(1)).await;
        if second < 65 || left < 50 {
            continue;
        }
        let r = w.read(&q).await;
        let what = format!("{second} s in, {left} left");
        assert_near(
            r.trend.backlog.eta,
            f64::from(left) / (100.0 / 60.0),
            0.2,
            &what,
        );
        assert_eq!(
            r.trend.backlog.stalled_for, None,
            "{what}: a cap is not a stall"
        );
    }
    assert!(left < 300, "the limit let {} through", 500 - left);
}

/// Consumers gone: 12 s after the last ack the backlog reads no ETA and `stalled_for` the
/// time since that ack (to a sample's 10 s).
pub async fn reading_of_consumers_gone(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("gone", QueueConfigPatch::default()).await;
    fill(&e, &q, 200, "m").await;
    let w = Watch::new(&e, &[&q]).await;
    for _ in 0..40 {
        consume(&e, &q, 2).await;
        w.pass(secs(1)).await;
    }
    let last_ack = e.now().as_millis() - 1000;
    let r = w.read(&q).await;
    assert!(
        r.trend.backlog.eta.is_some(),
        "draining a second after the last ack: {:?}",
        r.trend.backlog
    );
    for since in 2..=90i64 {
        w.pass(secs(1)).await;
        if since < 12 {
            continue;
        }
        let r = w.read(&q).await;
        let idle = (e.now().as_millis() - last_ack) as f64 / 1000.0;
        let what = format!("{idle} s after the last ack");
        assert_eq!(r.trend.backlog.eta, None, "{what}");
        let stalled = r
            .trend
            .backlog
            .stalled_for
            .unwrap_or_else(|| panic!("{what}: not stalled: {:?}", r.trend.backlog))
            .as_secs_f64();
        assert!(
            stalled <= idle && stalled >= idle - 10.0,
            "{what}: stalled for {stalled} s"
        );
    }
}

/// 91 dead letters in 10 s, then nothing: the queue's dead letters read rising, "+91 in the
/// last minute", for the minute after the jump; flat after; never a stall.
pub async fn reading_of_a_dead_letter_jump(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("jump").await;
    fill(&e, &q, 101, "m").await;
    let w = Watch::new(&e, &[&q, &dlq]).await;
    let reject = |n: usize| {
        let e = &e;
        let q = &q;
        async move {
            // A receive may answer fewer than it was asked for.
            let mut left = n;
            while left > 0 {
                let ds = e.recv(q, left as u32).await;
                assert!(!ds.is_empty(), "{left} more to dead-letter, none delivered");
                left -= ds.len();
                for d in ds {
                    e.store
                        .reject(q, d.receipt, fail("poison"))
                        .await
                        .expect("reject");
                }
            }
        }
    };
    // 10 dead letters long before.
    reject(10).await;
    w.pass(secs(120)).await;
    // Then 91 over 10 s.
    for second in 0..10 {
        reject(if second == 0 { 10 } else { 9 }).await;
        w.pass(secs(1)).await;
    }
    assert_eq!(e.stats(&q).await.dead_letter_depth, 101);
    for after in 1..=120u32 {
        w.pass(secs(1)).await;
        let r = w.read(&q).await;
        let d = r.trend.dead_letters;
        let what = format!("{after} s after the jump: {d:?}");
        assert_eq!(d.stalled_for, None, "{what}");
        assert_eq!(r.trend.backlog.stalled_for, None, "{what}");
        if after <= 50 {
            assert_eq!(d.direction, Direction::Rising, "{what}");
            assert_eq!(d.change_1m, 91, "{what}");
        }
        if after >= 80 {
            assert_eq!(d.direction, Direction::Flat, "{what}");
            assert_eq!(d.change_1m, 0, "{what}");
        }
    }
}

/// A paused queue reads no ETA and no stall however long it waits; resumed, it drains again.
pub async fn reading_of_a_paused_queue(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("held", QueueConfigPatch::default()).await;
    fill(&e, &q, 100, "m").await;
    let w = Watch::new(&e, &[&q]).await;
    for _ in 0..20 {
        consume(&e, &q, 2).await;
        w.pass(secs(1)).await;
    }
    let pause = |p: bool| QueueConfigPatch {
        paused: Some(p),
        ..QueueConfigPatch::default()
    };
    e.store.put_queue(&q, &pause(true)).await.expect("pause");
    for after in 1..=60 {
        w.pass(secs(1)).await;
        let r = w.read(&q).await;
        assert!(r.info.config.paused);
        assert_eq!(
            (r.trend.backlog.eta, r.trend.backlog.stalled_for),
            (None, None),
            "{after} s after the pause"
        );
    }
    e.store.put_queue(&q, &pause(false)).await.expect("resume");
    for _ in 0..20 {
        consume(&e, &q, 2).await;
        w.pass(secs(1)).await;
    }
    let r = w.read(&q).await;
    assert_near(
        r.trend.backlog.eta,
        10.0,
        0.2,
        "resumed, 20 left at 2 a second",
    );
}

/// A new queue sent 5 a second for 5 s reads 5/s over every window (a rate over its age while
/// it is younger than the window); after a window (and one sampling interval) with no
/// traffic, that window reads 0.
pub async fn reading_of_a_new_queue_and_of_quiet(h: &dyn Harness) {
    let e = env(h).await;
    let q = e.queue("young", QueueConfigPatch::default()).await;
    let w = Watch::new(&e, &[&q]).await;
    for _ in 0..5 {
        fill(&e, &q, 5, "m").await;
        w.pass(secs(1)).await;
    }
    let r = w.read(&q).await;
    for (i, rates) in r.trend.rates.iter().enumerate() {
        assert!(
            (rates.sent - 5.0).abs() <= 1.0,
            "window {i}: sent {}/s",
            rates.sent
        );
    }
    // A window and one sampling interval of quiet (the window's base is a sample).
    w.pass(secs(70)).await;
    let r = w.read(&q).await;
    assert_eq!(
        r.trend.rates[0].sent, 0.0,
        "a quiet minute: {:?}",
        r.trend.rates[0]
    );
    assert!(
        r.trend.rates[1].sent > 0.0,
        "5 minutes still hold the sends"
    );
    w.pass(secs(15 * 60)).await;
    let r = w.read(&q).await;
    for (i, rates) in r.trend.rates.iter().enumerate() {
        assert_eq!(
            *rates,
            Default::default(),
            "window {i} after 16 quiet minutes"
        );
    }
}

/// A DLQ of 82 under a redrive limited to 20 whose filter leaves 10 out: its progress reads
/// `moved of 20`; the DLQ's time to empty (on its own row and as its source's dead-letter
/// trend) is the time to move what the job will still move, none while the job is paused
/// and none once it is done.
pub async fn reading_of_a_dead_letter_queue_under_a_limited_redrive(h: &dyn Harness) {
    let e = env(h).await;
    let (q, dlq) = e.queue_and_dlq("partner").await;
    fill(&e, &q, 82, "m").await;
    for i in 0..82 {
        let d = e.recv_one(&q).await;
        let error = if i < 10 {
            "400 bad input"
        } else {
            "503 unavailable"
        };
        e.store
            .reject(&q, d.receipt, fail(error))
            .await
            .expect("reject");
    }
    let w = Watch::new(&e, &[&q, &dlq]).await;
    w.pass(secs(120)).await;
    let mut spec = super::redrive::redrive_spec(&dlq);
    spec.limit = Some(20);
    spec.filter.error_contains = Some("503".into());
    let job = e.store.create_redrive(spec).await.expect("redrive");
    let to_move = |job: &sluice_core::RedriveJob| {
        let e = &e;
        let job = job.clone();
        async move {
            job.moved
                + still_to_move(e.store.as_ref(), &job)
                    .await
                    .expect("to move")
        }
    };
    assert_eq!(to_move(&job).await, 20, "min(limit, matched)");
    let mut current = job.clone();
    for second in 1..=15u64 {
        current = e.store.redrive_step(job.id, 1).await.expect("step").job;
        w.pass(secs(1)).await;
        assert_eq!((current.moved, to_move(&current).await), (second, 20));
    }
    let left = 5.0;
    for r in [
        w.read(&dlq).await.trend.backlog,
        w.read(&q).await.trend.dead_letters,
    ] {
        assert_near(r.eta, left, 0.2, "5 left to move at 1 a second");
    }
    let pause = sluice_core::RedriveControl::Pause {
        reason: "upstream down".into(),
    };
    e.store.control_redrive(job.id, pause).await.expect("pause");
    w.pass(secs(5)).await;
    for r in [
        w.read(&dlq).await.trend.backlog,
        w.read(&q).await.trend.dead_letters,
    ] {
        assert_eq!(r.eta, None, "paused: nothing leaves");
    }
    e.store
        .control_redrive(job.id, sluice_core::RedriveControl::Resume)
        .await
        .expect("resume");
    for _ in 0..5 {
        current = e.store.redrive_step(job.id, 1).await.expect("step").job;
        w.pass(secs(1)).await;
    }
    assert_eq!(
        (current.moved, current.state),
        (20, sluice_core::redrive::RedriveState::Completed)
    );
    let dlq_reading = w.read(&dlq).await;
    assert_eq!(
        dlq_reading.stats.visible, 62,
        "the filter and the limit leave 62"
    );
    for r in [
        dlq_reading.trend.backlog,
        w.read(&q).await.trend.dead_letters,
    ] {
        assert_eq!(r.eta, None, "done: what stays is not being emptied");
        assert_eq!(r.stalled_for, None);
    }
}
