//! One run of the scenario on its own queue and upstream: the queue set up for the run's
//! [`Mode`], the worker, the outage, the operator, a sample every scenario minute, and what
//! was observed at the end. `sluice drill --adaptive` runs two at once on one broker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use sluice_client::wire::{MessageView, QueueConfigRequest};
use sluice_client::{Client, RateLimiter};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::adaptive::{self, Mode};
use super::scenario::{Clock, Scenario};
use super::upstream::Upstream;
use super::workload::{Plan, WorkerPlan};
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let (worker_stop_tx, worker_stop_rx) = watch::channel(false);
    let label = mode.label();

    let clock_probe = Clock::new(sc.scale);
    let minute_real = clock_probe.real(Duration::from_secs(60));
    let upstream = start_upstream(sc, &clock_probe, minute_real, stop_rx).await?;
    let queue = create_queue(client, sc, mode, &clock_probe).await?;
    let dlq = format!("{queue}.dlq");
    let unprocessable = format!("{queue}.unprocessable");
    announce(
        url,
        sc,
        mode,
        &queue,
        &upstream,
        &clock_probe,
        deadline_real,
    );
    let wp = worker_plan(sc, mode, &clock_probe, &upstream)?;
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
    announce_enqueued(label, sent, &plan, wp.concurrency, sc, mode);
    let worker_task = tokio::spawn(worker.run_until(stopped(worker_stop_rx)));
    let outage_task = spawn_outage(sc, clock, upstream.clone(), plan.valid_ids.clone());
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

    let watching = Watching {
        client,
        queue: &queue,
        sc,
        clock,
        epoch,
        upstream: &upstream,
        plan: &plan,
        label,
    };
    let mut sampled = watching.sample_until_done(deadline, minute_real).await;
    let ended_at = clock.now_minutes();
    op_stop.store(true, Ordering::Relaxed);
    let operator = op_task.await.unwrap_or_default();
    let pending_at_recovery = pending_at_recovery(outage_task, plan.valid_ids.len()).await;
    // Let settlements land, then stop the worker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let end = watching
        .end_state(&dlq, &unprocessable, &mut sampled.breaker_transitions)
        .await?;
    stop_worker(&worker_stop_tx, worker_task).await;
    let _ = stop_tx.send(true);

    let (calls, applied, repeats) = upstream_record(&upstream, &clock);
    Ok(Observed {
        scenario: sc.clone(),
        mode,
        samples: sampled.samples,
        breaker_transitions: sampled.breaker_transitions,
        calls,
        applied,
        repeats,
        plan,
        dlq: end.dlq,
        unprocessable: end.unprocessable,
        operator,
        drained_at: sampled.drained_at,
        pending_at_recovery,
        ended_at,
        dead_lettered: end.dead_lettered,
        redriven: end.redriven,
        queue,
        real_secs: clock.start.elapsed().as_secs_f64(),
    })
}

/// Resolves once `rx` says stop.
pub(crate) async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Starts the scenario's upstream with its quota, faults and seed; it runs until `stop`.
async fn start_upstream(
    sc: &Scenario,
    clock_probe: &Clock,
    minute_real: Duration,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Upstream> {
    Upstream::start(
        upstream::UpstreamConfig {
            quota: sc.quota_per_min,
            terms: terms(sc, clock_probe, minute_real),
            seed: sc.seed,
        },
        stopped(stop),
    )
    .await
}

/// The scenario's faults, and a quota window of a scenario minute (`minute_real`).
pub(crate) fn terms(sc: &Scenario, clock_probe: &Clock, minute_real: Duration) -> upstream::Terms {
    upstream::Terms {
        window: minute_real,
        random_429: sc.random_429_pct / 100.0,
        lost_every: upstream::lost_every(sc.lost_reply_pct),
        random_retry_after: clock_probe.real(sc.random_retry_after),
    }
}

/// Creates the run's queue under a fresh name, with the scenario's retry settings and, in
/// adaptive mode, the broker's rate governance; returns its name.
async fn create_queue(
    client: &Client,
    sc: &Scenario,
    mode: Mode,
    clock_probe: &Clock,
) -> anyhow::Result<String> {
    let queue = format!("drill-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let (adaptive_rate, breaker) = match mode {
        Mode::Tuned => (None, None),
        Mode::Adaptive => {
            let (a, b) = adaptive::governance(sc, clock_probe);
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
    Ok(queue)
}

/// Says where the run goes on and how long it should take.
fn announce(
    url: &str,
    sc: &Scenario,
    mode: Mode,
    queue: &str,
    upstream: &Upstream,
    clock_probe: &Clock,
    deadline_real: Duration,
) {
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
}

/// The worker: tuned, its limiter set from the quota; adaptive, none (the broker paces).
fn worker_plan(
    sc: &Scenario,
    mode: Mode,
    clock_probe: &Clock,
    upstream: &Upstream,
) -> anyhow::Result<WorkerPlan> {
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
    Ok(WorkerPlan {
        concurrency: ((sized_for * 0.25).ceil() as usize).clamp(4, 64),
        limiter,
        upstream_url: upstream.url(),
        idempotency_key: !sc.no_idempotency_key,
        retry_permanent: sc.retry_permanent_errors,
        visibility: clock_probe.real(sc.visibility).max(Duration::from_secs(1)),
        poll_wait: Duration::from_millis(200),
    })
}

/// The outage: the upstream paused for the scenario's outage window. The task yields how
/// many valid tasks were still unreleased when the upstream recovered.
fn spawn_outage(
    sc: &Scenario,
    clock: Clock,
    upstream: Upstream,
    valid: Vec<String>,
) -> JoinHandle<u64> {
    let (o_start, o_end) = sc.outage_min();
    tokio::spawn(async move {
        tokio::time::sleep_until(clock.instant_of(o_start).into()).await;
        upstream.set_paused(true);
        tokio::time::sleep_until(clock.instant_of(o_end).into()).await;
        upstream.set_paused(false);
        let b = upstream.books();
        valid
            .iter()
            .filter(|id| b.ledger.applied.get(*id).copied().unwrap_or(0) == 0)
            .count() as u64
    })
}

/// Says what was enqueued and how the worker runs.
fn announce_enqueued(
    label: &str,
    sent: usize,
    plan: &Plan,
    concurrency: usize,
    sc: &Scenario,
    mode: Mode,
) {
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
}

/// The outage task's count of tasks unreleased at recovery; when the run ended before the
/// recovery, every valid task (`valid`) counts.
async fn pending_at_recovery(outage: JoinHandle<u64>, valid: usize) -> u64 {
    if outage.is_finished() {
        outage.await.unwrap_or(0)
    } else {
        outage.abort();
        valid as u64
    }
}

/// Stops the worker and waits for it, at most 10 s, so that it hands back unfinished tasks.
pub(crate) async fn stop_worker(
    stop: &watch::Sender<bool>,
    worker: JoinHandle<sluice_client::Result<()>>,
) {
    let _ = stop.send(true);
    match tokio::time::timeout(Duration::from_secs(10), worker).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "worker"),
        Err(_) => tracing::warn!("the worker did not stop within 10 s"),
        _ => {}
    }
}

/// The upstream's books: every call at its scenario minute, releases per id, and repeats.
fn upstream_record(
    upstream: &Upstream,
    clock: &Clock,
) -> (
    Vec<(f64, upstream::CallKind)>,
    std::collections::HashMap<String, u32>,
    u64,
) {
    let b = upstream.books();
    (
        b.calls
            .iter()
            .map(|c| (clock.minutes_at(c.at), c.kind))
            .collect(),
        b.ledger.applied.clone(),
        b.ledger.repeats,
    )
}

/// What a running scenario is watched through.
struct Watching<'a> {
    client: &'a Client,
    queue: &'a str,
    sc: &'a Scenario,
    clock: Clock,
    epoch: SystemTime,
    upstream: &'a Upstream,
    plan: &'a Plan,
    label: &'static str,
}

/// What the samples saw while the scenario ran.
struct Sampled {
    samples: Vec<Sample>,
    drained_at: Option<f64>,
    breaker_transitions: Vec<(f64, String)>,
}

/// What is left to read once the scenario has ended.
struct EndState {
    dlq: Vec<MessageView>,
    unprocessable: Vec<MessageView>,
    dead_lettered: u64,
    redriven: u64,
}

impl Watching<'_> {
    /// Samples the queue every scenario minute until the work is done or `deadline` passes,
    /// with a progress line every 10 s.
    async fn sample_until_done(&self, deadline: Instant, minute_real: Duration) -> Sampled {
        let (sc, clock) = (self.sc, self.clock);
        let mut sampled = Sampled {
            samples: Vec::new(),
            drained_at: None,
            breaker_transitions: Vec::new(),
        };
        let (_, o_end) = sc.outage_min();
        let mut next = clock.start;
        let mut last_print = Instant::now();
        while Instant::now() < deadline {
            tokio::time::sleep_until(next.into()).await;
            next += minute_real;
            let m = clock.now_minutes();
            let st = match self.client.stats(self.queue).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "stats");
                    continue;
                }
            };
            adaptive::merge_transitions(&mut sampled.breaker_transitions, &st, &clock, self.epoch);
            sampled.samples.push(Sample {
                minute: m,
                visible: st.visible,
                delayed: st.delayed,
                in_flight: st.in_flight,
                dlq: st.dead_letter_depth,
                flow: adaptive::flow_sample(&st, sc.scale),
            });
            let released = self.released();
            if last_print.elapsed() >= Duration::from_secs(10) {
                last_print = Instant::now();
                println!(
                    "{}  minute {m:>5.0}: backlog {:>5}  delayed {:>5}  in flight {:>3}  DLQ {:>4}  released {released}/{}{}",
                    self.label,
                    st.visible,
                    st.delayed,
                    st.in_flight,
                    st.dead_letter_depth,
                    self.plan.valid_ids.len(),
                    sampled
                        .samples
                        .last()
                        .map(|s| s.flow.describe())
                        .unwrap_or_default()
                );
            }
            let all_sent_due = m > sc.last_expiry_min() && m > o_end;
            if all_sent_due
                && released == self.plan.valid_ids.len()
                && st.visible + st.delayed + st.in_flight == 0
            {
                sampled.drained_at = Some(m);
                break;
            }
        }
        sampled
    }

    /// How many valid tasks the upstream has released so far.
    fn released(&self) -> usize {
        let b = self.upstream.books();
        self.plan
            .valid_ids
            .iter()
            .filter(|id| b.ledger.applied.get(*id).copied().unwrap_or(0) > 0)
            .count()
    }

    /// The dead-letter and unprocessable queues' messages and the queue's last totals (its
    /// last breaker transitions merged into `transitions`).
    async fn end_state(
        &self,
        dlq: &str,
        unprocessable: &str,
        transitions: &mut Vec<(f64, String)>,
    ) -> anyhow::Result<EndState> {
        // With max_receive_count 0 there is no DLQ: nothing was dead-lettered.
        let dlq_msgs = if self.sc.max_receive_count == 0 {
            browse_all(self.client, dlq).await.unwrap_or_default()
        } else {
            browse_all(self.client, dlq).await?
        };
        let last = self
            .client
            .stats(self.queue)
            .await
            .with_context(|| format!("reading the totals of {}", self.queue))?;
        adaptive::merge_transitions(transitions, &last, &self.clock, self.epoch);
        let totals = last.totals;
        let unprocessable_msgs = browse_all(self.client, unprocessable)
            .await
            .unwrap_or_default();
        Ok(EndState {
            dlq: dlq_msgs,
            unprocessable: unprocessable_msgs,
            dead_lettered: totals.dead_lettered,
            redriven: totals.redriven,
        })
    }
}
