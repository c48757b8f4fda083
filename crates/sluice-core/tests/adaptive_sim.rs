//! The adaptive rate against a simulated dependency, in virtual time.
//!
//! The dependency allows `quota` calls in any sliding minute and answers the rest with a 429
//! and a Retry-After (until its oldest counted call leaves the window), optionally also a
//! share of calls at random with a 5 s Retry-After (its quota is shared with callers we
//! cannot see). The governor is not told the quota. Demand is always larger than the quota:
//! workers take what `admit` allows, each call answers after a latency, and every answer is
//! observed as it arrives (or, as a PostgreSQL node does, in tallies flushed every 250 ms).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_core::adaptive::{AdaptiveRate, Admit, FlowConfig, FlowState, Outcome, Tally};
use sluice_core::rate::SlidingWindow;
use sluice_core::time::Timestamp;

const MINUTE: i64 = 60_000;

/// A dependency with a sliding-window quota.
struct Upstream {
    quota: u32,
    window_ms: i64,
    accepted: VecDeque<i64>,
    random_429: f64,
    random_retry_ms: i64,
    rng: StdRng,
}

impl Upstream {
    fn call(&mut self, now: i64) -> Outcome {
        if self.random_429 > 0.0 && self.rng.gen_bool(self.random_429) {
            return Outcome::Congestion {
                retry_after: Some(ms(self.random_retry_ms)),
            };
        }
        while self
            .accepted
            .front()
            .is_some_and(|t| now - t >= self.window_ms)
        {
            self.accepted.pop_front();
        }
        if self.accepted.len() >= self.quota as usize {
            let oldest = self.accepted.front().copied().unwrap_or(now);
            return Outcome::Congestion {
                retry_after: Some(ms((oldest + self.window_ms - now).max(1))),
            };
        }
        self.accepted.push_back(now);
        Outcome::Success
    }
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

/// One scenario, in scenario units (a minute is 60 s of scenario time).
#[derive(Clone)]
struct Scenario {
    quota: u32,
    min_per_min: u32,
    max_per_min: u32,
    ceiling_per_min: Option<u32>,
    random_429: f64,
    /// Call latency, uniform in this range (scenario ms).
    latency_ms: (i64, i64),
    /// Most calls in flight.
    workers: usize,
    /// The dependency counts its quota over this many scenario ms (the governor is told a
    /// minute); the quota is per this window.
    quota_window_ms: i64,
    /// Minutes to run.
    minutes: usize,
    /// Raise the quota to this at the start of this minute.
    raise: Option<(usize, u32)>,
    /// Observe tallies every this many scenario ms (0: each answer as it arrives).
    flush_ms: i64,
    /// The clock runs this many times faster than the scenario (rates this many times
    /// higher per real minute, every duration this many times shorter).
    scale: i64,
    seed: u64,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            quota: 100,
            min_per_min: 10,
            max_per_min: 300,
            ceiling_per_min: None,
            random_429: 0.0,
            latency_ms: (20, 400),
            workers: 64,
            quota_window_ms: MINUTE,
            minutes: 12,
            raise: None,
            flush_ms: 0,
            scale: 1,
            seed: 7,
        }
    }
}

/// What happened per scenario minute.
#[derive(Debug, Default)]
struct Run {
    /// Calls made (leases), per minute.
    calls: Vec<u32>,
    /// Calls accepted by the quota, per minute.
    accepted: Vec<u32>,
    /// The governed rate at the end of each minute, per scenario minute.
    rate: Vec<u32>,
    /// Most calls in any sliding minute of the clock.
    max_calls_in_real_minute: u32,
    /// The highest governed rate seen, per minute of the clock.
    max_rate_seen: u32,
    decreases: u64,
}

fn run(sc: &Scenario) -> Run {
    let s = sc.scale;
    let mut adaptive = AdaptiveRate::new(sc.min_per_min * s as u32, sc.max_per_min * s as u32);
    adaptive.window_ms = Some(60_000 / s as u64);
    let cfg = |a| FlowConfig {
        adaptive: Some(a),
        breaker: None,
        ceiling_per_min: sc.ceiling_per_min.map(|c| c * s as u32),
    };
    let mut rng = StdRng::seed_from_u64(sc.seed);
    let mut up = Upstream {
        quota: sc.quota,
        window_ms: sc.quota_window_ms / s,
        accepted: VecDeque::new(),
        random_429: sc.random_429,
        random_retry_ms: 5_000 / s,
        rng: StdRng::seed_from_u64(sc.seed ^ 0x5eed),
    };
    let t0 = 1_767_225_600_000i64;
    let mut state = FlowState::new(cfg(&adaptive), Timestamp(t0)).expect("governed");
    let mut pace_window = SlidingWindow::default();
    let mut in_flight: BinaryHeap<Reverse<(i64, u64, u8, i64)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut pending = Tally::default();
    let mut next_flush = t0;
    let mut recent_calls: VecDeque<i64> = VecDeque::new();
    let mut out = Run::default();
    let scen_minute = MINUTE / s;
    let end = t0 + scen_minute * sc.minutes as i64;
    let dt = (5 / s).max(1);
    let mut now = t0;
    let mut minute_calls = 0u32;
    let mut minute_accepted = 0u32;
    let mut minute_end = t0 + scen_minute;
    while now <= end {
        if now >= minute_end {
            out.calls.push(minute_calls);
            out.accepted.push(minute_accepted);
            let st = state.stats(cfg(&adaptive), Timestamp(now));
            let rate = st.adaptive.expect("adaptive").rate_per_min;
            out.rate.push(rate / s as u32);
            minute_calls = 0;
            minute_accepted = 0;
            minute_end += scen_minute;
            if let Some((at, q)) = sc.raise
                && out.calls.len() == at
            {
                up.quota = q;
            }
        }
        // Answers that arrived.
        while let Some(Reverse((at, _, kind, retry))) = in_flight.peek().copied() {
            if at > now {
                break;
            }
            in_flight.pop();
            let outcome = match kind {
                0 => Outcome::Success,
                _ => Outcome::Congestion {
                    retry_after: Some(ms(retry)),
                },
            };
            pending.add(outcome, 1);
            if sc.flush_ms == 0 {
                state.observe(cfg(&adaptive), &pending, Timestamp(at));
                pending = Tally::default();
            }
        }
        if sc.flush_ms > 0 && now >= next_flush {
            state.observe(cfg(&adaptive), &pending, Timestamp(now));
            pending = Tally::default();
            next_flush = now + (sc.flush_ms / s).max(1);
        }
        // Workers take what the governor allows.
        let (admit, _) = state.admit(cfg(&adaptive), Timestamp(now));
        let free = sc.workers.saturating_sub(in_flight.len()) as u32;
        let (n, paced) = match admit {
            Admit::Shut { .. } => (0, None),
            Admit::Probe { n } => (n.min(free), None),
            Admit::Paced { pace, per_min } => {
                out.max_rate_seen = out.max_rate_seen.max(per_min);
                (
                    pace_window.available(&pace, Timestamp(now)).min(free),
                    Some(pace),
                )
            }
            Admit::Free => (free, None),
        };
        if n > 0 {
            match paced {
                Some(pace) => pace_window.record(&pace, Timestamp(now), n as usize),
                None => pace_window.note(Timestamp(now), n as usize),
            }
            for _ in 0..n {
                let outcome = up.call(now);
                let lat = rng.gen_range(sc.latency_ms.0..=sc.latency_ms.1) / s;
                seq += 1;
                let (kind, retry) = match outcome {
                    Outcome::Success => {
                        minute_accepted += 1;
                        (0, 0)
                    }
                    Outcome::Congestion { retry_after } => {
                        (1, retry_after.map_or(0, |d| d.as_millis() as i64))
                    }
                    _ => unreachable!(),
                };
                in_flight.push(Reverse((now + lat.max(1), seq, kind, retry)));
                recent_calls.push_back(now);
            }
            minute_calls += n;
            while recent_calls.front().is_some_and(|t| now - t >= MINUTE) {
                recent_calls.pop_front();
            }
            out.max_calls_in_real_minute =
                out.max_calls_in_real_minute.max(recent_calls.len() as u32);
            state.leased(cfg(&adaptive), n, Timestamp(now));
        }
        now += dt;
    }
    out.decreases = state
        .stats(cfg(&adaptive), Timestamp(now))
        .adaptive
        .expect("adaptive")
        .decreases_total;
    out
}

fn show(name: &str, sc: &Scenario, r: &Run) {
    println!(
        "{name}: quota {} (raise {:?}), random 429 {}, decreases {}",
        sc.quota, sc.raise, sc.random_429, r.decreases
    );
    println!("  calls    {:?}", r.calls);
    println!("  accepted {:?}", r.accepted);
    println!("  rate     {:?}", r.rate);
    let (calls, acc): (u32, u32) = (
        r.calls.iter().skip(4).sum(),
        r.accepted.iter().skip(4).sum(),
    );
    let quota = sc.raise.map_or(sc.quota, |(_, q)| q) * (MINUTE / sc.quota_window_ms) as u32;
    let later: Vec<u32> = r
        .accepted
        .iter()
        .skip(sc.raise.map_or(4, |(at, _)| at + 5))
        .copied()
        .collect();
    println!(
        "  from minute 5: {:.1}% of calls refused; accepted {:.0}% of the quota (after a raise: \
         from 5 minutes after it)",
        100.0 * f64::from(calls - acc) / f64::from(calls.max(1)),
        100.0 * f64::from(later.iter().sum::<u32>()) / f64::from(quota * later.len().max(1) as u32)
    );
}

/// Minutes `from..to` (0 is the first) all within `share` percent of `quota`: accepted
/// calls at least `quota - share`, calls (429s included) at most `quota + share`.
fn within(r: &Run, from: usize, to: usize, quota: u32, share: u32) -> Result<(), String> {
    let lo = quota * (100 - share) / 100;
    let hi = quota * (100 + share) / 100;
    for m in from..to.min(r.calls.len()) {
        if r.accepted[m] < lo || r.calls[m] > hi {
            return Err(format!(
                "minute {}: {} calls, {} accepted, outside {lo}..{hi}",
                m + 1,
                r.calls[m],
                r.accepted[m]
            ));
        }
    }
    Ok(())
}

fn check(name: &str, sc: &Scenario, from: usize, quota: u32, share: u32) -> Run {
    let r = run(sc);
    show(name, sc, &r);
    if let Err(e) = within(&r, from, sc.minutes, quota, share) {
        panic!("{name}, quota {quota}: {e}");
    }
    r
}

#[test]
fn converges_to_an_unknown_quota_within_five_minutes() {
    for (quota, min, max) in [
        (100, 10, 300),
        (100, 1, 2_000),
        (30, 3, 90),
        (600, 60, 1_200),
        (3_000, 300, 6_000),
        (3_000, 1, 100_000),
    ] {
        let sc = Scenario {
            quota,
            min_per_min: min,
            max_per_min: max,
            ..Scenario::default()
        };
        let r = check("converge", &sc, 4, quota, 20);
        assert!(r.max_rate_seen <= max, "{} > max {max}", r.max_rate_seen);
    }
}

#[test]
fn recovers_within_five_minutes_after_the_quota_is_raised() {
    for (quota, raised, max) in [(100, 200, 400), (600, 1_500, 3_000), (50, 200, 1_000)] {
        let sc = Scenario {
            quota,
            min_per_min: quota / 10,
            max_per_min: max,
            minutes: 18,
            raise: Some((8, raised)),
            ..Scenario::default()
        };
        let r = check("raise", &sc, 13, raised, 20);
        within(&r, 4, 8, quota, 20).unwrap_or_else(|e| panic!("before the raise: {e}"));
    }
}

#[test]
fn random_429s_do_not_collapse_the_rate() {
    for (quota, seed) in [(100, 7), (100, 8), (100, 9), (200, 7), (30, 7)] {
        let sc = Scenario {
            quota,
            min_per_min: quota / 10,
            max_per_min: quota * 3,
            random_429: 0.02,
            minutes: 20,
            seed,
            ..Scenario::default()
        };
        let r = run(&sc);
        show("random 429", &sc, &r);
        // Every 429 holds the queue for its 5 s Retry-After, so a cluster of them empties a
        // minute whatever the rate: judged over three minutes at a time.
        for m in 4..sc.minutes - 2 {
            let acc: u32 = r.accepted[m..m + 3].iter().sum();
            let calls: u32 = r.calls[m..m + 3].iter().sum();
            assert!(
                acc * 100 >= 3 * quota * 70 && calls * 100 <= 3 * quota * 120,
                "quota {quota}, seed {seed}, minutes {} to {}: {calls} calls, {acc} accepted",
                m + 1,
                m + 3
            );
        }
    }
}

#[test]
fn never_above_max_nor_the_ceiling() {
    // max below the quota: the rate settles at max.
    let sc = Scenario {
        quota: 100,
        min_per_min: 5,
        max_per_min: 60,
        ..Scenario::default()
    };
    let r = check("max below quota", &sc, 3, 60, 10);
    assert!(r.max_rate_seen <= 60);
    assert!(r.max_calls_in_real_minute <= 60 + 4, "{r:?}");
    // A rate_limit ceiling below max and the quota.
    let sc = Scenario {
        quota: 100,
        min_per_min: 5,
        max_per_min: 300,
        ceiling_per_min: Some(45),
        ..Scenario::default()
    };
    let r = check("ceiling", &sc, 3, 45, 10);
    assert!(r.max_rate_seen <= 45);
    assert!(r.max_calls_in_real_minute <= 45 + 4, "{r:?}");
    // A ceiling below min wins.
    let sc = Scenario {
        quota: 100,
        min_per_min: 50,
        max_per_min: 300,
        ceiling_per_min: Some(20),
        ..Scenario::default()
    };
    let r = run(&sc);
    assert!(r.max_rate_seen <= 20);
    assert!(r.max_calls_in_real_minute <= 20 + 4, "{r:?}");
}

#[test]
fn the_same_on_a_clock_a_hundred_times_faster() {
    for random_429 in [0.0, 0.02] {
        let base = Scenario {
            quota: 100,
            min_per_min: 10,
            max_per_min: 300,
            random_429,
            // Latency scaled too: 20 ms to 400 ms becomes 0.2 ms to 4 ms (at least 1 ms).
            latency_ms: (100, 400),
            ..Scenario::default()
        };
        let fast = Scenario {
            scale: 100,
            ..base.clone()
        };
        let (slow, quick) = if random_429 > 0.0 {
            let (slow, quick) = (run(&base), run(&fast));
            show("scale 1", &base, &slow);
            show("scale 100", &fast, &quick);
            (slow, quick)
        } else {
            (
                check("scale 1", &base, 4, 100, 20),
                check("scale 100", &fast, 4, 100, 20),
            )
        };
        let total = |r: &Run| r.accepted.iter().skip(2).sum::<u32>();
        let (a, b) = (total(&slow), total(&quick));
        assert!(a.abs_diff(b) * 10 <= a, "{a} vs {b}");
    }
}

#[test]
fn tallies_flushed_every_quarter_second_work_as_well() {
    let sc = Scenario {
        flush_ms: 250,
        ..Scenario::default()
    };
    check("flushed", &sc, 4, 100, 20);
    let sc = Scenario {
        flush_ms: 250,
        quota: 1_000,
        min_per_min: 100,
        max_per_min: 5_000,
        latency_ms: (200, 2_000),
        workers: 200,
        ..Scenario::default()
    };
    check("flushed, slow calls", &sc, 4, 1_000, 20);
}

#[test]
fn a_dependency_counting_over_a_shorter_window_is_found_too() {
    // 10 calls per 6 s is 100 a minute, but a burst of 11 within 6 s is refused.
    let sc = Scenario {
        quota: 10,
        quota_window_ms: 6_000,
        ..Scenario::default()
    };
    let r = run(&sc);
    show("6 s window", &sc, &r);
    within(&r, 4, sc.minutes, 100, 20).unwrap_or_else(|e| panic!("{e}"));
}
