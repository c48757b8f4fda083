//! The report: a one-screen text summary, and a self-contained SVG timeline (optionally in an
//! HTML page) with panels over scenario minutes — backlog, in flight and DLQ depth above;
//! upstream calls and 429s per minute below; for an adaptive run, the adapted rate and the
//! breaker's state at the bottom (and the tuned run's backlog beside its own) — and the
//! outage shaded in each.

use std::fmt::Write as _;

use super::Observed;
use super::adaptive::Mode;
use super::criteria::{Verdict, valid_dead_lettered};
use super::upstream::CallKind;

/// A chart series: legend, colour, points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// The worker's upstream calls per scenario minute over the minutes it had a standing
/// backlog (at least `backlog` messages visible at both ends of the minute, away from the
/// outage, and at most 5% of the minute's calls answered 429, since the worker rightly holds
/// off after a 429), with the number of such minutes; `None` when there were none.
///
/// Why: the verdict is judged in scenario time, which holds only while the machine keeps up
/// with `--time-scale`. A worker that keeps up runs near its limiter's rate while work
/// waits; one far below it was starved of CPU, and its verdict says more about the machine
/// than about the retry settings.
pub fn busy_call_rate(o: &Observed, backlog: u64) -> Option<(f64, usize)> {
    let (os, oe) = o.scenario.outage_min();
    let (mut calls, mut minutes, mut n) = (0usize, 0.0, 0usize);
    for w in o.samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.visible < backlog
            || b.visible < backlog
            || (b.minute > os - 1.0 && a.minute < oe + 1.0)
        {
            continue;
        }
        let inside: Vec<_> = o
            .calls
            .iter()
            .filter(|(m, _)| *m >= a.minute && *m < b.minute)
            .collect();
        if inside.iter().filter(|(_, k)| k.is_429()).count() * 20 > inside.len() {
            continue;
        }
        calls += inside.len();
        minutes += b.minute - a.minute;
        n += 1;
    }
    (n > 0 && minutes > 0.0).then(|| (calls as f64 / minutes, n))
}

/// The text summary.
///
/// Long because it writes the one-screen summary line by line in the order it prints (scenario,
/// upstream, retries, run, queue, operator, flow, warning, verdicts), each line with its own
/// figures.
pub fn summary(o: &Observed, verdicts: &[Verdict]) -> String {
    let sc = &o.scenario;
    let (os, oe) = sc.outage_min();
    let calls = o.calls.len();
    let n429 = o.calls.iter().filter(|(_, k)| k.is_429()).count();
    let n503 = o.calls_of(CallKind::Unavailable);
    let lost = o.calls_of(CallKind::LostReply);
    let peak_backlog = o.samples.iter().map(|s| s.visible).max().unwrap_or(0);
    let peak_dlq = o.samples.iter().map(|s| s.dlq).max().unwrap_or(0);
    let peak_retrying = o
        .samples
        .iter()
        .filter(|s| s.minute > sc.last_expiry_min())
        .map(|s| s.delayed)
        .max()
        .unwrap_or(0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nsluice drill: reservation expiry against a rate-limited upstream"
    );
    let _ = writeln!(
        s,
        "  scenario   {} reservations held {:.0} min, made over {:.0} min; {} poison, {} undecodable",
        sc.reservations,
        sc.hold.as_secs_f64() / 60.0,
        sc.arrival_window.as_secs_f64() / 60.0,
        sc.poison,
        sc.undecodable
    );
    let _ = writeln!(
        s,
        "  upstream   quota {}/min, {}% random 429 (Retry-After {:.0}s), {}% lost replies; outage minute {os:.1} to {oe:.1}",
        sc.quota_per_min,
        sc.random_429_pct,
        sc.random_retry_after.as_secs_f64(),
        sc.lost_reply_pct
    );
    let pacing = match o.mode {
        Mode::Tuned => format!("limiter {:.0}/min", sc.worker_per_min()),
        Mode::Adaptive => format!(
            "no limiter; queue adaptive {}..{}/min + breaker",
            sc.adaptive_min_per_min, sc.adaptive_max_per_min
        ),
    };
    let _ = writeln!(
        s,
        "  retries    max_receive_count {}, backoff {:.0}s..{:.0}s, {pacing}{}{}",
        sc.max_receive_count,
        sc.backoff_base.as_secs_f64(),
        sc.backoff_max.as_secs_f64(),
        if sc.no_idempotency_key {
            ", NO idempotency key"
        } else {
            ", key expire:<id>"
        },
        if sc.retry_permanent_errors {
            ", permanent errors RETRIED"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  run        {:.0} scenario min in {:.1} s (time scale {}); queue {}",
        o.ended_at, o.real_secs, sc.scale, o.queue
    );
    let _ = writeln!(
        s,
        "  upstream   {calls} calls: {n429} x 429, {n503} x 503 (outage), {lost} lost replies, {} repeats absorbed",
        o.repeats
    );
    let _ = writeln!(
        s,
        "  queue      peak backlog {peak_backlog}, peak DLQ {peak_dlq}, peak in backoff after the last expiry {peak_retrying}; DLQ at end {}, unprocessable {}",
        o.dlq.len(),
        o.unprocessable.len()
    );
    let moved: u64 = o.operator.batches.iter().map(|b| b.moved).sum();
    let _ = writeln!(
        s,
        "  operator   {} redrive batches (≤ {} each), {moved} moved, {} pauses{}",
        o.operator.batches.len(),
        sc.redrive_batch,
        o.operator.pauses,
        if o.operator.errors.is_empty() {
            String::new()
        } else {
            format!(
                ", {} errors (first: {})",
                o.operator.errors.len(),
                o.operator.errors[0]
            )
        }
    );
    if o.mode == Mode::Adaptive {
        let rates: Vec<f64> = o
            .samples
            .iter()
            .filter_map(|x| x.flow.rate_per_min)
            .collect();
        let open_min = open_minutes(o);
        let lowest = rates.iter().copied().reduce(f64::min).unwrap_or(0.0);
        let highest = rates.iter().copied().reduce(f64::max).unwrap_or(0.0);
        let opened = o
            .breaker_transitions
            .iter()
            .filter(|(_, t)| t == "open")
            .count();
        let _ = writeln!(
            s,
            "  flow       adapted rate {lowest:.0} to {highest:.0}/min (at the end {:.0}); \
             breaker opened {opened} times, open or half-open {open_min:.1} min",
            rates.last().copied().unwrap_or(0.0),
        );
    }
    if let Some((rate, minutes)) = busy_call_rate(o, 50)
        && o.mode == Mode::Tuned
        && minutes >= 3
        && rate < sc.worker_per_min() * 0.5
    {
        let _ = writeln!(
            s,
            "  WARNING    with work waiting the worker made only {rate:.0} calls a minute \
             (limiter {:.0}) over {minutes} minutes: this machine did not keep up with time \
             scale {}, so the verdict may reflect the machine; try a lower --time-scale",
            sc.worker_per_min(),
            sc.scale
        );
    }
    let _ = writeln!(s);
    for v in verdicts {
        let _ = writeln!(s, "{v}");
    }
    let failed = verdicts.iter().filter(|v| !v.pass).count();
    let _ = writeln!(
        s,
        "\n{}",
        if failed == 0 {
            "drill PASSED".to_owned()
        } else {
            format!("drill FAILED: {failed} of {} criteria", verdicts.len())
        }
    );
    s
}

/// What the tuned run beside an adaptive one did, in a few lines.
pub fn reference_summary(r: &Observed, verdicts: &[Verdict]) -> String {
    let n = r.calls.len().max(1);
    let n429 = r.calls.iter().filter(|(_, k)| k.is_429()).count();
    let drained = r.drained_at.map_or_else(
        || "not drained".to_owned(),
        |m| format!("drained at minute {m:.0}"),
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nthe tuned run beside it (queue {}, worker limiter {:.0}/min): {drained}; {} valid \
         tasks dead-lettered, {} redriven; {n429} x 429 of {} calls ({:.1}%); criteria 1-4: {}",
        r.queue,
        r.scenario.worker_per_min(),
        valid_dead_lettered(r),
        r.redriven,
        r.calls.len(),
        n429 as f64 * 100.0 / n as f64,
        verdicts
            .iter()
            .map(|v| format!("{} {}", v.number, if v.pass { "pass" } else { "FAIL" }))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s
}

/// Scenario minutes the breaker spent open or half-open, from its transitions.
fn open_minutes(o: &Observed) -> f64 {
    breaker_spans(o).iter().map(|(a, b, _)| b - a).sum()
}

/// The spans the breaker was not closed: (from, to, state).
fn breaker_spans(o: &Observed) -> Vec<(f64, f64, &str)> {
    let mut spans = Vec::new();
    let t = &o.breaker_transitions;
    for (i, (at, state)) in t.iter().enumerate() {
        if state == "closed" {
            continue;
        }
        let end = t.get(i + 1).map_or(o.ended_at, |n| n.0);
        spans.push((at.max(0.0), end.max(0.0), state.as_str()));
    }
    spans
}

/// Escapes text for SVG and HTML.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A polyline of `pts` in `color`, through the axes `x` and `y`.
pub(crate) fn polyline(
    pts: &[(f64, f64)],
    color: &str,
    x: impl Fn(f64) -> f64,
    y: impl Fn(f64) -> f64,
) -> String {
    let mut d = String::new();
    for (a, b) in pts {
        let _ = write!(d, "{:.1},{:.1} ", x(*a), y(*b));
    }
    format!(r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{d}"/>"#)
}

/// The next round number (1, 2 or 5 times a power of ten) at or above `v`.
pub(crate) fn nice_max(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if v <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

/// The timeline chart: SVG, or an HTML page holding it and the summary with `verdicts`. For
/// an adaptive run, a third panel draws the adapted rate and the breaker, and the tuned run
/// beside it (`reference`) has its backlog drawn dashed in the first.
///
/// Long because the panels share one time axis, outage span and frame: the series are built, each
/// panel is drawn with its own extras (outage label, quota line, redrive batches), then the axis
/// and the HTML page.
pub fn chart(
    o: &Observed,
    reference: Option<&Observed>,
    verdicts: &[Verdict],
    html: bool,
) -> String {
    let sc = &o.scenario;
    let adaptive = o.mode == Mode::Adaptive;
    let (w, h) = (900.0, if adaptive { 790.0 } else { 560.0 });
    let (left, right) = (70.0, 880.0);
    let panels = [(50.0, 270.0), (320.0, 520.0)];
    let t_max = reference
        .map_or(o.ended_at, |r| r.ended_at.max(o.ended_at))
        .max(1.0)
        .ceil();
    let x = |m: f64| left + (right - left) * m / t_max;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r##"<rect width="{w}" height="{h}" fill="#fff"/>"##);
    let _ = write!(
        svg,
        r#"<text x="{left}" y="24" font-size="15" font-weight="bold">sluice drill{} — {} reservations, quota {}/min, outage {:.0} min (scenario minutes)</text>"#,
        if adaptive { " --adaptive" } else { "" },
        sc.reservations,
        sc.quota_per_min,
        sc.outage.as_secs_f64() / 60.0
    );
    let (os, oe) = sc.outage_min();
    // Calls and 429s per minute.
    let n = t_max as usize + 1;
    let mut per_min = vec![0f64; n];
    let mut per_min_429 = vec![0f64; n];
    for (m, k) in &o.calls {
        let i = (m.max(0.0) as usize).min(n - 1);
        per_min[i] += 1.0;
        if k.is_429() {
            per_min_429[i] += 1.0;
        }
    }
    let mut series_top: Vec<Series> = vec![
        (
            "backlog (visible)",
            "#1f77b4",
            o.samples
                .iter()
                .map(|s| (s.minute, s.visible as f64))
                .collect(),
        ),
        (
            "in flight",
            "#2ca02c",
            o.samples
                .iter()
                .map(|s| (s.minute, s.in_flight as f64))
                .collect(),
        ),
        (
            "DLQ depth",
            "#d62728",
            o.samples.iter().map(|s| (s.minute, s.dlq as f64)).collect(),
        ),
    ];
    if let Some(r) = reference {
        series_top.push((
            "tuned run's backlog",
            "#888",
            r.samples
                .iter()
                .map(|s| (s.minute, s.visible as f64))
                .collect(),
        ));
    }
    let series_bottom: Vec<Series> = vec![
        (
            "upstream calls / min",
            "#9467bd",
            per_min
                .iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 0.5, *v))
                .collect(),
        ),
        (
            "429s / min",
            "#ff7f0e",
            per_min_429
                .iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 0.5, *v))
                .collect(),
        ),
    ];
    for (pi, ((top, bottom), series)) in panels.iter().zip([series_top, series_bottom]).enumerate()
    {
        let vmax = nice_max(series.iter().flat_map(|s| s.2.iter().map(|p| p.1)).fold(
            if pi == 1 {
                f64::from(sc.quota_per_min)
            } else {
                1.0
            },
            f64::max,
        ));
        let y = |v: f64| bottom - (bottom - top) * v / vmax;
        frame(
            &mut svg,
            (x(os), x(oe)),
            (*top, *bottom),
            (left, right),
            vmax,
        );
        if pi == 0 {
            let _ = write!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" fill="#555">outage</text>"##,
                x(os) + 3.0,
                top + 14.0
            );
        }
        if pi == 1 {
            let q = f64::from(sc.quota_per_min);
            let _ = write!(
                svg,
                r##"<line x1="{left}" x2="{right}" y1="{0:.1}" y2="{0:.1}" stroke="#000" stroke-dasharray="5,4"/><text x="{right}" y="{1:.1}" text-anchor="end">quota {q}/min</text>"##,
                y(q),
                y(q) - 4.0
            );
        }
        for (i, (name, color, pts)) in series.iter().enumerate() {
            let mut line = polyline(pts, color, x, y);
            if *color == "#888" {
                line = line.replace("/>", r#" stroke-dasharray="6,4"/>"#);
            }
            svg.push_str(&line);
            let lx = left + 10.0 + 170.0 * i as f64;
            let _ = write!(
                svg,
                r#"<rect x="{lx}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                top - 10.0,
                lx + 16.0,
                top - 5.0,
                esc(name)
            );
        }
        if pi == 1 {
            for b in &o.operator.batches {
                let _ = write!(
                    svg,
                    r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="5" fill="#17becf"/>"##,
                    x(b.start_min),
                    bottom - 5.0,
                    (x(b.end_min) - x(b.start_min)).max(1.0)
                );
            }
            let _ = write!(
                svg,
                r##"<text x="{right}" y="{:.1}" text-anchor="end" fill="#17becf">redrive batches</text>"##,
                bottom - 8.0
            );
        }
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#333"/>"##
        );
    }
    if adaptive {
        flow_panel(&mut svg, o, (570.0, 750.0), (left, right), x);
    }
    let step = nice_max(t_max / 10.0);
    let mut m = 0.0;
    while m <= t_max {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{m}</text>"#,
            x(m),
            h - 22.0
        );
        m += step;
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">scenario minute</text></svg>"#,
        (left + right) / 2.0,
        h - 5.0
    );
    if !html {
        return svg;
    }
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>sluice drill</title></head><body>",
    );
    page.push_str(&svg);
    page.push_str("<pre>");
    if let Some(r) = reference {
        page.push_str(&esc(&reference_summary(r, &super::criteria::judge(r))));
    }
    page.push_str(&esc(&summary(o, verdicts)));
    page.push_str("</pre></body></html>\n");
    page
}

/// A span of a breaker's state as a band from `x0` to `x1` at `y`, `height` tall: red while
/// open, amber while half-open.
pub(crate) fn breaker_band(
    svg: &mut String,
    (x0, x1): (f64, f64),
    (y, height): (f64, f64),
    open: bool,
) {
    let color = if open { "#d62728" } else { "#ffbf00" };
    let _ = write!(
        svg,
        r#"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{height}" fill="{color}"/>"#,
        (x1 - x0).max(1.5)
    );
}

/// A panel's frame: the outage (`from`, `to`) shaded, and grid lines labelled 0 to `vmax`.
fn frame(
    svg: &mut String,
    (from, to): (f64, f64),
    (top, bottom): (f64, f64),
    (left, right): (f64, f64),
    vmax: f64,
) {
    let _ = write!(
        svg,
        r##"<rect x="{from:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#999" fill-opacity="0.18"/>"##,
        (to - from).max(1.0),
        bottom - top
    );
    for k in 0..=4 {
        let v = vmax * f64::from(k) / 4.0;
        let y = bottom - (bottom - top) * v / vmax;
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{0}" y="{1:.1}" text-anchor="end">{2}</text>"##,
            left - 6.0,
            y + 4.0,
            v.round()
        );
    }
}

/// The adaptive run's third panel: the adapted rate per scenario minute against the quota,
/// and the breaker's open (red) and half-open (amber) spans as bands along its foot.
fn flow_panel(
    svg: &mut String,
    o: &Observed,
    (top, bottom): (f64, f64),
    (left, right): (f64, f64),
    x: impl Fn(f64) -> f64 + Copy,
) {
    let sc = &o.scenario;
    let q = f64::from(sc.quota_per_min);
    let pts: Vec<(f64, f64)> = o
        .samples
        .iter()
        .filter_map(|s| s.flow.rate_per_min.map(|r| (s.minute, r)))
        .collect();
    let vmax = nice_max(pts.iter().map(|p| p.1).fold(q * 1.5, f64::max));
    let y = |v: f64| bottom - (bottom - top) * v / vmax;
    let (os, oe) = sc.outage_min();
    frame(svg, (x(os), x(oe)), (top, bottom), (left, right), vmax);
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{right}" y1="{0:.1}" y2="{0:.1}" stroke="#000" stroke-dasharray="5,4"/><text x="{right}" y="{1:.1}" text-anchor="end">quota {q}/min (unknown to the worker)</text>"##,
        y(q),
        y(q) - 4.0
    );
    for (a, b, state) in breaker_spans(o) {
        breaker_band(svg, (x(a), x(b)), (bottom - 10.0, 10.0), state == "open");
    }
    svg.push_str(&polyline(&pts, "#8c564b", x, y));
    let legend: [(&str, &str); 3] = [
        ("adapted rate / min", "#8c564b"),
        ("breaker open", "#d62728"),
        ("breaker half-open", "#ffbf00"),
    ];
    for (i, (name, color)) in legend.iter().enumerate() {
        let lx = left + 10.0 + 170.0 * i as f64;
        let _ = write!(
            svg,
            r#"<rect x="{lx}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            top - 10.0,
            lx + 16.0,
            top - 5.0,
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#333"/>"##
    );
}
