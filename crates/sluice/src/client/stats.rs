//! `sluice stats [QUEUE] [--watch] [--chart]`: backlog, in flight, DLQ depth, rates and the
//! backlog trend.
//!
//! Without a queue, one table row per queue; with one, every gauge and total of that queue,
//! and a governed queue's adaptive rate and breaker.
//! `--watch` redraws every `--interval` until Ctrl-C (and stops by itself after 24 h);
//! `--chart` draws the queue's backlog and DLQ depth over `--window` from the broker's history
//! (a sample every 10 s) as plain text, and with `--watch` redraws it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use sluice_client::Client;
use sluice_client::wire::{RatesView, SampleView, StatsView, TrendView};

use super::args::{fmt_ms, fmt_secs, parse_duration, short_time, time_ago, time_ms};
use super::governance::{breaker_line, last_transition, rate_line};
use super::output::Table;
use super::{Conn, Failure};

/// The longest a `--watch` runs.
const WATCH_MAX: Duration = Duration::from_secs(24 * 3600);
/// How long the broker keeps history.
const HISTORY_MAX: Duration = Duration::from_secs(24 * 3600);

/// `sluice stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    conn: Conn,
    /// The queue [default: every queue, one row each].
    queue: Option<String>,
    /// Redraw every --interval until Ctrl-C (stops by itself after 24h); with --chart,
    /// redraws the chart.
    #[arg(long)]
    watch: bool,
    /// Time between redraws with --watch, e.g. 2s.
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = parse_duration)]
    interval: Duration,
    /// Draw the queue's backlog (visible) and DLQ depth over --window as a chart.
    #[arg(long, requires = "queue")]
    chart: bool,
    /// How far back --chart looks, e.g. 15m or 6h (the broker keeps 24h).
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = parse_duration)]
    window: Duration,
}

/// Runs `sluice stats`.
pub async fn run(a: StatsArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let view = if a.chart {
        let Some(q) = a.queue.clone() else {
            return Err(Failure::Usage(
                "--chart needs a queue: sluice stats QUEUE --chart".into(),
            ));
        };
        View::Chart(q, chart_window(a.window)?)
    } else {
        View::Table(a.queue.clone())
    };
    if a.watch {
        if a.interval < Duration::from_millis(100) {
            return Err(Failure::Usage(
                "--interval must be at least 100ms, e.g. 2s".to_owned(),
            ));
        }
        return watch(&c, &view, a.interval, a.conn.json).await;
    }
    let text = view.draw(&c, a.conn.json).await?;
    print!("{text}");
    Ok(())
}

/// What `stats` shows: the table (one queue or all), or one queue's chart.
enum View {
    Table(Option<String>),
    Chart(String, Duration),
}

impl View {
    /// One frame, as text or as one line of JSON.
    async fn draw(&self, c: &Client, as_json: bool) -> Result<String, Failure> {
        match self {
            View::Table(queue) => {
                let frame = fetch(c, queue.as_deref()).await?;
                if as_json {
                    let v = match (queue.is_some(), frame.first()) {
                        (true, Some(s)) => serde_json::to_value(s),
                        _ => serde_json::to_value(json!({
                            "at": sluice_wire::rfc3339(time_ago(Duration::ZERO)),
                            "queues": frame,
                        })),
                    }
                    .map_err(|e| Failure::Other(format!("cannot print JSON: {e}")))?;
                    return Ok(format!("{v}\n"));
                }
                Ok(render(&frame, queue.is_some()))
            }
            View::Chart(queue, window) => chart(c, queue, *window, as_json).await,
        }
    }
}

/// The stats of one queue, or of every queue.
async fn fetch(c: &Client, queue: Option<&str>) -> Result<Vec<StatsView>, Failure> {
    if let Some(q) = queue {
        return Ok(vec![c.stats(q).await?]);
    }
    let queues = c.list_queues().await?;
    let mut set = tokio::task::JoinSet::new();
    for (i, q) in queues.into_iter().enumerate() {
        let c = c.clone();
        set.spawn(async move { (i, c.stats(&q.name).await) });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        let (i, r) =
            r.map_err(|e| Failure::Other(format!("a stats request did not finish: {e}")))?;
        match r {
            Ok(s) => out.push((i, s)),
            // Deleted since the list, or not ours to see: leave it out.
            Err(e)
                if e.is_not_found()
                    || e.code() == Some(sluice_client::ErrorCode::PermissionDenied) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, s)| s).collect())
}

/// A depth's trend as an arrow and its change over the last minute: `↑ +91 in 1m`,
/// `↓ -24 in 1m`, `→ flat`.
/// When the recent span turned against the minute, its pace instead: `↓ -20/s now`.
fn trend(f: &TrendView) -> String {
    match f.direction.as_str() {
        "rising" if f.change_1m > 0 => format!("↑ +{} in 1m", f.change_1m),
        "falling" if f.change_1m < 0 => format!("↓ {} in 1m", f.change_1m),
        "rising" => format!("↑ {} now", signed(f.slope)),
        "falling" => format!("↓ {} now", signed(f.slope)),
        _ => "→ flat".to_owned(),
    }
}

/// The change per second over 1 and 5 minutes: `+0.83/s 1m, +0.17/s 5m`.
fn slopes(f: &TrendView) -> String {
    format!("{} 1m, {} 5m", signed(f.slope), signed(f.slope_5m))
}

fn signed(v: f64) -> String {
    if v > 0.0 {
        format!("+{}/s", num(v))
    } else if v < 0.0 {
        format!("-{}/s", num(-v))
    } else {
        "0/s".to_owned()
    }
}

/// A rate compactly: `0`, `0.25`, `12.5`, `1200`.
fn num(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v < 10.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// An ETA; `stalled 25s` when messages wait and nothing has left for that long; `-` while
/// nothing is being taken out.
fn eta(f: &TrendView) -> String {
    match (f.eta_ms, f.stalled_for_ms) {
        (Some(ms), _) => fmt_secs(ms.div_ceil(1000)),
        (None, Some(ms)) => format!("stalled {}", fmt_secs(ms / 1000)),
        (None, None) => "-".to_owned(),
    }
}

/// Rates of one window on one line.
fn rates_line(r: &RatesView) -> String {
    format!(
        "sent {}/s, received {}/s, acked {}/s, nacked {}/s, dead-lettered {}/s, redriven {}/s, expired {}/s",
        num(r.sent),
        num(r.received),
        num(r.acked),
        num(r.nacked),
        num(r.dead_lettered),
        num(r.redriven),
        num(r.expired)
    )
}

fn render(frame: &[StatsView], one: bool) -> String {
    if one && let Some(s) = frame.first() {
        return render_one(s);
    }
    let mut t = Table::new(&[
        "QUEUE",
        "VISIBLE",
        "DELAYED",
        "IN FLIGHT",
        "DLQ",
        "OLDEST",
        "SENT/S",
        "ACKED/S",
        "TREND",
        "DLQ TREND",
        "ETA",
    ]);
    for s in frame {
        t.row(vec![
            s.queue.clone(),
            s.visible.to_string(),
            s.delayed.to_string(),
            s.in_flight.to_string(),
            s.dead_letter_depth.to_string(),
            if s.visible == 0 {
                "-".to_owned()
            } else {
                fmt_secs(s.oldest_visible_age_ms / 1000)
            },
            num(s.rates.sent),
            num(s.rates.acked),
            trend(&s.backlog_trend),
            trend(&s.dlq_trend),
            eta(&s.backlog_trend),
        ]);
    }
    t.render()
}

fn render_one(s: &StatsView) -> String {
    let t = &s.totals;
    let pairs = [
        ("queue", s.queue.clone()),
        ("visible", s.visible.to_string()),
        ("delayed", s.delayed.to_string()),
        ("in_flight", s.in_flight.to_string()),
        ("dead_letter_depth", s.dead_letter_depth.to_string()),
        ("oldest_visible_age", fmt_ms(s.oldest_visible_age_ms)),
        ("completed", s.completed.to_string()),
        ("sent", t.sent.to_string()),
        ("received", t.received.to_string()),
        ("acked", t.acked.to_string()),
        ("nacked", t.nacked.to_string()),
        ("dead_lettered", t.dead_lettered.to_string()),
        ("redriven", t.redriven.to_string()),
        ("expired", t.expired.to_string()),
        ("rates (1m)", rates_line(&s.rates)),
        ("rates (5m)", rates_line(&s.rates_5m)),
        ("rates (15m)", rates_line(&s.rates_15m)),
        (
            "backlog trend",
            format!("{} ({})", trend(&s.backlog_trend), slopes(&s.backlog_trend)),
        ),
        ("drain_eta", eta(&s.backlog_trend)),
        (
            "dlq trend",
            format!("{} ({})", trend(&s.dlq_trend), slopes(&s.dlq_trend)),
        ),
        ("dlq_empty_eta", eta(&s.dlq_trend)),
    ];
    let mut pairs = pairs.to_vec();
    if let Some(f) = &s.flow {
        if let Some(r) = rate_line(f) {
            pairs.push(("adaptive rate", r));
        }
        if let Some(b) = &f.breaker {
            pairs.push(("breaker", breaker_line(b)));
            if let Some(t) = last_transition(b) {
                pairs.push(("breaker change", t));
            }
        }
    }
    details_string(&pairs)
}

fn details_string(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

async fn watch(c: &Client, view: &View, interval: Duration, as_json: bool) -> Result<(), Failure> {
    let tty = std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut ctrl_c => break,
        }
        if started.elapsed() >= WATCH_MAX {
            eprintln!("stats --watch stops after 24h; run it again to go on");
            break;
        }
        let frame = match view.draw(c, as_json).await {
            Ok(f) => Ok(f),
            Err(Failure::Api(e)) if e.is_connect() || e.is_transient() || e.is_timeout() => {
                Err(format!("broker not answering: {e} (retrying)"))
            }
            Err(f) => return Err(f),
        };
        let mut out = String::new();
        if as_json {
            match frame {
                Ok(f) => out.push_str(&f),
                Err(msg) => eprintln!("{msg}"),
            }
        } else {
            if tty {
                // Home the cursor and clear the screen, then draw the frame.
                out.push_str("\x1b[H\x1b[2J");
            } else {
                out.push('\n');
            }
            let now = sluice_wire::rfc3339(time_ago(Duration::ZERO));
            out.push_str(&format!(
                "{}  every {}  (Ctrl-C to stop)\n\n",
                short_time(&now),
                fmt_ms(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX))
            ));
            match frame {
                Ok(f) => out.push_str(&f),
                Err(msg) => {
                    out.push_str(&msg);
                    out.push('\n');
                }
            }
        }
        let mut stdout = std::io::stdout().lock();
        if stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            // The reader went away (e.g. `| head`): stop quietly.
            return Ok(());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// --chart
// ---------------------------------------------------------------------------------------------

/// Chart width in columns (one column per time bucket) and height in rows.
const CHART_WIDTH: usize = 60;
const CHART_HEIGHT: usize = 8;
/// Eighths of a cell, from empty to full.
const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `--window` checked and capped to the history the broker keeps.
fn chart_window(window: Duration) -> Result<Duration, Failure> {
    if window.is_zero() {
        return Err(Failure::Usage(
            "--window must be more than 0s, e.g. 1h".into(),
        ));
    }
    if window > HISTORY_MAX {
        eprintln!("the broker keeps 24h of history; showing the last 24h");
        return Ok(HISTORY_MAX);
    }
    Ok(window)
}

/// The backlog and DLQ charts of `queue` over `window`, or its history as JSON.
async fn chart(
    c: &Client,
    queue: &str,
    window: Duration,
    as_json: bool,
) -> Result<String, Failure> {
    let start = time_ago(window);
    let h = c
        .stats_history(queue, Some(&sluice_wire::rfc3339(start)))
        .await?;
    if as_json {
        let v = serde_json::to_string(&h)
            .map_err(|e| Failure::Other(format!("cannot print JSON: {e}")))?;
        return Ok(format!("{v}\n"));
    }
    let end_ms = time_ago(Duration::ZERO).as_millis();
    let start_ms = start.as_millis();
    let points: Vec<(i64, &SampleView)> = h
        .samples
        .iter()
        .filter_map(|s| time_ms(&s.at).map(|t| (t, s)))
        .collect();
    let mut out = format!(
        "{queue}: last {} (a sample every {})\n",
        fmt_ms(u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
        fmt_ms(h.interval_ms)
    );
    if points.is_empty() {
        out.push_str(&format!(
            "no history yet: the broker samples every {}; try again shortly\n",
            fmt_ms(h.interval_ms)
        ));
        return Ok(out);
    }
    let backlog: Vec<(i64, u64)> = points
        .iter()
        .map(|(t, s)| (*t, s.visible + s.delayed + s.in_flight))
        .collect();
    let dlq: Vec<(i64, u64)> = points
        .iter()
        .map(|(t, s)| (*t, s.dead_letter_depth))
        .collect();
    for (title, series) in [
        ("backlog (visible + delayed + in flight)", &backlog),
        ("DLQ depth", &dlq),
    ] {
        out.push('\n');
        out.push_str(&draw(
            title,
            series,
            start_ms,
            end_ms,
            CHART_WIDTH,
            CHART_HEIGHT,
        ));
    }
    Ok(out)
}

/// The largest value of the samples falling in each of `width` time buckets over
/// `[start, end]`; `None` for a bucket without samples.
fn buckets(points: &[(i64, u64)], start: i64, end: i64, width: usize) -> Vec<Option<u64>> {
    let mut out = vec![None; width];
    let span = (end - start).max(1);
    for &(t, v) in points {
        if t < start || t > end {
            continue;
        }
        let i = usize::try_from((t - start) * width as i64 / span)
            .unwrap_or(0)
            .min(width - 1);
        out[i] = Some(out[i].map_or(v, |o: u64| o.max(v)));
    }
    out
}

/// A bar chart of `points` over `[start, end]` (ms since the epoch) as plain text: a title
/// with the latest and largest values, `height` rows of block characters under a y axis
/// labelled with the maximum and 0, and a time axis labelled with its ends (UTC).
fn draw(
    title: &str,
    points: &[(i64, u64)],
    start: i64,
    end: i64,
    width: usize,
    height: usize,
) -> String {
    let cols = buckets(points, start, end, width);
    let max = cols.iter().flatten().copied().max().unwrap_or(0);
    let last = points.last().map_or(0, |p| p.1);
    let top = max.max(1);
    let label_w = top.to_string().len();
    let mut out = format!("{title}: now {last}, max {max}\n");
    // Each column's height in eighths of a row.
    let eighths: Vec<Option<usize>> = cols
        .iter()
        .map(|c| {
            c.map(|v| {
                let e = (v as f64 / top as f64 * (height * 8) as f64).round() as usize;
                // Anything above zero shows at least a sliver.
                if v > 0 { e.max(1) } else { 0 }
            })
        })
        .collect();
    for row in (0..height).rev() {
        let label = if row + 1 == height {
            top.to_string()
        } else if row == 0 {
            "0".to_owned()
        } else {
            String::new()
        };
        out.push_str(&format!("{label:>label_w$} ┤"));
        for e in &eighths {
            let ch = match e {
                None => ' ',
                Some(e) => {
                    let fill = e.saturating_sub(row * 8).min(8);
                    // A zero value still marks that a sample exists.
                    if row == 0 && *e == 0 {
                        '_'
                    } else {
                        LEVELS[fill]
                    }
                }
            };
            out.push(ch);
        }
        out.push('\n');
    }
    out.push_str(&format!("{:>label_w$} └{}\n", "", "─".repeat(width)));
    let left = short_time(&sluice_wire::rfc3339(sluice_core::Timestamp(start)));
    let right = short_time(&sluice_wire::rfc3339(sluice_core::Timestamp(end)));
    let gap = (width + 2).saturating_sub(left.len() + right.len()).max(1);
    out.push_str(&format!(
        "{:>label_w$}{left}{}{right}\n",
        "",
        " ".repeat(gap)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrows() {
        let flow = |direction: &str, slope: f64| TrendView {
            direction: direction.to_owned(),
            change_1m: (slope * 60.0) as i64,
            slope,
            slope_1m: slope,
            slope_5m: 0.0,
            eta_ms: None,
            stalled_for_ms: None,
        };
        assert_eq!(trend(&flow("rising", 1.5)), "↑ +90 in 1m");
        assert_eq!(trend(&flow("falling", -0.4)), "↓ -24 in 1m");
        assert_eq!(trend(&flow("flat", 0.3)), "→ flat");
        let turned = TrendView {
            change_1m: 380,
            ..flow("falling", -20.0)
        };
        assert_eq!(trend(&turned), "↓ -20.0/s now");
        assert_eq!(slopes(&flow("falling", -0.4)), "-0.4/s 1m, 0/s 5m");
        let stalled = TrendView {
            stalled_for_ms: Some(25_400),
            ..flow("flat", 0.0)
        };
        assert_eq!(eta(&stalled), "stalled 25s");
        assert_eq!(num(1200.4), "1200");
        assert_eq!(num(12.34), "12.3");
    }

    #[test]
    fn chart_draws_max_and_time_axis() {
        let start = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let end = start + 600_000;
        let points = [(start, 0), (start + 300_000, 40), (end, 80)];
        let text = draw("backlog", &points, start, end, 10, 4);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "backlog: now 80, max 80");
        assert!(lines[1].starts_with("80 ┤"), "{text}");
        assert!(lines[1].ends_with('█'), "{text}");
        assert!(lines[4].starts_with(" 0 ┤_"), "{text}");
        assert!(text.contains("2026-01-01 00:00:00Z"), "{text}");
        assert!(text.contains("2026-01-01 00:10:00Z"), "{text}");
        // Half height in the middle column.
        let mid: Vec<char> = lines[3].chars().collect();
        assert_eq!(mid[4 + 5], '█', "{text}");
        assert_eq!(lines[2].chars().nth(4 + 5), Some(' '), "{text}");
    }

    #[test]
    fn empty_buckets_stay_blank() {
        let b = buckets(&[(0, 5), (100, 7), (100, 3)], 0, 100, 4);
        assert_eq!(b, vec![Some(5), None, None, Some(7)]);
    }
}
