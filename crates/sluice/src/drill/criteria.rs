//! The four pass criteria of the drill, each judged with its figure.
//!
//! 1. No reservation released twice (applied-count per reservation ≤ 1) and every valid
//!    reservation released exactly once.
//! 2. Every poison message in the DLQ within the retry budget (`receive_count ≤
//!    max_receive_count`), and every undecodable body in the unprocessable queue, byte-exact.
//! 3. The main queue drained after the upstream recovered, within the bound
//!    `max(last expiry − recovery, 0) + pending at recovery / (quota / 2) + 5 min`, and no
//!    scenario minute outside the outage stalled: began with a backlog, yet no upstream call
//!    released or absorbed a task and the queue did not shrink (fresh expirations kept
//!    flowing while poison messages were isolated). A minute whose last visible task was a
//!    repeat of one already released, or an undecodable body moved aside, drains without a
//!    release and is not a stall.
//! 4. Every valid task the outage dead-lettered was redriven (the broker's `redriven` total
//!    is at least its `dead_lettered` total less the poison messages: a redrive that was
//!    needed but moved nothing fails); during the redrive (first batch to the end) neither the
//!    upstream's calls nor the redrive's moves exceeded the quota in any sliding minute, no
//!    redrive job asked for a rate above it, and the 429 share of the last third of that phase
//!    is no higher than the first third's (or within the random share + 3 points). When no
//!    valid task was dead-lettered the figure says so: the redrive was not exercised. (In an
//!    adaptive run the upstream's calls are judged by criterion 6 instead, see
//!    [`super::adaptive`].)

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use sluice_client::wire::MessageView;

use super::adaptive::Mode;
use super::upstream::CallKind;
use super::{Observed, Sample};

/// A criterion's verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// 1 to 4.
    pub number: u8,
    /// Its name.
    pub name: &'static str,
    /// Passed.
    pub pass: bool,
    /// Its figure.
    pub figure: String,
}

impl Verdict {
    /// `PASS` or `FAIL`.
    pub fn mark(&self) -> &'static str {
        if self.pass { "PASS" } else { "FAIL" }
    }
}

/// The summary's line of a verdict: `PASS 1. <name>: <figure>`.
impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}. {}: {}",
            self.mark(),
            self.number,
            self.name,
            self.figure
        )
    }
}

/// The reservation id of a task message (None for any other body).
pub fn reservation_id(m: &MessageView) -> Option<String> {
    let body = m.body.as_ref()?;
    let v: serde_json::Value = serde_json::from_str(body.get()).ok()?;
    v.get("kwargs")?
        .get("reservation_id")?
        .as_str()
        .map(str::to_owned)
}

fn body_bytes(m: &MessageView) -> Option<Vec<u8>> {
    if let Some(b) = &m.body_base64 {
        return base64::engine::general_purpose::STANDARD.decode(b).ok();
    }
    m.body.as_ref().map(|b| b.get().as_bytes().to_vec())
}

/// Most calls in any sliding window of `width` minutes among sorted minutes `t`.
pub fn max_in_window(t: &[f64], width: f64) -> usize {
    busiest_window(t, width).0
}

/// Most calls in any sliding window of `width` minutes among sorted minutes `t`, and the
/// minute the first such window starts at (0 when there are none).
pub fn busiest_window(t: &[f64], width: f64) -> (usize, f64) {
    let mut best = (0, 0.0);
    let mut lo = 0;
    for hi in 0..t.len() {
        while t[hi] - t[lo] >= width {
            lo += 1;
        }
        if hi - lo + 1 > best.0 {
            best = (hi - lo + 1, t[lo]);
        }
    }
    best
}

fn share_429(calls: &[(f64, CallKind)], from: f64, to: f64) -> (f64, usize) {
    let inside: Vec<_> = calls
        .iter()
        .filter(|(m, _)| *m >= from && *m < to)
        .collect();
    if inside.is_empty() {
        return (0.0, 0);
    }
    let n429 = inside.iter().filter(|(_, k)| k.is_429()).count();
    (n429 as f64 * 100.0 / inside.len() as f64, inside.len())
}

/// Most messages moved in any window of `width` minutes, from cumulative `(minute, moved)`
/// observations in time order. It is a lower bound of the true peak (two observations at
/// most `width` apart frame the moves between them), so a figure above a cap proves the cap
/// was broken.
pub fn max_moves_in_window(progress: &[(f64, u64)], width: f64) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..progress.len() {
        while progress[hi].0 - progress[lo].0 > width {
            lo += 1;
        }
        best = best.max(progress[hi].1.saturating_sub(progress[lo].1));
    }
    best
}

/// The poison messages in the DLQ at the end.
fn poison_dead_letters(o: &Observed) -> Vec<&MessageView> {
    let poison: HashSet<&str> = o.plan.poison_ids.iter().map(String::as_str).collect();
    o.dlq
        .iter()
        .filter(|m| reservation_id(m).is_some_and(|id| poison.contains(id.as_str())))
        .collect()
}

/// Valid tasks the main queue dead-lettered over the run (the broker's total less the poison
/// messages), whether redriven since or not.
pub fn valid_dead_lettered(o: &Observed) -> u64 {
    o.dead_lettered
        .saturating_sub(poison_dead_letters(o).len() as u64)
}

/// Judges the run.
///
/// Long because it holds the four criteria as numbered sections, in the order the report prints
/// them, so each pass condition can be read against the drill's stated criteria.
pub fn judge(o: &Observed) -> Vec<Verdict> {
    let sc = &o.scenario;
    let (o_start, o_end) = sc.outage_min();

    // 1. Exactly once.
    let twice = o.applied.values().filter(|n| **n > 1).count();
    let once = o
        .plan
        .valid_ids
        .iter()
        .filter(|id| o.applied.get(*id).copied() == Some(1))
        .count();
    let never = o
        .plan
        .valid_ids
        .iter()
        .filter(|id| !o.applied.contains_key(*id))
        .count();
    let c1 = Verdict {
        number: 1,
        name: "no double release, every reservation released once",
        pass: twice == 0 && once == o.plan.valid_ids.len(),
        figure: format!(
            "released exactly once {once}/{}, twice or more {twice}, never {never}; \
             repeats absorbed by the idempotency key {}",
            o.plan.valid_ids.len(),
            o.repeats
        ),
    };

    // 2. Poison in the DLQ within budget; undecodable bodies byte-exact.
    let poison_dl = poison_dead_letters(o);
    let poison_n = o.plan.poison_ids.len();
    let max_rc = poison_dl.iter().map(|m| m.receive_count).max().unwrap_or(0);
    let first_try = poison_dl.iter().filter(|m| m.receive_count <= 1).count();
    let within = sc.max_receive_count == 0 || max_rc <= sc.max_receive_count;
    let mut want: HashMap<&[u8], usize> = HashMap::new();
    for b in &o.plan.raw_bodies {
        *want.entry(b.as_slice()).or_insert(0) += 1;
    }
    let mut exact = 0;
    for m in &o.unprocessable {
        if let Some(b) = body_bytes(m)
            && let Some(n) = want.get_mut(b.as_slice())
            && *n > 0
        {
            *n -= 1;
            exact += 1;
        }
    }
    let budget = if sc.max_receive_count == 0 {
        "unlimited".to_owned()
    } else {
        sc.max_receive_count.to_string()
    };
    let c2 = Verdict {
        number: 2,
        name: "poison isolated within the retry budget, undecodable bodies kept byte-exact",
        pass: poison_dl.len() == poison_n && within && exact == o.plan.raw_bodies.len(),
        figure: format!(
            "poison in DLQ {}/{} ({first_try} on the first attempt, most attempts {max_rc}, \
             budget {budget}); \
             undecodable in {}.unprocessable byte-exact {exact}/{}",
            poison_dl.len(),
            poison_n,
            o.queue,
            o.plan.raw_bodies.len()
        ),
    };

    // 3. Drained within the bound; fresh expirations kept flowing.
    let bound = (sc.last_expiry_min() - o_end).max(0.0)
        + o.pending_at_recovery as f64 / (f64::from(sc.quota_per_min) / 2.0)
        + 5.0;
    let handled_at: Vec<f64> = o
        .calls
        .iter()
        .filter(|(_, k)| {
            matches!(
                k,
                CallKind::Applied | CallKind::LostReply | CallKind::Repeat
            )
        })
        .map(|(m, _)| *m)
        .collect();
    let mut stalls = 0;
    let mut watched = 0;
    for w in o.samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        let near_outage = b.minute > o_start - 1.0 && a.minute < o_end + 1.0;
        if a.visible == 0 || near_outage {
            continue;
        }
        watched += 1;
        if stalled(a, b, &handled_at) {
            stalls += 1;
        }
    }
    let (c3_pass, drained) = match o.drained_at {
        Some(t) => {
            let took = (t - o_end).max(0.0);
            (
                took <= bound && stalls == 0,
                format!("drained {took:.1} min after recovery"),
            )
        }
        None => (false, format!("not drained by minute {:.0}", o.ended_at)),
    };
    let c3 = Verdict {
        number: 3,
        name: "backlog back to zero after recovery, fresh work kept flowing",
        pass: c3_pass,
        figure: format!(
            "{drained} (bound {bound:.1} min: {} pending at recovery); \
             minutes stalled with a backlog {stalls}/{watched}",
            o.pending_at_recovery
        ),
    };

    // 4. The redrive happened when it was needed, stayed under the cap, and 429s fell.
    let needed = valid_dead_lettered(o);
    let phase_start = o.operator.batches.first().map_or(o_end, |b| b.start_min);
    let phase_end = o.drained_at.unwrap_or(o.ended_at).max(phase_start);
    let phase_calls: Vec<f64> = o
        .calls
        .iter()
        .filter(|(m, _)| *m >= phase_start && *m <= phase_end)
        .map(|(m, _)| *m)
        .collect();
    let peak_calls = max_in_window(&phase_calls, 1.0);
    let peak_moves = max_moves_in_window(&o.operator.progress, 1.0);
    let third = (phase_end - phase_start) / 3.0;
    let (first, n_first) = share_429(&o.calls, phase_start, phase_start + third);
    let (last, n_last) = share_429(&o.calls, phase_end - third, phase_end + 1e-9);
    let fell = last <= first || last <= sc.random_429_pct + 3.0;
    let max_job_rate = o
        .operator
        .batches
        .iter()
        .map(|b| f64::from(b.rate_per_second) * 60.0 / sc.scale)
        .fold(0.0, f64::max);
    let cap = u64::from(sc.quota_per_min);
    let done = o.redriven >= needed;
    // An adaptive run's upstream calls and 429s are judged by criteria 6 and 7, with their
    // allowance for a governor that learns the quota by touching it; here only the redrive.
    let calls_judged = o.mode == Mode::Tuned;
    let under_cap = (!calls_judged || peak_calls as u64 <= cap)
        && peak_moves <= cap
        && max_job_rate <= cap as f64;
    let figure = if needed == 0 && o.redriven == 0 && !calls_judged {
        "no redrive needed: no valid task was dead-lettered (upstream calls: criterion 6)"
            .to_owned()
    } else if needed == 0 && o.redriven == 0 {
        format!(
            "no redrive needed: no valid task was dead-lettered; peak {peak_calls} upstream \
             calls in any minute (cap {cap})"
        )
    } else {
        format!(
            "{needed} valid tasks dead-lettered, {} redriven in {} batches at {max_job_rate:.0}/min \
             (peak {peak_moves} moves in any minute); peak {peak_calls} upstream calls in any \
             minute (cap {cap}); 429 share {first:.1}% of {n_first} calls in the first third, \
             {last:.1}% of {n_last} in the last; {} pauses",
            o.redriven,
            o.operator.batches.len(),
            o.operator.pauses
        )
    };
    let c4 = Verdict {
        number: 4,
        name: "dead letters redriven under the upstream's cap, 429s fell after backoff",
        pass: done && under_cap && (fell || !calls_judged),
        figure,
    };
    vec![c1, c2, c3, c4]
}

/// Whether the minute from sample `a` to `b`, which began with a backlog, stalled: no call in
/// `handled_at` (upstream calls that released or absorbed a task) fell inside it, and the
/// queue (visible, delayed and in flight) did not shrink.
fn stalled(a: Sample, b: Sample, handled_at: &[f64]) -> bool {
    let size = |s: Sample| s.visible + s.delayed + s.in_flight;
    let handled = handled_at.iter().any(|m| *m >= a.minute && *m < b.minute);
    !handled && size(b) >= size(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_stalls_only_when_nothing_was_handled_and_nothing_left() {
        let at = |minute: f64, visible: u64, in_flight: u64| Sample {
            minute,
            visible,
            in_flight,
            ..Sample::default()
        };
        // A backlog that neither moved nor saw a release.
        assert!(stalled(at(3.0, 5, 2), at(4.0, 5, 2), &[2.9, 4.0]));
        // A release inside the minute.
        assert!(!stalled(at(3.0, 5, 2), at(4.0, 6, 2), &[3.5]));
        // The last visible task left without a release (a repeat absorbed, or an undecodable
        // body moved aside).
        assert!(!stalled(at(31.0, 1, 0), at(32.0, 0, 0), &[30.9]));
    }

    #[test]
    fn sliding_window() {
        assert_eq!(max_in_window(&[0.0, 0.5, 0.99, 1.0, 1.5], 1.0), 3);
        assert_eq!(max_in_window(&[], 1.0), 0);
        assert_eq!(busiest_window(&[0.0, 2.0, 2.5, 2.9, 4.0], 1.0), (3, 2.0));
    }

    #[test]
    fn moves_per_window() {
        let p = [(0.0, 0), (0.5, 30), (1.0, 60), (1.6, 70), (3.0, 70)];
        assert_eq!(max_moves_in_window(&p, 1.0), 60);
        assert_eq!(max_moves_in_window(&p[..1], 1.0), 0);
        assert_eq!(max_moves_in_window(&[], 1.0), 0);
    }
}
