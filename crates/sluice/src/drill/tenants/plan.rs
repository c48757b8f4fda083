//! The tenants: who sends how much, each one's quota at the partner, whose account goes down
//! and whose quota is raised; and the workload spread over them.
//!
//! Shares are uneven, as in any real customer base: the first tenant sends 40 % of the
//! reservations, the others split the rest by `1 / rank` (with 20 tenants, from 17 % down to
//! under 1 %). A tenant's quota is its expected calls per minute times a factor drawn from the
//! A tenant's quota is a plan tier drawn from the seed (30, 60, 120 or 300 calls a minute),
//! raised to one and a half times its expected calls a minute (rounded to 5) when that is
//! more, and at most 300: headroom for its own steady traffic, not for a backlog. Why no
//! tier under 30: a governor learns a quota by touching it, and needs two refused calls to
//! tell a quota from random 429s; under 30 a minute two calls are more than a tenth.
//! Two tenants stand out:
//!
//! - the **raised** tenant (the largest) has a quota under its traffic, 80 % of it, so a
//!   backlog builds; at 60 % of the arrival window its plan is upgraded to one and a half times the quota;
//! - the **outage** tenant (the fourth largest) has its account suspended for `--outage`
//!   (every call answered 503), from `--outage-at`.

use std::collections::HashMap;
use std::time::SystemTime;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::scenario::{Clock, Scenario};
use super::super::workload::{self, Item, Plan};

/// Tenant index of the raised tenant.
pub const RAISED: usize = 0;
/// Tenant index of the outage tenant.
pub const OUTAGE: usize = 3;
/// The raised tenant's quota before the raise, as a share of its expected calls.
const RAISED_BEFORE: f64 = 0.8;
/// The partner's plan tiers, calls per minute.
const TIERS: [u32; 4] = [30, 60, 120, 300];

/// One tenant.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Its name: its messages' key and its path at the partner.
    pub name: String,
    /// Its share of the reservations.
    pub share: f64,
    /// Its quota at the start, calls per scenario minute.
    pub quota: u32,
}

/// The tenant table.
#[derive(Debug, Clone)]
pub struct Tenants {
    /// The tenants, largest first.
    pub list: Vec<Tenant>,
    /// The raised tenant's quota after the raise.
    pub raised_to: u32,
    /// Scenario minute of the raise.
    pub raise_at: f64,
}

fn round5(v: f64) -> u32 {
    ((v / 5.0).round() * 5.0) as u32
}

impl Tenants {
    /// The table for `n` tenants of the scenario `sc`.
    pub fn new(sc: &Scenario, n: u32) -> Self {
        let n = n as usize;
        let per_min = f64::from(sc.reservations) / (sc.arrival_window.as_secs_f64() / 60.0);
        let harmonic: f64 = (1..n).map(|i| 1.0 / i as f64).sum();
        let mut rng = StdRng::seed_from_u64(sc.seed ^ 0x7e4a47);
        let hi = TIERS[TIERS.len() - 1];
        let list: Vec<Tenant> = (0..n)
            .map(|i| {
                let share = if i == 0 {
                    0.4
                } else {
                    0.6 / (i as f64 * harmonic)
                };
                let expected = per_min * share;
                let tier = TIERS[rng.gen_range(0..TIERS.len())];
                let quota = if i == RAISED {
                    round5(expected * RAISED_BEFORE).max(TIERS[0])
                } else {
                    tier.max(round5(expected * 1.5))
                };
                Tenant {
                    name: format!("t{i:02}"),
                    share,
                    quota: quota.min(hi),
                }
            })
            .collect();
        let raised_to = (list[RAISED].quota * 3 / 2).min(hi);
        let raise_at = (sc.hold + sc.arrival_window.mul_f64(0.6)).as_secs_f64() / 60.0;
        Tenants {
            list,
            raised_to,
            raise_at,
        }
    }

    /// Tenant `i`'s quota at scenario minute `m`.
    pub fn quota_at(&self, i: usize, m: f64) -> u32 {
        if i == RAISED && m >= self.raise_at {
            self.raised_to
        } else {
            self.list[i].quota
        }
    }

    /// The names, in table order.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|t| t.name.clone()).collect()
    }
}

/// The drill's workload ([`workload::plan`]) with every task given a tenant, drawn by share
/// (poison ones too; undecodable bodies belong to nobody), and each task's tenant.
pub fn plan(
    sc: &Scenario,
    tenants: &Tenants,
    clock: &Clock,
    epoch: SystemTime,
) -> (Plan, HashMap<String, usize>) {
    let mut p = workload::plan(sc, clock, epoch);
    let mut rng = StdRng::seed_from_u64(sc.seed ^ 0x7e4a_0001);
    let mut owner = HashMap::new();
    for (_, item) in &mut p.items {
        let Item::Task(e) = item else { continue };
        let mut draw = rng.gen_range(0.0..1.0);
        let mut pick = tenants.list.len() - 1;
        for (i, t) in tenants.list.iter().enumerate() {
            if draw < t.share {
                pick = i;
                break;
            }
            draw -= t.share;
        }
        e.tenant = Some(tenants.list[pick].name.clone());
        owner.insert(e.reservation_id.clone(), pick);
    }
    (p, owner)
}
