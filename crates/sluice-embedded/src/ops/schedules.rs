//! Schedules on the embedded engine.
//!
//! A schedule lives in the log as [`Record::Schedule`] (its whole state, as JSON) and leaves
//! it with [`Record::ScheduleDeleted`]. A step that enqueues writes one [`Record::Firing`]:
//! the message and the schedule's new progress in a single checksummed frame. Recovery
//! applies a frame whole or cuts it as a torn tail, so after any crash the firing's message
//! and the schedule's `last_fired` are both there or both absent: there is no write order in
//! which one can survive without the other. Steps that enqueue nothing (a skip, a missing
//! queue, a duplicate within the queue's dedup window) write a [`Record::Schedule`] alone.

use std::time::Duration;

use sluice_core::schedule::{Schedule, ScheduleName, ScheduleSpec};
use sluice_core::store::{ScheduleStep, StepOutcome, validate_bodies_fit};
use sluice_core::{MessageId, StoreError, Timestamp};

use crate::core::{Core, Inner};
use crate::journal::record::{JsonSchedule, MessageRecord, Origin, Qid, Record, Rich};

fn not_found(name: &ScheduleName) -> StoreError {
    StoreError::ScheduleNotFound(name.to_string())
}

/// Creates or replaces a schedule; a changed trigger re-anchors it at now.
pub(crate) async fn put(
    inner: &Inner,
    name: &ScheduleName,
    spec: ScheduleSpec,
) -> Result<(Schedule, bool), StoreError> {
    let (out, pos) = {
        let mut core = inner.lock();
        let now = Timestamp(inner.now());
        let qid = core.qid(&spec.queue)?;
        // A firing is a send: its body must fit the queue now, as a send's must.
        sluice_core::store::validate_bodies_fit(
            &core.state.queues[&qid].config,
            &spec.queue,
            &[sluice_core::NewMessage::new(spec.body.clone())],
        )?;
        let (schedule, created) = match core.state.schedules.get(name.as_str()) {
            Some(old) => {
                let mut s = old.clone();
                if s.spec.trigger != spec.trigger {
                    s.anchor = now;
                    s.last_fired = None;
                }
                s.spec = spec;
                s.updated_at = now;
                (s, false)
            }
            None => (
                Schedule {
                    name: name.clone(),
                    spec,
                    created_at: now,
                    updated_at: now,
                    anchor: now,
                    last_fired: None,
                    fired: 0,
                    missed: 0,
                },
                true,
            ),
        };
        let pos = core.commit(vec![Record::Schedule {
            schedule: JsonSchedule(schedule.clone()),
        }])?;
        ((schedule, created), pos)
    };
    inner.answerable(pos).await?;
    Ok(out)
}

/// One schedule.
pub(crate) fn get(inner: &Inner, name: &ScheduleName) -> Result<Schedule, StoreError> {
    inner
        .lock()
        .state
        .schedules
        .get(name.as_str())
        .cloned()
        .ok_or_else(|| not_found(name))
}

/// Every schedule, by name.
pub(crate) fn list(inner: &Inner) -> Vec<Schedule> {
    inner.lock().state.schedules.values().cloned().collect()
}

/// Deletes a schedule; its messages stay.
pub(crate) async fn delete(inner: &Inner, name: &ScheduleName) -> Result<(), StoreError> {
    let pos = {
        let mut core = inner.lock();
        if !core.state.schedules.contains_key(name.as_str()) {
            return Err(not_found(name));
        }
        core.commit(vec![Record::ScheduleDeleted {
            name: name.to_string(),
        }])?
    };
    inner.answerable(pos).await
}

/// Applies one step when the schedule is still at `step.expected`: one record, so the
/// message (if any) and the progress are durable together.
pub(crate) async fn step(
    inner: &Inner,
    name: &ScheduleName,
    step: ScheduleStep,
) -> Result<StepOutcome, StoreError> {
    let (outcome, pos, notify) = {
        let mut core = inner.lock();
        let now = inner.now();
        let Some((outcome, record, enqueued)) = plan(&mut core, name, step, now)? else {
            return Ok(StepOutcome::Stale);
        };
        let pos = core.commit(vec![record])?;
        let notify = enqueued.map(|qid| {
            core.state.promote(qid, now);
            core.state.queues[&qid].notify.clone()
        });
        (outcome, pos, notify)
    };
    if let Some(n) = notify {
        n.notify_waiters();
    }
    inner.answerable(pos).await?;
    Ok(outcome)
}

/// What a step does: its outcome, its one record and the queue it enqueues into; `None`
/// when the schedule is no longer at `step.expected`.
fn plan(
    core: &mut Core,
    name: &ScheduleName,
    step: ScheduleStep,
    now: i64,
) -> Result<Option<(StepOutcome, Record, Option<Qid>)>, StoreError> {
    let Some(current) = core.state.schedules.get(name.as_str()) else {
        return Err(not_found(name));
    };
    // Stale too: a step worked out before a pause, or for a trigger (or a schedule of the
    // same name) replaced since — its times are at or before the new anchor.
    if current.last_fired != step.expected || current.spec.paused || step.through <= current.anchor
    {
        return Ok(None);
    }
    let mut next = current.clone();
    next.last_fired = Some(step.through);
    next.missed += step.missed;
    let progress = |next| Record::Schedule {
        schedule: JsonSchedule(next),
    };
    if !step.fire {
        return Ok(Some((StepOutcome::Skipped, progress(next), None)));
    }
    let Ok(qid) = core.qid(&next.spec.queue) else {
        // The firing at `through` is missed too.
        next.missed += 1;
        return Ok(Some((StepOutcome::QueueMissing, progress(next), None)));
    };
    // A firing enqueues like a send: refused while the disk is almost full (the schedule
    // stays where it is and fires once space returns, by its catch-up rule).
    core.log.admit_growth()?;
    core.expire(qid, now)?;
    let cfg = core.state.queues[&qid].config.clone();
    let message = next.message(step.through, false);
    validate_bodies_fit(&cfg, &next.spec.queue, std::slice::from_ref(&message))?;
    next.fired += 1;
    let key = message.dedup_id.clone().unwrap_or_default();
    let dedup_on = !cfg.dedup_window.is_zero();
    if dedup_on && let Some(first) = core.state.queues[&qid].dedup_hit(&key, now) {
        // Enqueued already within the window: the firing counts, once.
        let outcome = StepOutcome::Fired {
            id: MessageId(first),
        };
        return Ok(Some((outcome, progress(next), None)));
    }
    if let Some(max) = cfg.max_depth
        && core.state.queues[&qid].depth() + 1 > max
    {
        return Err(StoreError::QueueFull {
            queue: next.spec.queue.to_string(),
            max_depth: max,
            retry_after: Duration::from_secs(1),
        });
    }
    let id = core.state.draw_id(Timestamp(now));
    // The message keeps its dedup id whatever the window; the queue's dedup table holds it
    // only while the window is on (an entry ending now is never a hit).
    let until = if dedup_on {
        now + cfg.dedup_window.as_millis() as i64
    } else {
        now
    };
    let record = Record::Firing {
        message: MessageRecord {
            origin: Origin::Send,
            id,
            qid,
            body: message.body,
            attributes: message.attributes,
            enqueued_at: now,
            entered_at: now,
            visible_at: now,
            receive_count: 0,
            lease: None,
            rich: Rich::default(),
            dedup: Some((key, until)),
            // A firing starts no trace of its own: nothing asked for one.
            trace: None,
        },
        schedule: JsonSchedule(next),
    };
    Ok(Some((
        StepOutcome::Fired { id: MessageId(id) },
        record,
        Some(qid),
    )))
}
