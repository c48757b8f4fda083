//! Redrive jobs shared by every node.
//!
//! A job's row holds its progress; each step locks it, moves messages and writes the new
//! progress in one transaction, so a crash between steps never moves a message twice or loses
//! one. Every node's runner offers to step every running job, but a job is stepped by one
//! node at a time: the first to step it becomes its owner and renews the ownership with each
//! step; another node's step answers "blocked" until the owner has been silent for
//! [`OWNER_LEASE`], and then takes the job over. So a job's rate holds across nodes, and a job
//! whose node died finishes on another.

use std::collections::HashMap;

use sluice_core::redrive::already_running;
use sluice_core::{
    MessageId, QueueConfig, RedriveControl, RedriveId, RedriveJob, RedriveSpec, RedriveStep,
    StoreError, Timestamp,
};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Json;

use crate::db::counters::Counter;
use crate::db::effects::Effects;
use crate::db::row::{FULL_COLS, Row, WAITING, message_of, write_back};
use crate::error::{corrupt, db, is_unique_violation};
use crate::expiry::expire_queue;
use crate::store::Inner;

/// How long a job stays with a node that stopped stepping it (in ms).
pub(crate) const OWNER_LEASE: i64 = 10_000;
/// Finished jobs kept for listing.
const FINISHED_KEPT: i64 = 100;
/// Messages examined per message moved, at most, in one step (filters skip some).
const EXAMINE_PER_MOVE: i64 = 4;

fn not_found(id: RedriveId) -> StoreError {
    StoreError::RedriveNotFound(id.to_string())
}

fn job_of(r: &tokio_postgres::Row) -> Result<RedriveJob, StoreError> {
    r.try_get::<_, Json<RedriveJob>>(0)
        .map(|j| j.0)
        .map_err(corrupt)
}

/// Creates a running job.
pub(crate) async fn create(inner: &Inner, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
    let mut conn = inner.conn().await?;
    let job = crate::db::tx::transaction(&mut conn, async |tx| {
        crate::db::catalog::config(tx, spec.source.as_str(), false).await?;
        if let Some(d) = &spec.destination {
            crate::db::catalog::config(tx, d.as_str(), false).await?;
        }
        let now = inner.now();
        let id = inner.ids.draw(tx, 1).await?[0];
        let job = RedriveJob::new(RedriveId(id as u64), spec, Timestamp(now));
        let conflict = |other: &str| already_running(other, &job.spec.source);
        if let Some(running) = tx
            .query_opt(
                "SELECT job FROM redrives WHERE source = $1 AND running",
                &[&job.spec.source.as_str()],
            )
            .await
            .map_err(|e| db(&e))?
        {
            return Err(conflict(&job_of(&running)?.id.to_string()));
        }
        // Two nodes creating a job for one source at once: the unique index lets one win.
        tx.execute(
            "INSERT INTO redrives (id, source, running, job, created_at) VALUES ($1, $2, true, $3, $4)",
            &[&id, &job.spec.source.as_str(), &Json(&job), &now],
        )
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                conflict("created a moment ago")
            } else {
                db(&e)
            }
        })?;
        tx.execute(
            "DELETE FROM redrives WHERE NOT running AND id NOT IN
                 (SELECT id FROM redrives WHERE NOT running ORDER BY created_at DESC, id DESC LIMIT $1)",
            &[&FINISHED_KEPT],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(job)
    })
    .await?;
    Ok(job)
}

/// One job.
pub(crate) async fn get(inner: &Inner, id: RedriveId) -> Result<RedriveJob, StoreError> {
    let row = inner
        .conn()
        .await?
        .query_opt("SELECT job FROM redrives WHERE id = $1", &[&(id.0 as i64)])
        .await
        .map_err(|e| db(&e))?
        .ok_or_else(|| not_found(id))?;
    job_of(&row)
}

/// All jobs kept, newest first.
pub(crate) async fn list(inner: &Inner) -> Result<Vec<RedriveJob>, StoreError> {
    inner
        .conn()
        .await?
        .query(
            "SELECT job FROM redrives ORDER BY created_at DESC, id DESC",
            &[],
        )
        .await
        .map_err(|e| db(&e))?
        .iter()
        .map(job_of)
        .collect()
}

/// Cancels, pauses or resumes a job. The `running` column means active: a paused job still
/// holds its source.
pub(crate) async fn control(
    inner: &Inner,
    id: RedriveId,
    control: &RedriveControl,
) -> Result<RedriveJob, StoreError> {
    let mut conn = inner.conn().await?;
    let job = crate::db::tx::transaction(&mut conn, async |tx| {
        let row = tx
            .query_opt(
                "SELECT job FROM redrives WHERE id = $1 FOR UPDATE",
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?
            .ok_or_else(|| not_found(id))?;
        let mut job = job_of(&row)?;
        if !job.control(control, Timestamp(inner.now()))? {
            return Ok(job);
        }
        tx.execute(
            "UPDATE redrives SET running = $3, job = $2, owner = NULL WHERE id = $1",
            &[&(id.0 as i64), &Json(&job), &job.state.is_active()],
        )
        .await
        .map_err(|e| db(&e))?;
        Ok(job)
    })
    .await?;
    Ok(job)
}

/// Moves up to `max` matching dead letters of a running job, with its progress.
pub(crate) async fn step(
    inner: &Inner,
    id: RedriveId,
    max: u32,
) -> Result<RedriveStep, StoreError> {
    let mut conn = inner.conn().await?;
    let (step, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let now = inner.now();
        let row = tx
            .query_opt(
                "SELECT job, owner, owner_until FROM redrives WHERE id = $1 FOR UPDATE",
                &[&(id.0 as i64)],
            )
            .await
            .map_err(|e| db(&e))?
            .ok_or_else(|| not_found(id))?;
        let mut job = job_of(&row)?;
        job.check_running()?;
        let owner: Option<String> = row.try_get(1).map_err(corrupt)?;
        let owner_until: Option<i64> = row.try_get(2).map_err(corrupt)?;
        if let (Some(owner), Some(until)) = (owner, owner_until)
            && owner != inner.node
            && until > now
        {
            job.blocked = Some(format!("stepped by broker node {owner}"));
            let step = RedriveStep {
                job,
                moved_now: 0,
                at: Timestamp(now),
                moved_ids: vec![],
            };
            return Ok((step, Effects::default()));
        }
        let want = i64::try_from(job.step_budget(u64::from(max.clamp(1, 1000))))
            .unwrap_or(i64::MAX);
        job.updated_at = Timestamp(now);
        job.blocked = None;
        let mut fx = Effects::default();
        let mut moves: Vec<Row> = Vec::new();
        let src = job.spec.source.clone();
        match crate::db::catalog::config(tx, src.as_str(), false).await {
            Err(StoreError::QueueNotFound(_)) => {
                job.finish(Timestamp(now));
                job.blocked = Some(format!("source queue \"{}\" was deleted", src.as_str()));
            }
            Err(e) => return Err(e),
            Ok(scfg) => {
                expire_queue(tx, src.as_str(), &scfg, now, &mut fx).await?;
                step_moves(tx, &mut job, want, now, &mut moves, &mut fx).await?;
            }
        }
        write_back(tx, &moves).await?;
        let running = job.state.is_active();
        tx.execute(
            "UPDATE redrives SET job = $2, running = $3, owner = $4, owner_until = $5 WHERE id = $1",
            &[
                &(id.0 as i64),
                &Json(&job),
                &running,
                &inner.node,
                &(now + OWNER_LEASE),
            ],
        )
        .await
        .map_err(|e| db(&e))?;
        fx.write(tx).await?;
        let step = RedriveStep {
            job,
            moved_now: moves.len() as u64,
            at: Timestamp(now),
            moved_ids: moves.iter().map(|m| MessageId(m.id as u64)).collect(),
        };
        Ok((step, fx))
    })
    .await?;
    fx.after_commit(inner);
    Ok(step)
}

/// Picks and changes (in memory) the messages one step moves.
///
/// Long because it makes the embedded engine's per-row decisions in the same order (skip, count,
/// stop, move), with each destination's settings and leased count read once and charged as rows
/// move; one loop keeps them comparable.
async fn step_moves(
    tx: &impl GenericClient,
    job: &mut RedriveJob,
    want: i64,
    now: i64,
    moves: &mut Vec<Row>,
    fx: &mut Effects,
) -> Result<(), StoreError> {
    let (from_at, from_id) = job
        .cursor
        .map_or((i64::MIN, i64::MIN), |(at, id)| (at, id as i64));
    let fetch = want * EXAMINE_PER_MOVE + 1000;
    // A redrive moves rows: packs sent to the source queue itself become rows first.
    crate::hot::packs::unpack_queue(tx, &job.spec.source).await?;
    let rows = tx
        .query(
            &format!(
                "SELECT {FULL_COLS} FROM messages
                 WHERE queue = $1 AND state = 0 AND visible_at <= $2 AND (visible_at, id) > ($3, $4)
                 ORDER BY visible_at, id LIMIT $5 FOR UPDATE SKIP LOCKED"
            ),
            &[&job.spec.source.as_str(), &now, &from_at, &from_id, &fetch],
        )
        .await
        .map_err(|e| db(&e))?;
    let scanned_to_end = (rows.len() as i64) < fetch;
    let mut dests: HashMap<String, Option<(QueueConfig, i64)>> = HashMap::new();
    let mut taken = 0i64;
    let mut stopped_early = false;
    for r in &rows {
        if taken >= want {
            stopped_early = true;
            break;
        }
        let mut row = Row::from_pg(r)?;
        let cursor = Some((row.visible_at, row.id as u64));
        let view = message_of(r, now)?;
        if !job.spec.filter.matches(&view) {
            job.pass_filtered();
            job.cursor = cursor;
            continue;
        }
        let dest_name = job
            .spec
            .destination
            .as_ref()
            .map(|d| d.to_string())
            .or(row.source_queue.clone());
        let dest = match &dest_name {
            None => None,
            Some(d) => {
                if !dests.contains_key(d) {
                    let found = match crate::db::catalog::config(tx, d, false).await {
                        // A dry run asks only whether the queue exists.
                        Ok(cfg) if job.spec.dry_run => Some((cfg, 0)),
                        Ok(cfg) => {
                            let leased = tx
                                .query_one(crate::hot::packs::IN_FLIGHT_SQL, &[d])
                                .await
                                .map_err(|e| db(&e))?;
                            Some((cfg, leased.get::<_, i64>(0)))
                        }
                        Err(StoreError::QueueNotFound(_)) => None,
                        Err(e) => return Err(e),
                    };
                    dests.insert(d.clone(), found);
                }
                dests
                    .get_mut(d)
                    .and_then(|x| x.as_mut())
                    .map(|x| (d.clone(), x))
            }
        };
        let Some((dest, (dcfg, leased))) = dest else {
            let missing = dest_name
                .as_deref()
                .map(sluice_core::QueueName::new)
                .transpose();
            job.skip(missing.map_err(corrupt)?.as_ref());
            job.cursor = cursor;
            continue;
        };
        if job.spec.dry_run {
            job.matched += 1;
            taken += 1;
            job.cursor = cursor;
            continue;
        }
        if dcfg.paused {
            job.blocked = Some(format!("destination \"{dest}\" is paused"));
            stopped_early = true;
            break;
        }
        if let Some(mif) = dcfg.max_in_flight
            && *leased >= i64::from(mif)
        {
            job.blocked = Some(sluice_core::redrive::blocked_at_max_in_flight(&dest, mif));
            stopped_early = true;
            break;
        }
        // What waits in the destination counts against its cap as soon as it is leased.
        *leased += 1;
        row.dead_letter = None;
        row.queue = dest.clone();
        row.state = WAITING;
        row.visible_at = now;
        row.entered_at = now;
        row.token = None;
        if job.spec.reset_receive_count {
            row.receive_count = 0;
        }
        fx.counts.add(&dest, Counter::Redriven, 1);
        fx.wake.insert(dest);
        tracing::debug!(job = %job.id, message = %MessageId(row.id as u64), "redriven");
        moves.push(row);
        job.matched += 1;
        job.moved += 1;
        taken += 1;
        job.cursor = cursor;
    }
    job.finish_if_done(scanned_to_end, stopped_early, Timestamp(now));
    Ok(())
}
