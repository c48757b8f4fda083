//! The redrive job runner: steps every running job at its rate.
//!
//! The store moves messages in atomic steps (`Store::redrive_step`); this loop decides how many
//! each step may move so that a job never exceeds `rate_per_second` in any one-second window:
//! it keeps the time and size of each step of the last second and asks only for what the
//! window still allows. Steps are small (a tenth of the rate) so the flow is smooth rather than
//! one burst per second. A job that the store reports blocked (destination paused or at its
//! `max_in_flight`) is left alone for a while instead of being polled hot.
//!
//! After a broker restart the runner has no memory of the last second's steps, so each job
//! waits one second before its first step: no window can then hold moves from both sides of
//! the restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::rate::SlidingWindow;
use sluice_core::{Clock, RateLimit, RedriveId, RedriveState, Store, SystemClock, Timestamp};
use tokio::sync::watch;

/// How often the runner looks at its jobs.
const TICK: Duration = Duration::from_millis(50);
/// Most messages one step moves.
const MAX_STEP: u32 = 1000;
/// How long a blocked job is left alone.
const BLOCKED_PAUSE: Duration = Duration::from_millis(500);
/// How long a job seen for the first time waits (see the module docs).
const FIRST_STEP_DELAY: Duration = Duration::from_secs(1);

/// How long to wait after the jobs could not be listed, when the store does not say.
const FAILED_LIST_PAUSE: Duration = Duration::from_secs(1);

struct JobPace {
    window: SlidingWindow,
    not_before: Timestamp,
}

/// Runs until `shutdown` turns true.
pub async fn run(store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
    let clock = SystemClock;
    let mut pace: HashMap<RedriveId, JobPace> = HashMap::new();
    // While the store cannot list jobs (a database down), wait as long as it asks and say
    // so once, not on every tick.
    let mut failing = false;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut wait = TICK;
        match store.list_redrives().await {
            Ok(jobs) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("redrive jobs can be listed again");
                }
                let running: Vec<_> = jobs
                    .into_iter()
                    .filter(|j| j.state == RedriveState::Running)
                    .collect();
                pace.retain(|id, _| running.iter().any(|j| j.id == *id));
                for job in running {
                    let now = clock.now();
                    let p = pace.entry(job.id).or_insert_with(|| JobPace {
                        window: SlidingWindow::default(),
                        not_before: now.plus(FIRST_STEP_DELAY),
                    });
                    if now < p.not_before {
                        continue;
                    }
                    let allowed = match job.spec.rate_per_second {
                        Some(rate) => {
                            let limit = RateLimit {
                                limit: rate,
                                period: Duration::from_secs(1),
                            };
                            p.window.available(&limit, now).min((rate / 10).max(1))
                        }
                        None => MAX_STEP,
                    };
                    if allowed == 0 {
                        continue;
                    }
                    match store.redrive_step(job.id, allowed.min(MAX_STEP)).await {
                        Ok(step) => {
                            p.window.record(step.at, step.moved_now as usize);
                            if step.job.blocked.is_some() {
                                p.not_before = clock.now().plus(BLOCKED_PAUSE);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(job = %job.id, error = %e, "redrive step failed; retrying");
                            p.not_before = clock.now().plus(BLOCKED_PAUSE);
                        }
                    }
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "cannot list redrive jobs; retrying until it can");
                }
                wait = e.retry_after().unwrap_or(FAILED_LIST_PAUSE).max(TICK);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
    }
}
