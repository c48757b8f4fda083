//! The breaker's transitions, the governor's holds and bounds, and the state as a whole.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::time::Timestamp;

const T0: Timestamp = Timestamp(1_767_225_600_000);

fn at(ms: i64) -> Timestamp {
    Timestamp(T0.0 + ms)
}

fn breaker_cfg() -> BreakerConfig {
    BreakerConfig {
        failure_share_permille: 500,
        window_ms: 10_000,
        min_calls: 10,
        probe_every_ms: 5_000,
        probes: 3,
        ..Default::default()
    }
}

fn only_breaker(b: &BreakerConfig) -> FlowConfig<'_> {
    FlowConfig {
        breaker: Some(b),
        ..FlowConfig::default()
    }
}

fn tally(ok: u32, failures: u32) -> Tally {
    let mut t = Tally::of(Outcome::Success, ok);
    t.add(Outcome::Failure, failures);
    t
}

fn transitions(events: &[FlowEvent]) -> Vec<(BreakerState, BreakerState, BreakerReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::Breaker(t) => Some((t.from, t.to, t.reason)),
            FlowEvent::RateAdapted { .. } => None,
        })
        .collect()
}

/// A breaker opened by failures at `at(1_000)`.
fn opened(b: &BreakerConfig) -> FlowState {
    let cfg = only_breaker(b);
    let mut s = FlowState::new(cfg, T0).expect("governed");
    let events = s.observe(cfg, &tally(5, 5), at(1_000));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::Closed,
            BreakerState::Open,
            BreakerReason::Failures
        )]
    );
    s
}

#[test]
fn nothing_to_govern_is_no_state() {
    assert!(FlowState::new(FlowConfig::default(), T0).is_none());
}

#[test]
fn the_breaker_opens_when_the_share_is_reached_with_enough_calls() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = FlowState::new(cfg, T0).expect("governed");
    // 9 failures of 9 calls: not enough calls to judge.
    assert!(s.observe(cfg, &tally(0, 9), at(0)).is_empty());
    // Failures older than the window no longer count: 10 more calls, 4 failed, leave a
    // window of 10 calls with 40% failed.
    assert!(s.observe(cfg, &tally(6, 4), at(10_500)).is_empty());
    assert!(s.counts_attempt(Outcome::Failure));
    assert_eq!(s.admit(cfg, at(10_500)).0, Admit::Free);
    // Congestion and rejects are calls the dependency answered, not failures.
    let mut answered = Tally::of(Outcome::Congestion { retry_after: None }, 5);
    answered.add(Outcome::Other, 5);
    assert!(s.observe(cfg, &answered, at(11_000)).is_empty());
    let st = s.stats(cfg, at(11_000)).breaker.expect("breaker");
    assert_eq!((st.calls_in_window, st.failure_share_permille), (20, 200));
    // 20 failures of 40 calls: half.
    let events = s.observe(cfg, &tally(4, 16), at(12_000));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::Closed,
            BreakerState::Open,
            BreakerReason::Failures
        )]
    );
    let FlowEvent::Breaker(t) = events[0] else {
        unreachable!()
    };
    assert_eq!((t.calls, t.failure_share_permille), (40, 500));
    assert!(!s.counts_attempt(Outcome::Failure));
    assert_eq!(
        s.admit(cfg, at(12_000)).0,
        Admit::Shut {
            until: Some(at(17_000))
        }
    );
}

#[test]
fn an_open_breaker_probes_after_its_pause_and_closes_when_the_probes_succeed() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = opened(&b);
    // Outcomes of deliveries leased before it opened change nothing.
    assert!(s.observe(cfg, &tally(50, 0), at(2_000)).is_empty());
    assert_eq!(
        s.admit(cfg, at(5_999)).0,
        Admit::Shut {
            until: Some(at(6_000))
        }
    );
    let (admit, events) = s.admit(cfg, at(6_000));
    assert_eq!(admit, Admit::Probe { n: 3 });
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerReason::PauseOver
        )]
    );
    assert!(
        !s.counts_attempt(Outcome::Failure),
        "a probe's failure does not spend an attempt"
    );
    s.leased(cfg, 2, at(6_000));
    assert_eq!(s.admit(cfg, at(6_000)).0, Admit::Probe { n: 1 });
    s.leased(cfg, 1, at(6_000));
    // Every probe is out: nothing more until they are answered, or given up for lost after
    // a pause.
    assert_eq!(
        s.admit(cfg, at(6_000)).0,
        Admit::Shut {
            until: Some(at(11_000))
        }
    );
    // A released probe lets another through, and so does a rejected one: a reject is no
    // sign that the dependency is back.
    s.observe(cfg, &Tally::of(Outcome::Neutral, 1), at(6_100));
    assert_eq!(s.admit(cfg, at(6_100)).0, Admit::Probe { n: 1 });
    s.leased(cfg, 1, at(6_100));
    assert!(
        s.observe(cfg, &Tally::of(Outcome::Other, 1), at(6_150))
            .is_empty()
    );
    assert_eq!(s.admit(cfg, at(6_150)).0, Admit::Probe { n: 1 });
    s.leased(cfg, 1, at(6_150));
    assert!(s.observe(cfg, &tally(2, 0), at(6_200)).is_empty());
    let events = s.observe(cfg, &tally(1, 0), at(6_500));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::HalfOpen,
            BreakerState::Closed,
            BreakerReason::ProbesSucceeded
        )]
    );
    assert!(s.counts_attempt(Outcome::Failure));
    assert_eq!(s.admit(cfg, at(6_500)).0, Admit::Free);
    let st = s.stats(cfg, at(9_000)).breaker.expect("breaker");
    assert_eq!(st.state, BreakerState::Closed);
    assert_eq!(st.opened_total, 1);
    assert_eq!(
        st.open_ms_total, 5_500,
        "open and half-open, 1 000 to 6 500"
    );
    assert_eq!(st.calls_in_window, 0, "closing starts an empty window");
    assert_eq!(st.transitions.len(), 3);
}

#[test]
fn a_failed_probe_opens_the_breaker_again() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = opened(&b);
    assert_eq!(s.admit(cfg, at(6_000)).0, Admit::Probe { n: 3 });
    s.leased(cfg, 3, at(6_000));
    s.observe(cfg, &tally(1, 0), at(6_100));
    let events = s.observe(cfg, &tally(0, 1), at(6_200));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::HalfOpen,
            BreakerState::Open,
            BreakerReason::ProbeFailed
        )]
    );
    assert_eq!(
        s.admit(cfg, at(6_200)).0,
        Admit::Shut {
            until: Some(at(11_200))
        }
    );
    let st = s.stats(cfg, at(7_000)).breaker.expect("breaker");
    assert_eq!((st.opened_total, st.open_ms_total), (2, 6_000));
    assert_eq!(st.next_probe_at, Some(at(11_200)));
    // The time-driven turn to half-open is reported by tick as well as by admit.
    assert_eq!(
        transitions(&s.tick(cfg, at(11_200))),
        [(
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerReason::PauseOver
        )]
    );
}

#[test]
fn forced_open_is_sticky_and_forced_closed_starts_afresh() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = FlowState::new(cfg, T0).expect("governed");
    s.observe(cfg, &tally(0, 8), at(100));
    let events = s.force(BreakerForce::Open, at(1_000));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::Closed,
            BreakerState::Open,
            BreakerReason::Forced
        )]
    );
    assert!(!s.counts_attempt(Outcome::Failure));
    // No probes, however long it stays open, and outcomes change nothing.
    for t in [1_000, 6_000, 600_000] {
        assert_eq!(s.admit(cfg, at(t)).0, Admit::Shut { until: None });
        assert!(s.observe(cfg, &tally(10, 0), at(t)).is_empty());
    }
    let st = s.stats(cfg, at(600_000)).breaker.expect("breaker");
    assert!(st.forced);
    assert_eq!(st.next_probe_at, None);
    // Forcing it open again changes nothing.
    assert!(s.force(BreakerForce::Open, at(600_000)).is_empty());
    let events = s.force(BreakerForce::Closed, at(601_000));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::Open,
            BreakerState::Closed,
            BreakerReason::Forced
        )]
    );
    assert!(s.counts_attempt(Outcome::Failure));
    let st = s.stats(cfg, at(601_000)).breaker.expect("breaker");
    assert!(!st.forced);
    assert_eq!(st.calls_in_window, 0, "the 8 failures before are forgotten");
    assert_eq!(st.open_ms_total, 600_000);
    // Automatic again: 2 more failures do not open it (the window starts empty) ...
    assert!(s.observe(cfg, &tally(0, 2), at(601_100)).is_empty());
    // ... and an automatic open probes after its pause.
    s.observe(cfg, &tally(0, 8), at(601_200));
    assert_eq!(s.admit(cfg, at(606_200)).0, Admit::Probe { n: 3 });
}

#[test]
fn probes_whose_answers_were_lost_are_let_through_again_after_a_pause() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = opened(&b);
    assert_eq!(s.admit(cfg, at(6_000)).0, Admit::Probe { n: 3 });
    s.leased(cfg, 3, at(6_000));
    // One answered, two never are (a client gone before its ack was counted).
    assert!(s.observe(cfg, &tally(1, 0), at(6_500)).is_empty());
    assert_eq!(
        s.admit(cfg, at(10_999)).0,
        Admit::Shut {
            until: Some(at(11_000))
        }
    );
    let (admit, events) = s.admit(cfg, at(11_000));
    assert_eq!(admit, Admit::Probe { n: 2 });
    assert!(events.is_empty(), "still half-open: {events:?}");
    s.leased(cfg, 2, at(11_000));
    let events = s.observe(cfg, &tally(2, 0), at(11_200));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::HalfOpen,
            BreakerState::Closed,
            BreakerReason::ProbesSucceeded
        )]
    );
}

#[test]
fn forcing_a_half_open_breaker_open_cancels_its_probes() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = opened(&b);
    assert_eq!(s.admit(cfg, at(6_000)).0, Admit::Probe { n: 3 });
    let events = s.force(BreakerForce::Open, at(6_100));
    assert_eq!(
        transitions(&events),
        [(
            BreakerState::HalfOpen,
            BreakerState::Open,
            BreakerReason::Forced
        )]
    );
    assert_eq!(s.admit(cfg, at(60_000)).0, Admit::Shut { until: None });
}

#[test]
fn an_isolated_retry_after_holds_without_cutting_the_rate() {
    let a = AdaptiveRate::new(60, 600);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        ..FlowConfig::default()
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    let Admit::Paced { per_min, pace } = s.admit(cfg, T0).0 else {
        panic!("paced")
    };
    assert_eq!(per_min, 60);
    assert_eq!(pace.spacing(), Duration::from_secs(1));
    let congestion = |secs| {
        Tally::of(
            Outcome::Congestion {
                retry_after: Some(Duration::from_secs(secs)),
            },
            1,
        )
    };
    assert!(s.observe(cfg, &congestion(30), at(1_000)).is_empty());
    assert_eq!(
        s.admit(cfg, at(1_000)).0,
        Admit::Shut {
            until: Some(at(31_000))
        }
    );
    // A shorter Retry-After does not shorten the hold; a longer one extends it.
    s.observe(cfg, &congestion(5), at(2_000));
    assert_eq!(s.hold_until(), Some(at(31_000)));
    s.observe(cfg, &congestion(60), at(3_000));
    assert_eq!(s.hold_until(), Some(at(63_000)));
    let st = s.stats(cfg, at(3_000)).adaptive.expect("adaptive");
    assert_eq!(st.hold_until, Some(at(63_000)));
    assert_eq!(
        (st.rate_per_min, st.congestion_total, st.decreases_total),
        (60, 3, 0)
    );
    assert!(matches!(s.admit(cfg, at(63_000)).0, Admit::Paced { .. }));
    assert_eq!(
        s.stats(cfg, at(63_000)).adaptive.expect("a").hold_until,
        None
    );
}

/// Leases at the pace the state allows, each answered at once with `answer`, for `ms`.
fn drive(
    s: &mut FlowState,
    cfg: FlowConfig<'_>,
    from: i64,
    ms: i64,
    demand_every_ms: i64,
    answer: Outcome,
) -> Vec<FlowEvent> {
    let mut window = crate::rate::SlidingWindow::default();
    let mut events = Vec::new();
    let mut t = from;
    while t < from + ms {
        let now = at(t);
        let (admit, mut e) = s.admit(cfg, now);
        events.append(&mut e);
        let (n, pace) = match admit {
            Admit::Paced { pace, .. } => (window.available(&pace, now).min(1), Some(pace)),
            Admit::Probe { n } => (n.min(1), None),
            Admit::Free => (1, None),
            Admit::Shut { .. } => (0, None),
        };
        if n > 0 {
            if let Some(pace) = pace {
                window.record(&pace, now, 1);
            }
            events.append(&mut s.leased(cfg, 1, now));
            events.append(&mut s.observe(cfg, &Tally::of(answer, 1), now));
        }
        t += demand_every_ms;
    }
    events
}

#[test]
fn the_rate_grows_only_while_it_binds() {
    let a = AdaptiveRate::new(60, 6_000);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        ..FlowConfig::default()
    };
    // Demand of one message every 2 s (30 a minute) never uses a rate of 60: it stays.
    let mut s = FlowState::new(cfg, T0).expect("governed");
    drive(&mut s, cfg, 0, 600_000, 2_000, Outcome::Success);
    assert_eq!(s.rate_mpm(), Some(60_000));
    // Demand of one every 10 ms: slow start doubles it each round of 5 s up to max, with
    // an audit event for each step of a quarter or more and for reaching max.
    let mut s = FlowState::new(cfg, T0).expect("governed");
    let events = drive(&mut s, cfg, 0, 60_000, 10, Outcome::Success);
    assert_eq!(s.rate_mpm(), Some(6_000_000));
    let steps: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::RateAdapted {
                from_per_min,
                to_per_min,
                reason,
                ..
            } => Some((*from_per_min, *to_per_min, *reason)),
            FlowEvent::Breaker(_) => None,
        })
        .collect();
    assert_eq!(steps.first(), Some(&(60, 120, RateReason::Growth)));
    assert_eq!(steps.last().map(|s| s.1), Some(6_000));
    let history = s.stats(cfg, at(60_000)).history;
    assert_eq!(history.first().and_then(|p| p.rate_per_min), Some(60));
    assert_eq!(history.last().and_then(|p| p.rate_per_min), Some(6_000));
}

#[test]
fn a_rate_grown_by_a_burst_of_work_comes_down_when_the_work_runs_out() {
    let a = AdaptiveRate::new(10, 6_000);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        ..FlowConfig::default()
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    // A burst of work for 45 s: slow start grows the rate far beyond what follows.
    drive(&mut s, cfg, 0, 45_000, 10, Outcome::Success);
    let grown = s.rate_mpm().expect("rate");
    assert!(grown >= 300_000, "{grown}");
    // Then one message every 2 s (30 a minute): within three minutes the rate is back to
    // twice what the dependency accepted over its window, audited as unused.
    let events = drive(&mut s, cfg, 45_000, 180_000, 2_000, Outcome::Success);
    let rate = s.rate_mpm().expect("rate");
    assert!((45_000..=70_000).contains(&rate), "{grown} -> {rate}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            FlowEvent::RateAdapted {
                reason: RateReason::Unused,
                ..
            }
        )),
        "{events:?}"
    );
}

#[test]
fn congestion_cuts_the_rate_once_and_audits_it() {
    let a = AdaptiveRate::new(10, 6_000);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        ..FlowConfig::default()
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    drive(&mut s, cfg, 0, 60_000, 10, Outcome::Success);
    let before = s.rate_mpm().expect("rate");
    let events = drive(
        &mut s,
        cfg,
        60_000,
        1_000,
        10,
        Outcome::Congestion { retry_after: None },
    );
    let cut: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                FlowEvent::RateAdapted {
                    reason: RateReason::Congestion,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(cut.len(), 1, "{events:?}");
    // The first cut ends slow start, from what was accepted over the window (slow start
    // reached its rate only at its end).
    let after = s.rate_mpm().expect("rate");
    assert!(after < before * 7 / 10, "{before} -> {after}");
    let audit = cut[0].audit("jobs");
    assert_eq!(audit.action, "queue.rate_adapted");
    assert_eq!(audit.actor, "sluice");
    assert_eq!(audit.queue.as_deref(), Some("jobs"));
    assert_eq!(audit.details["reason"], "congestion");
    assert_eq!(audit.details["from_per_min"], (before / 1000).to_string());
}

#[test]
fn a_ceiling_below_min_wins_and_reconfiguring_moves_the_rate_into_its_bounds() {
    let a = AdaptiveRate::new(100, 1_000);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        breaker: None,
        ceiling_per_min: Some(30),
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    assert_eq!(s.rate_mpm(), Some(30_000));
    drive(&mut s, cfg, 0, 120_000, 10, Outcome::Success);
    assert_eq!(s.rate_mpm(), Some(30_000));
    let lifted = FlowConfig {
        ceiling_per_min: None,
        ..cfg
    };
    let events = s.reconfigure(lifted, at(120_000));
    assert_eq!(s.rate_mpm(), Some(100_000));
    assert!(matches!(
        events[..],
        [FlowEvent::RateAdapted {
            from_per_min: 30,
            to_per_min: 100,
            reason: RateReason::Config,
            ..
        }]
    ));
    // Adding a breaker adds it closed; dropping the rate drops the governor.
    let b = breaker_cfg();
    let both = FlowConfig {
        breaker: Some(&b),
        ..lifted
    };
    s.reconfigure(both, at(121_000));
    assert!(s.has_breaker());
    assert!(matches!(s.admit(both, at(121_000)).0, Admit::Paced { .. }));
    let breaker_only = only_breaker(&b);
    s.reconfigure(breaker_only, at(122_000));
    assert_eq!(s.rate_mpm(), None);
    assert_eq!(s.admit(breaker_only, at(122_000)).0, Admit::Free);
    assert!(s.stats(breaker_only, at(122_000)).adaptive.is_none());
}

#[test]
fn the_state_survives_a_trip_through_json() {
    let a = AdaptiveRate::new(10, 600);
    let b = breaker_cfg();
    let cfg = FlowConfig {
        adaptive: Some(&a),
        breaker: Some(&b),
        ceiling_per_min: None,
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    drive(&mut s, cfg, 0, 30_000, 50, Outcome::Success);
    s.observe(
        cfg,
        &Tally::of(
            Outcome::Congestion {
                retry_after: Some(Duration::from_secs(3)),
            },
            2,
        ),
        at(30_000),
    );
    s.force(BreakerForce::Open, at(31_000));
    let json = serde_json::to_string(&s).expect("json");
    let back: FlowState = serde_json::from_str(&json).expect("read");
    assert_eq!(back, s);
    assert_eq!(back.stats(cfg, at(32_000)), s.stats(cfg, at(32_000)));
}

#[test]
fn breaker_transitions_are_audited_with_their_share() {
    let b = breaker_cfg();
    let s = opened(&b);
    let st = s
        .stats(only_breaker(&b), at(1_000))
        .breaker
        .expect("breaker");
    let e = FlowEvent::Breaker(st.transitions[0]).audit("jobs");
    assert_eq!(e.action, "queue.breaker");
    assert_eq!(e.details["from"], "closed");
    assert_eq!(e.details["to"], "open");
    assert_eq!(e.details["reason"], "failures");
    assert_eq!(e.details["failure_share"], "0.5");
    assert_eq!(e.details["calls"], "10");
}

#[test]
fn history_and_transitions_stay_bounded() {
    let b = breaker_cfg();
    let cfg = only_breaker(&b);
    let mut s = FlowState::new(cfg, T0).expect("governed");
    for i in 0..500 {
        s.force(BreakerForce::Open, at(i * 10));
        s.force(BreakerForce::Closed, at(i * 10 + 5));
    }
    let st = s.stats(cfg, at(10_000));
    assert_eq!(st.history.len(), HISTORY_KEPT);
    assert_eq!(st.breaker.expect("b").transitions.len(), TRANSITIONS_KEPT);
}

/// One thing that can happen to a governed queue.
#[derive(Debug, Clone)]
enum Op {
    Advance(i64),
    Admit,
    Lease(u32),
    Observe(u32, u32, u32, u32, u32, Option<u64>),
    Force(bool),
    Bounds(u32, u32, Option<u32>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Mostly forward; now and then a little backwards (clocks of two nodes).
        (-2_000i64..120_000).prop_map(Op::Advance),
        Just(Op::Admit),
        (0u32..200).prop_map(Op::Lease),
        (
            0u32..100,
            0u32..20,
            0u32..20,
            0u32..5,
            0u32..5,
            proptest::option::of(0u64..600_000)
        )
            .prop_map(|(a, b, c, d, e, f)| Op::Observe(a, b, c, d, e, f)),
        any::<bool>().prop_map(Op::Force),
        (1u32..500, 0u32..5_000, proptest::option::of(1u32..2_000))
            .prop_map(|(min, extra, ceiling)| Op::Bounds(min, min + extra, ceiling)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever happens, the rate stays within `[min, min(max, ceiling)]` (the ceiling
    /// winning over min), admits never exceed it, and the hold only moves later.
    #[test]
    fn the_rate_stays_in_its_bounds_and_holds_never_shorten(
        ops in proptest::collection::vec(op(), 1..200)
    ) {
        let mut a = AdaptiveRate::new(5, 300);
        let b = breaker_cfg();
        let mut ceiling = None;
        let mut now = T0;
        fn cfg_of<'a>(a: &'a AdaptiveRate, b: &'a BreakerConfig, c: Option<u32>) -> FlowConfig<'a> {
            FlowConfig {
                adaptive: Some(a),
                breaker: Some(b),
                ceiling_per_min: c,
            }
        }
        let mut s = FlowState::new(cfg_of(&a, &b, ceiling), now).expect("governed");
        let mut hold = None;
        for op in ops {
            match op {
                Op::Advance(ms) => now = Timestamp(now.0 + ms),
                Op::Admit => {
                    let cfg = cfg_of(&a, &b, ceiling);
                    match s.admit(cfg, now).0 {
                        Admit::Paced { per_min, .. } => {
                            let upper = ceiling.map_or(a.max_per_min, |c| c.min(a.max_per_min));
                            prop_assert!(per_min <= upper);
                        }
                        Admit::Probe { n } => prop_assert!(n <= b.probes),
                        Admit::Shut { until } => {
                            prop_assert!(until.is_none_or(|u| u > now));
                        }
                        Admit::Free => prop_assert!(false, "a governed rate is paced"),
                    }
                }
                Op::Lease(n) => {
                    s.leased(cfg_of(&a, &b, ceiling), n, now);
                }
                Op::Observe(ok, congestion, failures, other, neutral, retry_ms) => {
                    let mut t = Tally::of(Outcome::Success, ok);
                    t.add(Outcome::Congestion { retry_after: retry_ms.map(Duration::from_millis) }, congestion);
                    t.add(Outcome::Failure, failures);
                    t.add(Outcome::Other, other);
                    t.add(Outcome::Neutral, neutral);
                    s.observe(cfg_of(&a, &b, ceiling), &t, now);
                }
                Op::Force(open) => {
                    let f = if open { BreakerForce::Open } else { BreakerForce::Closed };
                    s.force(f, now);
                    prop_assert_eq!(s.counts_attempt(Outcome::Failure), !open);
                }
                Op::Bounds(min, max, c) => {
                    a = AdaptiveRate::new(min, max);
                    ceiling = c;
                    s.reconfigure(cfg_of(&a, &b, ceiling), now);
                }
            }
            let upper = u64::from(ceiling.map_or(a.max_per_min, |c| c.min(a.max_per_min))) * 1000;
            let lower = (u64::from(a.min_per_min) * 1000).min(upper);
            let rate = s.rate_mpm().expect("rate");
            prop_assert!((lower..=upper).contains(&rate), "{rate} outside {lower}..={upper}");
            let h = s.hold_until();
            prop_assert!(h >= hold, "hold moved back from {hold:?} to {h:?}");
            hold = h;
            let st = s.stats(cfg_of(&a, &b, ceiling), now);
            let r = st.adaptive.expect("adaptive");
            prop_assert!(r.hold_until.is_none_or(|u| u > now));
            prop_assert!(st.history.len() <= HISTORY_KEPT);
        }
    }
}

#[test]
fn random_refusals_do_not_cut_a_queue_under_its_own_traffic() {
    // 30 deliveries a minute of work: slow start grows the rate past it, then stops growing
    // (the rate no longer holds deliveries back), so what was accepted is the work there was.
    let a = AdaptiveRate::new(10, 6_000);
    let cfg = FlowConfig {
        adaptive: Some(&a),
        ..FlowConfig::default()
    };
    let mut s = FlowState::new(cfg, T0).expect("governed");
    drive(&mut s, cfg, 0, 60_000, 2_000, Outcome::Success);
    let grown = s.rate_mpm().expect("rate");
    assert!(grown > 45_000, "slow start grew past the work: {grown}");
    // Four random 429s among the last outcomes cut the rate, but from the rate, not from the
    // 30 a minute the queue happened to need: it stays above its own traffic.
    let congestion = Tally::of(Outcome::Congestion { retry_after: None }, 1);
    for i in 0..4 {
        s.observe(cfg, &congestion, at(60_000 + i));
    }
    let cut = s.rate_mpm().expect("rate");
    assert!(cut < grown, "cut: {grown} -> {cut}");
    assert!(
        cut >= 30_000,
        "cut under the queue's own traffic: {grown} -> {cut}"
    );
}
