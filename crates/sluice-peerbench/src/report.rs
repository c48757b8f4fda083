//! The table, the JSON and the SVG chart.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One system at one batch size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// System name as given to `--systems`.
    pub system: String,
    /// What an ack/confirm promises.
    pub durability: String,
    /// How the system was configured.
    pub settings: String,
    /// Batch size.
    pub batch: usize,
    /// Messages acked in the measured phase.
    pub acked: u64,
    /// Length of the measured phase.
    pub seconds: f64,
    /// Acked messages per second.
    pub msgs_per_s: f64,
    /// End-to-end latency p50 (µs).
    pub p50_us: u64,
    /// End-to-end latency p99 (µs).
    pub p99_us: u64,
    /// End-to-end latency p99.9 (µs).
    pub p999_us: u64,
    /// Server CPU seconds per million messages.
    pub cpu_s_per_m: Option<f64>,
    /// Failed operations (retried).
    pub errors: u64,
    /// Whether the measured phase hit `--timeout`.
    pub timed_out: bool,
    /// The first error, if any.
    pub first_error: Option<String>,
    /// Throughput of every round (this row is the median one).
    #[serde(default)]
    pub rounds_msgs_per_s: Vec<f64>,
}

/// A system that was not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skipped {
    /// System name.
    pub system: String,
    /// Why.
    pub reason: String,
}

impl Skipped {
    /// A skipped system and the error that made it so.
    pub fn new(system: &str, e: &anyhow::Error) -> Self {
        Skipped {
            system: system.to_owned(),
            reason: format!("{e:#}"),
        }
    }
}

/// The whole run.
#[derive(Debug, Serialize, Deserialize)]
pub struct Output {
    /// Messages counted per system and batch.
    pub messages: u64,
    /// Warm-up messages.
    pub warmup: u64,
    /// Producers.
    pub producers: usize,
    /// Consumers.
    pub consumers: usize,
    /// Rounds per system and batch.
    pub rounds: usize,
    /// Body size.
    pub body_bytes: usize,
    /// What pads the bodies: `filler` (compressible) or `random`.
    #[serde(default)]
    pub body_fill: String,
    /// Results.
    pub rows: Vec<Row>,
    /// Systems not run.
    pub skipped: Vec<Skipped>,
}

fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Output {
    /// The row the ratios compare with: Sluice's embedded engine over its fastest client
    /// protocol (frames), or over HTTP when the frames row did not run.
    fn sluice(&self, batch: usize) -> Option<&Row> {
        let row = |name: &str| {
            self.rows
                .iter()
                .find(|r| r.system == name && r.batch == batch)
        };
        row("sluice-frames").or_else(|| row("sluice"))
    }

    /// The table as Markdown.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} messages of {} bytes ({} padding) per system and batch after a {}-message warm-up; {} producers, {} consumers; median of {} round(s)\n",
            thousands(self.messages),
            self.body_bytes,
            self.body_fill,
            thousands(self.warmup),
            self.producers,
            self.consumers,
            self.rounds
        );
        let _ = writeln!(
            s,
            "| system | B | durability | msg/s (spread of rounds) | e2e p50 / p99 / p99.9 (ms) | server CPU s per 1M msgs | msg/s: Sluice ÷ this (>1: Sluice faster) | p99: Sluice ÷ this (>1: Sluice slower) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        let reference = self
            .rows
            .first()
            .and_then(|r| self.sluice(r.batch))
            .map(|r| r.system.clone());
        for r in &self.rows {
            let (tr, lr) = match self.sluice(r.batch) {
                Some(sl) if !std::ptr::eq(sl, r) => (
                    format!("{:.2}×", sl.msgs_per_s / r.msgs_per_s.max(1e-9)),
                    format!("{:.2}×", sl.p99_us as f64 / (r.p99_us.max(1)) as f64),
                ),
                _ => ("—".to_owned(), "—".to_owned()),
            };
            let cpu = r
                .cpu_s_per_m
                .map(|c| format!("{c:.0}"))
                .unwrap_or_else(|| "n/a".to_owned());
            let flag = if r.timed_out { " (timed out)" } else { "" };
            let spread = if r.rounds_msgs_per_s.len() > 1 {
                let lo = r.rounds_msgs_per_s.iter().copied().fold(f64::MAX, f64::min);
                let hi = r.rounds_msgs_per_s.iter().copied().fold(0.0, f64::max);
                format!(" ({} – {})", thousands(lo as u64), thousands(hi as u64))
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {}{spread}{flag} | {} / {} / {} | {cpu} | {tr} | {lr} |",
                r.system,
                r.batch,
                r.durability,
                thousands(r.msgs_per_s as u64),
                ms(r.p50_us),
                ms(r.p99_us),
                ms(r.p999_us),
            );
        }
        if let Some(name) = reference {
            let _ = writeln!(
                s,
                "\nRatios compare each row with the `{name}` row of its batch size."
            );
        }
        let _ = writeln!(s, "\nSettings:");
        let mut seen = Vec::new();
        for r in &self.rows {
            if !seen.contains(&&r.system) {
                seen.push(&r.system);
                let _ = writeln!(s, "- {}: {}", r.system, r.settings);
            }
        }
        for r in self.rows.iter().filter(|r| r.errors > 0) {
            let _ = writeln!(
                s,
                "- {} B={}: {} failed operations (retried); first: {}",
                r.system,
                r.batch,
                r.errors,
                r.first_error.as_deref().unwrap_or("?")
            );
        }
        for k in &self.skipped {
            let _ = writeln!(s, "- SKIPPED {}: {}", k.system, k.reason);
        }
        s
    }

    /// A grouped bar chart: one group per batch size, one bar per system.
    ///
    /// Long because the layout (axis maximum, group and bar widths, legend rows) is computed once
    /// and used by every element after it; the SVG is written in drawing order: title, grid, bars,
    /// legend.
    pub fn svg(&self) -> String {
        let mut batches: Vec<usize> = self.rows.iter().map(|r| r.batch).collect();
        batches.dedup();
        let mut systems: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !systems.contains(&r.system.as_str()) {
                systems.push(&r.system);
            }
        }
        let colors = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79",
        ];
        let top_value = self
            .rows
            .iter()
            .map(|r| r.msgs_per_s)
            .fold(1.0_f64, f64::max);
        // A round axis maximum: 1, 2 or 5 times a power of ten, times 4 grid steps.
        let raw_step = top_value / 4.0;
        let pow = 10f64.powf(raw_step.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * pow)
            .find(|s| *s >= raw_step)
            .unwrap_or(10.0 * pow);
        let max = step * 4.0;
        // The legend takes rows of five below the plot.
        const PER_ROW: usize = 5;
        let legend_rows = systems.len().div_ceil(PER_ROW).max(1);
        let (w, left, top) = (900.0, 80.0, 50.0);
        let bottom = 50.0 + 20.0 * legend_rows as f64;
        let h = 350.0 + bottom;
        let plot_h = h - top - bottom;
        let group_w = (w - left - 20.0) / batches.len().max(1) as f64;
        let bar_w = (group_w - 30.0) / systems.len().max(1) as f64;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">Acked messages/s (1 KiB, {} producers, {} consumers, {} msgs) — higher is better</text>"#,
            w / 2.0,
            self.producers,
            self.consumers,
            thousands(self.messages)
        );
        // Grid lines.
        for i in 0..=4 {
            let v = max * f64::from(i) / 4.0;
            let y = top + plot_h - plot_h * f64::from(i) / 4.0;
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                w - 20.0,
                left - 6.0,
                y + 4.0,
                thousands(v as u64)
            );
        }
        for (gi, b) in batches.iter().enumerate() {
            let gx = left + group_w * gi as f64 + 15.0;
            for (si, sys) in systems.iter().enumerate() {
                let Some(r) = self.rows.iter().find(|r| r.batch == *b && r.system == *sys) else {
                    continue;
                };
                let bh = plot_h * r.msgs_per_s / max;
                let x = gx + bar_w * si as f64;
                let y = top + plot_h - bh;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{} B={}: {:.0} msg/s</title></rect>"#,
                    (bar_w - 4.0).max(1.0),
                    colors[si % colors.len()],
                    r.system,
                    r.batch,
                    r.msgs_per_s
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                    x + (bar_w - 4.0) / 2.0,
                    y - 4.0,
                    thousands(r.msgs_per_s as u64)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">batch {b}</text>"#,
                gx + (group_w - 30.0) / 2.0,
                top + plot_h + 20.0
            );
        }
        let legend_w = (w - left) / PER_ROW as f64;
        for (si, sys) in systems.iter().enumerate() {
            let x = left - 40.0 + legend_w * (si % PER_ROW) as f64;
            let label = match *sys {
                "nats" => "nats (not durable)",
                "redis-everysec" => "redis everysec (weaker)",
                "sluice-relaxed" => "sluice relaxed (weaker)",
                other => other,
            };
            let y = h - 20.0 * (legend_rows - si / PER_ROW) as f64;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{y:.1}" font-size="11">{label}</text>"#,
                y - 10.0,
                colors[si % colors.len()],
                x + 16.0
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}
