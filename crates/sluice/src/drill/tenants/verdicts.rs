//! The five verdicts of a tenants run, each with its figure.
//!
//! 1. **Quotas**: no tenant's partner account saw more than its quota plus a tenth in any
//!    sliding scenario minute, counting every call but the injected random 429s and the
//!    outage's 503s (a call refused for the quota was one too many), from two minutes after
//!    the tenant's first call (a governor learns a limit by touching it, from a slow start).
//!    Across the raise, a minute is judged against the quota in force at its end.
//! 2. **Outage**: the tenant whose account was down dead-lettered no valid task.
//! 3. **Neighbours**: the other tenants' 95th-percentile completion latency (from the end of a
//!    task's hold to its release at the partner; the raised tenant, whose latency its own
//!    quota sets with or without the outage, is left out) is within 20 % of the calm run's, give or
//!    take 5 scenario seconds (a governor round: deliveries are paced in small bursts, so a
//!    latency is not measured finer than that). A task never released counts with the time
//!    until the run ended.
//! 4. **Raise**: the raised tenant's accepted calls in some sliding minute that ended at most
//!    3 minutes after the raise reached 90 % of its new quota.
//! 5. **Exactly once**: every valid reservation was released exactly once (idempotency keys
//!    absorb repeats).

use super::super::criteria::{Verdict, busiest_window};
use super::TenantRun;
use super::plan::{OUTAGE, RAISED, Tenants};

/// Tolerance of verdict 3, scenario seconds.
const LATENCY_SLACK_SECS: f64 = 5.0;

/// A tenant's worst minute against its quota: (calls, allowed, minute it started).
pub fn worst_minute(run: &TenantRun, tenants: &Tenants, i: usize) -> Option<(usize, u32, f64)> {
    let mine: Vec<f64> = run
        .calls
        .iter()
        .filter(|(_, t, k)| *t == i && k.counts_against_quota())
        .map(|(m, _, _)| *m)
        .collect();
    let first = *mine.first()?;
    let judged: Vec<f64> = mine.into_iter().filter(|m| *m >= first + 2.0).collect();
    let mut worst: Option<(usize, u32, f64)> = None;
    let mut lo = 0;
    for hi in 0..judged.len() {
        while judged[hi] - judged[lo] >= 1.0 {
            lo += 1;
        }
        let quota = tenants.quota_at(i, judged[hi]);
        let allowed = quota + quota.div_ceil(10);
        let calls = hi - lo + 1;
        let ratio = |c: usize, a: u32| c as f64 / f64::from(a);
        if worst.is_none_or(|(c, a, _)| ratio(calls, allowed) > ratio(c, a)) {
            worst = Some((calls, allowed, judged[lo]));
        }
    }
    worst
}

/// Completion latencies, scenario seconds, of the valid tasks of the tenants `which` picks.
pub fn latencies(run: &TenantRun, which: impl Fn(usize) -> bool) -> Vec<f64> {
    let mut out: Vec<f64> = run
        .valid_ids
        .iter()
        .filter(|id| run.owner.get(*id).is_some_and(|t| which(*t)))
        .filter_map(|id| {
            let due = run.due.get(id)?;
            let done = run.first_applied.get(id).copied().unwrap_or(run.ended_at);
            Some((done - due).max(0.0) * 60.0)
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// The `q` quantile of sorted values (0 when empty).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Judges `run` against the calm run of the same scope.
pub fn judge(run: &TenantRun, calm: &TenantRun, tenants: &Tenants) -> Vec<Verdict> {
    let mut over = Vec::new();
    let mut worst: Option<(usize, usize, u32, f64)> = None;
    for i in 0..tenants.list.len() {
        let Some((calls, allowed, from)) = worst_minute(run, tenants, i) else {
            continue;
        };
        if calls > allowed as usize {
            over.push(tenants.list[i].name.as_str());
        }
        let r = calls as f64 / f64::from(allowed);
        if worst.is_none_or(|(_, c, a, _)| r > c as f64 / f64::from(a)) {
            worst = Some((i, calls, allowed, from));
        }
    }
    let worst_text = worst.map_or("no calls".to_owned(), |(i, c, a, from)| {
        format!(
            "closest: {} with {c} calls in the minute from {from:.1} (allowed {a})",
            tenants.list[i].name
        )
    });
    let v1 = Verdict {
        number: 1,
        name: "no tenant over its quota by more than 10 % in any minute",
        pass: over.is_empty(),
        figure: if over.is_empty() {
            worst_text
        } else {
            format!(
                "{} tenants over: {}; {worst_text}",
                over.len(),
                over.join(", ")
            )
        },
    };

    let dead_of = |t: usize| {
        run.dead_valid
            .iter()
            .filter(|id| run.owner.get(*id) == Some(&t))
            .count()
    };
    let outage_dead = dead_of(OUTAGE);
    let other_dead = run.dead_valid.len() - outage_dead;
    let v2 = Verdict {
        number: 2,
        name: "the outage tenant dead-lettered no valid task",
        pass: outage_dead == 0,
        figure: format!(
            "{outage_dead} valid tasks of {} dead-lettered ({other_dead} of other tenants); {} redriven",
            tenants.list[OUTAGE].name, run.redriven
        ),
    };

    let others = |t: usize| t != OUTAGE && t != RAISED;
    let p95 = quantile(&latencies(run, others), 0.95);
    let calm_p95 = quantile(&latencies(calm, others), 0.95);
    let allowed = calm_p95 * 1.2 + LATENCY_SLACK_SECS;
    let v3 = Verdict {
        number: 3,
        name: "other tenants' p95 latency within 20 % of the calm run",
        pass: p95 <= allowed,
        figure: format!(
            "p95 {p95:.0} s against {calm_p95:.0} s without the outage (allowed {allowed:.0} s)"
        ),
    };

    let raised: Vec<f64> = run
        .calls
        .iter()
        .filter(|(m, t, k)| *t == RAISED && k.got_through() && *m < tenants.raise_at + 3.0)
        .map(|(m, _, _)| *m)
        .filter(|m| *m >= tenants.raise_at - 1.0)
        .collect();
    let (best, from) = busiest_window(&raised, 1.0);
    let need = (f64::from(tenants.raised_to) * 0.9).ceil() as usize;
    let v4 = Verdict {
        number: 4,
        name: "the raised tenant reached 90 % of its new quota within 3 minutes",
        pass: best >= need,
        figure: format!(
            "{} raised from {} to {}/min at minute {:.1}: best minute {best} accepted calls \
             (from minute {from:.1}; needed {need})",
            tenants.list[RAISED].name,
            tenants.list[RAISED].quota,
            tenants.raised_to,
            tenants.raise_at
        ),
    };

    let twice = run.applied.values().filter(|n| **n > 1).count();
    let never = run
        .valid_ids
        .iter()
        .filter(|id| run.applied.get(*id).copied().unwrap_or(0) == 0)
        .count();
    let v5 = Verdict {
        number: 5,
        name: "every valid task released exactly once",
        pass: twice == 0 && never == 0,
        figure: format!(
            "{} of {} released once, {twice} more than once, {never} never; {} repeats absorbed",
            run.valid_ids.len() - never - twice,
            run.valid_ids.len(),
            run.repeats
        ),
    };
    vec![v1, v2, v3, v4, v5]
}
