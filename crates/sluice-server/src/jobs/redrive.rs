//! The redrive job runner: steps every running job at its rate and watches its guard.
//!
//! The store moves messages in atomic steps (`Redrives::redrive_step`); this loop decides when
//! each step happens and how many it may move.
//!
//! **Rate.** A job's rate is `limit` moves per `period` (50 a minute, 10 a second). Moves are
//! spread evenly, one step every `spacing × size` where `spacing = period / limit` and a step
//! moves as many as the rate allows in one tick of the loop (one message at 50 a minute, 50 at
//! 1,000 a second), so an upstream with a per-minute quota never sees a burst at the start of
//! each minute. On top of that pacing, the times of the last `limit` moves are kept, and a
//! step never takes more than that window allows: never more than `limit` moves in any sliding
//! `period`. A job that the store reports blocked (destination paused or at its
//! `max_in_flight`) is left alone for a while instead of being polled hot.
//!
//! After a broker restart the runner has no memory of recent moves; a job's first step then
//! waits one spacing after the job's last recorded change (every step records one), so the
//! moves on both sides of the restart stay evenly spaced.
//!
//! **Guard.** A job with `pause_if_failing` remembers the messages it moved and looks at each
//! again (`Inspection::get_message`) until its fate is known: acknowledged (completed, or gone) is
//! a success; a failed attempt after the move (nacked, rejected, lease expired, moved away) or
//! a new dead-lettering is a failure, counted only when its error contains the guard's text if
//! one is given. When more than the guard's share of the last `window` outcomes are failures,
//! the job pauses itself with the reason and an audit entry; an operator resumes it. What the
//! guard has seen lives in the node that steps the job: a restart or a move of the job to
//! another node starts a fresh window.
//!
//! **Audit.** The runner records a job's progress at milestones (10, 100, 1,000, … moved, and
//! a quarter, half and three quarters of its limit), its finish, and a pause by its guard.
//! Each is written once however many broker nodes run this loop: by the node whose step
//! passed the milestone or finished the job (judged from that step's own before and after,
//! never from what the node saw earlier), or whose guard paused it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::message::{MessageId, MessageState};
use sluice_core::rate::SlidingWindow;
use sluice_core::{
    AuditEvent, Clock, ErrorCode, RateLimit, RedriveControl, RedriveGuard, RedriveId, RedriveJob,
    RedriveState, RedriveStep, Store, SystemClock, Timestamp,
};
use tokio::sync::watch;

/// How often the runner looks at its jobs.
const TICK: Duration = Duration::from_millis(50);
/// Most messages one step moves.
const MAX_STEP: u32 = 1000;
/// How long a blocked job is left alone.
const BLOCKED_PAUSE: Duration = Duration::from_millis(500);
/// How long to wait after the jobs could not be listed, when the store does not say.
const FAILED_LIST_PAUSE: Duration = Duration::from_secs(1);
/// Moved messages a guard looks at per look.
const GUARD_CHECKS_PER_LOOK: usize = 64;
/// How often a guard looks: each look reads up to `GUARD_CHECKS_PER_LOOK` messages, so this
/// bounds the reads a guarded job adds to the store while its moved messages wait.
const GUARD_EVERY: Duration = Duration::from_millis(500);
/// Moved messages a guard remembers while their fate is open; older ones are forgotten.
const GUARD_PENDING_MAX: usize = 10_000;

/// A rate as people write it: `50/min`, `10/s`, `none`.
pub fn rate_text(rate: Option<&RateLimit>) -> String {
    let Some(r) = rate else {
        return "none".to_owned();
    };
    let unit = match r.period.as_millis() {
        1000 => "s".to_owned(),
        60_000 => "min".to_owned(),
        3_600_000 => "h".to_owned(),
        ms => format!("{ms}ms"),
    };
    format!("{}/{unit}", r.limit)
}

/// What the runner keeps of one running job.
struct JobPace {
    window: SlidingWindow,
    /// When the next step may happen.
    next_at: Timestamp,
    guard: GuardWatch,
    /// When the guard looks next.
    guard_at: Timestamp,
}

/// What a guard has seen.
#[derive(Default)]
struct GuardWatch {
    /// Moved messages whose fate is open, with when they moved.
    pending: VecDeque<(MessageId, Timestamp)>,
    /// The latest outcomes (true: failed), at most the guard's window.
    outcomes: VecDeque<bool>,
    /// The error of the latest failure, for the reason.
    last_error: Option<String>,
}

/// Runs until `shutdown` turns true.
pub async fn run(store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
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
                    let p = pace.entry(job.id).or_insert_with(|| JobPace::new(&job));
                    if let Some(guard) = &job.spec.guard
                        && SystemClock.now() >= p.guard_at
                    {
                        p.guard_at = SystemClock.now().plus(GUARD_EVERY);
                        if watch_guard(store.as_ref(), &job, guard, &mut p.guard).await {
                            continue;
                        }
                    }
                    step(store.as_ref(), &job, p).await;
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

impl JobPace {
    fn new(job: &RedriveJob) -> Self {
        // The previous process (or node) may have moved up to `step_size` at the job's last
        // change: keep the spacing from there.
        let next_at = match &job.spec.rate {
            Some(rate) if job.moved > 0 => job
                .updated_at
                .plus(rate.spacing() * step_size(rate))
                .max(SystemClock.now()),
            _ => SystemClock.now(),
        };
        JobPace {
            window: SlidingWindow::default(),
            next_at,
            guard: GuardWatch::default(),
            guard_at: SystemClock.now(),
        }
    }
}

/// How many a step of a job at `rate` moves: what the rate allows per tick, at least one.
fn step_size(rate: &RateLimit) -> u32 {
    let per_tick = u128::from(rate.limit) * TICK.as_millis() / rate.period.as_millis().max(1);
    u32::try_from(per_tick)
        .unwrap_or(MAX_STEP)
        .clamp(1, MAX_STEP)
}

/// One step of a running job, when its pace allows.
async fn step(store: &dyn Store, job: &RedriveJob, p: &mut JobPace) {
    let now = SystemClock.now();
    if now < p.next_at {
        return;
    }
    let allowed = match &job.spec.rate {
        Some(rate) => step_size(rate).min(p.window.available(rate, now)),
        None => MAX_STEP,
    };
    if allowed == 0 {
        if let Some(rate) = &job.spec.rate {
            p.next_at = p.window.next_free(rate, now).unwrap_or(now.plus(TICK));
        }
        return;
    }
    match store.redrive_step(job.id, allowed).await {
        Ok(step) => {
            if let Some(rate) = &job.spec.rate {
                p.window.record(rate, step.at, step.moved_ids.len());
            }
            let now = SystemClock.now();
            p.next_at = match (&job.spec.rate, step.moved_now) {
                _ if step.job.blocked.is_some() => now.plus(BLOCKED_PAUSE),
                (Some(rate), n) if n > 0 => {
                    // On schedule, the next step follows the planned time, so the average
                    // stays the rate despite the loop's tick; late, it starts from now.
                    let base = if p.next_at.plus(TICK) >= now {
                        p.next_at
                    } else {
                        now
                    };
                    base.plus(rate.spacing() * u32::try_from(n).unwrap_or(MAX_STEP))
                }
                _ => now,
            };
            if job.spec.guard.is_some() {
                p.guard
                    .pending
                    .extend(step.moved_ids.iter().map(|id| (*id, step.at)));
                while p.guard.pending.len() > GUARD_PENDING_MAX {
                    p.guard.pending.pop_front();
                }
            }
            audit_progress(store, job, &step).await;
        }
        Err(e) => {
            tracing::warn!(job = %job.id, error = %e, "redrive step failed; retrying");
            p.next_at = SystemClock.now().plus(BLOCKED_PAUSE);
        }
    }
}

/// Looks at the fate of some moved messages; pauses the job when its guard trips. Returns
/// true when it paused the job.
async fn watch_guard(
    store: &dyn Store,
    job: &RedriveJob,
    guard: &RedriveGuard,
    w: &mut GuardWatch,
) -> bool {
    for _ in 0..GUARD_CHECKS_PER_LOOK.min(w.pending.len()) {
        let Some((id, moved_at)) = w.pending.pop_front() else {
            break;
        };
        match outcome(store, id, moved_at, guard).await {
            Some((failed, error)) => {
                if failed {
                    w.last_error = error;
                }
                w.outcomes.push_back(failed);
                while w.outcomes.len() > guard.window as usize {
                    w.outcomes.pop_front();
                }
            }
            None => w.pending.push_back((id, moved_at)),
        }
    }
    let failed = w.outcomes.iter().filter(|f| **f).count();
    if !guard.trips(failed, w.outcomes.len()) {
        return false;
    }
    let reason = format!(
        "paused by its guard: {failed} of the last {} moved messages failed again (more than {}%){}",
        w.outcomes.len(),
        guard.percent,
        w.last_error
            .as_deref()
            .map_or(String::new(), |e| format!("; latest error: {e}"))
    );
    match store
        .control_redrive(
            job.id,
            RedriveControl::Pause {
                reason: reason.clone(),
            },
        )
        .await
    {
        Ok(_) => {
            tracing::warn!(job = %job.id, %reason, "redrive paused");
            audit(
                store,
                "redrive.pause",
                job,
                vec![("reason", reason), ("moved", job.moved.to_string())],
            )
            .await;
            *w = GuardWatch::default();
            true
        }
        Err(e) => {
            tracing::warn!(job = %job.id, error = %e, "could not pause a failing redrive; will try again");
            false
        }
    }
}

/// The fate of a moved message: `Some((failed, error))` once known, `None` while open.
async fn outcome(
    store: &dyn Store,
    id: MessageId,
    moved_at: Timestamp,
    guard: &RedriveGuard,
) -> Option<(bool, Option<String>)> {
    let m = match store.get_message(id).await {
        Ok(m) => m,
        // Acknowledged and not kept, or deleted: done with.
        Err(e) if e.code() == ErrorCode::MessageNotFound => return Some((false, None)),
        Err(_) => return None,
    };
    if m.state == MessageState::Completed {
        return Some((false, None));
    }
    let failure = match m.attempts.iter().find(|a| a.at >= moved_at) {
        Some(a) => a.error.clone().or(Some(String::new())),
        None => m
            .dead_letter
            .as_ref()
            .filter(|d| d.at >= moved_at)
            .map(|_| m.last_error.clone().unwrap_or_default()),
    }?;
    let counts = guard
        .error_contains
        .as_deref()
        .is_none_or(|needle| failure.contains(needle));
    Some((counts, (!failure.is_empty()).then_some(failure)))
}

/// Audit entries for the milestones `step` itself passed and for the finish it made.
///
/// Each entry is written by the node whose step did it, whatever other nodes saw: a step is
/// atomic with the job's progress, so its own before (the count it started from) and after
/// are exact, and each milestone and the finish belong to exactly one step. (A node that
/// does not own the job steps nothing and so writes nothing.)
async fn audit_progress(store: &dyn Store, job: &RedriveJob, step: &RedriveStep) {
    let after = &step.job;
    let before = after.moved.saturating_sub(step.moved_now);
    if let Some(mark) = milestone(before, after.moved, after.spec.limit) {
        audit(
            store,
            "redrive.progress",
            after,
            vec![
                ("moved", after.moved.to_string()),
                ("matched", after.matched.to_string()),
                ("milestone", mark),
            ],
        )
        .await;
    }
    if job.state == RedriveState::Running && after.state == RedriveState::Completed {
        let mut details = vec![
            ("moved", after.moved.to_string()),
            ("matched", after.matched.to_string()),
            ("skipped", after.skipped.to_string()),
            ("filtered", after.skips.filtered.to_string()),
        ];
        if after.spec.dry_run {
            details.push(("would_move", after.would_move().to_string()));
        }
        let reasons = after.skip_reasons();
        if !reasons.is_empty() {
            details.push(("skip_reasons", reasons.join("; ")));
        }
        audit(store, "redrive.finish", after, details).await;
    }
}

/// The furthest milestone passed going from `before` to `after` moved: a power of ten from 10,
/// or a quarter, half or three quarters of `limit`.
fn milestone(before: u64, after: u64, limit: Option<u64>) -> Option<String> {
    let mut found = None;
    let mut p = 10u64;
    while p <= after {
        if p > before {
            found = Some(p.to_string());
        }
        p = p.saturating_mul(10);
    }
    if let Some(l) = limit {
        for (num, name) in [(1, "25%"), (2, "50%"), (3, "75%")] {
            let at = (l * num).div_ceil(4);
            if at > before && at <= after && at < l {
                found = Some(format!("{name} of limit {l}"));
            }
        }
    }
    found
}

async fn audit(store: &dyn Store, action: &str, job: &RedriveJob, details: Vec<(&str, String)>) {
    let mut event = AuditEvent::by_broker(SystemClock.now(), action);
    event.queue = Some(job.spec.source.to_string());
    event.details.insert("job".into(), job.id.to_string());
    event
        .details
        .extend(details.into_iter().map(|(k, v)| (k.to_owned(), v)));
    if let Err(e) = store.audit_append(vec![event]).await {
        tracing::error!(error = %e, action, "could not write the audit log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_move_what_the_rate_allows_per_tick() {
        let per = |limit, secs| RateLimit {
            limit,
            period: Duration::from_secs(secs),
            burst: None,
        };
        assert_eq!(step_size(&per(50, 60)), 1);
        assert_eq!(step_size(&per(1000, 1)), 50);
        assert_eq!(step_size(&per(100_000, 1)), 1000);
        assert_eq!(per(50, 60).spacing(), Duration::from_millis(1200));
        assert_eq!(rate_text(Some(&per(50, 60))), "50/min");
        assert_eq!(rate_text(Some(&per(10, 1))), "10/s");
        assert_eq!(rate_text(None), "none");
    }

    #[test]
    fn milestones_are_powers_of_ten_and_quarters_of_the_limit() {
        assert_eq!(milestone(0, 9, None), None);
        assert_eq!(milestone(9, 10, None).as_deref(), Some("10"));
        assert_eq!(milestone(5, 150, None).as_deref(), Some("100"));
        assert_eq!(
            milestone(24, 25, Some(100)).as_deref(),
            Some("25% of limit 100")
        );
        assert_eq!(
            milestone(49, 50, Some(100)).as_deref(),
            Some("50% of limit 100")
        );
        assert_eq!(milestone(99, 100, Some(100)).as_deref(), Some("100"));
        assert_eq!(milestone(11, 12, Some(100)), None);
    }
}
