//! The load driver shared by every system: producers, consumers, budget, histograms.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use tokio::time::Instant;

/// Size of every message body.
pub const BODY_BYTES: usize = 1024;
/// Most deliveries a consumer holds unacknowledged (Sluice's ack batch limit).
const MAX_HELD: u64 = 1000;
/// Largest latency the histograms hold (µs).
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Sends batches of bodies and returns once the server confirmed them durable.
pub trait Producer: Send + 'static {
    /// Sends `bodies` (1 – B of them) in one batch and waits for the durable confirmation.
    fn send(&mut self, bodies: Vec<Vec<u8>>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Receives up to `max` messages (waiting a bounded time) and acknowledges them.
pub trait Consumer: Send + 'static {
    /// Receives up to `max` bodies, waiting at most a few hundred ms; empty when none came.
    fn receive(&mut self, max: usize) -> impl Future<Output = anyhow::Result<Vec<Vec<u8>>>> + Send;
    /// Starts acknowledging everything received and not yet acknowledged. The future
    /// completes when the server confirmed the acks (or, for a protocol without ack
    /// confirmations, when they are sent) and borrows nothing, so the consumer receives its
    /// next batch meanwhile, as a real worker does.
    fn ack(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static;
    /// Whether the server keeps delivering while earlier deliveries wait for their ack. When
    /// it does, deliveries received while an ack is in flight are acknowledged together in
    /// the next one (as a worker's ack batcher does); when it does not (RabbitMQ with
    /// prefetch = B), each batch's ack is finished before the next receive.
    const DELIVERS_WHILE_UNACKED: bool = true;
    /// Whether acks ride on the next receive ([`Consumer::receive_acking`]), so a worker
    /// settles its last batch and takes the next in one round trip.
    fn acks_in_receive(&self) -> bool {
        false
    }
    /// Receives like [`Consumer::receive`] and, in the same request, acknowledges everything
    /// received and not yet acknowledged. `Ok` means the server confirmed those acks too.
    fn receive_acking(
        &mut self,
        max: usize,
    ) -> impl Future<Output = anyhow::Result<Vec<Vec<u8>>>> + Send {
        let _ = max;
        async { anyhow::bail!("this system cannot acknowledge within a receive") }
    }
}

/// One system under test: opens producer and consumer connections.
pub trait System: Send + Sync + 'static {
    /// Producer connection type.
    type P: Producer;
    /// Consumer connection type.
    type C: Consumer;
    /// Opens a producer.
    fn producer(&self) -> impl Future<Output = anyhow::Result<Self::P>> + Send;
    /// Opens a consumer.
    fn consumer(&self) -> impl Future<Output = anyhow::Result<Self::C>> + Send;
}

/// What one phase of load measured.
pub struct PhaseResult {
    /// Messages acked (counted) in the phase.
    pub acked: u64,
    /// From the first send to the ack that completed the count.
    pub elapsed: Duration,
    /// Send started → delivered to a consumer, µs.
    pub e2e_us: Histogram<u64>,
    /// Failed operations.
    pub errors: u64,
    /// Whether the phase hit its time limit.
    pub timed_out: bool,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

struct Shared {
    epoch: Instant,
    budget: AtomicI64,
    seq: AtomicU64,
    target: u64,
    acked: AtomicU64,
    done_us: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn count_acked(&self, k: u64) {
        let before = self.acked.fetch_add(k, Ordering::Relaxed);
        if before < self.target && before + k >= self.target {
            self.done_us.store(self.now_us(), Ordering::Relaxed);
        }
    }

    fn error(&self, e: &anyhow::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first_error.lock()
            && first.is_none()
        {
            *first = Some(format!("{e:#}"));
        }
    }
}

/// What fills a body after its send time and number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Fill {
    /// One repeated letter: compresses about fiftyfold, as padding does.
    #[default]
    Filler,
    /// Random letters and digits, fresh for every body: next to incompressible (about 6 of
    /// 8 bits carry information, and byte-oriented compressors such as LZ4 find no repeats).
    Random,
}

/// A 1 KiB JSON body carrying the send time (µs after the phase epoch) and a unique number,
/// padded with `fill`.
pub fn body(t_us: u64, n: u64, fill: Fill) -> Vec<u8> {
    let head = format!("{{\"t\":\"{t_us:020}\",\"n\":{n},\"p\":\"");
    let mut b = Vec::with_capacity(BODY_BYTES);
    b.extend_from_slice(head.as_bytes());
    match fill {
        Fill::Filler => b.resize(BODY_BYTES - 2, b'x'),
        Fill::Random => {
            use rand::Rng as _;
            let pad = BODY_BYTES - 2 - b.len();
            b.extend(
                rand::thread_rng()
                    .sample_iter(rand::distributions::Alphanumeric)
                    .take(pad),
            );
        }
    }
    b.extend_from_slice(b"\"}");
    b
}

/// Reads the send time back out of a body made by [`body`].
pub fn stamp(b: &[u8]) -> Option<u64> {
    let pos = b.windows(5).position(|w| w == b"\"t\":\"")? + 5;
    let digits = b.get(pos..pos + 20)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Records the end-to-end latency of each delivered body.
fn record(s: &Shared, hist: &mut Histogram<u64>, got: &[Vec<u8>]) {
    let now = s.now_us();
    for b in got {
        if let Some(t) = stamp(b) {
            hist.saturating_record(now.saturating_sub(t).max(1));
        }
    }
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).context("creating a histogram")
}

/// Runs one phase: `count` messages (bodies padded with `fill`) sent by the producers in
/// batches of `batch` and acked
/// by the consumers; stops at `limit` whatever happened. Producers and consumers are handed
/// back for the next phase (those of a timed-out phase are dropped).
///
/// Long because producers, consumers, the watcher and the gathering of results share one set of
/// counters and one deadline; top to bottom it is a phase's life: spawn, wait for the count or the
/// limit, stop, gather.
pub async fn phase<P: Producer, C: Consumer>(
    producers: Vec<P>,
    consumers: Vec<C>,
    count: u64,
    batch: usize,
    fill: Fill,
    limit: Duration,
) -> anyhow::Result<(PhaseResult, Vec<P>, Vec<C>)> {
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        budget: AtomicI64::new(i64::try_from(count).unwrap_or(i64::MAX)),
        seq: AtomicU64::new(0),
        target: count,
        acked: AtomicU64::new(0),
        done_us: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        first_error: std::sync::Mutex::new(None),
    });
    let deadline = shared.epoch + limit;
    let mut ptasks = Vec::new();
    for mut p in producers {
        let s = shared.clone();
        ptasks.push(tokio::spawn(async move {
            while !s.stop.load(Ordering::Relaxed) {
                let want = i64::try_from(batch).unwrap_or(1);
                let prev = s.budget.fetch_sub(want, Ordering::Relaxed);
                if prev <= 0 {
                    break;
                }
                let n = prev.min(want);
                let t = s.now_us();
                let bodies = (0..n)
                    .map(|_| body(t, s.seq.fetch_add(1, Ordering::Relaxed), fill))
                    .collect();
                if let Err(e) = p.send(bodies).await {
                    // Not confirmed: give the messages back to the budget and retry.
                    s.error(&e);
                    s.budget.fetch_add(n, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            p
        }));
    }
    let mut ctasks = Vec::new();
    for mut c in consumers {
        let s = shared.clone();
        ctasks.push(tokio::spawn(async move {
            let mut hist = new_histogram()?;
            // One ack in flight at a time; what arrives meanwhile waits for the next one. A
            // message counts as done when its ack is confirmed.
            let mut acking: Option<tokio::task::JoinHandle<()>> = None;
            let mut held = 0u64;
            while !s.stop.load(Ordering::Relaxed) && s.acked.load(Ordering::Relaxed) < s.target {
                // Once every send is out, nothing is held back behind a long poll; and no
                // ack grows past what one request may carry.
                let must_flush = !C::DELIVERS_WHILE_UNACKED
                    || s.budget.load(Ordering::Relaxed) <= 0
                    || held + batch as u64 > MAX_HELD;
                // Acks ride on the next receive where the system allows it; only the last
                // ones, once every send is out, go on their own.
                if c.acks_in_receive() && held > 0 && !must_flush {
                    match c.receive_acking(batch).await {
                        Ok(got) => {
                            s.count_acked(std::mem::take(&mut held));
                            record(&s, &mut hist, &got);
                            held += got.len() as u64;
                        }
                        Err(e) => {
                            // Unconfirmed: those messages come back when their leases expire.
                            held = 0;
                            s.error(&e);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    continue;
                }
                if held > 0 {
                    let busy = acking.as_ref().is_some_and(|a| !a.is_finished());
                    if !busy || must_flush {
                        if let Some(previous) = acking.take() {
                            previous.await.context("an ack task panicked")?;
                        }
                        let ack = c.ack();
                        let s2 = s.clone();
                        let k = std::mem::take(&mut held);
                        acking = Some(tokio::spawn(async move {
                            match ack.await {
                                Ok(()) => s2.count_acked(k),
                                Err(e) => s2.error(&e),
                            }
                        }));
                    }
                }
                if must_flush && let Some(a) = acking.take() {
                    a.await.context("an ack task panicked")?;
                }
                let got = match c.receive(batch).await {
                    Ok(g) => g,
                    Err(e) => {
                        s.error(&e);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                record(&s, &mut hist, &got);
                held += got.len() as u64;
            }
            if let Some(last) = acking {
                last.await.context("an ack task panicked")?;
            }
            anyhow::Ok((c, hist))
        }));
    }
    // Wait for the consumers to count everything, or the limit.
    let mut timed_out = false;
    loop {
        if shared.acked.load(Ordering::Relaxed) >= count {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
        // Every operation failing: give up early rather than wait out the limit.
        if shared.acked.load(Ordering::Relaxed) == 0 && shared.errors.load(Ordering::Relaxed) >= 100
        {
            timed_out = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut e2e = new_histogram()?;
    let mut ps = Vec::new();
    let mut cs = Vec::new();
    // Tasks finish within one receive wait; past a grace period they are abandoned.
    let grace = Instant::now() + Duration::from_secs(5);
    for t in ptasks {
        match tokio::time::timeout_at(grace, t).await {
            Ok(Ok(p)) => ps.push(p),
            Ok(Err(e)) => anyhow::bail!("a producer panicked: {e}"),
            Err(_) => timed_out = true,
        }
    }
    for t in ctasks {
        match tokio::time::timeout_at(grace, t).await {
            Ok(Ok(r)) => {
                let (c, h) = r?;
                e2e.add(&h).context("merging histograms")?;
                cs.push(c);
            }
            Ok(Err(e)) => anyhow::bail!("a consumer panicked: {e}"),
            Err(_) => timed_out = true,
        }
    }
    let done_us = shared.done_us.load(Ordering::Relaxed);
    let elapsed = if done_us > 0 {
        Duration::from_micros(done_us)
    } else {
        shared.epoch.elapsed()
    };
    let first_error = shared.first_error.lock().ok().and_then(|g| g.clone());
    Ok((
        PhaseResult {
            acked: shared.acked.load(Ordering::Relaxed).min(count),
            elapsed,
            e2e_us: e2e,
            errors: shared.errors.load(Ordering::Relaxed),
            timed_out,
            first_error,
        },
        ps,
        cs,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_1kib_json_and_carry_their_stamp() {
        let b = body(123_456, 7, Fill::Filler);
        assert_eq!(b.len(), BODY_BYTES);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["n"], 7);
        assert_eq!(v["t"], "00000000000000123456");
        assert_eq!(stamp(&b), Some(123_456));
    }
}
