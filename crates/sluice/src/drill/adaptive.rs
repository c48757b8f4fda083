//! `sluice drill --adaptive`: the queue governs itself. It has an adaptive delivery rate
//! (starting at `--adaptive-min`, bounded by `--adaptive-max`, learning from the Retry-After
//! of the upstream's 429s) and a circuit breaker, and the worker has no rate limiter: nobody
//! told it the quota. The tuned run (a limiter at 90% of the quota) runs beside it on its own
//! queue and upstream as the yardstick.
//!
//! Four more criteria judge it:
//!
//! 5. The outage dead-lettered no valid task: the breaker opened, and nacks while it was open
//!    or half-open did not spend attempts, so no redrive is needed.
//! 6. After the first 2 scenario minutes (slow start), the calls the upstream counted against
//!    its quota in any sliding minute stayed within the quota plus a tenth. Counted calls are
//!    every call but the injected random 429s and the outage's 503s: a call the upstream
//!    refused for its quota was one too many. A governor learns the limit by touching it, and
//!    deliveries already in flight when the first 429 comes back still arrive, so a tenth is
//!    allowed over the quota, and no more.
//! 7. The 429s for the quota (beyond the injected random ones) stayed under 2% of all calls.
//! 8. The backlog drained no later than the tuned run's (within one sample, a scenario
//!    minute).
//!
//! Every rate is in scenario time: the queue's rates and windows are scaled by the time scale
//! (a quota window of a scenario minute is `60 / N` real seconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_client::wire::StatsView;
use sluice_core::adaptive::{AdaptiveRate, BreakerConfig, BreakerState, limits};

use super::criteria::{Verdict, busiest_window, valid_dead_lettered};
use super::scenario::{Clock, Scenario};
use super::upstream::CallKind;
use super::{Observed, ms};

/// How a run's queue and worker are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A worker whose limiter is set from the quota; a plain queue.
    Tuned,
    /// A worker without a limiter; the queue has an adaptive rate and a breaker.
    Adaptive,
}

impl Mode {
    /// A prefix for progress lines, so that two runs side by side can be told apart.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Tuned => "[tuned] ",
            Mode::Adaptive => "[adaptive] ",
        }
    }

    /// How the run is set up, for its first line.
    pub fn describe(self, sc: &Scenario) -> String {
        match self {
            Mode::Tuned => format!(", tuned: worker limiter {:.0}/min", sc.worker_per_min()),
            Mode::Adaptive => format!(
                ", adaptive {}..{}/min + breaker, worker without a limiter",
                sc.adaptive_min_per_min, sc.adaptive_max_per_min
            ),
        }
    }
}

/// Breaker of the adaptive run: opens when half the calls of the last 15 scenario seconds
/// failed (5 calls at least), probes every 30 scenario seconds with 3 deliveries. A failed
/// message waits out the window before its backoff (10 s), so the window is also the shortest
/// retry after a failure: 15 s opens the breaker within seconds of the outage's start without
/// holding the scenario's few lost replies back long.
pub const BREAKER_MIN_CALLS: u32 = 5;
/// The breaker's window, scenario seconds.
pub const BREAKER_WINDOW_SECS: u64 = 15;

/// The queue's adaptive rate and breaker for the run, in real time.
pub fn governance(sc: &Scenario, clock: &Clock) -> (AdaptiveRate, BreakerConfig) {
    let per_min = |scenario: u32| {
        (f64::from(scenario) * sc.scale)
            .round()
            .clamp(1.0, f64::from(limits::MAX_PER_MIN)) as u32
    };
    let real_ms = |secs: u64| {
        u64::try_from(ms(clock.real(Duration::from_secs(secs))))
            .unwrap_or(limits::MIN_WINDOW_MS)
            .clamp(limits::MIN_WINDOW_MS, limits::MAX_WINDOW_MS)
    };
    let mut rate = AdaptiveRate::new(
        per_min(sc.adaptive_min_per_min),
        per_min(sc.adaptive_max_per_min),
    );
    // The upstream counts its quota over a scenario minute.
    rate.window_ms = Some(real_ms(60));
    let breaker = BreakerConfig {
        failure_share_permille: 500,
        window_ms: real_ms(BREAKER_WINDOW_SECS),
        min_calls: BREAKER_MIN_CALLS,
        probe_every_ms: real_ms(30),
        probes: 3,
        ..BreakerConfig::default()
    };
    (rate, breaker)
}

/// A governed queue's adaptive rate and breaker at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowSample {
    /// The adaptive rate, per scenario minute.
    pub rate_per_min: Option<f64>,
    /// The breaker's state.
    pub breaker: Option<BreakerState>,
}

impl FlowSample {
    /// For a progress line: empty for a queue that is not governed.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(r) = self.rate_per_min {
            s.push_str(&format!("  rate {r:.0}/min"));
        }
        if let Some(b) = self.breaker {
            s.push_str(&format!("  breaker {}", b.as_str()));
        }
        s
    }
}

/// The flow of a queue's stats, its rate in scenario minutes.
pub fn flow_sample(st: &StatsView, scale: f64) -> FlowSample {
    let Some(flow) = &st.flow else {
        return FlowSample::default();
    };
    FlowSample {
        rate_per_min: flow
            .adaptive
            .as_ref()
            .map(|a| f64::from(a.rate_per_min) / scale),
        breaker: flow.breaker.as_ref().map(|b| b.state.into()),
    }
}

/// Adds the breaker transitions of `st` that `into` does not hold yet, as (scenario minute,
/// state entered); the broker keeps only the last few, so they are gathered at each sample.
pub fn merge_transitions(
    into: &mut Vec<(f64, String)>,
    st: &StatsView,
    clock: &Clock,
    epoch: SystemTime,
) {
    let Some(b) = st.flow.as_ref().and_then(|f| f.breaker.as_ref()) else {
        return;
    };
    let epoch_ms = epoch
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let last = into.last().map_or(f64::NEG_INFINITY, |t| t.0);
    for t in &b.transitions {
        let Ok(at) = sluice_client::wire::parse_rfc3339("at", &t.at) else {
            continue;
        };
        let minute = (at.as_millis() as f64 - epoch_ms) / 1000.0 * clock.scale / 60.0;
        if minute > last {
            into.push((minute, t.to.as_str().to_owned()));
        }
    }
}

/// Criteria 5 to 8 of an adaptive run, against the tuned run beside it when there is one.
pub fn judge(o: &Observed, reference: Option<&Observed>) -> Vec<Verdict> {
    let sc = &o.scenario;
    let quota = u64::from(sc.quota_per_min);

    let dead = valid_dead_lettered(o);
    let tuned_dead = reference.map_or(String::new(), |r| {
        format!(" (tuned run: {} dead-lettered)", valid_dead_lettered(r))
    });
    let opened = o
        .breaker_transitions
        .iter()
        .filter(|(_, s)| s == "open")
        .count();
    let c5 = Verdict {
        number: 5,
        name: "the outage dead-lettered no valid task",
        pass: dead == 0,
        figure: format!(
            "{dead} valid tasks dead-lettered{tuned_dead}; the breaker opened {opened} times"
        ),
    };

    let counted: Vec<f64> = o
        .calls
        .iter()
        .filter(|(m, k)| *m >= 2.0 && k.counts_against_quota())
        .map(|(m, _)| *m)
        .collect();
    let (peak, from) = busiest_window(&counted, 1.0);
    let peak = peak as u64;
    let allowed = quota + quota.div_ceil(10);
    let c6 = Verdict {
        number: 6,
        name: "upstream calls within the quota after minute 2",
        pass: peak <= allowed,
        figure: format!(
            "peak {peak} calls counted against the quota in any sliding minute (from minute \
             {from:.1}; quota {quota}, allowed {allowed}: a tenth for calls already in flight)"
        ),
    };

    let n = o.calls.len();
    let quota_429 = o.calls_of(CallKind::Quota429);
    let random_429 = o.calls_of(CallKind::Random429);
    let share = if n == 0 {
        0.0
    } else {
        quota_429 as f64 * 100.0 / n as f64
    };
    let c7 = Verdict {
        number: 7,
        name: "429s beyond the injected ones under 2% of calls",
        pass: share < 2.0,
        figure: format!(
            "{quota_429} quota 429s of {n} calls ({share:.2}%); {random_429} random 429s injected"
        ),
    };

    let at = |r: &Observed| {
        r.drained_at
            .map_or_else(|| "not drained".to_owned(), |m| format!("minute {m:.0}"))
    };
    let (pass, yardstick) = match (o.drained_at, reference) {
        (None, _) => (false, String::new()),
        (Some(_), None) => (true, "; no tuned run beside it (--no-reference)".to_owned()),
        (Some(a), Some(r)) => (
            r.drained_at.is_none_or(|t| a <= t + 1.0),
            format!("; tuned run {}", at(r)),
        ),
    };
    let c8 = Verdict {
        number: 8,
        name: "drained no later than the tuned run",
        pass,
        figure: format!("drained at {}{yardstick}", at(o)),
    };
    vec![c5, c6, c7, c8]
}
