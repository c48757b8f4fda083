//! The worker's own numbers: tasks finished by outcome, retries, dead letters, tasks in
//! flight and handler time. Lock-free counters, readable at any time with
//! [`WorkerMetrics::snapshot`] or as Prometheus text with [`WorkerMetrics::render_prometheus`].

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the handler-time histogram buckets.
pub const HANDLER_TIME_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// How one delivery ended, from the worker's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Acked: the task is `SUCCESS`.
    Success,
    /// Nacked after a transient error or a panic: it will be tried again.
    Retry,
    /// Dead-lettered: a permanent error, or the last attempt failed. `FAILURE`.
    Failure,
    /// The task was cancelled while it ran. `CANCELLED`.
    Cancelled,
    /// Not a decodable envelope or an unknown task: moved to the unprocessable queue.
    Unprocessable,
    /// Handed back (nacked) at shutdown before it finished.
    Released,
    /// Its settlement did not reach the broker (the lease had moved on): it runs again.
    Lost,
}

impl Outcome {
    /// Every outcome, in a stable order.
    pub const ALL: [Outcome; 7] = [
        Outcome::Success,
        Outcome::Retry,
        Outcome::Failure,
        Outcome::Cancelled,
        Outcome::Unprocessable,
        Outcome::Released,
        Outcome::Lost,
    ];

    /// The label used in metrics, e.g. `success`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retry => "retry",
            Outcome::Failure => "failure",
            Outcome::Cancelled => "cancelled",
            Outcome::Unprocessable => "unprocessable",
            Outcome::Released => "released",
            Outcome::Lost => "lost",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Live counters of a worker; clones share them.
///
/// ```no_run
/// # async fn f(worker: sluice_client::Worker) {
/// let metrics = worker.metrics();
/// tokio::spawn(worker.run());
/// let s = metrics.snapshot();
/// println!("{} succeeded, {} in flight", s.completed(sluice_client::Outcome::Success), s.in_flight);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct WorkerMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    completed: [AtomicU64; 7],
    dead_lettered: AtomicU64,
    panics: AtomicU64,
    results_dropped: AtomicU64,
    broker_errors: AtomicU64,
    in_flight: AtomicI64,
    buckets: [AtomicU64; HANDLER_TIME_BUCKETS.len() + 1],
    time_sum_micros: AtomicU64,
    time_count: AtomicU64,
}

/// A point-in-time copy of a worker's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Deliveries finished, per outcome (in the order of [`Outcome::ALL`]).
    pub completed: [u64; 7],
    /// Tasks this worker dead-lettered (permanent errors and exhausted attempts).
    pub dead_lettered: u64,
    /// Handler panics (each also counted as a retry or failure).
    pub panics: u64,
    /// Results dropped for being over the size cap (the task still succeeded).
    pub results_dropped: u64,
    /// Broker calls that failed and were retried or given up.
    pub broker_errors: u64,
    /// Tasks running now.
    pub in_flight: i64,
    /// Handler time: count per bucket of [`HANDLER_TIME_BUCKETS`] (not cumulative), the last
    /// one for everything longer.
    pub handler_time_buckets: Vec<u64>,
    /// Total handler time.
    pub handler_time_sum: Duration,
    /// Handler runs measured.
    pub handler_time_count: u64,
}

impl MetricsSnapshot {
    /// Deliveries finished with `outcome`.
    pub fn completed(&self, outcome: Outcome) -> u64 {
        self.completed[outcome.index()]
    }

    /// Retries: deliveries nacked for another attempt.
    pub fn retries(&self) -> u64 {
        self.completed(Outcome::Retry)
    }

    /// Deliveries finished with any outcome.
    pub fn total(&self) -> u64 {
        self.completed.iter().sum()
    }
}

impl WorkerMetrics {
    /// Fresh, zeroed metrics.
    pub fn new() -> Self {
        WorkerMetrics::default()
    }

    /// A copy of the current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let i = &self.inner;
        MetricsSnapshot {
            completed: std::array::from_fn(|k| i.completed[k].load(Ordering::Relaxed)),
            dead_lettered: i.dead_lettered.load(Ordering::Relaxed),
            panics: i.panics.load(Ordering::Relaxed),
            results_dropped: i.results_dropped.load(Ordering::Relaxed),
            broker_errors: i.broker_errors.load(Ordering::Relaxed),
            in_flight: i.in_flight.load(Ordering::Relaxed),
            handler_time_buckets: i
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            handler_time_sum: Duration::from_micros(i.time_sum_micros.load(Ordering::Relaxed)),
            handler_time_count: i.time_count.load(Ordering::Relaxed),
        }
    }

    /// The metrics in the Prometheus text format, each name prefixed `sluice_worker_` and
    /// labelled with `queue`.
    pub fn render_prometheus(&self, queue: &str) -> String {
        let s = self.snapshot();
        let q = queue.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP sluice_worker_tasks_total Deliveries finished, by outcome."
        );
        let _ = writeln!(out, "# TYPE sluice_worker_tasks_total counter");
        for o in Outcome::ALL {
            let _ = writeln!(
                out,
                "sluice_worker_tasks_total{{queue=\"{q}\",outcome=\"{}\"}} {}",
                o.as_str(),
                s.completed(o)
            );
        }
        for (name, help, v) in [
            (
                "retries_total",
                "Deliveries nacked for another attempt.",
                s.retries(),
            ),
            (
                "dead_lettered_total",
                "Tasks dead-lettered by this worker.",
                s.dead_lettered,
            ),
            ("panics_total", "Handler panics.", s.panics),
            (
                "results_dropped_total",
                "Results dropped for being over the size cap.",
                s.results_dropped,
            ),
            (
                "broker_errors_total",
                "Failed broker calls.",
                s.broker_errors,
            ),
        ] {
            let _ = writeln!(out, "# HELP sluice_worker_{name} {help}");
            let _ = writeln!(out, "# TYPE sluice_worker_{name} counter");
            let _ = writeln!(out, "sluice_worker_{name}{{queue=\"{q}\"}} {v}");
        }
        let _ = writeln!(out, "# HELP sluice_worker_in_flight Tasks running now.");
        let _ = writeln!(out, "# TYPE sluice_worker_in_flight gauge");
        let _ = writeln!(
            out,
            "sluice_worker_in_flight{{queue=\"{q}\"}} {}",
            s.in_flight
        );
        let _ = writeln!(
            out,
            "# HELP sluice_worker_handler_seconds Handler run time."
        );
        let _ = writeln!(out, "# TYPE sluice_worker_handler_seconds histogram");
        let mut cumulative = 0;
        for (le, n) in HANDLER_TIME_BUCKETS.iter().zip(&s.handler_time_buckets) {
            cumulative += n;
            let _ = writeln!(
                out,
                "sluice_worker_handler_seconds_bucket{{queue=\"{q}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "sluice_worker_handler_seconds_bucket{{queue=\"{q}\",le=\"+Inf\"}} {}",
            s.handler_time_count
        );
        let _ = writeln!(
            out,
            "sluice_worker_handler_seconds_sum{{queue=\"{q}\"}} {}",
            s.handler_time_sum.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "sluice_worker_handler_seconds_count{{queue=\"{q}\"}} {}",
            s.handler_time_count
        );
        out
    }

    pub(crate) fn finished(&self, outcome: Outcome) {
        self.inner.completed[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dead_lettered(&self) {
        self.inner.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn panicked(&self) {
        self.inner.panics.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn result_dropped(&self) {
        self.inner.results_dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn broker_error(&self) {
        self.inner.broker_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn started(&self) {
        self.inner.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn ended(&self) {
        self.inner.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn handler_time(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let slot = HANDLER_TIME_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(HANDLER_TIME_BUCKETS.len());
        self.inner.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.inner.time_sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.inner.time_count.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        let m = WorkerMetrics::new();
        m.finished(Outcome::Success);
        m.finished(Outcome::Retry);
        m.handler_time(Duration::from_millis(3));
        m.handler_time(Duration::from_secs(100));
        let s = m.snapshot();
        assert_eq!(s.completed(Outcome::Success), 1);
        assert_eq!(s.retries(), 1);
        assert_eq!(s.handler_time_buckets[2], 1);
        assert_eq!(*s.handler_time_buckets.last().unwrap(), 1);
        let text = m.render_prometheus("q");
        assert!(text.contains("sluice_worker_tasks_total{queue=\"q\",outcome=\"success\"} 1"));
        assert!(text.contains("sluice_worker_handler_seconds_bucket{queue=\"q\",le=\"+Inf\"} 2"));
    }
}
