//! The operator: once the upstream is back, redrive the DLQ in bounded batches at a rate under
//! the quota, and pause when 429s rise again.
//!
//! Only dead letters whose last error names the upstream (`upstream unavailable`, `upstream
//! rate limited`) are redriven: poison messages stay isolated in the DLQ. The operator looks
//! at them before each job and the job moves only those dead-lettered before that look, so
//! its log holds every message it redrove (`sluice drill --tenants` counts the valid tasks
//! a tenant's outage dead-lettered from it). Each batch is one
//! server-side redrive job (`limit` = batch, `rate_per_second` = the redrive rate); after a
//! batch ends the operator waits `--redrive-pause` (a scenario minute), looks at the
//! upstream's 429 share over the last minute, and waits another minute while it is above the
//! threshold.
//!
//! Why batches with a pause rather than one long job at a rate: the broker bounds a job's rate
//! over one-second windows of real time, and under a high `--time-scale` a scenario minute is
//! shorter than that second, so a long job could put a second's worth of moves into one
//! scenario minute. A batch no larger than the quota, followed by a minute's pause, keeps every
//! sliding scenario minute under the quota at any time scale — and it is what a careful
//! operator does anyway: move a few, watch the dependency, move a few more.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_client::Client;
use sluice_client::wire::{BrowseQuery, MessageView, RedriveFilterView, RedriveRequest};

use super::criteria::reservation_id;
use super::scenario::{Clock, Scenario};
use super::upstream::Upstream;

/// The redrive filter: dead letters of upstream trouble.
pub const REDRIVE_ERROR: &str = "upstream";

/// The dependency as the operator watches it: the share of its recent calls answered 429.
pub trait Watched: Clone + Send + Sync + 'static {
    /// 429 share among the calls of the last `window` (0 when none).
    fn recent_429_share(&self, window: Duration) -> f64;
}

impl Watched for Upstream {
    fn recent_429_share(&self, window: Duration) -> f64 {
        Upstream::recent_429_share(self, window)
    }
}

/// One redrive job as the operator ran it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Scenario minute it started.
    pub start_min: f64,
    /// Scenario minute it ended.
    pub end_min: f64,
    /// Messages moved.
    pub moved: u64,
    /// Rate asked for, per real second.
    pub rate_per_second: u32,
}

/// What the operator did.
#[derive(Debug, Default, Clone)]
pub struct OperatorLog {
    /// The jobs.
    pub batches: Vec<Batch>,
    /// Messages moved so far, as the operator saw it while following its jobs: (scenario
    /// minute, cumulative count). Criterion 4 derives the redrive's peak moves per minute
    /// from it.
    pub progress: Vec<(f64, u64)>,
    /// Times it paused because 429s rose.
    pub pauses: u32,
    /// Errors it met (logged, not fatal).
    pub errors: Vec<String>,
    /// Reservation ids of the dead letters it found before its jobs. Each job moves only
    /// dead letters older than its look, so every message it redrove is among them.
    pub seen: BTreeSet<String>,
}

/// Redrive rate per real second (at least 1: the broker's floor).
pub fn rate_per_second(sc: &Scenario) -> u32 {
    let r = f64::from(sc.redrive_per_min) * sc.scale / 60.0;
    (r.floor() as u32).clamp(1, 100_000)
}

/// The dead letters of upstream trouble in `dlq`, each page filtered here too (a broker
/// without browse filters answers every dead letter).
async fn upstream_dead_letters(client: &Client, dlq: &str) -> anyhow::Result<Vec<MessageView>> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let page = client
            .browse(
                dlq,
                &BrowseQuery {
                    limit: Some(1000),
                    cursor: cursor.take(),
                    error_contains: Some(REDRIVE_ERROR.to_owned()),
                    ..BrowseQuery::default()
                },
            )
            .await?;
        out.extend(page.messages.into_iter().filter(|m| {
            m.last_error
                .as_deref()
                .is_some_and(|e| e.contains(REDRIVE_ERROR))
        }));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(out)
}

/// Now, as the API writes times.
fn now_rfc3339() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    sluice_core::time::rfc3339(sluice_core::time::Timestamp(ms))
}

/// Runs until `stop` is set or `deadline` passes. Starts after the outage ends.
pub async fn run(
    client: Client,
    dlq: String,
    sc: Scenario,
    clock: Clock,
    upstream: impl Watched,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> OperatorLog {
    let mut log = OperatorLog::default();
    let minute = clock.real(Duration::from_secs(60));
    let (_, outage_end) = sc.outage_min();
    // Wait for the recovery, and one more minute for the dust to settle.
    tokio::time::sleep_until(clock.instant_of(outage_end + 1.0).into()).await;
    let rate = rate_per_second(&sc);
    // Follow a job often enough to see its rate per scenario minute: ten looks a minute.
    let poll = (minute / 10).clamp(Duration::from_millis(20), Duration::from_millis(200));
    let mut moved_before = 0;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let looked = now_rfc3339();
        match upstream_dead_letters(&client, &dlq).await {
            Ok(found) if !found.is_empty() => {
                log.seen.extend(found.iter().filter_map(reservation_id));
            }
            Ok(_) => {
                tokio::time::sleep(minute).await;
                continue;
            }
            Err(e) => {
                log.errors.push(format!("browsing {dlq}: {e}"));
                tokio::time::sleep(minute).await;
                continue;
            }
        }
        if upstream.recent_429_share(minute) * 100.0 > sc.redrive_stop_429_pct {
            log.pauses += 1;
            tokio::time::sleep(minute).await;
            continue;
        }
        let req = RedriveRequest {
            source: dlq.clone(),
            destination: None,
            limit: Some(sc.redrive_batch),
            rate: None,
            rate_per_second: Some(rate),
            filter: Some(RedriveFilterView {
                error_contains: Some(REDRIVE_ERROR.to_owned()),
                dead_lettered_before: Some(looked),
                ..RedriveFilterView::default()
            }),
            reset_receive_count: Some(true),
            dry_run: Some(false),
            pause_if_failing: None,
        };
        let start_min = clock.now_minutes();
        let job = match client.create_redrive(&req, None).await {
            Ok(j) => j,
            Err(e) => {
                log.errors.push(format!("starting a redrive: {e}"));
                tokio::time::sleep(minute).await;
                continue;
            }
        };
        let mut moved = job.moved;
        let mut state = job.state.clone();
        log.progress.push((start_min, moved_before + moved));
        // Follow the job; cancel it if 429s rise or time runs out.
        while state == "running" && Instant::now() < deadline {
            tokio::time::sleep(poll).await;
            if upstream.recent_429_share(minute) * 100.0 > sc.redrive_stop_429_pct {
                log.pauses += 1;
                let _ = client.cancel_redrive(&job.id).await;
            }
            match client.get_redrive(&job.id).await {
                Ok(j) => {
                    moved = j.moved;
                    state = j.state;
                    log.progress
                        .push((clock.now_minutes(), moved_before + moved));
                }
                Err(e) => log
                    .errors
                    .push(format!("following redrive {}: {e}", job.id)),
            }
        }
        if state == "running" {
            let _ = client.cancel_redrive(&job.id).await;
        }
        moved_before += moved;
        log.batches.push(Batch {
            start_min,
            end_min: clock.now_minutes(),
            moved,
            rate_per_second: rate,
        });
        // Let the batch reach the upstream before the next one.
        tokio::time::sleep(clock.real(sc.redrive_pause)).await;
    }
    log
}
