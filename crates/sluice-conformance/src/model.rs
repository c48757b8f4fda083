//! Reference model for property tests: one queue with a DLQ, as plain data.
//!
//! The model knows where each message is (visible, delayed, in flight, dead-lettered,
//! completed), its receive count and the receipt of its current lease. It does not choose
//! which visible messages a receive hands out: the store does, and the model checks the
//! choice (every delivered id was visible, as many as allowed) and then follows it.
//!
//! Time follows the suite's convention: a deadline `t` is reached when `now >= t`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;

use sluice_core::lifecycle::is_exhausted;
use sluice_core::message::MessageId;
use sluice_core::receipt::Receipt;
use sluice_core::time::Timestamp;

/// Which receipt an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The n-th (modulo) receipt of a live lease; falls back to `Any` when none is live.
    Live(usize),
    /// The n-th (modulo) receipt ever issued, live or stale.
    Any(usize),
    /// A receipt the store never issued: a real one with its token altered.
    Forged(usize),
}

/// One step of a random scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Send one message, with an explicit delay in ms or the queue default (none).
    Send {
        /// Delay in ms; `None` takes the queue's default (0 in the model queue).
        delay_ms: Option<u64>,
    },
    /// Receive up to `max` with an optional visibility override.
    Receive {
        /// Most messages.
        max: u32,
        /// Visibility override in ms.
        visibility_ms: Option<u64>,
    },
    /// Acknowledge.
    Ack {
        /// Which receipt.
        pick: Pick,
    },
    /// Nack with an explicit delay (backoff jitter is random, so the model never uses it).
    Nack {
        /// Which receipt.
        pick: Pick,
        /// Delay in ms.
        delay_ms: u64,
    },
    /// Reject to the DLQ.
    Reject {
        /// Which receipt.
        pick: Pick,
    },
    /// Extend a lease.
    Extend {
        /// Which receipt.
        pick: Pick,
        /// New lease length from now, in ms.
        visibility_ms: u64,
    },
    /// Move the virtual clock.
    Advance {
        /// Milliseconds.
        ms: u64,
    },
}

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Receivable now.
    Visible,
    /// Receivable from `until`.
    Delayed {
        /// When it becomes visible.
        until: Timestamp,
    },
    /// Leased until `until` under `receipt`.
    InFlight {
        /// Lease end.
        until: Timestamp,
        /// The live receipt.
        receipt: Receipt,
    },
    /// In the DLQ.
    Dead,
    /// Acknowledged.
    Completed,
}

/// One message of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MState {
    /// Where it is.
    pub place: Place,
    /// Deliveries so far.
    pub receive_count: u32,
}

/// The expected state of one queue (and its DLQ).
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// The queue's `max_receive_count`.
    pub max_receive_count: u32,
    /// The queue's `visibility_timeout`.
    pub visibility: Duration,
    /// Every message ever sent, by id.
    pub msgs: BTreeMap<MessageId, MState>,
    /// Every receipt ever issued, in order.
    pub issued: Vec<Receipt>,
}

impl Model {
    /// An empty queue with these settings.
    pub fn new(max_receive_count: u32, visibility: Duration) -> Self {
        Model {
            max_receive_count,
            visibility,
            msgs: BTreeMap::new(),
            issued: Vec::new(),
        }
    }

    /// Applies the passage of time up to `now`: delays end, leases run out.
    pub fn settle(&mut self, now: Timestamp) {
        let mrc = self.max_receive_count;
        for m in self.msgs.values_mut() {
            match m.place {
                Place::Delayed { until } if until <= now => m.place = Place::Visible,
                Place::InFlight { until, .. } if until <= now => {
                    m.place = if is_exhausted(mrc, m.receive_count) {
                        Place::Dead
                    } else {
                        Place::Visible
                    };
                }
                _ => {}
            }
        }
    }

    /// Ids whose place matches `f`.
    pub fn ids(&self, f: impl Fn(&Place) -> bool) -> BTreeSet<MessageId> {
        self.msgs
            .iter()
            .filter(|(_, m)| f(&m.place))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Visible ids.
    pub fn visible(&self) -> BTreeSet<MessageId> {
        self.ids(|p| matches!(p, Place::Visible))
    }

    /// Delayed ids.
    pub fn delayed(&self) -> BTreeSet<MessageId> {
        self.ids(|p| matches!(p, Place::Delayed { .. }))
    }

    /// Leased ids.
    pub fn in_flight(&self) -> BTreeSet<MessageId> {
        self.ids(|p| matches!(p, Place::InFlight { .. }))
    }

    /// Dead-lettered ids.
    pub fn dead(&self) -> BTreeSet<MessageId> {
        self.ids(|p| matches!(p, Place::Dead))
    }

    /// Receipts of live leases, in id order.
    pub fn live_receipts(&self) -> Vec<Receipt> {
        self.msgs
            .values()
            .filter_map(|m| match m.place {
                Place::InFlight { receipt, .. } => Some(receipt),
                _ => None,
            })
            .collect()
    }

    /// True when `r` names the current lease of its message (call [`Model::settle`] first).
    pub fn is_live(&self, r: &Receipt) -> bool {
        matches!(
            self.msgs.get(&r.id).map(|m| m.place),
            Some(Place::InFlight { receipt, .. }) if receipt == *r
        )
    }

    /// Resolves a pick to a receipt; `None` when no receipt was ever issued.
    pub fn pick(&self, pick: Pick) -> Option<Receipt> {
        match pick {
            Pick::Live(i) => {
                let live = self.live_receipts();
                if live.is_empty() {
                    self.pick(Pick::Any(i))
                } else {
                    Some(live[i % live.len()])
                }
            }
            Pick::Any(i) => (!self.issued.is_empty()).then(|| self.issued[i % self.issued.len()]),
            Pick::Forged(i) => {
                let real = self.pick(Pick::Any(i))?;
                let forged = Receipt {
                    id: real.id,
                    token: real.token ^ (1 << 63) ^ 0x5a5a,
                };
                (!self.issued.contains(&forged)).then_some(forged)
            }
        }
    }

    /// A message was sent at `now`.
    pub fn on_send(&mut self, id: MessageId, delay: Duration, now: Timestamp) {
        let place = if delay.is_zero() {
            Place::Visible
        } else {
            Place::Delayed {
                until: now.plus(delay),
            }
        };
        self.msgs.insert(
            id,
            MState {
                place,
                receive_count: 0,
            },
        );
    }

    /// The store delivered `id` under `receipt` until `until`.
    ///
    /// # Errors
    /// A description when the model did not have `id` visible.
    pub fn on_receive(
        &mut self,
        id: MessageId,
        receipt: Receipt,
        until: Timestamp,
    ) -> Result<u32, String> {
        let m = self
            .msgs
            .get_mut(&id)
            .ok_or_else(|| format!("delivered unknown id {id}"))?;
        if m.place != Place::Visible {
            return Err(format!(
                "delivered {id} which the model has as {:?}",
                m.place
            ));
        }
        m.receive_count += 1;
        m.place = Place::InFlight { until, receipt };
        self.issued.push(receipt);
        Ok(m.receive_count)
    }

    /// A live lease was acknowledged.
    pub fn on_ack(&mut self, r: &Receipt) {
        if let Some(m) = self.msgs.get_mut(&r.id) {
            m.place = Place::Completed;
        }
    }

    /// A live lease was nacked with `delay` at `now`; returns true when it dead-lettered.
    pub fn on_nack(&mut self, r: &Receipt, delay: Duration, now: Timestamp) -> bool {
        let mrc = self.max_receive_count;
        let Some(m) = self.msgs.get_mut(&r.id) else {
            return false;
        };
        if is_exhausted(mrc, m.receive_count) {
            m.place = Place::Dead;
            true
        } else {
            m.place = if delay.is_zero() {
                Place::Visible
            } else {
                Place::Delayed {
                    until: now.plus(delay),
                }
            };
            false
        }
    }

    /// A live lease was rejected.
    pub fn on_reject(&mut self, r: &Receipt) {
        if let Some(m) = self.msgs.get_mut(&r.id) {
            m.place = Place::Dead;
        }
    }

    /// A live lease was extended to `until`.
    pub fn on_extend(&mut self, r: &Receipt, until: Timestamp) {
        if let Some(m) = self.msgs.get_mut(&r.id) {
            m.place = Place::InFlight { until, receipt: *r };
        }
    }
}

fn pick_strategy() -> impl Strategy<Value = Pick> {
    prop_oneof![
        6 => any::<usize>().prop_map(Pick::Live),
        3 => any::<usize>().prop_map(Pick::Any),
        1 => any::<usize>().prop_map(Pick::Forged),
    ]
}

/// Durations on a coarse grid hit deadlines exactly now and then, which checks the
/// "reached when `now >= t`" convention too.
fn grid_ms(step: u64, max_steps: u64) -> impl Strategy<Value = u64> {
    (1..=max_steps).prop_map(move |k| k * step)
}

/// One random operation.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::option::weighted(0.3, prop_oneof![grid_ms(1000, 6), 1u64..6000])
            .prop_map(|delay_ms| Op::Send { delay_ms }),
        4 => (1u32..=4, prop::option::weighted(0.4, grid_ms(2500, 4)))
            .prop_map(|(max, visibility_ms)| Op::Receive { max, visibility_ms }),
        3 => pick_strategy().prop_map(|pick| Op::Ack { pick }),
        3 => (pick_strategy(), prop_oneof![Just(0u64), grid_ms(1000, 8), 1u64..8000])
            .prop_map(|(pick, delay_ms)| Op::Nack { pick, delay_ms }),
        1 => pick_strategy().prop_map(|pick| Op::Reject { pick }),
        2 => (pick_strategy(), grid_ms(2500, 6))
            .prop_map(|(pick, visibility_ms)| Op::Extend { pick, visibility_ms }),
        4 => prop_oneof![1u64..4000, grid_ms(2500, 6)].prop_map(|ms| Op::Advance { ms }),
    ]
}

/// A random scenario of 1 to `max_len` operations.
pub fn ops_strategy(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op_strategy(), 1..=max_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: u64, token: u64) -> Receipt {
        Receipt {
            id: MessageId(id),
            token,
        }
    }

    #[test]
    fn lease_expiry_on_last_attempt_dead_letters_in_the_model() {
        let mut m = Model::new(2, Duration::from_secs(10));
        let t0 = Timestamp(1_000_000);
        m.on_send(MessageId(1), Duration::ZERO, t0);
        m.on_receive(MessageId(1), r(1, 1), t0.plus(Duration::from_secs(10)))
            .expect("visible");
        assert!(m.is_live(&r(1, 1)));
        m.settle(t0.plus(Duration::from_secs(10)));
        assert!(!m.is_live(&r(1, 1)), "a lease is over at its deadline");
        assert_eq!(m.visible().len(), 1);
        m.on_receive(MessageId(1), r(1, 2), t0.plus(Duration::from_secs(20)))
            .expect("visible");
        m.settle(t0.plus(Duration::from_secs(20)));
        assert_eq!(m.dead().len(), 1);
        assert!(
            m.on_receive(MessageId(1), r(1, 3), t0).is_err(),
            "dead messages are not delivered"
        );
    }

    #[test]
    fn forged_receipts_are_never_issued_ones() {
        let mut m = Model::new(3, Duration::from_secs(10));
        m.on_send(MessageId(7), Duration::ZERO, Timestamp(0));
        m.on_receive(MessageId(7), r(7, 3), Timestamp(10))
            .expect("visible");
        let f = m.pick(Pick::Forged(0)).expect("forged");
        assert!(!m.is_live(&f));
        assert_eq!(m.pick(Pick::Live(5)), Some(r(7, 3)));
    }
}
