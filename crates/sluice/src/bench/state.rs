//! What the producer and consumer tasks of a run share, what each measured, and how they
//! count failed requests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use super::consumer::Stamp;
use super::frames;

/// Largest latency the histograms hold (µs); larger values are clamped.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// What every task shares.
pub(super) struct Shared {
    pub(super) client: reqwest::Client,
    /// With `--frames`: the frame connections producers and consumers use instead of HTTP.
    pub(super) frames: Option<frames::Pool>,
    pub(super) base: String,
    pub(super) queue: String,
    pub(super) token: Option<String>,
    /// Identifies this run's messages, so leftovers of another run are acked but not counted.
    pub(super) run: String,
    pub(super) batch: u32,
    pub(super) body_bytes: usize,
    pub(super) epoch: Instant,
    /// Start of the measured window, µs after `epoch`.
    pub(super) warm_us: u64,
    /// End of the measured window, µs after `epoch`; `u64::MAX` until it ends.
    pub(super) end_us: AtomicU64,
    /// Messages the measured window may still send (`--messages`).
    pub(super) budget: Option<AtomicI64>,
    pub(super) stop_producers: AtomicBool,
    pub(super) stop_consumers: AtomicBool,
    // Totals for the progress line and the drain (all phases).
    pub(super) sent_total: AtomicU64,
    pub(super) acked_total: AtomicU64,
    pub(super) errors_total: AtomicU64,
    // Counted in the measured window.
    pub(super) sent_measured: AtomicU64,
    pub(super) acked_measured: AtomicU64,
    /// With `--groups`: how many, and the count that picks the next message's group.
    pub(super) groups: Option<(u32, AtomicU64)>,
    /// With `--keys`: how many, and the count that picks the next message's key.
    pub(super) keys: Option<(u32, AtomicU64)>,
}

impl Shared {
    pub(super) fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The group of the next message sent, with `--groups`.
    pub(super) fn next_group(&self) -> Option<String> {
        self.groups
            .as_ref()
            .map(|(n, next)| format!("g{}", next.fetch_add(1, Ordering::Relaxed) % u64::from(*n)))
    }

    /// The key of the next message sent, with `--keys`.
    pub(super) fn next_key(&self) -> Option<String> {
        self.keys
            .as_ref()
            .map(|(n, next)| format!("k{}", next.fetch_add(1, Ordering::Relaxed) % u64::from(*n)))
    }

    pub(super) fn in_window(&self, t_us: u64) -> bool {
        t_us >= self.warm_us && t_us < self.end_us.load(Ordering::Relaxed)
    }

    /// The send time stamped in a body of this run sent inside the measured window; `None`
    /// for anything else (leftovers of another run, warm-up messages, foreign bodies).
    pub(super) fn stamp(&self, body: &[u8]) -> Option<u64> {
        let stamp = serde_json::from_slice::<Stamp<'_>>(body).ok()?;
        (stamp.run == self.run && self.in_window(stamp.t)).then_some(stamp.t)
    }
}

/// What one task measured.
pub(super) struct TaskStats {
    pub(super) send_us: Histogram<u64>,
    pub(super) e2e_us: Histogram<u64>,
    pub(super) errors: BTreeMap<String, u64>,
    pub(super) late_starts: u64,
}

impl TaskStats {
    pub(super) fn new() -> anyhow::Result<Self> {
        Ok(TaskStats {
            send_us: new_histogram()?,
            e2e_us: new_histogram()?,
            errors: BTreeMap::new(),
            late_starts: 0,
        })
    }

    pub(super) fn merge(&mut self, other: TaskStats) -> anyhow::Result<()> {
        self.send_us
            .add(&other.send_us)
            .context("merging histograms")?;
        self.e2e_us
            .add(&other.e2e_us)
            .context("merging histograms")?;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.late_starts += other.late_starts;
        Ok(())
    }
}

pub(super) fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).context("creating a latency histogram")
}

/// A failed request: an error code for the report and how long to back off.
pub(super) struct Failed {
    pub(super) code: String,
    pub(super) retry_after: Option<Duration>,
}

impl Failed {
    pub(super) fn new(code: &str, retry_after: Option<Duration>) -> Self {
        Failed {
            code: code.to_owned(),
            retry_after,
        }
    }

    /// Counts the error; returns how long to wait before the next request.
    pub(super) fn count(self, shared: &Shared, errors: &mut BTreeMap<String, u64>) -> Duration {
        count_error(shared, errors, self.code);
        self.retry_after
            .unwrap_or(Duration::from_millis(10))
            .min(Duration::from_secs(1))
    }

    /// Counts the error and waits a little before the next request.
    pub(super) async fn record(self, shared: &Shared, stats: &mut TaskStats) {
        let pause = self.count(shared, &mut stats.errors);
        tokio::time::sleep(pause).await;
    }
}

/// Counts one error with `code`, in the run's total and in `errors`.
pub(super) fn count_error(shared: &Shared, errors: &mut BTreeMap<String, u64>, code: String) {
    shared.errors_total.fetch_add(1, Ordering::Relaxed);
    *errors.entry(code).or_default() += 1;
}

/// What an acknowledgement call did: how many receipts it settled, and the error codes of
/// those it refused (a batch ack answers per receipt).
pub(super) struct Acked {
    pub(super) count: u64,
    pub(super) refused: Vec<String>,
}
