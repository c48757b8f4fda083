//! Redrive jobs on the embedded engine: a job and the moves of each step are one log record,
//! so a crash between steps never moves a message twice or loses one.

use std::sync::Arc;

use sluice_core::message::MessageId;
use sluice_core::redrive::already_running;
use sluice_core::{
    QueueName, RedriveControl, RedriveId, RedriveJob, RedriveSpec, RedriveStep, StoreError,
    Timestamp,
};
use tokio::sync::Notify;

use crate::core::{Core, Inner};
use crate::journal::record::{Record, UpdateEvent, UpdateRecord};
use crate::state::Slot;

/// Finished jobs kept for listing; older ones are forgotten.
const FINISHED_KEPT: usize = 100;

/// How many dead letters one step may look at per message it may move, to bound the time
/// the lock is held when few messages match.
const EXAMINE_PER_MOVE: usize = 4;

fn not_found(id: RedriveId) -> StoreError {
    StoreError::RedriveNotFound(id.to_string())
}

/// Creates a redrive job.
pub(crate) async fn create(inner: &Inner, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
    let (job, pos) = {
        let mut core = inner.lock();
        let (job, rec) = new_job(&mut core, spec, inner.now())?;
        (job, core.commit(vec![rec])?)
    };
    inner.answerable(pos).await?;
    Ok(job)
}

/// A redrive job.
pub(crate) fn get(inner: &Inner, id: RedriveId) -> Result<RedriveJob, StoreError> {
    job(&inner.lock(), id)
}

/// Redrive jobs, newest first.
pub(crate) fn list(inner: &Inner) -> Result<Vec<RedriveJob>, StoreError> {
    Ok(inner.lock().state.jobs.values().rev().cloned().collect())
}

/// Pauses, resumes or cancels a job.
pub(crate) async fn control(
    inner: &Inner,
    id: RedriveId,
    control: sluice_core::RedriveControl,
) -> Result<RedriveJob, StoreError> {
    let (job, pos) = {
        let mut core = inner.lock();
        let (job, rec) = control_record(&core, id, &control, inner.now())?;
        let pos = match rec {
            Some(rec) => Some(core.commit(vec![rec])?),
            None => None,
        };
        (job, pos)
    };
    if let Some(pos) = pos {
        inner.answerable(pos).await?;
    }
    Ok(job)
}

/// Runs one step of a job: its moves and its progress in one record.
pub(crate) async fn step(
    inner: &Inner,
    id: RedriveId,
    max: u32,
) -> Result<RedriveStep, StoreError> {
    let now = inner.now();
    let (job, moved_ids, wake, pos) = {
        let mut core = inner.lock();
        let out = plan_step(&mut core, id, max, now)?;
        let pos = core.commit(vec![out.record])?;
        (out.job, out.moved_ids, out.wake, pos)
    };
    for n in wake {
        n.notify_waiters();
    }
    inner.answerable(pos).await?;
    Ok(RedriveStep {
        job,
        moved_now: moved_ids.len() as u64,
        at: Timestamp(now),
        moved_ids,
    })
}

/// The record creating a job, after checks.
fn new_job(
    core: &mut Core,
    spec: RedriveSpec,
    now: i64,
) -> Result<(RedriveJob, Record), StoreError> {
    core.qid(&spec.source)?;
    if let Some(d) = &spec.destination {
        core.qid(d)?;
    }
    if let Some(running) = core
        .state
        .jobs
        .values()
        .find(|j| j.state.is_active() && j.spec.source == spec.source)
    {
        return Err(already_running(&running.id.to_string(), &spec.source));
    }
    forget_old_jobs(core);
    let id = RedriveId(core.state.draw_id(Timestamp(now)));
    let job = RedriveJob::new(id, spec, Timestamp(now));
    Ok((job.clone(), Record::redrive(job, vec![])))
}

fn forget_old_jobs(core: &mut Core) {
    let finished: Vec<u64> = core
        .state
        .jobs
        .iter()
        .filter(|(_, j)| !j.state.is_active())
        .map(|(id, _)| *id)
        .collect();
    if finished.len() > FINISHED_KEPT {
        for id in &finished[..finished.len() - FINISHED_KEPT] {
            core.state.jobs.remove(id);
        }
    }
}

/// A job by id.
fn job(core: &Core, id: RedriveId) -> Result<RedriveJob, StoreError> {
    core.state
        .jobs
        .get(&id.0)
        .cloned()
        .ok_or_else(|| not_found(id))
}

/// The record of `control` applied to a job, or `None` when it changes nothing.
fn control_record(
    core: &Core,
    id: RedriveId,
    control: &RedriveControl,
    now: i64,
) -> Result<(RedriveJob, Option<Record>), StoreError> {
    let mut job = job(core, id)?;
    if !job.control(control, Timestamp(now))? {
        return Ok((job, None));
    }
    Ok((job.clone(), Some(Record::redrive(job, vec![]))))
}

/// What one step decided.
struct StepOutcome {
    /// The job after the step.
    pub job: RedriveJob,
    /// The record holding the moves and the job's new progress.
    pub record: Record,
    /// The messages it moves.
    pub moved_ids: Vec<MessageId>,
    /// The destinations to wake.
    pub wake: Vec<Arc<Notify>>,
}

/// One step of a running job.
///
/// Long because every candidate is skipped, counted (dry run), stops the step (destination paused
/// or full) or moves, and each branch advances the cursor; cursor, counts and moves become one
/// record.
fn plan_step(
    core: &mut Core,
    id: RedriveId,
    max: u32,
    now: i64,
) -> Result<StepOutcome, StoreError> {
    let mut job = job(core, id)?;
    job.check_running()?;
    let max = max.clamp(1, 1000) as u64;
    let want = job.step_budget(max);
    job.updated_at = Timestamp(now);
    job.blocked = None;
    let Ok(src) = core.qid(&job.spec.source) else {
        job.finish(Timestamp(now));
        job.blocked = Some(format!(
            "source queue \"{}\" was deleted",
            job.spec.source.as_str()
        ));
        return Ok(StepOutcome {
            job: job.clone(),
            record: Record::redrive(job, vec![]),
            moved_ids: vec![],
            wake: vec![],
        });
    };
    core.expire(src, now)?;
    // Visible dead letters in time order: the deliverable ones and those parked behind the
    // front of their FIFO group, merged (each index is in time order).
    let (candidates, scanned_to_end) = {
        let q = &core.state.queues[&src];
        let take = want as usize * EXAMINE_PER_MOVE + 1000;
        let after = |index: &std::collections::BTreeSet<(i64, u64)>| -> Vec<(i64, u64)> {
            let range = match job.cursor {
                Some(c) => index.range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded)),
                None => index.range(..),
            };
            range.take(take + 1).copied().collect()
        };
        let mut all = after(&q.ready);
        all.extend(after(&q.parked));
        all.sort_unstable();
        let to_end = all.len() <= take;
        all.truncate(take);
        (all, to_end)
    };
    let mut moves = Vec::new();
    let mut orders = Vec::new();
    let mut wake = Vec::new();
    let mut taken = 0u64;
    let mut stopped_early = false;
    for (at, mid) in candidates {
        if taken >= want {
            stopped_early = true;
            break;
        }
        let Some(m) = core.state.msgs.get(&mid).copied() else {
            continue;
        };
        if !matches!(m.slot(), Slot::Ready | Slot::Parked) {
            job.cursor = Some((at, mid));
            continue;
        }
        let view = core.message_view(mid, &m)?;
        // Past this message unless it stops the step (its destination paused or full).
        let cursor = Some((at, mid));
        if !job.spec.filter.matches(&view) {
            job.pass_filtered();
            job.cursor = cursor;
            continue;
        }
        let dest_name: Option<QueueName> =
            job.spec.destination.clone().or(view.source_queue.clone());
        let Some(dest) = dest_name
            .as_ref()
            .and_then(|d| core.state.names.get(d).copied())
        else {
            job.skip(dest_name.as_ref());
            job.cursor = cursor;
            continue;
        };
        if job.spec.dry_run {
            job.matched += 1;
            taken += 1;
            job.cursor = cursor;
            continue;
        }
        let dq = &core.state.queues[&dest];
        if dq.config.paused {
            job.blocked = Some(format!("destination \"{}\" is paused", dq.name.as_str()));
            stopped_early = true;
            break;
        }
        if let Some(mif) = dq.config.max_in_flight
            && dq.leased.len() as u64
                + moves
                    .iter()
                    .filter(|u: &&UpdateRecord| u.qid == dest)
                    .count() as u64
                >= u64::from(mif)
        {
            job.blocked = Some(sluice_core::redrive::blocked_at_max_in_flight(
                dq.name.as_str(),
                mif,
            ));
            stopped_early = true;
            break;
        }
        let (_, mut rich) = core.load(mid, &m)?;
        rich.dead_letter = None;
        wake.push(dq.notify.clone());
        let u = UpdateRecord {
            event: UpdateEvent::Redriven,
            id: mid,
            qid: dest,
            visible_at: now,
            entered_at: now,
            receive_count: if job.spec.reset_receive_count {
                0
            } else {
                m.receive_count()
            },
            rich,
        };
        // A grouped message joins the end of its group's line in the destination.
        if let Some(order) = core.state.place_for(&u, now) {
            orders.push((mid, order));
        }
        moves.push(u);
        job.matched += 1;
        job.moved += 1;
        taken += 1;
        job.cursor = Some((at, mid));
    }
    job.finish_if_done(scanned_to_end, stopped_early, Timestamp(now));
    let moved_ids = moves.iter().map(|u| MessageId(u.id)).collect();
    Ok(StepOutcome {
        job: job.clone(),
        record: Record::redrive_grouped(job, moves, orders),
        moved_ids,
        wake,
    })
}
