//! The scheduler: steps every schedule whose firings have fallen due, through the store's
//! atomic step, so that each firing is enqueued once however many brokers share the store.
//!
//! Every tick it lists the schedules and, for each one not paused, works out from the
//! schedule as read which firings are due and which were missed (its `catch_up` decides),
//! then applies them oldest first, each step naming the `last_fired` it was computed from.
//! A step another broker applied first comes back `Stale` and this broker moves on to the
//! next schedule: the other one has it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use sluice_core::schedule::{Schedule, ScheduleName, Trigger, TriggerSpec};
use sluice_core::store::{ScheduleStep, StepOutcome};
use sluice_core::{Clock, Store, StoreError, SystemClock, Timestamp};
use tokio::sync::watch;

/// How often schedules are looked at: a firing is enqueued at most this late.
pub const TICK: Duration = Duration::from_millis(250);
/// Most steps one schedule takes in one tick: a long catch-up goes on at the next tick, so
/// one schedule cannot hold the others back.
pub const MAX_STEPS_PER_TURN: usize = 100;
/// Most schedules taking their turn at once.
const CONCURRENT_TURNS: usize = 256;
/// How long a schedule whose step failed is left alone before it is tried again.
const FAILED_PAUSE: Duration = Duration::from_secs(5);

/// Parsed triggers, kept while a schedule's trigger stays the same.
#[derive(Default)]
pub struct Triggers(HashMap<ScheduleName, (TriggerSpec, Trigger)>);

impl Triggers {
    /// The parsed trigger of `s` (a stored schedule's trigger always parses; one that does
    /// not, written by a newer version, is left alone).
    pub fn of(&mut self, s: &Schedule) -> Option<&Trigger> {
        let fresh = self
            .0
            .get(&s.name)
            .is_none_or(|(spec, _)| *spec != s.spec.trigger);
        if fresh {
            let t = Trigger::parse(&s.spec.trigger).ok()?;
            self.0.insert(s.name.clone(), (s.spec.trigger.clone(), t));
        }
        self.0.get(&s.name).map(|(_, t)| t)
    }

    /// Forgets schedules that are gone.
    fn keep(&mut self, names: &HashSet<&ScheduleName>) {
        self.0.retain(|n, _| names.contains(n));
    }
}

/// The next `n` firings of `s` after `now` (none while it is paused).
pub fn upcoming(s: &Schedule, now: Timestamp, n: usize) -> Vec<Timestamp> {
    if s.spec.paused {
        return Vec::new();
    }
    Trigger::parse(&s.spec.trigger)
        .map(|t| t.upcoming(s.anchor, now.max(s.fired_through()), n))
        .unwrap_or_default()
}

/// What one schedule's turn did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Firings enqueued.
    pub fired: u64,
    /// Firings skipped.
    pub missed: u64,
    /// Firings whose queue was gone.
    pub queue_missing: u64,
}

/// Applies what is due of `s` at `now`.
///
/// # Errors
/// The store's error of a step (the rest of the schedule waits for the next tick).
pub async fn turn(
    store: &dyn Store,
    s: &Schedule,
    trigger: &Trigger,
    now: Timestamp,
) -> Result<Turn, StoreError> {
    let mut out = Turn::default();
    if s.spec.paused {
        return Ok(out);
    }
    let due = trigger.due(s.anchor, s.fired_through(), now, s.spec.catch_up);
    let mut expected = s.last_fired;
    let mut missed = due.missed;
    if due.fire.is_empty() {
        if let Some(latest) = due.latest.filter(|_| missed > 0) {
            let step = ScheduleStep {
                expected,
                through: latest,
                fire: false,
                missed,
            };
            if store.step_schedule(&s.name, step).await? != StepOutcome::Stale {
                out.missed = missed;
            }
        }
        return Ok(out);
    }
    for at in due.fire.into_iter().take(MAX_STEPS_PER_TURN) {
        let step = ScheduleStep {
            expected,
            through: at,
            fire: true,
            missed: std::mem::take(&mut missed),
        };
        match store.step_schedule(&s.name, step).await? {
            StepOutcome::Fired { .. } => out.fired += 1,
            StepOutcome::QueueMissing => out.queue_missing += 1,
            StepOutcome::Skipped => {}
            // Another broker has this schedule.
            StepOutcome::Stale => return Ok(out),
        }
        out.missed += step.missed;
        expected = Some(at);
    }
    Ok(out)
}

/// Runs until shutdown.
pub async fn run(store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
    let mut triggers = Triggers::default();
    // Says once that listing fails, and once per schedule that its queue is gone.
    let mut failing = false;
    let mut told_missing: HashMap<ScheduleName, bool> = HashMap::new();
    let mut resting: HashMap<ScheduleName, tokio::time::Instant> = HashMap::new();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut wait = TICK;
        match store.list_schedules().await {
            Ok(list) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("schedules can be listed again");
                }
                triggers.keep(&list.iter().map(|s| &s.name).collect());
                let now = tokio::time::Instant::now();
                resting.retain(|_, until| *until > now);
                let due: Vec<(Schedule, Trigger)> = list
                    .iter()
                    .filter(|s| !s.spec.paused && !resting.contains_key(&s.name))
                    .filter_map(|s| Some((s.clone(), triggers.of(s)?.clone())))
                    .collect();
                // Schedules take their turns side by side, so that their writes share the
                // store's syncs; one schedule's steps stay in order within its turn.
                let turns: Vec<_> = futures::stream::iter(due)
                    .map(|(s, trigger)| {
                        let store = store.clone();
                        async move {
                            let r = turn(store.as_ref(), &s, &trigger, SystemClock.now()).await;
                            (s, r)
                        }
                    })
                    .buffer_unordered(CONCURRENT_TURNS)
                    .collect()
                    .await;
                for (s, result) in turns {
                    match result {
                        Ok(t) => report(store.as_ref(), &s, &t, &mut told_missing).await,
                        Err(e) => {
                            tracing::warn!(schedule = %s.name, error = %e, "a schedule's firing failed; trying it again in 5 s");
                            resting.insert(s.name.clone(), now + FAILED_PAUSE);
                        }
                    }
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "cannot list schedules; retrying until it can");
                }
                wait = e.retry_after().unwrap_or(Duration::from_secs(1)).max(TICK);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Writes what an operator should know of a turn to the log and the audit log: skipped
/// firings and a queue that is gone.
async fn report(
    store: &dyn Store,
    s: &Schedule,
    t: &Turn,
    told_missing: &mut HashMap<ScheduleName, bool>,
) {
    let mut details = Vec::new();
    if t.missed > 0 {
        details.push(("missed".to_owned(), t.missed.to_string()));
    }
    let missing = t.queue_missing > 0;
    if missing && !told_missing.get(&s.name).copied().unwrap_or(false) {
        tracing::warn!(schedule = %s.name, queue = %s.spec.queue, "the schedule's queue does not exist; its firings are counted as missed until it does");
        details.push(("queue_missing".to_owned(), t.queue_missing.to_string()));
    }
    if t.fired > 0 || missing {
        told_missing.insert(s.name.clone(), missing);
    }
    if details.is_empty() {
        return;
    }
    details.push(("schedule".to_owned(), s.name.to_string()));
    let event = sluice_core::AuditEvent {
        at: SystemClock.now(),
        actor: "scheduler".to_owned(),
        action: "schedule.missed".to_owned(),
        queue: Some(s.spec.queue.to_string()),
        message_id: None,
        details: details.into_iter().collect(),
        outcome: "ok".to_owned(),
    };
    if let Err(e) = store.audit_append(vec![event]).await {
        tracing::warn!(error = %e, "could not write the audit log");
    }
}
