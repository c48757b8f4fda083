//! The producers: stamped bodies, the `--messages` budget, and the closed-loop and
//! open-loop (`--rate`) send loops.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::state::{Failed, Shared, TaskStats};
use super::{frames, http};

/// With `--rate`: most send requests one producer keeps in flight; past it the producer
/// waits for an answer before starting the next.
const MAX_IN_FLIGHT_PER_PRODUCER: usize = 64;
/// With `--rate`: a request that starts this much after its scheduled time is counted late
/// (Tokio's timer has a 1 ms resolution, so slips under that are normal).
const LATE_START: Duration = Duration::from_millis(2);
/// How often an idle open-loop producer checks whether the run is over.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// Padding copied into bodies.
pub(super) fn padding(len: usize) -> String {
    "x".repeat(len)
}

/// A body of exactly `size` bytes (when `size` leaves room for the fields) stamped with `t`.
pub(super) fn stamped_body(run: &str, t_us: u64, size: usize, pad: &str) -> String {
    let head = format!(r#"{{"run":"{run}","t":{t_us},"pad":""#);
    let room = size.saturating_sub(head.len() + 2).min(pad.len());
    let mut s = String::with_capacity(head.len() + room + 2);
    s.push_str(&head);
    s.push_str(&pad[..room]);
    s.push_str("\"}");
    s
}

/// Takes up to `want` messages from the `--messages` budget of the measured window; `None`
/// when the budget is spent.
fn take_budget(shared: &Shared, want: u32, now_us: u64) -> Option<u32> {
    let Some(budget) = &shared.budget else {
        return Some(want);
    };
    if now_us < shared.warm_us {
        return Some(want);
    }
    let prev = budget.fetch_sub(i64::from(want), Ordering::Relaxed);
    if prev <= 0 {
        return None;
    }
    Some(u32::try_from(prev.min(i64::from(want))).unwrap_or(want))
}

/// What one send request did: when it started and ended (µs after the epoch) and how many
/// messages it stored.
struct SendOutcome {
    start_us: u64,
    done_us: u64,
    result: Result<u64, Failed>,
}

/// Sends `n` messages stamped with the request's start time.
async fn send_once(shared: Arc<Shared>, n: u32, pad: Arc<str>) -> SendOutcome {
    let start_us = shared.now_us();
    let result = match &shared.frames {
        Some(pool) => frames::send(&shared, pool, n, start_us, &pad).await,
        None => http::send(&shared, n, start_us, &pad).await,
    };
    SendOutcome {
        start_us,
        done_us: shared.now_us(),
        result,
    }
}

/// Counts a send; for a failure, returns how long a closed-loop producer should pause.
fn note_send(shared: &Shared, stats: &mut TaskStats, out: SendOutcome) -> Option<Duration> {
    match out.result {
        Ok(count) => {
            shared.sent_total.fetch_add(count, Ordering::Relaxed);
            if shared.in_window(out.start_us) {
                shared.sent_measured.fetch_add(count, Ordering::Relaxed);
                stats
                    .send_us
                    .saturating_record(out.done_us.saturating_sub(out.start_us).max(1));
            }
            None
        }
        Err(f) => Some(f.count(shared, &mut stats.errors)),
    }
}

pub(super) async fn producer(
    shared: Arc<Shared>,
    spread: u32,
    interval: Option<Duration>,
    _alive: mpsc::Sender<()>,
) -> anyhow::Result<TaskStats> {
    let mut stats = TaskStats::new()?;
    let pad: Arc<str> = padding(shared.body_bytes).into();
    let Some(interval) = interval else {
        // Closed loop: one request at a time, as fast as the broker answers.
        while !shared.stop_producers.load(Ordering::Relaxed) {
            let Some(n) = take_budget(&shared, shared.batch, shared.now_us()) else {
                break;
            };
            let out = send_once(shared.clone(), n, pad.clone()).await;
            if let Some(pause) = note_send(&shared, &mut stats, out) {
                tokio::time::sleep(pause).await;
            }
        }
        return Ok(stats);
    };
    // Open loop: each request starts at its scheduled time whether or not the earlier ones
    // were answered (up to MAX_IN_FLIGHT_PER_PRODUCER). Producers are spread evenly over one
    // interval (`spread` of 1024).
    let mut next = Instant::now() + interval.mul_f64(f64::from(spread) / 1024.0);
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                note_send(&shared, &mut stats, done.context("a send task panicked")?);
            }
            () = tokio::time::sleep_until(next.min(Instant::now() + STOP_CHECK)) => {
                if shared.stop_producers.load(Ordering::Relaxed) {
                    break;
                }
                if Instant::now() < next {
                    continue;
                }
                if in_flight.len() >= MAX_IN_FLIGHT_PER_PRODUCER
                    && let Some(done) = in_flight.join_next().await
                {
                    note_send(&shared, &mut stats, done.context("a send task panicked")?);
                }
                if next.elapsed() > LATE_START {
                    stats.late_starts += 1;
                }
                next += interval;
                let Some(n) = take_budget(&shared, shared.batch, shared.now_us()) else {
                    break;
                };
                in_flight.spawn(send_once(shared.clone(), n, pad.clone()));
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        note_send(&shared, &mut stats, done.context("a send task panicked")?);
    }
    Ok(stats)
}
