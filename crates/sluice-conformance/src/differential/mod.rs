//! A differential model test of the whole `Store` contract.
//!
//! Random scenarios ([`ops`]) over every `Store` method — queue create, update, delete and
//! re-create; sends with every option; receives, acks with results, nacks with explicit
//! delays, rejects, moves, extends, releases; purge, delete, get, browse, stats, dead-letter
//! summaries; redrive jobs; schedules; cancel; idempotent responses — with restarts,
//! compactions and crashes at random points, run against an engine and a reference model
//! ([`model`]) on one shared [`ManualClock`]. After every step the runner ([`runner`])
//! compares every field of every message (by `get_message` and by paging `browse`), every
//! queue's config and stats, every dead-letter summary, and the answer of every call (the Ok
//! value, or the error code). Engines assign their own message ids and receipts: the runner
//! keeps per-engine tables indexed by model id and model delivery ([`compare`]).
//!
//! Scenarios shrink on failure (proptest); the seed is printed. [`check`] runs a number of
//! scenarios against targets made by a factory.

use std::future::Future;
use std::pin::Pin;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use sluice_core::time::ManualClock;

pub mod compare;
pub mod model;
pub mod ops;
pub mod runner;

pub use runner::{Run, Target};

/// Makes a fresh, empty target on a clock.
pub type Factory<'f> =
    dyn Fn(ManualClock) -> Pin<Box<dyn Future<Output = Box<dyn Target>> + Send>> + Sync + 'f;

/// How many scenarios and how long.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Scenarios to run.
    pub cases: u32,
    /// Most operations per scenario (besides the two that create queues first).
    pub max_len: usize,
    /// The seed of the scenarios.
    pub seed: u64,
}

impl Plan {
    /// A plan from the environment: `SLUICE_DIFF_CASES`, `SLUICE_DIFF_LEN` and
    /// `SLUICE_DIFF_SEED` override the given defaults.
    pub fn from_env(cases: u32, max_len: usize, seed: u64) -> Plan {
        let get = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Plan {
            cases: get("SLUICE_DIFF_CASES").map_or(cases, |v| v as u32),
            max_len: get("SLUICE_DIFF_LEN").map_or(max_len, |v| v as usize),
            seed: get("SLUICE_DIFF_SEED").unwrap_or(seed),
        }
    }
}

/// Runs `plan.cases` scenarios, each against a fresh target from `factory`, on the runtime
/// `rt`. A failing scenario is shrunk to a minimal one, and the test panics with it, the
/// seed and the disagreement.
pub fn check(name: &str, rt: &tokio::runtime::Runtime, plan: Plan, factory: &Factory<'_>) {
    // A scenario's future is large and deep, and a debug build polls it on the calling
    // thread's stack: the scenarios run on a thread of their own with room for it (a test
    // thread has 2 MiB).
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(format!("differential {name}"))
            .stack_size(SCENARIO_STACK)
            .spawn_scoped(s, || check_here(name, rt, plan, factory))
            .expect("a thread for the scenarios")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    });
}

/// The stack of the thread that runs the scenarios.
const SCENARIO_STACK: usize = 16 << 20;

fn check_here(name: &str, rt: &tokio::runtime::Runtime, plan: Plan, factory: &Factory<'_>) {
    eprintln!(
        "differential {name}: {} scenarios of up to {} steps, SLUICE_DIFF_SEED={}",
        plan.cases, plan.max_len, plan.seed
    );
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&plan.seed.to_le_bytes());
    let config = Config {
        cases: plan.cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let started = std::time::Instant::now();
    let result = runner.run(&ops::scenario(plan.max_len).boxed(), |ops| {
        rt.block_on(async {
            let clock = ManualClock::default();
            let mut target = factory(clock.clone()).await;
            let mut run = Run::new(&mut *target, clock);
            run.run(&ops).await
        })
        .map_err(|e| {
            let listing: Vec<String> = ops
                .iter()
                .enumerate()
                .map(|(i, op)| format!("  {i:3}: {op:?}"))
                .collect();
            TestCaseError::fail(format!("{e}\nscenario:\n{}", listing.join("\n")))
        })
    });
    match result {
        Ok(()) => eprintln!(
            "differential {name}: {} scenarios passed in {:.1} s",
            plan.cases,
            started.elapsed().as_secs_f64()
        ),
        Err(proptest::test_runner::TestError::Fail(reason, _)) => panic!(
            "differential {name} failed (SLUICE_DIFF_SEED={}, {} scenarios, up to {} steps); \
             minimal scenario and disagreement:\n{reason}",
            plan.seed, plan.cases, plan.max_len
        ),
        Err(e) => panic!(
            "differential {name} failed (SLUICE_DIFF_SEED={}, {} scenarios, up to {} steps); \
             minimal scenario and disagreement:\n{e}",
            plan.seed, plan.cases, plan.max_len
        ),
    }
}
