//! One run of the scenario on its own queue and upstream: the queue set up for the run's
//! [`Mode`], the worker, the outage, the operator, a sample every scenario minute, and what
//! was observed at the end. `sluice drill --adaptive` runs two at once on one broker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, RateLimiter};

use super::adaptive::{self, Mode};
use super::scenario::{Clock, Scenario};
use super::{Observed, Sample, browse_all, ms, operator, upstream, workload};

/// Runs the scenario once in `mode` against the broker of `client`, until the work is done
/// or `deadline_real` (from now) passes.
pub async fn run(
    client: &Client,
    url: &str,
    sc: &Scenario,
    mode: Mode,
    deadline_real: Duration,
) -> anyhow::Result<Observed> {
    // The upstream stops after the worker, so that the worker can hand unfinished tasks back.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (worker_stop_tx, worker_stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let label = mode.label();

    let clock_probe = Clock::new(sc.scale);
    let minute_real = clock_probe.real(Duration::from_secs(60));
    let upstream = upstream::Upstream::start(
        upstream::UpstreamConfig {
            quota: sc.quota_per_min,
            window: minute_real,
            random_429: sc.random_429_pct / 100.0,
            lost_every: if sc.lost_reply_pct > 0.0 {
                (100.0 / sc.lost_reply_pct).round().max(1.0) as u64
            } else {
                0
            },
            random_retry_after: clock_probe.real(sc.random_retry_after),
            seed: sc.seed,
        },
        stopped(stop_rx.clone()),
    )
    .await?;

    let queue = format!("drill-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let dlq = format!("{queue}.dlq");
    let unprocessable = format!("{queue}.unprocessable");
    let (adaptive_rate, breaker) = match mode {
        Mode::Tuned => (None, None),
        Mode::Adaptive => {
            let (a, b) = adaptive::governance(sc, &clock_probe);
            (Some(Some(a)), Some(Some(b)))
        }
    };
    client
        .put_queue(
            &queue,
            &QueueConfigRequest {
                visibility_timeout_ms: Some(ms(clock_probe.real(sc.visibility)).max(1000)),
                max_receive_count: Some(sc.max_receive_count),
                backoff_base_ms: Some(ms(clock_probe.real(sc.backoff_base))),
                backoff_max_ms: Some(ms(clock_probe.real(sc.backoff_max))),
                adaptive: adaptive_rate,
                breaker,
                ..QueueConfigRequest::default()
            },
        )
        .await
        .with_context(|| format!("creating queue {queue}"))?;

    println!(
        "sluice drill: queue {queue} on {url}, upstream on http://{} \
         (quota {}/min, time scale {}){}: expect about {:.0} s, at most {:.0} s",
        upstream.addr,
        sc.quota_per_min,
        sc.scale,
        mode.describe(sc),
        clock_probe
            .real(Duration::from_secs_f64(sc.expected_minutes() * 60.0))
            .as_secs_f64(),
        deadline_real.as_secs_f64()
    );

    // The worker: tuned, its limiter set from the quota; adaptive, none (the broker paces).
    let (limiter, sized_for) = match mode {
        Mode::Tuned => {
            let rate_real = sc.worker_rate_real();
            (
                Some(RateLimiter::new(
                    (rate_real * 10.0).round().max(1.0) as u32,
                    Duration::from_secs(10),
                )?),
                rate_real,
            )
        }
        Mode::Adaptive => (None, sc.adaptive_max_per_min as f64 * sc.scale / 60.0),
    };
    let concurrency = ((sized_for * 0.25).ceil() as usize).clamp(4, 64);
    let wp = workload::WorkerPlan {
        concurrency,
        limiter,
        upstream_url: upstream.url(),
        idempotency_key: !sc.no_idempotency_key,
        retry_permanent: sc.retry_permanent_errors,
        visibility: clock_probe.real(sc.visibility).max(Duration::from_secs(1)),
        poll_wait: Duration::from_millis(200),
    };
    let worker = workload::worker(client.clone(), &queue, &wp)?;

    // Go.
    // The wall clock is read first, so that a task's `expires_at` is never later than the
    // instant its delay ends: a worker must not find a hold not over yet and spend an attempt
    // on it.
    let epoch = SystemTime::now();
    let clock = Clock::new(sc.scale);
    let deadline = clock.start + deadline_real;
    let plan = workload::plan(sc, &clock, epoch);
    let sent = workload::enqueue(client, &queue, &plan, &clock).await?;
    println!(
        "{label}enqueued {sent} expiry tasks: {} reservations, {} poison, {} undecodable; worker \
         concurrency {concurrency}, {}",
        plan.valid_ids.len(),
        plan.poison_ids.len(),
        plan.raw_bodies.len(),
        match mode {
            Mode::Tuned => format!("limiter {:.0}/min", sc.worker_per_min()),
            Mode::Adaptive => "no limiter".to_owned(),
        }
    );
    let worker_task = tokio::spawn(worker.run_until(stopped(worker_stop_rx)));

    // The outage.
    let (o_start, o_end) = sc.outage_min();
    let up2 = upstream.clone();
    let valid: Vec<String> = plan.valid_ids.clone();
    let outage_task = tokio::spawn(async move {
        tokio::time::sleep_until(clock.instant_of(o_start).into()).await;
        up2.set_paused(true);
        tokio::time::sleep_until(clock.instant_of(o_end).into()).await;
        up2.set_paused(false);
        let b = up2.books();
        valid
            .iter()
            .filter(|id| b.applied.get(*id).copied().unwrap_or(0) == 0)
            .count() as u64
    });

    // The operator.
    let op_stop = Arc::new(AtomicBool::new(false));
    let op_task = tokio::spawn(operator::run(
        client.clone(),
        dlq.clone(),
        sc.clone(),
        clock,
        upstream.clone(),
        Arc::clone(&op_stop),
        deadline,
    ));

    // Sample every scenario minute until the work is done or the deadline passes.
    let mut samples = Vec::new();
    let mut drained_at = None;
    let mut next = clock.start;
    let mut last_print = Instant::now();
    let mut breaker_transitions = Vec::new();
    while Instant::now() < deadline {
        tokio::time::sleep_until(next.into()).await;
        next += minute_real;
        let m = clock.now_minutes();
        let st = match client.stats(&queue).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "stats");
                continue;
            }
        };
        adaptive::merge_transitions(&mut breaker_transitions, &st, &clock, epoch);
        samples.push(Sample {
            minute: m,
            visible: st.visible,
            delayed: st.delayed,
            in_flight: st.in_flight,
            dlq: st.dead_letter_depth,
            flow: adaptive::flow_sample(&st, sc.scale),
        });
        let released = {
            let b = upstream.books();
            plan.valid_ids
                .iter()
                .filter(|id| b.applied.get(*id).copied().unwrap_or(0) > 0)
                .count()
        };
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            println!(
                "{label}  minute {m:>5.0}: backlog {:>5}  delayed {:>5}  in flight {:>3}  DLQ {:>4}  released {released}/{}{}",
                st.visible,
                st.delayed,
                st.in_flight,
                st.dead_letter_depth,
                plan.valid_ids.len(),
                samples
                    .last()
                    .map(|s| s.flow.describe())
                    .unwrap_or_default()
            );
        }
        let all_sent_due = m > sc.last_expiry_min() && m > o_end;
        if all_sent_due
            && released == plan.valid_ids.len()
            && st.visible + st.delayed + st.in_flight == 0
        {
            drained_at = Some(m);
            break;
        }
    }
    let ended_at = clock.now_minutes();
    op_stop.store(true, Ordering::Relaxed);
    let operator = op_task.await.unwrap_or_default();
    let pending_at_recovery = if outage_task.is_finished() {
        outage_task.await.unwrap_or(0)
    } else {
        outage_task.abort();
        plan.valid_ids.len() as u64
    };
    // Let settlements land, then stop the worker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // With max_receive_count 0 there is no DLQ: nothing was dead-lettered.
    let dlq_msgs = if sc.max_receive_count == 0 {
        browse_all(client, &dlq).await.unwrap_or_default()
    } else {
        browse_all(client, &dlq).await?
    };
    let last = client
        .stats(&queue)
        .await
        .with_context(|| format!("reading the totals of {queue}"))?;
    adaptive::merge_transitions(&mut breaker_transitions, &last, &clock, epoch);
    let totals = last.totals;
    let unprocessable_msgs = browse_all(client, &unprocessable).await.unwrap_or_default();
    let _ = worker_stop_tx.send(true);
    match tokio::time::timeout(Duration::from_secs(10), worker_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "worker"),
        Err(_) => tracing::warn!("the worker did not stop within 10 s"),
        _ => {}
    }
    let _ = stop_tx.send(true);

    let (calls, applied, repeats) = {
        let b = upstream.books();
        (
            b.calls
                .iter()
                .map(|c| (clock.minutes_at(c.at), c.kind))
                .collect(),
            b.applied.clone(),
            b.repeats,
        )
    };
    Ok(Observed {
        scenario: sc.clone(),
        mode,
        samples,
        breaker_transitions,
        calls,
        applied,
        repeats,
        plan,
        dlq: dlq_msgs,
        unprocessable: unprocessable_msgs,
        operator,
        drained_at,
        pending_at_recovery,
        ended_at,
        dead_lettered: totals.dead_lettered,
        redriven: totals.redriven,
        queue,
        real_secs: clock.start.elapsed().as_secs_f64(),
    })
}
