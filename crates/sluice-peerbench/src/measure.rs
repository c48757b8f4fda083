//! One measurement of one system at one batch size: the connections opened, an uncounted
//! warm-up, the measured phase with the server's CPU time around it, and the table row.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::compare::Ctx;
use crate::cpu;
use crate::load::{self, System};
use crate::report::Row;

/// Opens the connections, runs the warm-up and the measured phase, and builds the row.
pub(crate) async fn measure<S: System>(
    ctx: &Ctx,
    sys: &S,
    name: &str,
    durability: &str,
    settings: &str,
    batch: usize,
    target: cpu::Target,
) -> anyhow::Result<Row> {
    let a = &ctx.args;
    let limit = Duration::from_secs(a.timeout);
    let mut ps = Vec::new();
    let mut cs = Vec::new();
    for _ in 0..a.producers {
        ps.push(sys.producer().await.context("opening a producer")?);
    }
    for _ in 0..a.consumers {
        cs.push(sys.consumer().await.context("opening a consumer")?);
    }
    if a.warmup > 0 {
        let (w, p2, c2) = load::phase(ps, cs, a.warmup, batch, a.body, limit).await?;
        if w.timed_out || w.acked < a.warmup {
            bail!(
                "warm-up did not finish in {} s ({} of {} acked; first error: {})",
                a.timeout,
                w.acked,
                a.warmup,
                w.first_error.unwrap_or_else(|| "none".to_owned())
            );
        }
        ps = p2;
        cs = c2;
    }
    let before = cpu::ticks(&target);
    let (m, ps, cs) = load::phase(ps, cs, a.messages, batch, a.body, limit).await?;
    let after = cpu::ticks(&target);
    drop((ps, cs));
    if m.acked == 0 {
        bail!(
            "nothing was acked in {} s (first error: {})",
            a.timeout,
            m.first_error.unwrap_or_else(|| "none".to_owned())
        );
    }
    let secs = m.elapsed.as_secs_f64().max(1e-6);
    let cpu_s_per_m = match (before, after) {
        (Some(b), Some(a)) => Some((a.saturating_sub(b)) as f64 / ctx.tick / m.acked as f64 * 1e6),
        _ => None,
    };
    Ok(Row {
        system: name.to_owned(),
        durability: durability.to_owned(),
        settings: settings.to_owned(),
        batch,
        acked: m.acked,
        seconds: secs,
        msgs_per_s: m.acked as f64 / secs,
        p50_us: m.e2e_us.value_at_quantile(0.50),
        p99_us: m.e2e_us.value_at_quantile(0.99),
        p999_us: m.e2e_us.value_at_quantile(0.999),
        cpu_s_per_m,
        errors: m.errors,
        timed_out: m.timed_out,
        first_error: m.first_error,
        rounds_msgs_per_s: Vec::new(),
    })
}
