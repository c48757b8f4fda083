//! A model-based check of FIFO groups: random sequences of grouped and ungrouped sends,
//! receives, acks, nacks, rejects and clock moves, each checked against a small reference
//! that knows only the rule: of a group, only the first member of its line may be
//! delivered, and only when it is due and not leased.

use std::collections::{BTreeMap, HashMap, VecDeque};

use proptest::prelude::*;

use super::*;

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Step {
    /// Send one message, in group `group` (of three) or ungrouped, delayed `delay_s`.
    Send { group: Option<u8>, delay_s: u64 },
    /// Receive up to `max`.
    Receive { max: u32 },
    /// Ack the `pick`-th active lease.
    Ack { pick: usize },
    /// Nack the `pick`-th active lease with a delay.
    Nack { pick: usize, delay_s: u64 },
    /// Reject the `pick`-th active lease (to the DLQ).
    Reject { pick: usize },
    /// Move the clock.
    Advance { s: u64 },
}

fn steps(len: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (proptest::option::weighted(0.8, 0u8..3), prop_oneof![4 => Just(0u64), 1 => 1u64..6])
            .prop_map(|(group, delay_s)| Step::Send { group, delay_s }),
        4 => (1u32..6).prop_map(|max| Step::Receive { max }),
        3 => (0usize..8).prop_map(|pick| Step::Ack { pick }),
        2 => ((0usize..8), 0u64..4).prop_map(|(pick, delay_s)| Step::Nack { pick, delay_s }),
        1 => (0usize..8).prop_map(|pick| Step::Reject { pick }),
        2 => (0u64..13).prop_map(|s| Step::Advance { s }),
    ];
    proptest::collection::vec(step, 1..len)
}

/// What the reference knows of one message.
struct Known {
    group: Option<u8>,
    visible_at: Timestamp,
    lease: Option<(Receipt, Timestamp)>,
    receive_count: u32,
}

/// The reference: live messages of the queue and each group's line.
#[derive(Default)]
struct Reference {
    msgs: BTreeMap<MessageId, Known>,
    lines: HashMap<u8, VecDeque<MessageId>>,
}

impl Reference {
    /// Ends the leases that are over at `now`.
    fn expire(&mut self, now: Timestamp) {
        for m in self.msgs.values_mut() {
            if m.lease.is_some_and(|(_, until)| until <= now) {
                m.lease = None;
                m.visible_at = now;
            }
        }
    }

    /// Whether `id` may be delivered at `now`.
    fn deliverable(&self, id: MessageId, now: Timestamp) -> bool {
        let m = &self.msgs[&id];
        m.lease.is_none()
            && m.visible_at <= now
            && m.group.is_none_or(|g| self.lines[&g].front() == Some(&id))
    }

    /// Active leases, oldest id first.
    fn leases(&self) -> Vec<(MessageId, Receipt)> {
        self.msgs
            .iter()
            .filter_map(|(id, m)| m.lease.map(|(r, _)| (*id, r)))
            .collect()
    }

    fn forget(&mut self, id: MessageId) {
        if let Some(m) = self.msgs.remove(&id)
            && let Some(g) = m.group
        {
            let line = self.lines.get_mut(&g).expect("line of a grouped message");
            line.retain(|x| *x != id);
        }
    }
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

const VIS: Duration = Duration::from_secs(10);

// Long because it is one arm per step of a FIFO-group sequence, each making its call and moving the
// reference's group lines and leases with it, then the gauges compared; a delivery out of turn
// fails at its step.
async fn run(h: &dyn Harness, steps: &[Step]) -> Result<(), String> {
    let e = env(h).await;
    let q = e
        .queue(
            "fifo-model",
            QueueConfigPatch {
                max_receive_count: Some(1000),
                visibility_timeout: Some(VIS),
                ..Default::default()
            },
        )
        .await;
    let mut r = Reference::default();
    for (i, step) in steps.iter().enumerate() {
        let now = e.now();
        r.expire(now);
        match step {
            Step::Send { group, delay_s } => {
                let mut m = delayed(&format!("m{i}"), secs(*delay_s));
                if let Some(g) = group {
                    m = m.in_group(gn(&format!("g{g}")));
                }
                let id = e.send(&q, m).await.id;
                r.msgs.insert(
                    id,
                    Known {
                        group: *group,
                        visible_at: now.plus(secs(*delay_s)),
                        lease: None,
                        receive_count: 0,
                    },
                );
                if let Some(g) = group {
                    r.lines.entry(*g).or_default().push_back(id);
                }
            }
            Step::Receive { max } => {
                let want: BTreeSet<MessageId> = r
                    .msgs
                    .keys()
                    .copied()
                    .filter(|id| r.deliverable(*id, now))
                    .collect();
                let ds = e.recv(&q, *max).await;
                check!(
                    ds.len() == want.len().min(*max as usize),
                    "step {i}: received {:?}, deliverable {want:?}",
                    order_of(&ds)
                );
                for d in ds {
                    check!(
                        want.contains(&d.id),
                        "step {i}: {} delivered out of turn (deliverable {want:?})",
                        d.id
                    );
                    let m = r.msgs.get_mut(&d.id).expect("known");
                    check!(
                        d.group == m.group.map(|g| gn(&format!("g{g}"))),
                        "step {i}: delivery of {} carries group {:?}",
                        d.id,
                        d.group
                    );
                    m.receive_count += 1;
                    check!(
                        d.receive_count == m.receive_count,
                        "step {i}: receive count of {} is {}, expected {}",
                        d.id,
                        d.receive_count,
                        m.receive_count
                    );
                    m.lease = Some((d.receipt, now.plus(VIS)));
                }
            }
            Step::Ack { pick } | Step::Nack { pick, .. } | Step::Reject { pick } => {
                let leases = r.leases();
                if leases.is_empty() {
                    continue;
                }
                let (id, receipt) = leases[pick % leases.len()];
                match step {
                    Step::Ack { .. } => {
                        let out = e.ack(&q, receipt).await;
                        check!(out.is_ok(), "step {i}: ack of {id}: {out:?}");
                        r.forget(id);
                    }
                    Step::Nack { delay_s, .. } => {
                        let out = e.nack(&q, receipt, Some(secs(*delay_s)), None).await;
                        check!(out.is_ok(), "step {i}: nack of {id}: {out:?}");
                        let m = r.msgs.get_mut(&id).expect("known");
                        m.lease = None;
                        m.visible_at = now.plus(secs(*delay_s));
                    }
                    _ => {
                        let out = e.store.reject(&q, receipt, fail("no")).await;
                        check!(out.is_ok(), "step {i}: reject of {id}: {out:?}");
                        r.forget(id);
                    }
                }
            }
            Step::Advance { s } => e.advance(secs(*s)),
        }
        let now = e.now();
        r.expire(now);
        let s = e.stats(&q).await;
        let in_flight = r.msgs.values().filter(|m| m.lease.is_some()).count() as u64;
        let delayed = r
            .msgs
            .values()
            .filter(|m| m.lease.is_none() && m.visible_at > now)
            .count() as u64;
        let visible = r.msgs.len() as u64 - in_flight - delayed;
        check!(
            (s.visible, s.delayed, s.in_flight) == (visible, delayed, in_flight),
            "step {i}: stats (visible, delayed, in flight) are {:?}, expected {:?}",
            (s.visible, s.delayed, s.in_flight),
            (visible, delayed, in_flight)
        );
    }
    Ok(())
}

/// Random sequences over three groups and ungrouped messages, checked after every step
/// against the reference: what a receive returns (exactly the deliverable messages, up to its
/// max, each with its group and receive count) and the queue's gauges. `SLUICE_MODEL_CASES`
/// sets the number of sequences (default 32).
pub async fn group_model_random_sequences(h: &dyn Harness) {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let e = env(h).await;
    if !supported(&e, "group_model_random_sequences") {
        return;
    }
    drop(e);
    let cases: usize = std::env::var("SLUICE_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    // Deterministic, so a failure reproduces.
    let mut runner = TestRunner::deterministic();
    let strategy = steps(48);
    for n in 0..cases {
        let seq = strategy
            .new_tree(&mut runner)
            .expect("generate a sequence")
            .current();
        if let Err(msg) = run(h, &seq).await {
            let listing: Vec<String> = seq
                .iter()
                .enumerate()
                .map(|(i, s)| format!("  {i:2}: {s:?}"))
                .collect();
            panic!(
                "group model sequence {n} failed: {msg}\nsequence:\n{}",
                listing.join("\n")
            );
        }
    }
}
