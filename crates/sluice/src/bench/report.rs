//! The report of a `sluice bench` run: latency percentiles, rates and the text or JSON it
//! prints.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::BenchArgs;
use super::state::{Shared, TaskStats};

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Serialize)]
pub(super) struct Percentiles {
    count: u64,
    mean: f64,
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

impl From<&Histogram<u64>> for Percentiles {
    fn from(h: &Histogram<u64>) -> Self {
        Percentiles {
            count: h.len(),
            mean: (h.mean() * 10.0).round() / 10.0,
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// The outcome of a run (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub(super) struct Report {
    url: String,
    /// `http`, or `frames` with `--frames`.
    transport: &'static str,
    /// With `--frames`: the frame listener's address.
    frames: Option<String>,
    queue: String,
    producers: u32,
    consumers: u32,
    batch: u32,
    body_bytes: u64,
    target_rate: Option<f64>,
    warmup_s: f64,
    measured_s: f64,
    /// Messages whose send started in the window and got a 2xx.
    pub(super) sent: u64,
    /// Messages acknowledged in the window.
    acked: u64,
    sent_per_s: f64,
    acked_per_s: f64,
    /// Send calls: request started → 2xx read, per request.
    send_latency_us: Percentiles,
    /// Send started → received by a consumer, per message.
    end_to_end_latency_us: Percentiles,
    /// Failed requests (and failed receipts of batch acks) by error code.
    errors: BTreeMap<String, u64>,
    /// With --rate: requests that started over 2 ms after their scheduled time.
    late_starts: u64,
    /// Messages sent (in any phase) and not acknowledged when the run ended.
    unacked_at_end: u64,
}

impl Report {
    pub(super) fn new(
        args: &BenchArgs,
        shared: &Shared,
        total: &TaskStats,
        window_us: u64,
    ) -> Self {
        let secs = window_us as f64 / 1e6;
        let sent = shared.sent_measured.load(Ordering::Relaxed);
        let acked = shared.acked_measured.load(Ordering::Relaxed);
        let round = |x: f64| (x * 10.0).round() / 10.0;
        Report {
            url: shared.base.clone(),
            transport: if shared.frames.is_some() {
                "frames"
            } else {
                "http"
            },
            frames: shared.frames.as_ref().map(|p| p.addr().to_owned()),
            queue: shared.queue.clone(),
            producers: args.producers,
            consumers: args.consumers,
            batch: args.batch,
            body_bytes: args.body_bytes,
            target_rate: args.rate,
            warmup_s: round(args.warmup.as_secs_f64()),
            measured_s: (secs * 1000.0).round() / 1000.0,
            sent,
            acked,
            sent_per_s: round(sent as f64 / secs),
            acked_per_s: round(acked as f64 / secs),
            send_latency_us: Percentiles::from(&total.send_us),
            end_to_end_latency_us: Percentiles::from(&total.e2e_us),
            errors: total.errors.clone(),
            late_starts: total.late_starts,
            unacked_at_end: shared
                .sent_total
                .load(Ordering::Relaxed)
                .saturating_sub(shared.acked_total.load(Ordering::Relaxed)),
        }
    }

    pub(super) fn errors_line(&self) -> String {
        if self.errors.is_empty() {
            return "none".to_owned();
        }
        self.errors
            .iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let rate = self
            .target_rate
            .map(|r| format!(", target {} msg/s", thousands(r as u64)))
            .unwrap_or_default();
        let over = self
            .frames
            .as_ref()
            .map(|a| format!(" (frames {a})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "sluice bench: {}{over} queue {}: {} producers, {} consumers, batch {}, \
             {}-byte bodies{rate}",
            self.url, self.queue, self.producers, self.consumers, self.batch, self.body_bytes
        );
        let _ = writeln!(
            s,
            "measured {:.2} s after a {:.1} s warm-up",
            self.measured_s, self.warmup_s
        );
        let _ = writeln!(
            s,
            "throughput    sent {} msg/s   acked {} msg/s   ({} sent, {} acked)",
            thousands(self.sent_per_s as u64),
            thousands(self.acked_per_s as u64),
            thousands(self.sent),
            thousands(self.acked),
        );
        let _ = writeln!(
            s,
            "{:<13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "latency", "p50", "p90", "p99", "p99.9", "max", "samples"
        );
        for (name, p) in [
            ("send call", &self.send_latency_us),
            ("end-to-end", &self.end_to_end_latency_us),
        ] {
            if p.count == 0 {
                let _ = writeln!(s, "{name:<13} {:>9}", "-");
                continue;
            }
            let _ = writeln!(
                s,
                "{name:<13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
                ms(p.p50),
                ms(p.p90),
                ms(p.p99),
                ms(p.p999),
                ms(p.max),
                thousands(p.count)
            );
        }
        let _ = writeln!(s, "errors        {}", self.errors_line());
        if self.target_rate.is_some() && self.late_starts > 0 {
            let _ = writeln!(
                s,
                "note          {} requests started over 2 ms behind schedule (the load \
                 generator could not keep the rate)",
                thousands(self.late_starts)
            );
        }
        if self.unacked_at_end > 0 && self.consumers > 0 {
            let _ = writeln!(
                s,
                "note          {} messages were still unacknowledged at the end (consumers \
                 slower than producers)",
                thousands(self.unacked_at_end)
            );
        }
        s
    }
}

/// `1234567` as `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Microseconds as milliseconds with a sensible precision.
pub(super) fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v < 10.0 {
        format!("{v:.2}ms")
    } else if v < 100.0 {
        format!("{v:.1}ms")
    } else {
        format!("{v:.0}ms")
    }
}
