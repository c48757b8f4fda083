//! Compaction: keeps disk use proportional to live data.
//!
//! Acknowledged messages leave dead records behind. When the oldest segment is mostly dead
//! (or the log is much larger than what is live), every live record in it is copied forward
//! to the head of the log — a message as one full record of its current state, a completed
//! record, a dedup id, each redrive job and schedule — followed by a checkpoint of the
//! counters. Once those copies are durable the segment is deleted.
//!
//! Why only the oldest segment: a record can only change a message whose base record comes
//! earlier in the log. Copying a message forward makes the copy its new base, and everything
//! that touched it before sits in segments that replay sees first. So deleting the oldest
//! segment after its live records were copied leaves a log that replays to the same state;
//! deleting a middle one could drop an update to a message based in an older segment.

use std::collections::HashMap;

use sluice_core::StoreError;

use crate::core::{Core, Inner, Kept, stored_completions};
use crate::journal::log::SEGMENT_TARGET;
use crate::journal::record::{
    Acked, Checkpoint, Completion, GroupTag, Hold, JsonSchedule, MessageRecord, Origin, Record,
    Times, message_ids_in,
};
use crate::state::{LeaseHolder, Slot};

/// Records copied per lock hold, so senders and receivers keep flowing during a compaction.
const CHUNK: usize = 512;
/// Completed messages per copied record. Reading one completed message back (its result,
/// history or lease) decodes the whole record it is in, so copies stay small.
const KEPT_PER_RECORD: usize = 256;

/// Compacts the oldest segment if it is worth it. Returns after the segment is deleted.
/// One compaction runs at a time: with `wait`, after the one running; without, not at all
/// while one runs (the background loop).
pub(crate) async fn compact(inner: &Inner, wait: bool) -> Result<(), StoreError> {
    let _one = if wait {
        inner.compacting.lock().await
    } else {
        match inner.compacting.try_lock() {
            Ok(g) => g,
            Err(_) => return Ok(()),
        }
    };
    compact_oldest(inner).await
}

// Long because the copy passes (live messages, completed records, then the small records and the
// checkpoint) and the deletion are one procedure whose order is its correctness: the segment goes
// only once every copy is durable.
async fn compact_oldest(inner: &Inner) -> Result<(), StoreError> {
    let Some(seg) = pick(inner) else {
        return Ok(());
    };
    // Messages based in the segment, found once, copied a chunk per lock hold.
    let ids = based_in(inner, seg).await?;
    for chunk in ids.chunks(CHUNK) {
        {
            let mut core = inner.lock();
            let now = inner.clock.now().as_millis();
            let core = &mut *core;
            let mut records = Vec::new();
            for id in chunk {
                // Acknowledged or already copied meanwhile: nothing to keep.
                let Some(m) = core.state.msgs.get(id).copied() else {
                    continue;
                };
                if m.body.seg != seg && m.aux.seg != seg {
                    continue;
                }
                let (rec, rich) = core.load(*id, &m)?;
                let message = MessageRecord {
                    origin: Origin::Relocate,
                    id: *id,
                    qid: m.qid,
                    body: rec.body,
                    attributes: rec.attributes,
                    enqueued_at: rec.enqueued_at,
                    entered_at: m.entered_at,
                    visible_at: if m.slot() == Slot::Leased { now } else { m.at },
                    receive_count: m.receive_count(),
                    lease: (m.slot() == Slot::Leased).then_some((m.token(), m.at)),
                    rich,
                    // Kept for the message's view; the dedup window's entry travels in its
                    // own record below, so replay registers a copy's key only from that.
                    dedup: rec.dedup,
                    trace: rec.trace,
                };
                // A grouped message keeps its group and its place in the group's line.
                let group = core.state.members.get(id).map(|p| GroupTag {
                    name: p.group.to_string(),
                    order: p.order,
                });
                let tag = core.state.tag_of(&m, *id);
                let copy = Record::base(
                    message,
                    group,
                    tag.and_then(|t| t.key.as_deref()),
                    tag.and_then(|t| t.priority),
                );
                // A leased copy keeps when its lease began and who received it.
                let holder = (m.slot() == Slot::Leased)
                    .then(|| core.state.holders.get(id).map(LeaseHolder::holder))
                    .flatten();
                let hold = Hold::of_lease(*id, holder.as_ref());
                records.push(Record::held(copy, hold.into_iter().collect()));
                if m.cancel_requested() {
                    records.push(Record::Cancel { id: *id });
                }
            }
            if !records.is_empty() {
                core.commit(records)?;
            }
        }
        tokio::task::yield_now().await;
    }
    // Completed records whose ack lives in the segment, likewise, in the order of their
    // records: those sharing one (a batch ack, an earlier copy) are next to each other, so
    // each record is read once.
    let done_ids: Vec<u64> = {
        let core = inner.lock();
        let mut found: Vec<(u32, u64)> = core
            .state
            .done
            .iter()
            .filter(|(_, d)| d.loc.seg == seg)
            .map(|(id, d)| (d.loc.off, *id))
            .collect();
        found.sort_unstable();
        found.into_iter().map(|(_, id)| id).collect()
    };
    // The record last read, with what it keeps of each message it completes.
    let mut read: Option<(u32, HashMap<u64, Kept>)> = None;
    for chunk in done_ids.chunks(CHUNK * 8) {
        {
            let mut core = inner.lock();
            let core = &mut *core;
            let mut records = Vec::new();
            for piece in chunk.chunks(KEPT_PER_RECORD) {
                copy_completed(core, seg, piece, &mut read, &mut records)?;
            }
            if !records.is_empty() {
                core.commit(records)?;
            }
        }
        tokio::task::yield_now().await;
    }
    // The small things, then the checkpoint, in one append.
    let last_pos;
    {
        let mut core = inner.lock();
        let now = inner.clock.now().as_millis();
        let core = &mut *core;
        let mut records = Vec::new();
        {
            let checkpoint = Checkpoint {
                next_id: core.state.next_id,
                next_token: core.state.next_token,
                totals: core
                    .state
                    .queues
                    .iter()
                    .map(|(q, s)| (*q, s.totals))
                    .collect(),
            };
            for (qid, q) in &core.state.queues {
                for (key, e) in &q.dedup {
                    if e.seg == seg && e.until > now {
                        records.push(Record::Dedup {
                            qid: *qid,
                            key: key.clone(),
                            id: e.id,
                            until: e.until,
                        });
                    }
                }
            }
            let remembered: Vec<crate::journal::log::Loc> = core
                .state
                .idem
                .values()
                .filter(|r| r.loc.seg == seg && r.until > now)
                .map(|r| r.loc)
                .collect();
            for loc in remembered {
                records.push(core.log.read(loc)?);
            }
            let sample_times: Vec<i64> = core
                .state
                .history_segs
                .iter()
                .filter(|(_, s)| **s == seg)
                .map(|(at, _)| *at)
                .collect();
            for at in sample_times {
                let entries: Vec<_> = core
                    .state
                    .queues
                    .iter()
                    .filter_map(|(qid, q)| {
                        q.history
                            .iter()
                            .find(|s| s.at.as_millis() == at)
                            .map(|s| (*qid, *s))
                    })
                    .collect();
                if !entries.is_empty() {
                    records.push(Record::Samples { at, entries });
                }
            }
            for job in core.state.jobs.values() {
                records.push(Record::redrive(job.clone(), vec![]));
            }
            // Every schedule as it is, whichever segment its last record is in: there are
            // few, and the copy at the head supersedes whatever precedes it.
            for schedule in core.state.schedules.values() {
                records.push(Record::Schedule {
                    schedule: JsonSchedule(schedule.clone()),
                });
            }
            // The rate windows and paces may have been counted from leases in the segment
            // about to go.
            let paces = core.state.rate_paces();
            if !paces.is_empty() {
                records.push(Record::RatePaces(paces));
            }
            let key_paces = core.state.all_key_paces();
            if !key_paces.is_empty() {
                records.push(Record::KeyPaces(key_paces));
            }
            records.push(Record::Checkpoint(checkpoint));
            // The token reservation may live in the segment about to go.
            records.push(Record::Tokens {
                upto: core.state.token_limit,
            });
            last_pos = core.commit(records)?;
        }
    }
    inner.durable(last_pos).await?;
    let mut core = inner.lock();
    if let Err(e) = core.log.remove_segment(seg) {
        tracing::warn!(segment = seg, error = %e, "could not delete a compacted log segment; will retry");
    }
    core.state.live.remove(&seg);
    tracing::debug!(segment = seg, "compacted log segment");
    Ok(())
}

/// Copies the completed records of `ids` (in segment `seg`) as at most two records: plain
/// completions, and those with a history of failed attempts.
fn copy_completed(
    core: &mut Core,
    seg: u32,
    ids: &[u64],
    read: &mut Option<(u32, HashMap<u64, Kept>)>,
    records: &mut Vec<Record>,
) -> Result<(), StoreError> {
    let mut acked_all = Vec::new();
    let mut results = Vec::new();
    let mut finished = Vec::new();
    let (mut acked_times, mut finished_times) = (Vec::new(), Vec::new());
    let (mut acked_holds, mut finished_holds) = (Vec::new(), Vec::new());
    for id in ids {
        let Some(d) = core.state.done.get(id).copied() else {
            continue;
        };
        if d.loc.seg != seg {
            continue;
        }
        let acked = Acked {
            id: *id,
            qid: d.qid,
            receive_count: d.receive_count,
            at: d.at,
            keep_until: d.keep_until,
            cancelled: d.cancelled,
        };
        let kept = if d.has_result || d.has_attempts || d.held {
            if read.as_ref().is_none_or(|(off, _)| *off != d.loc.off) {
                *read = Some((d.loc.off, stored_completions(core.log.read(d.loc)?)));
            }
            read.as_mut()
                .and_then(|(_, kept)| kept.remove(id))
                .unwrap_or_default()
        } else {
            Kept::default()
        };
        let times = Times {
            id: *id,
            enqueued_at: d.enqueued_at,
            entered_at: d.entered_at,
        };
        let hold = Hold::of_lease(*id, kept.holder.as_ref());
        if d.has_attempts {
            finished_holds.extend(hold);
            finished_times.push(times);
            finished.push(Completion {
                acked,
                result: kept.result,
                attempts: kept.attempts,
                last_error: kept.last_error,
            });
        } else {
            acked_holds.extend(hold);
            acked_times.push(times);
            acked_all.push(acked);
            results.push(kept.result);
        }
    }
    if !acked_all.is_empty() {
        records.push(Record::held(
            Record::timed(
                Record::Kept {
                    acked: acked_all,
                    results,
                },
                acked_times,
            ),
            acked_holds,
        ));
    }
    if !finished.is_empty() {
        records.push(Record::held(
            Record::timed(Record::KeptFinished { finished }, finished_times),
            finished_holds,
        ));
    }
    Ok(())
}

/// Above this many live messages, the candidates of a compaction are read from the segment
/// instead of scanning the index under the lock (at 10 million messages that scan held the
/// lock for a quarter of a second, every segment).
const SCAN_INDEX_UP_TO: usize = 500_000;

/// The ids of messages that may be based in segment `seg` (each is checked again before it
/// is copied). A small index is scanned under the lock; a large one is not: the segment is
/// read instead (without the lock, in a blocking thread), whose size does not grow with the
/// backlog.
async fn based_in(inner: &Inner, seg: u32) -> Result<Vec<u64>, StoreError> {
    {
        let core = inner.lock();
        if core.state.msgs.len() <= SCAN_INDEX_UP_TO {
            return Ok(core
                .state
                .msgs
                .iter()
                .filter(|(_, m)| m.body.seg == seg || m.aux.seg == seg)
                .map(|(id, _)| *id)
                .collect());
        }
    }
    let path = crate::journal::log::segment_path(&inner.dir.join("log"), seg);
    tokio::task::spawn_blocking(move || std::fs::read(&path).map(|b| message_ids_in(&b)))
        .await
        .map_err(|e| StoreError::unavailable(format!("compaction reader failed: {e}")))?
        .map_err(|e| StoreError::unavailable(format!("cannot read a segment to compact: {e}")))
}

/// The oldest segment, when it is mostly dead or the whole log is mostly dead.
fn pick(inner: &Inner) -> Option<u32> {
    let core = inner.lock();
    let sizes = core.log.segment_sizes();
    let &(oldest, size) = sizes.first()?;
    if oldest == core.log.active() {
        return None;
    }
    let total: u64 = sizes.iter().map(|(_, s)| s).sum();
    let live_total: u64 = core.state.live.values().sum();
    let live_oldest = core.state.live.get(&oldest).copied().unwrap_or(0);
    // An empty segment (the one started at open, left at once for a zero-filled one) goes
    // too: only the oldest segment is ever compacted, so it must not stay in the way.
    let worth = size == 0 || live_oldest * 2 < size || total > 2 * live_total + 2 * SEGMENT_TARGET;
    worth.then_some(oldest)
}
