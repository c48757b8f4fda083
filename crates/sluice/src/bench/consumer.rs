//! The consumers: long-polling receives, each batch acknowledged while the next is received.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use sluice_client::frames::FrameReceipt;
use tokio::task::JoinHandle;

use super::state::{Failed, Shared, TaskStats, count_error};
use super::{frames, http};

/// The stamp inside a bench body (the padding is skipped).
#[derive(Deserialize)]
pub(super) struct Stamp<'a> {
    pub(super) run: &'a str,
    pub(super) t: u64,
}

/// The receipts of one received batch, in the form of the transport that leased it.
enum Receipts {
    Http(Vec<String>),
    Frames(Vec<FrameReceipt>),
}

impl Receipts {
    fn is_empty(&self) -> bool {
        match self {
            Receipts::Http(r) => r.is_empty(),
            Receipts::Frames(r) => r.is_empty(),
        }
    }
}

/// One long-polling receive: the batch's receipts and the stamps to measure.
async fn receive(shared: &Shared) -> Result<(Receipts, Vec<u64>), Failed> {
    match &shared.frames {
        Some(pool) => frames::receive(shared, pool)
            .await
            .map(|(r, s)| (Receipts::Frames(r), s)),
        None => http::receive(shared)
            .await
            .map(|(r, s)| (Receipts::Http(r), s)),
    }
}

/// Acknowledges one batch and counts the outcome; returns how long to pause after a failed
/// call.
async fn ack(
    shared: &Shared,
    receipts: Receipts,
    errors: &mut BTreeMap<String, u64>,
) -> Option<Duration> {
    let acked = match (receipts, &shared.frames) {
        (Receipts::Frames(r), Some(pool)) => frames::ack(shared, pool, r).await,
        (Receipts::Http(r), _) => http::ack(shared, r).await,
        (Receipts::Frames(_), None) => Err(Failed::new("no_frames_listener", None)),
    };
    match acked {
        Ok(a) => {
            shared.acked_total.fetch_add(a.count, Ordering::Relaxed);
            if shared.in_window(shared.now_us()) {
                shared.acked_measured.fetch_add(a.count, Ordering::Relaxed);
            }
            for code in a.refused {
                count_error(shared, errors, code);
            }
            None
        }
        Err(f) => Some(f.count(shared, errors)),
    }
}

/// An acknowledgement in flight: it yields the pause its failure asks for and the error codes
/// it counted.
type AckTask = JoinHandle<(Option<Duration>, BTreeMap<String, u64>)>;

/// Receives batches and acknowledges each while receiving the next: at most one
/// acknowledgement in flight, whose failure pauses the consumer before its next receive.
pub(super) async fn consumer(shared: Arc<Shared>) -> anyhow::Result<TaskStats> {
    let mut stats = TaskStats::new()?;
    let mut acking: Option<AckTask> = None;
    while !shared.stop_consumers.load(Ordering::Relaxed) {
        let got = receive(&shared).await;
        // The previous batch's ack ran during this receive; it finishes before the next one
        // starts, so one ack is in flight at a time.
        if let Some(pause) = settle(&mut acking, &mut stats).await? {
            tokio::time::sleep(pause).await;
        }
        let (receipts, stamps) = match got {
            Ok(got) => got,
            Err(f) => {
                f.record(&shared, &mut stats).await;
                continue;
            }
        };
        let now = shared.now_us();
        for t in stamps {
            stats.e2e_us.saturating_record(now.saturating_sub(t).max(1));
        }
        if receipts.is_empty() {
            continue;
        }
        let shared = shared.clone();
        acking = Some(tokio::spawn(async move {
            let mut errors = BTreeMap::new();
            let pause = ack(&shared, receipts, &mut errors).await;
            (pause, errors)
        }));
    }
    if let Some(pause) = settle(&mut acking, &mut stats).await? {
        tokio::time::sleep(pause).await;
    }
    Ok(stats)
}

/// Waits for the ack in flight, if any, and adds its refusals to `stats`.
async fn settle(
    acking: &mut Option<AckTask>,
    stats: &mut TaskStats,
) -> anyhow::Result<Option<Duration>> {
    let Some(task) = acking.take() else {
        return Ok(None);
    };
    let (pause, errors) = task.await.context("an acknowledgement task panicked")?;
    for (k, v) in errors {
        *stats.errors.entry(k).or_default() += v;
    }
    Ok(pause)
}
