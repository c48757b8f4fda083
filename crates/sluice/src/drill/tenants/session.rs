//! One run of the tenants scenario on its own queue and partner API: the queue governed per
//! key or queue-wide, the worker (without a rate limiter: nobody told it any quota), the
//! outage of one tenant's account (or none, in a calm run), the quota raise, the operator,
//! a sample of the queue and its keys every scenario minute, and what was observed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_client::Client;
use sluice_client::wire::{KeyOrderView, KeysQuery, QueueConfigRequest};
use sluice_core::adaptive::{AdaptiveRate, BreakerConfig, BreakerState, FlowScope};
use tokio::sync::watch;

use super::super::adaptive::{self, FlowSample};
use super::super::scenario::{Clock, Scenario};
use super::super::session::{stop_worker, stopped, terms};
use super::super::upstream::CallKind;
use super::super::workload::{self, WorkerPlan};
use super::super::{browse_all, ms, operator};
use super::plan::{self, OUTAGE, RAISED, Tenants};
use super::upstream::{Partner, PartnerConfig};
use super::{Setup, TenantRun};

/// One tenant's key at a sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeySample {
    /// Its own adaptive rate, per scenario minute (`scope: key`).
    pub rate_per_min: Option<f64>,
    /// Its own breaker (`scope: key`).
    pub breaker: Option<BreakerState>,
}

/// The queue and its tenants' keys, every scenario minute.
#[derive(Debug, Clone, Default)]
pub struct TenantSample {
    /// Scenario minute.
    pub minute: f64,
    /// Visible, delayed and in flight.
    pub pending: u64,
    /// DLQ depth.
    pub dlq: u64,
    /// The queue's own rate and breaker (queue-wide scope).
    pub flow: FlowSample,
    /// Per tenant, in table order.
    pub keys: Vec<KeySample>,
}

/// The queue's adaptive rate and breaker for `scope`, in real time: the `--adaptive`
/// drill's, with a breaker that sees a tenant's outage from its few calls: it opens when half
/// of at least 3 calls in 30 scenario seconds failed (a tenant with a handful of tasks a
/// minute reaches that before any task has spent its retry budget of 3), and 2 probes close
/// it.
pub fn governance(sc: &Scenario, clock: &Clock, scope: FlowScope) -> (AdaptiveRate, BreakerConfig) {
    let (mut rate, mut breaker) = adaptive::governance(sc, clock);
    rate.scope = scope;
    breaker.scope = scope;
    breaker.min_calls = 3;
    breaker.window_ms *= 2;
    breaker.probes = 2;
    (rate, breaker)
}

/// Runs the scenario once with `setup`, until the work is done or `deadline_real` (from now)
/// passes.
pub async fn run(
    client: &Client,
    sc: &Scenario,
    tenants: &Tenants,
    setup: Setup,
    deadline_real: Duration,
) -> anyhow::Result<TenantRun> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (worker_stop_tx, worker_stop_rx) = watch::channel(false);
    let probe = Clock::new(sc.scale);
    let minute_real = probe.real(Duration::from_secs(60));
    let partner = Partner::start(
        PartnerConfig {
            tenants: tenants.names(),
            quotas: tenants.list.iter().map(|t| t.quota).collect(),
            terms: terms(sc, &probe, minute_real),
            seed: sc.seed,
        },
        stopped(stop_rx),
    )
    .await?;
    let queue = format!("drill-tenants-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let (rate, breaker) = governance(sc, &probe, setup.scope);
    client
        .put_queue(
            &queue,
            &QueueConfigRequest {
                visibility_timeout_ms: Some(ms(probe.real(sc.visibility)).max(1000)),
                max_receive_count: Some(sc.max_receive_count),
                backoff_base_ms: Some(ms(probe.real(sc.backoff_base))),
                backoff_max_ms: Some(ms(probe.real(sc.backoff_max))),
                adaptive: Some(Some(rate)),
                breaker: Some(Some(breaker)),
                ..QueueConfigRequest::default()
            },
        )
        .await
        .with_context(|| format!("creating queue {queue}"))?;
    let dlq = format!("{queue}.dlq");
    let sized_for = f64::from(sc.adaptive_max_per_min) * sc.scale / 60.0;
    let worker = workload::worker(
        client.clone(),
        &queue,
        &WorkerPlan {
            concurrency: ((sized_for * 0.25).ceil() as usize).clamp(4, 64),
            limiter: None,
            upstream_url: partner.url(),
            idempotency_key: !sc.no_idempotency_key,
            retry_permanent: sc.retry_permanent_errors,
            visibility: probe.real(sc.visibility).max(Duration::from_secs(1)),
            poll_wait: Duration::from_millis(200),
        },
    )?;

    // Go: the wall clock first, as in the single-tenant drill.
    let epoch = std::time::SystemTime::now();
    let clock = Clock::new(sc.scale);
    let deadline = clock.start + deadline_real;
    let (plan, owner) = plan::plan(sc, tenants, &clock, epoch);
    let sent = workload::enqueue(client, &queue, &plan, &clock).await?;
    println!(
        "{}queue {queue}, partner API on http://{}: {sent} tasks over {} tenants",
        setup.label(),
        partner.addr,
        tenants.list.len()
    );
    let worker_task = tokio::spawn(worker.run_until(stopped(worker_stop_rx)));
    let events = spawn_events(sc, tenants, setup, clock, partner.clone());
    let op_stop = Arc::new(AtomicBool::new(false));
    let op_task = tokio::spawn(operator::run(
        client.clone(),
        dlq.clone(),
        sc.clone(),
        clock,
        partner.clone(),
        Arc::clone(&op_stop),
        deadline,
    ));

    let mut samples = Vec::new();
    let mut drained_at = None;
    let mut next = clock.start;
    let mut last_print = Instant::now();
    let (_, outage_end) = sc.outage_min();
    let done_after = sc
        .last_expiry_min()
        .max(outage_end)
        .max(tenants.raise_at + 3.0);
    while Instant::now() < deadline {
        tokio::time::sleep_until(next.into()).await;
        next += minute_real;
        let Some(s) = sample(client, &queue, tenants, sc.scale, clock.now_minutes()).await else {
            continue;
        };
        let released = released(&partner, &plan.valid_ids);
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            println!(
                "{}minute {:>5.0}: pending {:>5}  DLQ {:>4}  released {released}/{}",
                setup.label(),
                s.minute,
                s.pending,
                s.dlq,
                plan.valid_ids.len()
            );
        }
        let done = s.minute > done_after && released == plan.valid_ids.len() && s.pending == 0;
        let m = s.minute;
        samples.push(s);
        if done {
            drained_at = Some(m);
            break;
        }
    }
    let ended_at = clock.now_minutes();
    op_stop.store(true, Ordering::Relaxed);
    let op_log = op_task.await.unwrap_or_default();
    events.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dlq_end = browse_all(client, &dlq).await?;
    stop_worker(&worker_stop_tx, worker_task).await;
    let _ = stop_tx.send(true);

    // Valid tasks dead-lettered: those the operator found before redriving, and those left.
    let valid: BTreeSet<&str> = plan.valid_ids.iter().map(String::as_str).collect();
    let dead_valid: BTreeSet<String> = op_log
        .seen
        .iter()
        .cloned()
        .chain(
            dlq_end
                .iter()
                .filter_map(super::super::criteria::reservation_id),
        )
        .filter(|id| valid.contains(id.as_str()))
        .collect();
    let b = partner.books();
    let calls: Vec<(f64, usize, CallKind)> = b
        .calls
        .iter()
        .map(|c| (clock.minutes_at(c.at), c.tenant, c.kind))
        .collect();
    let first_applied: HashMap<String, f64> = b
        .ledger
        .first_applied
        .iter()
        .map(|(id, at)| (id.clone(), clock.minutes_at(*at)))
        .collect();
    let due: HashMap<String, f64> = plan
        .items
        .iter()
        .filter_map(|(due, item)| match item {
            workload::Item::Task(e) => Some((e.reservation_id.clone(), *due)),
            workload::Item::Raw(_) => None,
        })
        .collect();
    Ok(TenantRun {
        setup,
        queue,
        calls,
        applied: b.ledger.applied.clone(),
        first_applied,
        repeats: b.ledger.repeats,
        valid_ids: plan.valid_ids.clone(),
        owner,
        due,
        dead_valid,
        dlq_end: dlq_end.len(),
        redriven: op_log.batches.iter().map(|x| x.moved).sum(),
        samples,
        drained_at,
        ended_at,
        real_secs: clock.start.elapsed().as_secs_f64(),
    })
}

/// The outage (unless calm) and the quota raise, at their scenario minutes.
fn spawn_events(
    sc: &Scenario,
    tenants: &Tenants,
    setup: Setup,
    clock: Clock,
    partner: Partner,
) -> tokio::task::JoinHandle<()> {
    let (o_start, o_end) = sc.outage_min();
    let (raise_at, raised_to) = (tenants.raise_at, tenants.raised_to);
    tokio::spawn(async move {
        let mut events = vec![(raise_at, Event::Raise)];
        if setup.outage {
            events.push((o_start, Event::Down));
            events.push((o_end, Event::Up));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, event) in events {
            tokio::time::sleep_until(clock.instant_of(at).into()).await;
            match event {
                Event::Down => partner.set_down(OUTAGE, true),
                Event::Up => partner.set_down(OUTAGE, false),
                Event::Raise => partner.set_quota(RAISED, raised_to),
            }
        }
    })
}

enum Event {
    Down,
    Up,
    Raise,
}

/// How many of `valid` the partner has released.
fn released(partner: &Partner, valid: &[String]) -> usize {
    let b = partner.books();
    valid
        .iter()
        .filter(|id| b.ledger.applied.get(*id).copied().unwrap_or(0) > 0)
        .count()
}

/// The queue's stats and its tenants' keys at scenario minute `minute` (None when the broker
/// did not answer).
async fn sample(
    client: &Client,
    queue: &str,
    tenants: &Tenants,
    scale: f64,
    minute: f64,
) -> Option<TenantSample> {
    let st = client
        .stats(queue)
        .await
        .map_err(|e| tracing::warn!(error = %e, "stats"))
        .ok()?;
    let listing = client
        .keys(
            queue,
            &KeysQuery {
                order: Some(KeyOrderView::Breaker),
                limit: Some(1000),
                cursor: None,
            },
        )
        .await
        .map_err(|e| tracing::warn!(error = %e, "keys"))
        .ok()?;
    let mut keys = vec![KeySample::default(); tenants.list.len()];
    for k in &listing.keys {
        let Some(i) = k
            .key
            .as_deref()
            .and_then(|name| tenants.list.iter().position(|t| t.name == name))
        else {
            continue;
        };
        keys[i] = KeySample {
            rate_per_min: k
                .flow
                .as_ref()
                .and_then(|f| f.rate_per_min)
                .map(|r| f64::from(r) / scale),
            breaker: k.flow.as_ref().and_then(|f| f.breaker),
        };
    }
    Some(TenantSample {
        minute,
        pending: st.visible + st.delayed + st.in_flight,
        dlq: st.dead_letter_depth,
        flow: adaptive::flow_sample(&st, scale),
        keys,
    })
}
