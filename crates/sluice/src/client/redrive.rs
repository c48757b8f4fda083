//! `sluice redrive QUEUE`: start a rate-limited, optionally guarded redrive job and watch it,
//! and `sluice redrive list|show|pause|resume|cancel`.
//!
//! The job runs in the broker: this command only starts it (with an `Idempotency-Key`, so a
//! retried start cannot start two) and polls its progress every 250 ms. Ctrl-C detaches —
//! the job keeps running — and says how to cancel it.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use sluice_client::wire::{RedriveFilterView, RedriveGuardView, RedriveRequest, RedriveView};
use sluice_client::{Client, ErrorCode};

use super::args::{parse_percent, parse_redrive_rate, short_time};
use super::dlq::resolve_dlq;
use super::filter::DlqFilterArgs;
use super::output::{Table, details, json, or_dash};
use super::{Conn, Failure};

/// How often a running job is polled.
const POLL: Duration = Duration::from_millis(250);
/// How long polling may keep failing (e.g. while the broker restarts) before giving up.
const POLL_OUTAGE: Duration = Duration::from_secs(60);

/// `sluice redrive ...`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RedriveArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Option<RedriveCommand>,
    #[command(flatten)]
    start: StartArgs,
}

#[derive(Debug, Subcommand)]
enum RedriveCommand {
    /// List running redrive jobs and the most recent finished ones.
    List,
    /// Show one job and its progress.
    Show {
        /// The job id (16 hex digits).
        id: String,
    },
    /// Stop a running or paused job for good; what it moved stays moved.
    Cancel {
        /// The job id (16 hex digits).
        id: String,
    },
    /// Pause a running job; it keeps its place and its source until resumed.
    Pause {
        /// The job id (16 hex digits).
        id: String,
    },
    /// Resume a paused job (paused by hand or by its guard).
    Resume {
        /// The job id (16 hex digits).
        id: String,
    },
}

#[derive(Debug, Args)]
struct StartArgs {
    /// The dead-letter queue to move from, or a source queue (then its DLQ).
    #[arg(required = true)]
    queue: Option<String>,
    /// Move at most this many.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Never move more than this in any sliding period, spread evenly: e.g. 50/min (an
    /// upstream's quota), 10/s or 1000/h.
    #[arg(long, value_name = "RATE", value_parser = parse_redrive_rate)]
    rate: Option<sluice_client::wire::RateLimitWire>,
    /// Pause the job when more than this share of the messages it moved fail again (nacked,
    /// rejected or dead-lettered), e.g. 10%; resume it with `sluice redrive resume ID`.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pause_if_failing: Option<u8>,
    /// How many of the latest outcomes --pause-if-failing judges [default: 20].
    #[arg(long, value_name = "N", requires = "pause_if_failing",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    guard_window: Option<u32>,
    /// Count only failures whose error contains this text for --pause-if-failing, e.g. 429.
    #[arg(long, value_name = "TEXT", requires = "pause_if_failing")]
    guard_error: Option<String>,
    #[command(flatten)]
    filter: DlqFilterArgs,
    /// Move everything to this queue instead of each message's source queue.
    #[arg(long, value_name = "QUEUE")]
    to: Option<String>,
    /// Keep the messages' receive counts (by default they start afresh).
    #[arg(long)]
    keep_receive_count: bool,
    /// Count what would move; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the job id and exit; the job runs on in the broker.
    #[arg(long)]
    detach: bool,
    /// Idempotency key of the start [default: a fresh one]: the same key with the same
    /// request within 24 h answers the first job instead of starting another.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
}

/// Runs `sluice redrive`.
pub async fn run(a: RedriveArgs) -> Result<(), Failure> {
    let c = a.conn.client()?;
    let as_json = a.conn.json;
    match a.cmd {
        Some(RedriveCommand::List) => {
            let jobs = c.list_redrives().await?;
            if as_json {
                return json(&json!({ "redrives": jobs }));
            }
            let mut t = Table::new(&[
                "ID",
                "STATE",
                "SOURCE",
                "DESTINATION",
                "MOVED",
                "MATCHED",
                "SKIPPED",
                "RATE",
                "CREATED",
            ]);
            for j in &jobs {
                t.row(vec![
                    j.id.clone(),
                    state_label(j),
                    j.source.clone(),
                    destination(j),
                    j.moved.to_string(),
                    j.matched.to_string(),
                    j.skipped.to_string(),
                    rate_text(j),
                    short_time(&j.created_at),
                ]);
            }
            t.print();
            if jobs.is_empty() {
                eprintln!("no redrive jobs");
            }
            Ok(())
        }
        Some(RedriveCommand::Show { id }) => {
            let j = c.get_redrive(&id).await?;
            if as_json {
                return json(&j);
            }
            show(&j);
            Ok(())
        }
        Some(RedriveCommand::Pause { id }) => {
            let j = c.pause_redrive(&id).await?;
            if as_json {
                return json(&j);
            }
            println!(
                "redrive {} is {} after moving {} of {} matched; resume it with `sluice redrive resume {}`",
                j.id, j.state, j.moved, j.matched, j.id
            );
            Ok(())
        }
        Some(RedriveCommand::Resume { id }) => {
            let j = c.resume_redrive(&id).await?;
            if as_json {
                return json(&j);
            }
            println!(
                "redrive {} is {} ({} moved so far); follow it with `sluice redrive show {}`",
                j.id, j.state, j.moved, j.id
            );
            Ok(())
        }
        Some(RedriveCommand::Cancel { id }) => {
            let j = c.cancel_redrive(&id).await?;
            if as_json {
                return json(&j);
            }
            if j.state == "cancelled" {
                println!(
                    "cancelled redrive {} after moving {} of {} matched (what moved stays moved)",
                    j.id, j.moved, j.matched
                );
            } else {
                println!(
                    "redrive {} had already {}: {} moved; nothing to cancel",
                    j.id, j.state, j.moved
                );
            }
            Ok(())
        }
        None => start(&c, a.start, as_json).await,
    }
}

fn state_label(j: &RedriveView) -> String {
    let mut s = j.state.clone();
    if j.dry_run {
        s.push_str(" (dry run)");
    }
    s
}

/// The rate as asked: `50/min`, `10/s`, `-`.
fn rate_text(j: &RedriveView) -> String {
    let Some(r) = &j.rate else {
        return or_dash(j.rate_per_second.map(|r| format!("{r}/s")));
    };
    match r.period_ms {
        1000 => format!("{}/s", r.limit),
        60_000 => format!("{}/min", r.limit),
        3_600_000 => format!("{}/h", r.limit),
        ms => format!(
            "{}/{}",
            r.limit,
            super::args::fmt_ms(u64::try_from(ms).unwrap_or(0))
        ),
    }
}

fn guard_text(g: Option<&RedriveGuardView>) -> String {
    let Some(g) = g else {
        return "-".to_owned();
    };
    let mut s = format!(
        "pause if more than {}% of the last {} moved fail again",
        g.percent,
        g.window.unwrap_or(20)
    );
    if let Some(e) = &g.error_contains {
        s.push_str(&format!(" with an error containing \"{e}\""));
    }
    s
}

fn destination(j: &RedriveView) -> String {
    j.destination
        .clone()
        .unwrap_or_else(|| "(each source queue)".to_owned())
}

fn filter_text(f: &RedriveFilterView) -> String {
    let mut parts = Vec::new();
    if let Some(e) = &f.error_contains {
        parts.push(format!("error contains \"{e}\""));
    }
    if let Some(e) = &f.error_is {
        parts.push(format!("error is \"{e}\""));
    }
    if let Some(r) = f.reason {
        parts.push(format!("reason {}", super::filter::reason_text(r)));
    }
    if let Some(q) = &f.source_queue {
        parts.push(format!("from {q}"));
    }
    for (k, v) in &f.attributes {
        parts.push(format!("{k}={v}"));
    }
    if let Some(t) = &f.dead_lettered_after {
        parts.push(format!("dead-lettered after {}", short_time(t)));
    }
    if let Some(t) = &f.dead_lettered_before {
        parts.push(format!("dead-lettered before {}", short_time(t)));
    }
    if parts.is_empty() {
        "(all)".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The job's skip reasons on one line, or a dash.
fn reasons_text(j: &RedriveView) -> String {
    if j.skip_reasons.is_empty() {
        "-".to_owned()
    } else {
        j.skip_reasons.join("; ")
    }
}

fn show(j: &RedriveView) {
    details(&[
        ("id", j.id.clone()),
        ("state", state_label(j)),
        ("source", j.source.clone()),
        ("destination", destination(j)),
        ("matched", j.matched.to_string()),
        ("moved", j.moved.to_string()),
        ("to_move", or_dash(j.to_move)),
        ("skipped", j.skipped.to_string()),
        ("would_move", or_dash(j.would_move)),
        ("skip_reasons", reasons_text(j)),
        ("blocked", or_dash(j.blocked.as_ref())),
        ("limit", or_dash(j.limit)),
        ("paused_reason", or_dash(j.paused_reason.as_ref())),
        ("rate", rate_text(j)),
        ("guard", guard_text(j.pause_if_failing.as_ref())),
        ("filter", filter_text(&j.filter)),
        ("reset_receive_count", j.reset_receive_count.to_string()),
        ("dry_run", j.dry_run.to_string()),
        ("created_at", j.created_at.clone()),
        ("updated_at", j.updated_at.clone()),
        ("finished_at", or_dash(j.finished_at.as_ref())),
    ]);
}

async fn start(c: &Client, s: StartArgs, as_json: bool) -> Result<(), Failure> {
    let Some(queue) = s.queue else {
        return Err(Failure::Usage(
            "name the dead-letter queue to redrive from, e.g. `sluice redrive jobs.dlq`".into(),
        ));
    };
    let source = resolve_dlq(c, &queue, as_json).await?;
    if s.to.as_deref() == Some(source.as_str()) {
        return Err(Failure::Usage(format!(
            "--to {source} is the queue the redrive moves from; name another queue, or leave \
             --to out to send each message back to the queue it came from"
        )));
    }
    let req = RedriveRequest {
        source: source.clone(),
        destination: s.to,
        limit: s.limit,
        rate: s.rate,
        rate_per_second: None,
        filter: s.filter.redrive_filter(),
        reset_receive_count: Some(!s.keep_receive_count),
        dry_run: Some(s.dry_run),
        pause_if_failing: s.pause_if_failing.map(|percent| RedriveGuardView {
            percent,
            window: s.guard_window,
            error_contains: s.guard_error,
        }),
    };
    // The size of the DLQ bounds what can move: the bar's length when no limit is given.
    let depth = c
        .stats(&source)
        .await
        .ok()
        .map(|st| st.visible + st.delayed + st.in_flight);
    let job = match c.create_redrive(&req, s.idempotency_key.as_deref()).await {
        Ok(j) => j,
        Err(e) if e.code() == Some(ErrorCode::Conflict) => return Err(busy(c, &source, e).await),
        Err(e) => return Err(e.into()),
    };
    let id = job.id.clone();
    if s.detach {
        if as_json {
            return json(&job);
        }
        println!("{id}");
        eprintln!(
            "started redrive {id} from {source}; it runs in the broker. Follow it with \
             `sluice redrive show {id}`, stop it with `sluice redrive cancel {id}`"
        );
        return Ok(());
    }
    let total = match (s.limit, depth) {
        (Some(l), Some(d)) => Some(l.min(d)),
        (l, d) => l.or(d),
    };
    let watch = Watch::new(&job, total, as_json);
    let done = tokio::select! {
        r = follow(c, job, &watch) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    match done {
        None => {
            watch.bar.abandon();
            eprintln!(
                "\ndetached: redrive {id} keeps running in the broker. Follow it with \
                 `sluice redrive show {id}`, stop it with `sluice redrive cancel {id}`"
            );
            Ok(())
        }
        Some(Err(f)) => {
            watch.bar.abandon();
            eprintln!(
                "sluice: lost track of redrive {id}; it may still be running in the broker \
                 (check `sluice redrive show {id}`)"
            );
            Err(f)
        }
        Some(Ok(j)) => finish(&watch, &j, as_json),
    }
}

/// A start refused because a job of the same source runs: name that job and how to stop it.
async fn busy(c: &Client, source: &str, e: sluice_client::Error) -> Failure {
    let running = c.list_redrives().await.ok().and_then(|jobs| {
        jobs.into_iter()
            .find(|j| j.source == source && (j.state == "running" || j.state == "paused"))
    });
    let hint = match running {
        Some(j) => format!(
            "redrive {id} of {source} is still {} ({} moved so far): wait for it (`sluice \
             redrive show {id}`) or stop it (`sluice redrive cancel {id}`)",
            j.state,
            j.moved,
            id = j.id
        ),
        // A conflict with no job running is another clash; its message says which.
        None => return Failure::Code(4, e.to_string()),
    };
    Failure::Code(4, format!("{e}\n  hint: {hint}"))
}

struct Watch {
    bar: ProgressBar,
    started: Instant,
    dry_run: bool,
    /// Progress when watching began (a replayed start may have moved some already).
    first: u64,
}

impl Watch {
    fn new(job: &RedriveView, total: Option<u64>, as_json: bool) -> Self {
        let bar = match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::no_length(),
        };
        if as_json || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        let verb = if job.dry_run { "matched" } else { "moved" };
        let template = format!(
            "{{spinner}} {{prefix}} [{{bar:20}}] {{pos}}/{{len}} {verb} {{elapsed}} {{wide_msg}}"
        );
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(job.id.clone());
        bar.enable_steady_tick(Duration::from_millis(100));
        Watch {
            bar,
            started: Instant::now(),
            dry_run: job.dry_run,
            first: if job.dry_run { job.matched } else { job.moved },
        }
    }

    fn update(&self, j: &RedriveView) {
        let pos = if self.dry_run { j.matched } else { j.moved };
        // The broker counts what an active job will move in all (its limit and filter
        // applied); past that, or once it finished, the bar's length is what it did.
        let total = j.to_move.unwrap_or(pos).max(pos);
        if self.dry_run {
            if self.bar.length().is_some_and(|l| pos > l) || self.bar.length().is_none() {
                self.bar.set_length(pos.max(j.matched));
            }
        } else {
            self.bar.set_length(total);
        }
        self.bar.set_position(pos);
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = pos.saturating_sub(self.first) as f64 / secs;
        let mut msg = format!("· {rate:.1}/s");
        if !self.dry_run {
            msg.push_str(&format!(" · {} matched", j.matched));
        }
        if j.skipped > 0 {
            msg.push_str(&format!(", {} skipped", j.skipped));
        }
        if let Some(b) = &j.blocked {
            msg.push_str(&format!(" · blocked: {b}"));
        }
        if let Some(p) = &j.paused_reason {
            msg.push_str(&format!(
                " · {p}; resume with `sluice redrive resume {}`",
                j.id
            ));
        }
        self.bar.set_message(msg);
    }
}

/// Polls the job until it is no longer running.
async fn follow(c: &Client, mut job: RedriveView, w: &Watch) -> Result<RedriveView, Failure> {
    let mut failing_since: Option<Instant> = None;
    loop {
        w.update(&job);
        if job.state != "running" {
            return Ok(job);
        }
        tokio::time::sleep(POLL).await;
        match c.get_redrive(&job.id).await {
            Ok(j) => {
                job = j;
                failing_since = None;
            }
            Err(e) if e.is_connect() || e.is_transient() || e.is_timeout() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > POLL_OUTAGE {
                    return Err(e.into());
                }
                w.bar
                    .set_message(format!("broker not answering ({e}); retrying"));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn finish(w: &Watch, j: &RedriveView, as_json: bool) -> Result<(), Failure> {
    w.bar.finish_and_clear();
    if as_json {
        json(j)?;
    } else {
        let secs = w.started.elapsed().as_secs_f64();
        if j.dry_run {
            println!(
                "dry run {}: {} dead letters in {} match; {} would move; nothing was moved",
                j.id,
                j.matched,
                j.source,
                j.would_move.unwrap_or(j.matched)
            );
        } else {
            println!(
                "redrive {} {}: moved {} of {} matched from {} to {} in {secs:.1}s",
                j.id,
                j.state,
                j.moved,
                j.matched,
                j.source,
                destination(j)
            );
        }
        for reason in &j.skip_reasons {
            eprintln!("note: {reason}");
        }
    }
    if j.state == "paused" {
        return Err(Failure::Code(
            1,
            format!(
                "redrive {id} is paused after moving {} of {} matched: {}; resume it with \
                 `sluice redrive resume {id}` once the cause is fixed",
                j.moved,
                j.matched,
                j.paused_reason.as_deref().unwrap_or("paused"),
                id = j.id
            ),
        ));
    }
    if j.state == "cancelled" {
        return Err(Failure::Code(
            1,
            format!(
                "redrive {} was cancelled after moving {} of {} matched",
                j.id, j.moved, j.matched
            ),
        ));
    }
    Ok(())
}
