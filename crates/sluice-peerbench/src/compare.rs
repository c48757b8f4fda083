//! The side-by-side run: for each batch size every system runs once per round, the median
//! round of each is kept, and the table (or JSON, and the SVG chart) is written.

use anyhow::Context as _;

use crate::args::Args;
use crate::brokers::Started;
use crate::report::{self, Row, Skipped};
use crate::{cpu, load, systems};

/// What every system's run reads: the options and where the Sluice brokers serve.
pub(crate) struct Ctx {
    pub(crate) args: Args,
    pub(crate) sluice_url: Option<String>,
    pub(crate) sluice_frames: Option<String>,
    pub(crate) sluice_pid: Option<u32>,
    pub(crate) sluice_pg_url: Option<String>,
    pub(crate) sluice_pg_frames: Option<String>,
    pub(crate) sluice_pg_pid: Option<u32>,
    /// The relaxed-durability broker: base URL, frame listener, pid.
    pub(crate) sluice_relaxed: Option<(String, String, Option<u32>)>,
    /// Clock ticks per second of `/proc/<pid>/stat`.
    pub(crate) tick: f64,
}

/// Runs every system at every batch size and reports; a system that fails is skipped.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let mut skipped: Vec<Skipped> = Vec::new();
    let mut started = Started::default();
    let (sluice_url, sluice_frames, sluice_pid) = started.embedded(&args, &mut skipped).await;
    let (sluice_pg_url, sluice_pg_frames, sluice_pg_pid) =
        started.on_postgres(&args, &mut skipped).await;
    let sluice_relaxed = started.relaxed(&args, &mut skipped).await?;
    let ctx = Ctx {
        sluice_relaxed,
        sluice_url,
        sluice_frames,
        sluice_pid,
        sluice_pg_url,
        sluice_pg_frames,
        sluice_pg_pid,
        tick: cpu::ticks_per_second(),
        args,
    };
    let mut rows: Vec<Row> = Vec::new();
    for &batch in &ctx.args.batch {
        rows.extend(one_batch_size(&ctx, batch, &mut skipped).await);
    }
    started.stop(&ctx.args).await;
    write_output(&ctx.args, rows, skipped)
}

/// Every system's rounds at one batch size, alternating systems within a round; the median
/// round of each system, with every round's throughput beside it.
async fn one_batch_size(ctx: &Ctx, batch: usize, skipped: &mut Vec<Skipped>) -> Vec<Row> {
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); ctx.args.systems.len()];
    for _round in 0..ctx.args.rounds {
        for (i, name) in ctx.args.systems.iter().enumerate() {
            if skipped.iter().any(|s| s.system == *name) {
                continue;
            }
            eprintln!("peerbench: {name}, batch {batch} …");
            match systems::run_one(ctx, name, batch).await {
                Ok(row) => {
                    eprintln!(
                        "peerbench: {name}, batch {batch}: {:.0} msg/s",
                        row.msgs_per_s
                    );
                    runs[i].push(row);
                }
                Err(e) => {
                    eprintln!("peerbench: SKIPPING {name}: {e:#}");
                    skipped.push(Skipped::new(name, &e));
                }
            }
        }
    }
    runs.into_iter().filter_map(median).collect()
}

/// The median of one system's rounds by throughput, carrying every round's throughput.
fn median(mut rounds: Vec<Row>) -> Option<Row> {
    if rounds.is_empty() {
        return None;
    }
    rounds.sort_by(|a, b| a.msgs_per_s.total_cmp(&b.msgs_per_s));
    let all: Vec<f64> = rounds.iter().map(|x| x.msgs_per_s).collect();
    let mid = rounds.len() / 2;
    let mut row = rounds.swap_remove(mid);
    row.rounds_msgs_per_s = all;
    Some(row)
}

/// Prints the table (and with --json the JSON on stdout, the table on stderr) and writes
/// the --svg chart.
fn write_output(args: &Args, rows: Vec<Row>, skipped: Vec<Skipped>) -> anyhow::Result<()> {
    let out = report::Output {
        messages: args.messages,
        warmup: args.warmup,
        producers: args.producers,
        consumers: args.consumers,
        rounds: args.rounds,
        body_bytes: load::BODY_BYTES,
        body_fill: clap::ValueEnum::to_possible_value(&args.body)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default(),
        rows,
        skipped,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        eprint!("{}", out.table());
    } else {
        print!("{}", out.table());
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, out.svg()).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
