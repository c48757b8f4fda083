//! The report of `sluice drill --tenants`: the tenant table, a one-screen summary with the
//! verdicts of the per-key and the queue-wide run side by side, and an HTML page with those
//! verdicts and a panel per tenant: its partner calls per scenario minute in both runs against
//! its quota, and its breaker's open and half-open spans in both.

use std::fmt::Write as _;

use sluice_core::adaptive::BreakerState;

use super::super::criteria::Verdict;
use super::super::report::{breaker_band, esc, nice_max, polyline};
use super::super::scenario::Scenario;
use super::plan::{OUTAGE, RAISED, Tenants};
use super::verdicts::{latencies, quantile};
use super::{Runs, TenantRun};

/// Colour of the per-key run.
const KEY: &str = "#1f77b4";
/// Colour of the queue-wide run.
const QUEUE: &str = "#ff7f0e";

/// The tenant table, as printed before the runs.
pub fn table(sc: &Scenario, tenants: &Tenants) -> String {
    let per_min = f64::from(sc.reservations) / (sc.arrival_window.as_secs_f64() / 60.0);
    let (os, oe) = sc.outage_min();
    let mut s = String::from("  tenant  share  tasks/min  quota/min\n");
    for (i, t) in tenants.list.iter().enumerate() {
        let note = match i {
            RAISED => format!(
                "  raised to {} at minute {:.1}",
                tenants.raised_to, tenants.raise_at
            ),
            OUTAGE => format!("  account down from minute {os:.1} to {oe:.1}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "  {:<6} {:>5.1}%  {:>9.1}  {:>9}{note}",
            t.name,
            t.share * 100.0,
            per_min * t.share,
            t.quota
        );
    }
    s
}

/// A run's line in the summary.
fn run_line(r: &TenantRun) -> String {
    let n429 = r.calls.iter().filter(|(_, _, k)| k.is_429()).count();
    let drained = r.drained_at.map_or_else(
        || "NOT drained".to_owned(),
        |m| format!("drained at minute {m:.0}"),
    );
    let p95 = quantile(&latencies(r, |_| true), 0.95);
    format!(
        "  {:<17} queue {}: {drained} ({:.1} s); {} calls, {n429} x 429; p95 latency {p95:.0} s; \
         {} valid tasks dead-lettered, {} redriven, {} messages left in the DLQ",
        r.setup.name(),
        r.queue,
        r.real_secs,
        r.calls.len(),
        r.dead_valid.len(),
        r.redriven,
        r.dlq_end
    )
}

/// The summary: each run's figures, then each verdict for the per-key run and the queue-wide
/// run, one line each (`per key     PASS 1. <name>: <figure>`).
pub fn summary(
    sc: &Scenario,
    tenants: &Tenants,
    runs: &Runs,
    key: &[Verdict],
    queue: &[Verdict],
) -> String {
    let (os, oe) = sc.outage_min();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nsluice drill --tenants: {} tenants, {} reservations held {:.0} min over {:.0} min; \
         {} poison, {} undecodable; {}% random 429s; {} down from minute {os:.1} to {oe:.1}; \
         {} raised from {} to {}/min at minute {:.1}",
        tenants.list.len(),
        sc.reservations,
        sc.hold.as_secs_f64() / 60.0,
        sc.arrival_window.as_secs_f64() / 60.0,
        sc.poison,
        sc.undecodable,
        sc.random_429_pct,
        tenants.list[OUTAGE].name,
        tenants.list[RAISED].name,
        tenants.list[RAISED].quota,
        tenants.raised_to,
        tenants.raise_at
    );
    for r in [&runs.key, &runs.key_calm, &runs.queue, &runs.queue_calm] {
        let _ = writeln!(s, "{}", run_line(r));
    }
    let _ = writeln!(s);
    for (k, q) in key.iter().zip(queue) {
        for (run, v) in [("per key", k), ("queue-wide", q)] {
            let _ = writeln!(s, "{run:<11} {v}");
        }
    }
    let fails = |vs: &[Verdict]| {
        let f: Vec<String> = vs
            .iter()
            .filter(|v| !v.pass)
            .map(|v| v.number.to_string())
            .collect();
        if f.is_empty() {
            "passes every verdict".to_owned()
        } else {
            format!("fails {}", f.join(", "))
        }
    };
    let _ = writeln!(s, "\nper key: {}; queue-wide: {}", fails(key), fails(queue));
    s
}

/// A tenant's counted calls (all but random 429s and the outage's 503s) per whole scenario
/// minute, at the minute's middle.
fn calls_per_minute(r: &TenantRun, tenant: usize, until: f64) -> Vec<(f64, f64)> {
    let n = until.ceil().max(1.0) as usize;
    let mut per = vec![0u32; n];
    for (m, t, k) in &r.calls {
        if *t == tenant
            && k.counts_against_quota()
            && let Some(slot) = per.get_mut(*m as usize)
        {
            *slot += 1;
        }
    }
    per.iter()
        .enumerate()
        .map(|(i, c)| (i as f64 + 0.5, f64::from(*c)))
        .collect()
}

/// Spans a breaker was open or half-open: (from, to, state), from the samples; `key` picks
/// the tenant's own breaker, `None` the queue's.
fn breaker_spans(r: &TenantRun, key: Option<usize>) -> Vec<(f64, f64, BreakerState)> {
    let mut spans: Vec<(f64, f64, BreakerState)> = Vec::new();
    for w in r.samples.windows(2) {
        let state = match key {
            Some(t) => w[0].keys.get(t).and_then(|k| k.breaker),
            None => w[0].flow.breaker,
        };
        let Some(state) = state.filter(|s| *s != BreakerState::Closed) else {
            continue;
        };
        match spans.last_mut() {
            Some(last) if last.2 == state && (last.1 - w[0].minute).abs() < 1e-9 => {
                last.1 = w[1].minute;
            }
            _ => spans.push((w[0].minute, w[1].minute, state)),
        }
    }
    spans
}

/// The per-tenant panels, as one SVG.
pub fn panels(sc: &Scenario, tenants: &Tenants, runs: &Runs) -> String {
    const COLS: usize = 4;
    const PW: f64 = 310.0;
    const PH: f64 = 170.0;
    let n = tenants.list.len();
    let rows = n.div_ceil(COLS);
    let (w, h) = (PW * COLS as f64 + 20.0, PH * rows as f64 + 60.0);
    let t_max = runs.key.ended_at.max(runs.queue.ended_at).max(1.0);
    let (os, oe) = sc.outage_min();
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10"><rect width="100%" height="100%" fill="#fff"/>"##
    );
    let legend = [
        (
            "per key: calls / min (dotted: learned rate, cut at the top)",
            KEY,
        ),
        ("queue-wide: calls / min", QUEUE),
        ("breaker open", "#d62728"),
        ("breaker half-open", "#ffbf00"),
    ];
    for (i, (name, color)) in legend.iter().enumerate() {
        let lx = 20.0 + [0.0, 310.0, 470.0, 580.0][i];
        let _ = write!(
            svg,
            r#"<rect x="{lx}" y="12" width="14" height="5" fill="{color}"/><text x="{:.1}" y="18">{name}</text>"#,
            lx + 18.0
        );
    }
    let _ = write!(
        svg,
        r##"<text x="710" y="18">- - quota (unknown to Sluice); bands: per-key run above, queue-wide below; x: scenario minute</text>"##
    );
    for (i, t) in tenants.list.iter().enumerate() {
        let (col, row) = (i % COLS, i / COLS);
        let (left, top) = (20.0 + PW * col as f64 + 30.0, 40.0 + PH * row as f64 + 18.0);
        let (right, bottom) = (left + PW - 45.0, top + PH - 50.0);
        let x = |m: f64| left + (right - left) * m / t_max;
        let key_pts = calls_per_minute(&runs.key, i, t_max);
        let queue_pts = calls_per_minute(&runs.queue, i, t_max);
        let peak = key_pts
            .iter()
            .chain(&queue_pts)
            .map(|p| p.1)
            .fold(f64::from(tenants.quota_at(i, t_max)) * 1.2, f64::max);
        let vmax = nice_max(peak);
        let y = |v: f64| bottom - (bottom - top) * v / vmax;
        let note = match i {
            RAISED => format!(", raised to {}", tenants.raised_to),
            OUTAGE => ", account down".to_owned(),
            _ => String::new(),
        };
        let _ = write!(
            svg,
            r#"<text x="{left}" y="{:.1}" font-weight="bold">{} · {:.1} % of tasks · quota {}/min{}</text>"#,
            top - 6.0,
            esc(&t.name),
            t.share * 100.0,
            t.quota,
            esc(&note)
        );
        if i == OUTAGE {
            let _ = write!(
                svg,
                r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#999" fill-opacity="0.25"/>"##,
                x(os),
                (x(oe) - x(os)).max(1.0),
                bottom - top
            );
        }
        for k in 0..=2 {
            let v = vmax * f64::from(k) / 2.0;
            let _ = write!(
                svg,
                r##"<line x1="{left}" x2="{right}" y1="{0:.1}" y2="{0:.1}" stroke="#eee"/><text x="{1:.1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
                y(v),
                left - 3.0,
                y(v) + 3.0,
                v.round()
            );
        }
        // The quota, a step at the raise.
        let q0 = f64::from(t.quota);
        let quota_pts = if i == RAISED {
            let q1 = f64::from(tenants.raised_to);
            vec![
                (0.0, q0),
                (tenants.raise_at, q0),
                (tenants.raise_at, q1),
                (t_max, q1),
            ]
        } else {
            vec![(0.0, q0), (t_max, q0)]
        };
        let dashed = polyline(&quota_pts, "#000", x, y).replace(
            "stroke-width=\"1.6\"",
            "stroke-width=\"1\" stroke-dasharray=\"4,3\"",
        );
        svg.push_str(&dashed);
        svg.push_str(&polyline(&queue_pts, QUEUE, x, y));
        svg.push_str(&polyline(&key_pts, KEY, x, y));
        let learned: Vec<(f64, f64)> = runs
            .key
            .samples
            .iter()
            .filter_map(|s| Some((s.minute, s.keys.get(i)?.rate_per_min?.min(vmax))))
            .collect();
        svg.push_str(&polyline(&learned, KEY, x, y).replace(
            "stroke-width=\"1.6\"",
            "stroke-width=\"1\" stroke-dasharray=\"1,2\"",
        ));
        for (band, spans) in [
            (0.0, breaker_spans(&runs.key, Some(i))),
            (7.0, breaker_spans(&runs.queue, None)),
        ] {
            for (a, b, state) in spans {
                breaker_band(
                    &mut svg,
                    (x(a), x(b)),
                    (bottom + 4.0 + band, 5.0),
                    state == BreakerState::Open,
                );
            }
        }
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#333"/>"##
        );
        let step = nice_max(t_max / 4.0);
        let mut m = 0.0;
        while m <= t_max {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{m}</text>"#,
                x(m),
                bottom + 26.0
            );
            m += step;
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The HTML page: the verdicts side by side, the panels, and the summary.
pub fn page(
    sc: &Scenario,
    tenants: &Tenants,
    runs: &Runs,
    key: &[Verdict],
    queue: &[Verdict],
) -> String {
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>sluice drill --tenants</title>\
         <style>body{font-family:sans-serif;margin:16px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;font-size:13px}\
         .pass{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}</style>\
         </head><body><h1>sluice drill --tenants</h1>",
    );
    let _ = write!(
        page,
        "<p>{} tenants share one queue and one partner API, each with its own quota there; \
         one tenant's account is down for {:.0} minutes and one tenant's quota is raised \
         mid-run. The same workload runs with per-key adaptive rates and breakers \
         (<code>\"scope\": \"key\"</code>) and with one queue-wide rate and breaker.</p>\
         <table><tr><th>verdict</th><th>per key</th><th>queue-wide</th></tr>",
        tenants.list.len(),
        sc.outage.as_secs_f64() / 60.0
    );
    for (k, q) in key.iter().zip(queue) {
        let cell = |v: &Verdict| {
            format!(
                "<td><span class=\"{}\">{}</span> {}</td>",
                v.mark().to_lowercase(),
                v.mark(),
                esc(&v.figure)
            )
        };
        let _ = write!(
            page,
            "<tr><td>{}. {}</td>{}{}</tr>",
            k.number,
            esc(k.name),
            cell(k),
            cell(q)
        );
    }
    page.push_str("</table><h2>Each tenant</h2>");
    page.push_str(&panels(sc, tenants, runs));
    page.push_str("<pre>");
    page.push_str(&esc(&table(sc, tenants)));
    page.push_str(&esc(&summary(sc, tenants, runs, key, queue)));
    page.push_str("</pre></body></html>\n");
    page
}
