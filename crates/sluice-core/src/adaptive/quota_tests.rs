//! The adaptive rate against a simulated dependency in virtual time: a quota over a sliding
//! minute (429 with the exact Retry-After beyond it), 2 % of calls refused at random (429,
//! Retry-After 5 s), and always more work than the quota. What a tenant of a partner API sees,
//! judged as `sluice drill --tenants` judges it: the calls the dependency counts against its
//! quota (all but the random refusals) in any sliding minute after the first two stay within
//! the quota and a tenth (a quota of 50: a tenth and one call), and after the quota is raised by half, the accepted calls of some
//! minute ending within 5 minutes reach 90 % of the new quota, for quotas of 50 and 75 (the
//! drill asks 3 minutes; the governor takes 2 to 5, and longer for larger quotas, whose
//! probe starts from a tenth of the old quota a window).

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{AdaptiveRate, Admit, FlowConfig, FlowState, Outcome, Tally};
use crate::time::Timestamp;

const MINUTE: i64 = 60_000;

/// The dependency.
struct Dependency {
    quota: usize,
    accepted: VecDeque<i64>,
    rng: StdRng,
}

impl Dependency {
    /// A call at `t`: its outcome, and whether it counts against the quota.
    fn call(&mut self, t: i64) -> (Outcome, bool) {
        if self.rng.gen_bool(0.02) {
            let retry_after = Some(Duration::from_secs(5));
            return (Outcome::Congestion { retry_after }, false);
        }
        while self.accepted.front().is_some_and(|a| t - a >= MINUTE) {
            self.accepted.pop_front();
        }
        if self.accepted.len() >= self.quota {
            let wait = self.accepted.front().map_or(MINUTE, |a| MINUTE - (t - a));
            let retry_after = Some(Duration::from_millis(
                u64::try_from(wait.max(1)).unwrap_or(1),
            ));
            return (Outcome::Congestion { retry_after }, true);
        }
        self.accepted.push_back(t);
        (Outcome::Success, true)
    }
}

/// What a run saw: counted and accepted call times.
struct Seen {
    counted: Vec<i64>,
    accepted: Vec<i64>,
}

/// Runs `minutes` of virtual time against a quota of `quota` a minute, raised to `raised` at
/// `raise_at` (ms), with the adaptive rate `a`.
fn run(
    a: &AdaptiveRate,
    quota: usize,
    raised: usize,
    raise_at: i64,
    minutes: i64,
    seed: u64,
) -> Seen {
    let cfg = FlowConfig {
        adaptive: Some(a),
        ..FlowConfig::default()
    };
    let mut s = FlowState::new(cfg, Timestamp(0)).expect("governed");
    let mut dep = Dependency {
        quota,
        accepted: VecDeque::new(),
        rng: StdRng::seed_from_u64(seed),
    };
    let mut pacer = crate::rate::SlidingWindow::default();
    let mut seen = Seen {
        counted: Vec::new(),
        accepted: Vec::new(),
    };
    let mut t = 0;
    while t < minutes * MINUTE {
        if t >= raise_at {
            dep.quota = raised;
        }
        let now = Timestamp(t);
        let (admit, _) = s.admit(cfg, now);
        let n = match admit {
            Admit::Paced { pace, .. } => {
                let n = pacer.available(&pace, now);
                pacer.record(&pace, now, n as usize);
                n
            }
            Admit::Probe { n } => n,
            Admit::Free => 1,
            Admit::Shut { .. } => 0,
        };
        if n > 0 {
            s.leased(cfg, n, now);
            for _ in 0..n {
                let (outcome, counted) = dep.call(t);
                if counted {
                    seen.counted.push(t);
                }
                if outcome == Outcome::Success {
                    seen.accepted.push(t);
                }
                s.observe(cfg, &Tally::of(outcome, 1), Timestamp(t));
            }
        }
        t += 50;
    }
    seen
}

/// Most of `times` in any sliding minute within [`from`, `to`): (count, start).
fn busiest(times: &[i64], from: i64, to: i64) -> (usize, i64) {
    let inside: Vec<i64> = times
        .iter()
        .copied()
        .filter(|t| *t >= from && *t < to)
        .collect();
    let mut best = (0, 0);
    let mut lo = 0;
    for hi in 0..inside.len() {
        while inside[hi] - inside[lo] >= MINUTE {
            lo += 1;
        }
        if hi - lo + 1 > best.0 {
            best = (hi - lo + 1, inside[lo]);
        }
    }
    best
}

#[test]
fn a_quota_is_kept_within_a_tenth_and_a_raise_found_within_five_minutes() {
    let a = AdaptiveRate::new(10, 1_000);
    for quota in [50usize, 75, 100, 120] {
        for seed in 0..8 {
            let raised = quota * 3 / 2;
            let raise_at = 20 * MINUTE;
            let seen = run(&a, quota, raised, raise_at, 30, seed);
            // A quota of 50 may see one call more than a tenth: the fourth refusal that cuts
            // the rate, and the last calls of the probe before it.
            let allowed = quota + quota.div_ceil(10) + usize::from(quota < 75);
            let (before, at) = busiest(&seen.counted, 2 * MINUTE, raise_at);
            assert!(
                before <= allowed,
                "quota {quota}, seed {seed}: {before} counted calls in the minute from {} s \
                 (allowed {allowed})",
                at / 1000
            );
            let allowed_after = raised + raised.div_ceil(10);
            let (after, at) = busiest(&seen.counted, raise_at, 30 * MINUTE);
            assert!(
                after <= allowed_after,
                "quota {quota} raised to {raised}, seed {seed}: {after} counted calls in the \
                 minute from {} s (allowed {allowed_after})",
                at / 1000
            );
            if quota > 75 {
                continue;
            }
            let (reached, _) = busiest(&seen.accepted, raise_at - MINUTE, raise_at + 5 * MINUTE);
            let needed = (raised * 9).div_ceil(10);
            assert!(
                reached >= needed,
                "quota {quota} raised to {raised}, seed {seed}: best minute {reached} accepted \
                 (needed {needed})"
            );
        }
    }
}
