//! A queue's reading: its stats and trends at one moment, gathered from a store.
//!
//! The stats answer, the overview and the console show what [`read`] and [`read_many`]
//! return, and the conformance suite holds both engines to the readings documented for an
//! operator (ETA, stall, trend, rates, redrive progress) through the same functions, so a
//! reading is defined once, here and in [`crate::trend`].

use crate::config::QueueInfo;
use crate::error::StoreError;
use crate::name::QueueName;
use crate::redrive::{RedriveJob, RedriveState};
use crate::stats::QueueStats;
use crate::store::Store;
use crate::summary::{GroupBy, SummaryRequest};
use crate::time::Timestamp;
use crate::trend::{Holds, LOOKBACK, Outlook, Trend};

/// One queue at one moment: what it is, its stats, and the trends read from its history.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The queue's name, configuration and creation time.
    pub info: QueueInfo,
    /// Its gauges and totals.
    pub stats: QueueStats,
    /// Its rates, backlog trend and dead-letter trend.
    pub trend: Trend,
    /// Whether another queue names it as its dead-letter queue.
    pub is_dead_letter_queue: bool,
}

/// What an active job will still move ([`RedriveJob::left_to_move`]): a DLQ summary counts
/// its source's messages that match its filter, however many there are.
///
/// # Errors
/// The store's error; a source deleted under the job has nothing left to move.
pub async fn still_to_move(store: &dyn Store, job: &RedriveJob) -> Result<u64, StoreError> {
    let req = SummaryRequest {
        group_by: GroupBy::Reason,
        filter: job.spec.filter.clone(),
        limit: 1,
    };
    let matching = match store.summarize(&job.spec.source, req).await {
        Ok(s) => s.total,
        Err(StoreError::QueueNotFound(_)) => 0,
        Err(e) => return Err(e),
    };
    Ok(job.left_to_move(matching))
}

/// What the active jobs out of `queue` among `jobs` will still move, for the drain ETA of a
/// dead-letter queue; `None` when none is active.
///
/// # Errors
/// The store's error.
pub async fn redrive_outlook(
    store: &dyn Store,
    jobs: &[RedriveJob],
    queue: &QueueName,
) -> Result<Option<Outlook>, StoreError> {
    let active: Vec<&RedriveJob> = jobs
        .iter()
        .filter(|j| j.state.is_active() && !j.spec.dry_run && &j.spec.source == queue)
        .collect();
    if active.is_empty() {
        return Ok(None);
    }
    let mut remaining = 0;
    for job in &active {
        remaining += still_to_move(store, job).await?;
    }
    Ok(Some(Outlook {
        remaining,
        paused: active.iter().all(|j| j.state == RedriveState::Paused),
    }))
}

/// The reading of queue `q` at `now`.
///
/// # Errors
/// `queue_not_found`, or the store's error.
pub async fn read(store: &dyn Store, q: &QueueName, now: Timestamp) -> Result<Reading, StoreError> {
    let info = store.get_queue(q).await?;
    // One queue's own stats: an engine may bring its leases and retention up to date first.
    let stats = store.stats(q).await?;
    let mut readings = read_with(store, vec![info], vec![Some(stats)], now).await?;
    readings
        .pop()
        .flatten()
        .ok_or_else(|| StoreError::QueueNotFound(q.to_string()))
}

/// The readings of `queues` at `now`, in their order; `None` for one deleted meanwhile.
/// Reads a page of queues with a few calls, not a few per queue.
///
/// # Errors
/// The store's error.
pub async fn read_many(
    store: &dyn Store,
    queues: Vec<QueueInfo>,
    now: Timestamp,
) -> Result<Vec<Option<Reading>>, StoreError> {
    let names: Vec<QueueName> = queues.iter().map(|q| q.name.clone()).collect();
    let stats = store.stats_many(&names).await?;
    read_with(store, queues, stats, now).await
}

/// The readings of `queues` whose `stats` were read.
async fn read_with(
    store: &dyn Store,
    queues: Vec<QueueInfo>,
    stats: Vec<Option<QueueStats>>,
    now: Timestamp,
) -> Result<Vec<Option<Reading>>, StoreError> {
    let names: Vec<QueueName> = queues.iter().map(|q| q.name.clone()).collect();
    let since = Timestamp(now.as_millis() - LOOKBACK.as_millis() as i64);
    let histories = store.stats_history_many(&names, since).await?;
    let dlqs = store.dead_letter_queues_among(&names).await?;
    // What active redrives will still move, for these queues and the DLQs one moves out of:
    // their drain ETA (few jobs run at once, so this is a few summaries).
    let jobs = store.list_redrives().await?;
    let shown: std::collections::HashSet<&QueueName> = queues
        .iter()
        .flat_map(|q| std::iter::once(&q.name).chain(&q.config.dead_letter_queue))
        .collect();
    let mut outlooks = std::collections::HashMap::new();
    for job in jobs.iter().filter(|j| j.state.is_active()) {
        let source = &job.spec.source;
        if shown.contains(source) && !outlooks.contains_key(source) {
            let outlook = redrive_outlook(store, &jobs, source).await?;
            outlooks.insert(source.clone(), outlook);
        }
    }
    let outlook_of = |q: &QueueName| outlooks.get(q).copied().flatten();
    Ok(queues
        .into_iter()
        .zip(stats)
        .zip(histories)
        .zip(dlqs)
        .map(|(((info, stats), history), is_dlq)| {
            let stats = stats?;
            let holds = Holds {
                dead_letters: is_dlq,
                redrive: outlook_of(&info.name),
                dlq_redrive: info.config.dead_letter_queue.as_ref().and_then(outlook_of),
                ..Holds::of(&info.config, &stats)
            };
            let trend = Trend::compute(&stats, info.created_at, now, &history, holds);
            Some(Reading {
                info,
                stats,
                trend,
                is_dead_letter_queue: is_dlq,
            })
        })
        .collect())
}
