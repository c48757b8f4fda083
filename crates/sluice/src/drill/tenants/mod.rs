//! `sluice drill --tenants`: the reservation scenario spread over many tenants who share one
//! queue and one partner API, each tenant with its own account there and so its own quota.
//!
//! It runs four sessions side by side on one broker, each on its own queue and partner API,
//! with the same workload ([`plan`]) and no worker rate limiter (nobody told the worker any
//! quota):
//!
//! | run | queue's adaptive rate and breaker | one tenant's account down for `--outage` |
//! |---|---|---|
//! | per key | `"scope": "key"` | yes |
//! | per key, calm | `"scope": "key"` | no |
//! | queue-wide | `"scope": "queue"` | yes |
//! | queue-wide, calm | `"scope": "queue"` | no |
//!
//! The calm runs are the yardstick of the third verdict. Five verdicts judge the two runs with
//! the outage ([`verdicts`]); the command passes when the per-key run passes all five, and the
//! report shows which ones the queue-wide run fails ([`report`]).

pub mod plan;
pub mod report;
pub mod session;
pub mod upstream;
pub mod verdicts;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use anyhow::Context;
use sluice_client::Client;
use sluice_core::adaptive::FlowScope;

use super::DrillArgs;
use super::scenario::{Clock, Scenario};
use super::upstream::CallKind;
use plan::Tenants;

/// How a run's queue is governed, and whether one tenant's account goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// `key` or `queue`, for both the adaptive rate and the breaker.
    pub scope: FlowScope,
    /// Whether the outage tenant's account goes down.
    pub outage: bool,
}

impl Setup {
    /// The run's name.
    pub fn name(self) -> &'static str {
        match (self.scope, self.outage) {
            (FlowScope::Key, true) => "per key",
            (FlowScope::Key, false) => "per key, calm",
            (FlowScope::Queue, true) => "queue-wide",
            (FlowScope::Queue, false) => "queue-wide, calm",
        }
    }

    /// A prefix for progress lines.
    pub fn label(self) -> String {
        format!("[{}] ", self.name())
    }
}

/// What one run observed.
#[derive(Debug)]
pub struct TenantRun {
    /// How it was set up.
    pub setup: Setup,
    /// Its queue.
    pub queue: String,
    /// Partner calls: (scenario minute, tenant, kind).
    pub calls: Vec<(f64, usize, CallKind)>,
    /// Releases applied per reservation id.
    pub applied: HashMap<String, u32>,
    /// Scenario minute each reservation was first released.
    pub first_applied: HashMap<String, f64>,
    /// Repeats absorbed by the idempotency key.
    pub repeats: u64,
    /// The valid reservations.
    pub valid_ids: Vec<String>,
    /// Each task's tenant.
    pub owner: HashMap<String, usize>,
    /// Each task's due minute (the end of its hold).
    pub due: HashMap<String, f64>,
    /// Valid reservations that were dead-lettered at some point.
    pub dead_valid: BTreeSet<String>,
    /// Messages in the DLQ at the end.
    pub dlq_end: usize,
    /// Messages the operator redrove.
    pub redriven: u64,
    /// The samples.
    pub samples: Vec<session::TenantSample>,
    /// Scenario minute the work was done (None: not before the deadline).
    pub drained_at: Option<f64>,
    /// Scenario minutes the run lasted.
    pub ended_at: f64,
    /// Real seconds it took.
    pub real_secs: f64,
}

/// The four runs.
#[derive(Debug)]
pub struct Runs {
    /// Per key, with the outage.
    pub key: TenantRun,
    /// Per key, calm.
    pub key_calm: TenantRun,
    /// Queue-wide, with the outage.
    pub queue: TenantRun,
    /// Queue-wide, calm.
    pub queue_calm: TenantRun,
}

/// Runs the four sessions on the broker of `client`, judges them, prints the summary and
/// writes the report; true when the per-key run passes every verdict.
pub async fn run(
    client: &Client,
    url: &str,
    sc: &Scenario,
    n: u32,
    args: &DrillArgs,
) -> anyhow::Result<bool> {
    let tenants = Tenants::new(sc, n);
    let probe = Clock::new(sc.scale);
    let expected = probe.real(Duration::from_secs_f64(
        (sc.last_expiry_min().max(tenants.raise_at + 3.0) + 5.0) * 60.0,
    ));
    let deadline = args
        .deadline
        .unwrap_or(expected * 3 + Duration::from_secs(60));
    println!(
        "sluice drill --tenants: {} tenants on {url}, 4 runs side by side (time scale {}): \
         expect about {:.0} s, at most {:.0} s",
        tenants.list.len(),
        sc.scale,
        expected.as_secs_f64(),
        deadline.as_secs_f64()
    );
    print!("{}", report::table(sc, &tenants));
    let setup = |scope, outage| Setup { scope, outage };
    let (key, key_calm, queue, queue_calm) = tokio::join!(
        session::run(client, sc, &tenants, setup(FlowScope::Key, true), deadline),
        session::run(client, sc, &tenants, setup(FlowScope::Key, false), deadline),
        session::run(
            client,
            sc,
            &tenants,
            setup(FlowScope::Queue, true),
            deadline
        ),
        session::run(
            client,
            sc,
            &tenants,
            setup(FlowScope::Queue, false),
            deadline
        ),
    );
    let runs = Runs {
        key: key?,
        key_calm: key_calm?,
        queue: queue?,
        queue_calm: queue_calm?,
    };
    let key_verdicts = verdicts::judge(&runs.key, &runs.key_calm, &tenants);
    let queue_verdicts = verdicts::judge(&runs.queue, &runs.queue_calm, &tenants);
    print!(
        "{}",
        report::summary(sc, &tenants, &runs, &key_verdicts, &queue_verdicts)
    );
    if let Some(path) = &args.report {
        let text = if path.extension().is_some_and(|e| e == "html") {
            report::page(sc, &tenants, &runs, &key_verdicts, &queue_verdicts)
        } else {
            report::panels(sc, &tenants, &runs)
        };
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(key_verdicts.iter().all(|v| v.pass))
}
